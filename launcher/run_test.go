package launcher

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func testBinary(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runJob runs cfg with the test binary as the rank program in mode and
// returns what the job printed.
func runJob(t *testing.T, mode string, cfg Config) (stdout, stderr string, err error) {
	t.Helper()
	if cfg.Program == "" {
		cfg.Program = testBinary(t)
	}
	cfg.Export = append([]string{"GORUN_TEST_ROLE=rank", "GORUN_TEST_MODE=" + mode}, cfg.Export...)
	if cfg.KillGrace == 0 {
		cfg.KillGrace = time.Second
	}
	var out, errb bytes.Buffer
	cfg.Stdout = &out
	if cfg.Stderr == nil {
		cfg.Stderr = &errb
	}
	cfg.UseSrun = "no"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = Run(ctx, cfg)
	return out.String(), errb.String(), err
}

// rankLines groups "[r] text" lines by rank.
func rankLines(t *testing.T, out string) map[int][]string {
	t.Helper()
	m := map[int][]string{}
	re := regexp.MustCompile(`^\[(\d+)\] (.*)$`)
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		sub := re.FindStringSubmatch(l)
		if sub == nil {
			t.Fatalf("untagged or broken line %q", l)
		}
		r := mustAtoi(sub[1])
		m[r] = append(m[r], sub[2])
	}
	return m
}

func TestEnvContract(t *testing.T) {
	t.Setenv("TESTVAR_FROM_LAUNCHER", "inherited")
	t.Setenv(EnvRank, "99") // a launcher's own contract must not leak
	t.Setenv(EnvAlgo, "allreduce:ring")
	t.Setenv(EnvChecksum, "1")
	t.Setenv(EnvShmCMA, "0")
	t.Setenv(EnvFault, "overridden by --fault")
	hosts := []Host{{Name: "localhost", Slots: 2}, {Name: "127.0.0.1", Slots: 2}}
	out, stderr, err := runJob(t, "env", Config{NP: 3, Hosts: hosts, Bind: "numa",
		Export: []string{"TESTVAR_A=a b c", "TESTVAR_FROM_LAUNCHER"}, Transport: "tcp",
		Fault: "rank=2:kill:write:40"})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	if len(lines) != 3 {
		t.Fatalf("output from %d ranks, want 3:\n%s", len(lines), out)
	}
	// Two names of this machine are one host (mergeLocal): 3 local ranks.
	wantLocal := [][2]string{{"0", "3"}, {"1", "3"}, {"2", "3"}}
	shared := map[string]string{}
	for r := 0; r < 3; r++ {
		env := map[string]string{}
		for _, l := range lines[r] {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
		want := map[string]string{
			EnvRank: fmt.Sprint(r), EnvSize: "3",
			EnvLocalRank: wantLocal[r][0], EnvLocalSize: wantLocal[r][1],
			EnvBind: "numa", EnvTransport: "tcp", EnvAlgo: "allreduce:ring",
			EnvFault: "rank=2:kill:write:40", EnvChecksum: "1", EnvShmCMA: "0",
			"TESTVAR_A": "a b c", "TESTVAR_FROM_LAUNCHER": "inherited",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", r, k, env[k], v)
			}
		}
		for _, k := range []string{EnvSeeds, EnvJobID, EnvJobToken, EnvControl} {
			if env[k] == "" {
				t.Errorf("rank %d: %s not set", r, k)
			}
			if r == 0 {
				shared[k] = env[k]
			} else if env[k] != shared[k] {
				t.Errorf("rank %d: %s=%q, rank 0 has %q", r, k, env[k], shared[k])
			}
		}
	}
	if tok, err := hex.DecodeString(shared[EnvJobToken]); err != nil || len(tok) != 32 {
		t.Errorf("token %q is not 32 random bytes in hex", shared[EnvJobToken])
	}
	host, port, err := net.SplitHostPort(shared[EnvSeeds])
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Errorf("seeds %q: want 127.0.0.1 and a port (%v)", shared[EnvSeeds], err)
	}
	// A second job gets a different id and token.
	out2, _, err := runJob(t, "env", Config{NP: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{EnvJobID, EnvJobToken} {
		if strings.Contains(out2, k+"="+shared[k]+"\n") {
			t.Errorf("second job reuses %s", k)
		}
	}
}

func TestOutputLinesAreWhole(t *testing.T) {
	out, stderr, err := runJob(t, "lines", Config{NP: 4})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	lineRE := regexp.MustCompile(`^rank=(\d) g=(\d) i=(\d+) (x*)$`)
	for r := 0; r < 4; r++ {
		ls := lines[r]
		if len(ls) != 4*200+1 {
			t.Errorf("rank %d printed %d lines, want %d", r, len(ls), 4*200+1)
		}
		for _, l := range ls[:len(ls)-1] {
			sub := lineRE.FindStringSubmatch(l)
			if sub == nil || sub[1] != fmt.Sprint(r) || len(sub[4]) != mustAtoi(sub[3])*7%300 {
				t.Fatalf("rank %d: mangled line %q", r, l)
			}
		}
		if last := ls[len(ls)-1]; last != fmt.Sprintf("no newline at end rank=%d", r) {
			t.Errorf("rank %d: last line %q", r, last)
		}
	}
}

func TestUntaggedOutput(t *testing.T) {
	out, _, err := runJob(t, "env", Config{NP: 2, NoTag: true, Export: []string{"TESTVAR_X=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "[0]") || !strings.Contains(out, "\nTESTVAR_X=1\n") && !strings.HasPrefix(out, "TESTVAR_X=1\n") {
		t.Fatalf("untagged output:\n%s", out)
	}
}

func TestFailingRankStopsTheJob(t *testing.T) {
	for _, how := range []string{"exit", "kill"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now()
			_, stderr, err := runJob(t, "fail", Config{NP: 4,
				Export: []string{"GORUN_TEST_DIR=" + dir, "GORUN_TEST_FAIL=2", "GORUN_TEST_HOW=" + how}})
			var re *RankError
			if !errors.As(err, &re) || re.Rank != 2 || !errors.Is(err, ErrRankFailed) {
				t.Fatalf("Run = %v, want a *RankError for rank 2\n%s", err, stderr)
			}
			wantStatus, wantMsg := 7, "rank 2 exited with status 7"
			if how == "kill" {
				wantStatus, wantMsg = 128+int(syscall.SIGKILL), "rank 2 was killed by signal 9 (killed)"
			}
			if got := ExitStatus(err); got != wantStatus {
				t.Errorf("ExitStatus = %d, want %d", got, wantStatus)
			}
			if !strings.Contains(stderr, wantMsg) {
				t.Errorf("stderr does not say %q:\n%s", wantMsg, stderr)
			}
			if d := time.Since(start); d > 15*time.Second {
				t.Errorf("job took %v: the other ranks were not stopped", d)
			}
			for _, r := range []string{"0", "1", "3"} {
				if _, err := os.Stat(filepath.Join(dir, "term-"+r)); err != nil {
					t.Errorf("rank %s did not get SIGTERM", r)
				}
				b, err := os.ReadFile(filepath.Join(dir, "pid-"+r))
				if err != nil {
					t.Fatalf("rank %s never started: %v", r, err)
				}
				if err := syscall.Kill(mustAtoi(string(b)), 0); !errors.Is(err, syscall.ESRCH) {
					t.Errorf("rank %s (pid %s) still exists: kill(0) = %v", r, b, err)
				}
			}
		})
	}
}

func TestRankIgnoringSIGTERMIsKilled(t *testing.T) {
	start := time.Now()
	_, stderr, err := runJob(t, "ignore-term", Config{NP: 2, KillGrace: 500 * time.Millisecond,
		Export: []string{"GORUN_TEST_DIR=" + t.TempDir()}})
	if got := ExitStatus(err); got != 5 {
		t.Fatalf("ExitStatus = %d (%v), want 5\n%s", got, err, stderr)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v to kill a rank that ignores SIGTERM", d)
	}
	if !strings.Contains(stderr, "killing them") {
		t.Errorf("stderr does not report the SIGKILL:\n%s", stderr)
	}
}

func TestElasticKeepsGoing(t *testing.T) {
	dir := t.TempDir()
	done := make(chan error, 1)
	var stderr string
	go func() {
		var err error
		_, stderr, err = runJob(t, "fail", Config{NP: 2, Elastic: true, Timeout: 2 * time.Second,
			Export: []string{"GORUN_TEST_DIR=" + dir, "GORUN_TEST_FAIL=1"}})
		done <- err
	}()
	err := <-done
	// Rank 0 survives rank 1's failure until the job's timeout stops it.
	if !errors.Is(err, ErrRankFailed) {
		t.Fatalf("Run = %v, want rank 1's failure\n%s", err, stderr)
	}
	if !strings.Contains(stderr, "the job goes on") || !strings.Contains(stderr, "timed out") {
		t.Fatalf("stderr:\n%s", stderr)
	}
}

// --min-np 2 of 2: rank 1's failure leaves fewer than 2 ranks, so gorun
// stops rank 0 at once instead of letting the job go on.
func TestElasticMinNPStopsJob(t *testing.T) {
	dir := t.TempDir()
	_, stderr, err := runJob(t, "fail", Config{NP: 2, Elastic: true, MinNP: 2, Timeout: 30 * time.Second,
		Export: []string{"GORUN_TEST_DIR=" + dir, "GORUN_TEST_FAIL=1"}})
	if !errors.Is(err, ErrRankFailed) || !strings.Contains(stderr, "fewer than --min-np 2") {
		t.Fatalf("Run = %v, want rank 1's failure and the --min-np stop\n%s", err, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "term-0")); err != nil {
		t.Fatalf("rank 0 was not stopped with SIGTERM (%v)\n%s", err, stderr)
	}
}

func TestTimeout(t *testing.T) {
	start := time.Now()
	_, stderr, err := runJob(t, "sleep", Config{NP: 2, Timeout: 300 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || ExitStatus(err) != 124 {
		t.Fatalf("Run = %v (status %d), want a timeout with status 124", err, ExitStatus(err))
	}
	if time.Since(start) > 10*time.Second || !strings.Contains(stderr, "job timed out after 300ms") {
		t.Fatalf("took %v; stderr:\n%s", time.Since(start), stderr)
	}
}

func TestMissingProgram(t *testing.T) {
	_, _, err := runJob(t, "env", Config{NP: 2, Program: filepath.Join(t.TempDir(), "nope")})
	if !errors.Is(err, ErrLaunch) {
		t.Fatalf("Run = %v, want ErrLaunch", err)
	}
}

func TestGoPackageIsBuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a package with the go tool")
	}
	out, stderr, err := runJob(t, "", Config{NP: 2, Program: "./testdata/rankprog", Args: []string{"hello"}})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	for r := 0; r < 2; r++ {
		want := fmt.Sprintf("rankprog rank %d of 2: hello", r)
		if len(lines[r]) != 1 || lines[r][0] != want {
			t.Errorf("rank %d printed %q, want %q", r, lines[r], want)
		}
	}
}

// The tunables, --fault's GORUN_FAULT among them, reach ranks an agent
// starts with a clean environment (the fake ssh passes only PATH and
// HOME), as they would on a remote host.
func TestTunablesReachRemoteRanks(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "ssh")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{EnvTimeout: "7s", EnvDebug: "info", EnvIfname: "lo",
		EnvChecksum: "1", EnvShmCMA: "0", EnvFault: "rank=1:kill:write:40"}
	for k, v := range want {
		if k != EnvFault {
			t.Setenv(k, v)
		}
	}
	t.Setenv(EnvFault, "replaced by --fault")
	out, stderr, err := runJob(t, "env", Config{NP: 2, Hosts: []Host{{Name: "node1", Slots: 2}},
		LaunchAgent: []string{filepath.Join(bin, "ssh")}, Fault: want[EnvFault]})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	for r := 0; r < 2; r++ {
		env := map[string]string{}
		for _, l := range lines[r] {
			k, v, _ := strings.Cut(l, "=")
			env[k] = v
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("remote rank %d: %s=%q, want %q", r, k, env[k], v)
			}
		}
	}
}

// A rank restarted on a remote host (--max-restarts) gets what a rank
// joining the running job needs through the agent, as at its first start:
// the job token on its stdin, GORUN_RESTART on its command line, and not
// the fault (the fake ssh passes only PATH and HOME). Before 2026-11-29 a
// restart changed only the local agent's environment and gave it no stdin:
// the remote rank came back with an empty token, the fault, and no
// GORUN_RESTART, and never rejoined (seen over real ssh on the namespace
// cluster).
func TestRestartOnRemoteHost(t *testing.T) {
	bin := t.TempDir()
	if err := os.Symlink(testBinary(t), filepath.Join(bin, "ssh")); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out, stderr, err := runJob(t, "restart", Config{NP: 2, Hosts: []Host{{Name: "node1", Slots: 2}},
		LaunchAgent: []string{filepath.Join(bin, "ssh")}, Elastic: true, MaxRestarts: 1, Fault: "rank=1:kill:write:40",
		Export: []string{"GORUN_TEST_DIR=" + dir}})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	token, ok := strings.CutPrefix(strings.Join(lines[0], ""), "token=")
	if !ok || token == "" {
		t.Fatalf("rank 0 printed %q, want its token\n%s", lines[0], stderr)
	}
	if want := fmt.Sprintf("restart=1 fault=\"\" token=%s", token); len(lines[1]) != 1 || lines[1][0] != want {
		t.Fatalf("restarted rank 1 printed %q, want %q\n%s", lines[1], want, stderr)
	}
}

// rankCmd's environment for a rank that joins a running job: GORUN_RESTART
// for both, and the fault only for an added rank's first start (--add-ranks,
// restart 0), not for a restarted rank's.
func TestRankCmdJoining(t *testing.T) {
	j := &jobEnv{size: 2, seeds: "127.0.0.1:1", jobID: "job", token: "tok", extra: []string{EnvFault + "=rank=2:kill:write:1"}}
	s := Slot{Rank: 2, Host: "localhost", LocalRank: 2, LocalSize: 3}
	for _, c := range []struct {
		restart   int
		fault     bool
		restartKV string
	}{{-1, true, ""}, {0, true, "0"}, {1, false, "1"}, {2, false, "2"}} {
		env := map[string]string{}
		for _, kv := range rankCmd(Config{}, "prog", nil, j, s, c.restart).Env {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		if _, has := env[EnvFault]; has != c.fault {
			t.Errorf("restart %d: %s set %v, want %v", c.restart, EnvFault, has, c.fault)
		}
		if got := env[EnvRestart]; got != c.restartKV {
			t.Errorf("restart %d: %s=%q, want %q", c.restart, EnvRestart, got, c.restartKV)
		}
	}
}

// TestFreePortAndNext: the seed port is free for TCP and UDP, and the next
// one (torch's store under gorun's backend) for TCP, below the ephemeral
// range.
func TestFreePortAndNext(t *testing.T) {
	port, err := freePort("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if port < 20000 || port >= 32000 {
		t.Errorf("port %d, want one in [20000, 32000)", port)
	}
	for _, p := range []int{port, port + 1} {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		ln.Close()
	}
}

// --max-restarts, --min-np and --max-np mean something only with
// --elastic (without it a failed rank stops the job): given alone they
// are a usage error, not a flag that silently does nothing (a torchrun
// user's --max-restarts 3 restarted nothing).
func TestElasticFlagsNeedElastic(t *testing.T) {
	for _, cfg := range []Config{{MaxRestarts: 1}, {MinNP: 1}, {MaxNP: 4}, {Elastic: true, MaxRestarts: -1}} {
		cfg.NP = 2
		if _, _, err := runJob(t, "env", cfg); !errors.Is(err, ErrUsage) {
			t.Errorf("%+v: %v, want a usage error", cfg, err)
		}
	}
}
