package reliability

// Elastic recovery across more than one failure, and elastic training
// under gorun. This file is owned by the elastic-training maintainer. Its
// rank program ("shrink-twice") is dispatched from init below rather than
// from runChild, so that the file stands alone.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/scripts/cluster"
)

const roleShrinkTwice = "shrink-twice"

func init() {
	if os.Getenv(childEnv) == roleShrinkTwice {
		os.Exit(childShrinkTwice(envInt("GORUN_RANK", -1)))
	}
}

// childShrinkTwice runs allreduces until one fails, shrinks, reports
// "shrunk" (Iter: the new rank), runs allreduces on the new communicator
// until one fails and reports that as "error2".
func childShrinkTwice(rank int) int {
	base := takeSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		emit(event{Kind: "wrong", Rank: rank, Err: "init: " + err.Error()})
		return 2
	}
	emit(event{Kind: "ready", Rank: rank})
	buf := make([]int64, 256)
	loop := func(c *comm.Comm) error {
		for {
			if err := comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
				return err
			}
		}
	}
	err = loop(c)
	emit(event{Kind: "error", Rank: rank, Err: err.Error(), ErrRank: errRank(err)})
	s, err := c.Shrink(ctx)
	if err != nil {
		emit(event{Kind: "wrong", Rank: rank, Err: "shrink: " + err.Error()})
		return after(rank, base, c)
	}
	emit(event{Kind: "shrunk", Rank: rank, Iter: s.Rank()})
	err = loop(s)
	emit(event{Kind: "error2", Rank: rank, Err: err.Error(), ErrRank: errRank(err), Iter: s.Rank()})
	return after(rank, base, s)
}

// TestSecondFailureAfterShrink: 4 ranks, rank 1 is killed, the 3
// survivors shrink; then old rank 3 (new rank 2) dies too. The 2 remaining
// survivors must fail with an error naming new rank 2 well within the
// operation timeout. With "sigstop" the second victim is frozen, so its
// connections stay open and only the gossip failure report (forwarded to
// the shrunk communicator, comm/init.go's failureSink) can end the wait;
// with "kill" either path may.
func TestSecondFailureAfterShrink(t *testing.T) {
	const opTimeout = 30 * time.Second
	for _, how := range []string{"kill", "sigstop"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			trialSlots <- struct{}{}
			defer func() { <-trialSlots }()
			j := startJob(t, jobSpec{n: 4, role: roleShrinkTwice, transport: "tcp", timeout: opTimeout,
				env: []string{"REL_REINIT=0"}})
			defer j.kill()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			j.waitReady(ctx)
			time.Sleep(100 * time.Millisecond)
			j.ranks[1].signal(syscall.SIGKILL)
			for _, id := range []int{0, 2, 3} {
				e, ok := j.ranks[id].waitEvent(ctx, "shrunk")
				if !ok {
					for _, rk := range j.ranks {
						rk.mu.Lock()
						t.Logf("rank %d events %+v", rk.id, rk.events)
						rk.mu.Unlock()
					}
					t.Fatalf("rank %d did not shrink\n%s", id, j.logs())
				}
				if want := map[int]int{0: 0, 2: 1, 3: 2}[id]; e.Iter != want {
					t.Fatalf("rank %d became rank %d, want %d", id, e.Iter, want)
				}
			}
			time.Sleep(200 * time.Millisecond)
			sig := syscall.SIGKILL
			if how == "sigstop" {
				sig = syscall.SIGSTOP
			}
			second := time.Now()
			j.ranks[3].signal(sig)
			for _, id := range []int{0, 2} {
				rk := j.ranks[id]
				e, ok := rk.waitEvent(ctx, "error2")
				if !ok {
					t.Errorf("rank %d: no error after old rank 3 died\n%s", id, rk.log())
					continue
				}
				d := time.Unix(0, e.T).Sub(second)
				t.Logf("rank %d (now %d): error after %v: %s", id, e.Iter, d.Round(time.Millisecond), e.Err)
				if e.ErrRank != 2 {
					t.Errorf("rank %d: error names rank %d, want new rank 2: %s", id, e.ErrRank, e.Err)
				}
				if d > 10*time.Second {
					t.Errorf("rank %d: error %v after the second failure (operation timeout %v): gossip report not forwarded?", id, d, opTimeout)
				}
			}
		})
	}
}

// TestElasticTraining runs examples/train under gorun --elastic with
// ranks killed by GORUN_FAULT at their Nth write (gorun --fault): the
// survivors must shrink, finish every step and end with bitwise equal
// parameters; gorun exits with the killed rank's status (137), as
// documented for --elastic. One case kills two ranks one after the other
// (the second after the first Shrink).
func TestElasticTraining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gorun and examples/train")
	}
	bin := buildTrain(t)
	const steps = 3 * 16
	cases := []struct {
		name, tr, fault string
		dead            [][]int     // per recovery, the ranks gone
		final           map[int]int // survivor → its final rank
	}{
		// On tcp a rank makes about 2 writes a step with 4 ranks since
		// the selection table is derived from the cost model (945249e:
		// 4 before, and a kill at 120 came after the last step; 200-215
		// in all before 2026-11-24): rank 2 dies near step 27 of 48 here.
		// On shm about 4 (near step 29).
		{"tcp", "tcp", "rank=2:kill:write:60", [][]int{{2}}, map[int]int{0: 0, 1: 1, 3: 2}},
		{"shm", "shm", "rank=2:kill:write:120", [][]int{{2}}, map[int]int{0: 0, 1: 1, 3: 2}},
		// Rank 2 dies near step 12, rank 3 (about 26 writes by then, 1 a
		// step after) near step 31: its kill must come before its last
		// write, after rank 2's.
		{"tcp/two-kills", "tcp", "rank=2:kill:write:30;rank=3:kill:write:45", [][]int{{2}, {3}}, map[int]int{0: 0, 1: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "gorun"), "--elastic", "-np", "4", "--transport", tc.tr,
				"--timeout", "80", "--fault", tc.fault,
				filepath.Join(bin, "train"), "-epochs", "3", "-steps", "16", "-batch", "16", "-out", out)
			tmp := t.TempDir()
			cmd.Env = append(baseEnv(), "TMPDIR="+tmp)
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			logs := stdout.String() + stderr.String()
			checkLeftovers(t, tmp)
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGKILL) {
				t.Fatalf("gorun: %v, want exit status 137 (the killed rank's)\n%s", err, logs)
			}
			for _, d := range tc.dead {
				want := fmt.Sprintf("rank %d died at step", d[0])
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("no %q in the output:\n%s", want, logs)
				}
			}
			var ref map[string][]uint32
			refRank := -1
			for r := range 4 {
				b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank-%d.json", r)))
				final, survivor := tc.final[r]
				if !survivor {
					if err == nil {
						t.Errorf("killed rank %d wrote parameters", r)
					}
					continue
				}
				if err != nil {
					t.Fatalf("survivor %d wrote no parameters: %v\n%s", r, err, logs)
				}
				var res struct {
					FinalRank, FinalSize, Steps int
					Recoveries                  []struct {
						Step                                   int
						Dead                                   []int
						ShrinkMS, FirstStepMS, SinceLastGoodMS float64
					}
					Params map[string][]uint32
				}
				if err := json.Unmarshal(b, &res); err != nil {
					t.Fatal(err)
				}
				if res.Steps != steps || res.FinalSize != len(tc.final) || res.FinalRank != final {
					t.Errorf("rank %d: reached step %d as rank %d of %d, want step %d as rank %d of %d",
						r, res.Steps, res.FinalRank, res.FinalSize, steps, final, len(tc.final))
				}
				if len(res.Recoveries) != len(tc.dead) {
					t.Errorf("rank %d: recoveries %+v, want %d", r, res.Recoveries, len(tc.dead))
				}
				for i, rec := range res.Recoveries {
					if i < len(tc.dead) && !slices.Equal(rec.Dead, tc.dead[i]) {
						t.Errorf("rank %d: recovery %d names ranks %v gone, want %v", r, i, rec.Dead, tc.dead[i])
					}
					if rec.Step <= 0 || rec.Step >= steps {
						t.Errorf("rank %d: recovered at step %d: the fault did not hit mid-run", r, rec.Step)
					}
					t.Logf("%s rank %d: redo step %d; failure seen %.0f ms after the last good step; shrink %.0f ms; first step after shrink %.0f ms after the failure",
						tc.name, r, rec.Step, rec.SinceLastGoodMS, rec.ShrinkMS, rec.FirstStepMS)
				}
				if ref == nil {
					ref, refRank = res.Params, r
					continue
				}
				for name, v := range res.Params {
					if !slices.Equal(v, ref[name]) {
						t.Errorf("rank %d: %s differs from rank %d's", r, name, refRank)
					}
				}
				if len(res.Params) != len(ref) {
					t.Errorf("rank %d: %d parameters, rank %d has %d", r, len(res.Params), refRank, len(ref))
				}
			}
		})
	}
}

// gorun --elastic --max-restarts 1 with rank 2 killed mid-run: the
// survivors shrink, gorun restarts rank 2, it rejoins (comm.Init, Grow at
// a step boundary, the step and parameters from the others), and the job
// ends with exit 0 and all 4 ranks' final parameters bitwise identical.
// With -wait-np 4 the survivors wait at the step after the shrink until
// rank 2 is back: without it a restart slower than the rest of the run
// (CI, 2026-11-28: rank 2 not seen within the last 83 steps, 50 ms) let
// them finish with 3 ranks, and rank 2 then waited for a world long gone.
// REL_TRIALS runs per transport (default 2).
func TestElasticRegrow(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gorun and examples/train")
	}
	bin := buildTrain(t)
	for i := range 2 * envInt("REL_TRIALS", 2) {
		tr := []string{"tcp", "shm"}[i%2]
		kill := 120 + 20*(i%8) // rank 2's write to die at, 120–260: steps ≈ 57–125 of 160 on tcp (2 writes a step), 28–64 on shm (4)
		t.Run(fmt.Sprintf("%s/kill@%d", tr, kill), func(t *testing.T) {
			out, tmp := t.TempDir(), t.TempDir()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, "gorun"), "--elastic", "--max-restarts", "1", "-np", "4",
				"--transport", tr, "--timeout", "80", "--fault", fmt.Sprintf("rank=2:kill:write:%d", kill),
				filepath.Join(bin, "train"), "-epochs", "10", "-steps", "16", "-batch", "16", "-wait-np", "4", "-out", out)
			cmd.Env = append(baseEnv(), "TMPDIR="+tmp)
			logs, err := cmd.CombinedOutput()
			checkLeftovers(t, tmp)
			if err != nil {
				t.Fatalf("gorun: %v, want exit 0\n%s", err, logs)
			}
			checkRegrown(t, out, logs, 2)
		})
	}
}

// The same across hosts, over a real sshd on each (the namespace cluster,
// a UTS namespace each): 2 ranks on each of 2 hosts, tcp between them and
// shm within, rank 3 killed mid-run on the second host. Before 2026-11-29
// its restart never rejoined (gorun gave the restarted remote rank no job
// token: TestRestartOnRemoteHost), and, that fixed, every rank failed
// with "ranks disagree on the collective call" (the restarted rank's Init
// split off the hierarchical algorithms' communicators, which the
// survivors' Grow does not make: TestGrowAcrossHosts).
func TestElasticRegrowAcrossHosts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gorun and examples/train")
	}
	c := cluster.Start(t, cluster.Options{Hosts: 2})
	bin := buildTrain(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	hosts := fmt.Sprintf("%s:2,%s:2", c.Hosts[0].Name, c.Hosts[1].Name)
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "gorun"), "--elastic", "--max-restarts", "1", "-H", hosts,
		"--timeout", "80", "--fault", "rank=3:kill:write:120",
		filepath.Join(bin, "train"), "-epochs", "10", "-steps", "16", "-batch", "16", "-wait-np", "4", "-out", out)
	cmd.Env = baseEnv()
	logs, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("gorun: %v, want exit 0\n%s", err, logs)
	}
	checkRegrown(t, out, logs, 3)
}

// checkRegrown checks the output of examples/train under gorun --elastic
// --max-restarts 1, written to dir, whose rank victim was killed: gorun
// restarted it, it rejoined, and all 4 ranks ended as their own rank of
// 4 with bitwise identical parameters.
func checkRegrown(t *testing.T, dir string, logs []byte, victim int) {
	t.Helper()
	if !strings.Contains(string(logs), "restarted it (1 of 1") || !strings.Contains(string(logs), fmt.Sprintf("rank %d rejoined at step", victim)) {
		t.Fatalf("no restart and rejoin in the output:\n%s", logs)
	}
	var ref map[string][]uint32
	for r := range 4 {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatalf("rank %d wrote no parameters: %v\n%s", r, err, logs)
		}
		var res struct {
			FinalRank, FinalSize int
			Params               map[string][]uint32
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		if res.FinalRank != r || res.FinalSize != 4 {
			t.Errorf("rank %d ended as rank %d of %d, want %d of 4", r, res.FinalRank, res.FinalSize, r)
		}
		if ref == nil {
			ref = res.Params
			continue
		}
		if len(res.Params) != len(ref) {
			t.Errorf("rank %d: %d parameters, rank 0 %d", r, len(res.Params), len(ref))
		}
		for name, v := range res.Params {
			if !slices.Equal(v, ref[name]) {
				t.Errorf("rank %d: %s differs from rank 0's", r, name)
			}
		}
	}
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "died at step") || strings.Contains(l, "rejoined") || strings.Contains(l, "grew to") {
			t.Log(l)
		}
	}
}

// buildTrain builds gorun and examples/train into a temporary directory,
// which it returns.
func buildTrain(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	gotool, err := exec.LookPath("go") // go test puts its GOROOT/bin first in $PATH
	if err != nil {
		t.Fatalf("go: %v", err)
	}
	build := exec.Command(gotool, "build", "-o", bin+string(filepath.Separator), "./cmd/gorun", "./examples/train")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// gorun --elastic --max-restarts 1 with rank 2 killed late and its restart
// slowed by a second (a wrapper that sleeps when GORUN_RESTART is set):
// the three survivors shrink and finish without it, and the restarted
// rank, finding no rank left to admit it, gets comm.ErrJobGone from Init
// about 10 s later (bootstrap's aloneFor), not at the timeout (80 s
// here; a minute by default, as CI saw on 2026-11-28). examples/train
// then exits 0, and so does gorun: the survivors did the work. Their
// parameters are bitwise identical.
func TestRestartAfterJobEnded(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gorun and examples/train")
	}
	bin := buildTrain(t)
	out, tmp := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	slow := `if [ -n "$GORUN_RESTART" ]; then sleep 1; fi; exec "$0" "$@"`
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "gorun"), "--elastic", "--max-restarts", "1", "-np", "4",
		"--transport", "tcp", "--timeout", "80", "--fault", "rank=2:kill:write:250",
		"sh", "-c", slow, filepath.Join(bin, "train"), "-epochs", "10", "-steps", "16", "-batch", "16", "-out", out)
	cmd.Env = append(baseEnv(), "TMPDIR="+tmp)
	t0 := time.Now()
	logs, err := cmd.CombinedOutput()
	took := time.Since(t0)
	checkLeftovers(t, tmp)
	if err != nil {
		t.Fatalf("gorun: %v after %v, want exit 0\n%s", err, took, logs)
	}
	for _, want := range []string{"restarted it (1 of 1", "none is left to admit this restarted rank", "nothing to do"} {
		if !strings.Contains(string(logs), want) {
			t.Fatalf("%q not in the output:\n%s", want, logs)
		}
	}
	var ref map[string][]uint32
	for _, r := range []int{0, 1, 3} {
		b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank-%d.json", r)))
		if err != nil {
			t.Fatalf("rank %d wrote no parameters: %v\n%s", r, err, logs)
		}
		var res struct {
			FinalSize int
			Params    map[string][]uint32
		}
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		if res.FinalSize != 3 {
			t.Errorf("rank %d ended in a world of %d, want 3", r, res.FinalSize)
		}
		if ref == nil {
			ref = res.Params
			continue
		}
		for name, v := range res.Params {
			if !slices.Equal(v, ref[name]) {
				t.Errorf("rank %d: %s differs from rank 0's", r, name)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "rank-2.json")); err == nil {
		t.Errorf("the restarted rank 2 wrote parameters: it was never admitted")
	}
	t.Logf("gorun exited 0 after %v", took.Round(time.Millisecond))
}
