package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/bootstrap"
	"github.com/gorun-hpc/gorun/internal/engine"
)

// initDiesEnv names the rank that TestInitAgreeChild kills once it has
// acknowledged the world (initHook "formed"); initFailsEnv, as
// "rank:step", the rank whose Init it makes fail at that step of initHook,
// with initFailReason.
const (
	initDiesEnv    = "GORUN_INIT_TEST_DIES"
	initFailsEnv   = "GORUN_INIT_TEST_FAILS"
	initFailReason = "the test makes this rank's Init fail"
)

// TestInitAgreeChild is one rank of TestInitRankDiesAfterForm: its Init's
// outcome, one line.
func TestInitAgreeChild(t *testing.T) {
	dies, fails := os.Getenv(initDiesEnv), os.Getenv(initFailsEnv)
	if dies == "" && fails == "" {
		t.Skip("run by TestInitRankDiesAfterForm and TestInitRankFailsAfterForm")
	}
	if dies == os.Getenv("GORUN_RANK") {
		initHook = func(_ int, step string) error {
			if step == "formed" {
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
			return nil
		}
	}
	if rank, at, _ := strings.Cut(fails, ":"); rank == os.Getenv("GORUN_RANK") {
		initHook = func(_ int, step string) error {
			if step == at {
				return errors.New(initFailReason)
			}
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // beyond GORUN_TIMEOUT
	defer cancel()
	c, err := Init(ctx)
	if err != nil {
		var re *RankError
		if errors.As(err, &re) {
			fmt.Printf("INIT FAILED culprit=%d: %v\n", re.Rank, err)
		} else {
			fmt.Printf("INIT FAILED: %v\n", err)
		}
		return
	}
	fmt.Printf("INIT OK rank %d\n", c.Rank())
	c.Close()
}

// startAgreeRanks starts n processes of TestInitAgreeChild, a job of its
// own with env added, their stdin closed.
func startAgreeRanks(t *testing.T, ctx context.Context, n int, env ...string) ([]*exec.Cmd, []initOutput) {
	t.Helper()
	seed := "127.0.0.1:" + strconv.Itoa(initFreePort(t))
	common := append(initCleanEnv(), "GORUN_SIZE="+strconv.Itoa(n), "GORUN_SEEDS="+seed,
		"GORUN_JOB_ID=agree-test-"+initRandomID(), "GORUN_JOB_TOKEN="+initRandomID())
	cmds, stdins, outs := startStdinRanks(t, ctx, n, append(common, env...), "TestInitAgreeChild")
	for _, w := range stdins {
		w.Close()
	}
	return cmds, outs
}

// TestInitRankDiesAfterForm: of 6 ranks, rank 2 dies once it has
// acknowledged the world, before it connects. Rank 5 has no start-up
// link to rank 2 (collectives.InitPeers), so before Init ended with an
// agreement its Init returned a communicator; now every survivor's Init
// fails naming rank 2.
func TestInitRankDiesAfterForm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 6 processes")
	}
	const n, dies = 6, 2
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmds, outs := startAgreeRanks(t, ctx, n, initDiesEnv+"="+strconv.Itoa(dies), "GORUN_TIMEOUT=60s")
	for r, cmd := range cmds {
		err := cmd.Wait()
		out := outs[r].String()
		if r == dies {
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Errorf("rank %d was to die by SIGKILL: %v\n%s", r, err, out)
			}
			continue
		}
		if !strings.Contains(out, fmt.Sprintf("INIT FAILED culprit=%d", dies)) {
			t.Errorf("rank %d: Init did not fail naming rank %d:\n%s", r, dies, out)
		}
	}
}

// TestInitRankFailsAfterForm: of 6 ranks, one's Init fails for a reason
// of its own (not a death) once the world formed: before it connects (the
// ranks it would dial wait for it; rank 0 dials all its peers) or once
// connected, before Init's agreement. Every other rank's Init must fail
// naming it and its reason, long before GORUN_TIMEOUT (10 minutes): the
// test's deadline is 3. The reason appears once: before 2026-11-30 a rank
// that heard of rank 2 through rank 3's abandonment read "rank 2: peer
// failed: bootstrap gossip rank 1 peer 3: peer gave up on the world:
// gorun: init: rank 2: peer failed: bootstrap gossip rank 3 peer 2: ...".
func TestInitRankFailsAfterForm(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 6 processes")
	}
	for _, tc := range []struct {
		fails int
		step  string
	}{{0, "formed"}, {2, "formed"}, {2, "connected"}} {
		t.Run(fmt.Sprintf("rank=%d/step=%s", tc.fails, tc.step), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmds, outs := startAgreeRanks(t, ctx, 6, initFailsEnv+"="+strconv.Itoa(tc.fails)+":"+tc.step, "GORUN_TIMEOUT=10m")
			for r, cmd := range cmds {
				err := cmd.Wait()
				out := outs[r].String()
				switch {
				case ctx.Err() != nil:
					t.Errorf("rank %d still in Init at the test's deadline (GORUN_TIMEOUT is 10m)\n%s", r, out)
				case err != nil:
					t.Errorf("rank %d: %v\n%s", r, err, out)
				case !strings.Contains(out, fmt.Sprintf("INIT FAILED culprit=%d", tc.fails)) || !strings.Contains(out, initFailReason):
					t.Errorf("rank %d: Init did not fail naming rank %d and its reason:\n%s", r, tc.fails, out)
				default:
					// Once: not each abandoning rank's account of the one
					// before, nor the gossip's report lines.
					line := out[strings.Index(out, "INIT FAILED"):]
					line = line[:strings.IndexByte(line, '\n')]
					if strings.Count(line, initFailReason) != 1 || strings.Count(line, "gorun:") != 1 || strings.Contains(line, "bootstrap") {
						t.Errorf("rank %d: Init's error is not plain: %s", r, line)
					}
				}
			}
		})
	}
}

// TestInitAgreementNeedsEveryRank: Init's barrier (agreeInit) completes on
// no rank while one rank has not entered it, for every world of 2 to 8
// ranks and every absent rank. Before collectives.DisseminationBarrier
// ordered a round's send after every earlier receive, of 6 ranks, rank 1
// completed it without rank 2. Barrier is the same schedule, the same test.
func TestInitAgreementNeedsEveryRank(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(c *Comm, ctx context.Context) error
	}{
		{"init", (*Comm).agreeInit},
		{"barrier", (*Comm).Barrier},
	} {
		t.Run(tc.name, func(t *testing.T) { needsEveryRank(t, tc.call) })
	}
}

func needsEveryRank(t *testing.T, call func(c *Comm, ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // the ranks that wait for the absent one end here
	defer cancel()
	var wg sync.WaitGroup
	var worlds [][]*Comm
	for n := 2; n <= 8; n++ {
		for absent := range n {
			cs, err := NewLocal(context.Background(), n)
			if err != nil {
				t.Fatal(err)
			}
			worlds = append(worlds, cs)
			for r, c := range cs {
				if r == absent {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := call(c, ctx); err == nil {
						t.Errorf("%d ranks: rank %d completed without rank %d", n, r, absent)
					}
				}()
			}
		}
	}
	wg.Wait()
	for _, cs := range worlds {
		for _, c := range cs {
			c.Close()
		}
	}
}

// TestFormLossNamesRank: a Join that failed for a rank lost while the
// first world formed names that rank, as a failure after it formed does.
// TestInitRankFailsAfterForm met it in CI: of 6 ranks, rank 4 had not yet
// heard the coordinator's commit when the coordinator gave up on the world
// it had just agreed, and its Init failed with a *bootstrap.FormError
// that named no rank.
func TestFormLossNamesRank(t *testing.T) {
	fe := &bootstrap.FormError{JobID: "j", Size: 6, Epoch: 1, Seen: []int{0, 1, 2, 3, 4, 5},
		Cause: &bootstrap.OpError{Op: "join", Rank: 4, Peer: 0, Err: &bootstrap.AbandonError{Cause: 0, Reason: initFailReason}}}
	err := formLoss(fe)
	var re *RankError
	var got *bootstrap.FormError
	want := "gorun: init: rank 0: peer gave up on the world: " + initFailReason + " (while the world formed)"
	if !errors.As(err, &re) || re.Rank != 0 || err.Error() != want || !errors.As(err, &got) || got != fe ||
		!errors.Is(err, ErrPeerFailed) || !errors.Is(err, bootstrap.ErrPeerAbandoned) {
		t.Errorf("formLoss = %v, want %q, a *RankError naming rank 0 wrapping the FormError", err, want)
	}
	// An abandonment of a kind (the rank's own error was ErrInvalid) is of
	// that kind, not ErrPeerFailed.
	fe = &bootstrap.FormError{JobID: "j", Size: 3, Epoch: 1, Seen: []int{0, 1, 2},
		Cause: &bootstrap.OpError{Op: "join", Rank: 1, Peer: 0, Err: &bootstrap.AbandonError{Cause: 0, Kind: "invalid", Reason: "rank 2: invalid argument: its setting"}}}
	if err := formLoss(fe); !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrPeerFailed) {
		t.Errorf("formLoss of an abandonment of kind invalid = %v, want ErrInvalid naming rank 0, not ErrPeerFailed", err)
	}
	missing := &bootstrap.FormError{JobID: "j", Size: 6, Missing: []int{5}, Cause: context.DeadlineExceeded}
	if err := formLoss(missing); err != error(missing) {
		t.Errorf("formLoss of a world that did not form in time = %v, want it unchanged", err)
	}
}

// TestInitFailureKind: of 3 ranks, rank 2's Init fails once the world
// formed with an error of its own of a kind (ErrInvalid: a setting only it
// sees, as a bad GORUN_BIND; ErrTimeout), before it connects or once
// connected. The others' Init fails naming rank 2 with that kind, not
// ErrPeerFailed: its abandonment carries the kind (bootstrap's
// AbandonError.Kind), as an operation fails on every rank with the kind of
// the rank that withdrew. Before, they read "rank 2: peer gave up on the
// world: invalid argument: ..." wrapping ErrPeerFailed alone. An error of
// no such kind is ErrPeerFailed as before.
func TestInitFailureKind(t *testing.T) {
	plain := errors.New(initFailReason)
	for _, tc := range []struct {
		step string
		err  error
		want error
	}{
		{"connected", fmt.Errorf("%w: %w", ErrInvalid, plain), ErrInvalid},
		{"formed", fmt.Errorf("%w: %w", ErrInvalid, plain), ErrInvalid},
		{"connected", fmt.Errorf("%w: %w", ErrTimeout, plain), ErrTimeout},
		{"connected", plain, ErrPeerFailed},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.step, tc.want), func(t *testing.T) {
			initHook = func(rank int, step string) error {
				if rank == 2 && step == tc.step {
					return tc.err
				}
				return nil
			}
			defer func() { initHook = nil }()
			_, errs, _ := initRanks(t, 3, func(int) []Option { return nil })
			for r, err := range errs {
				want := tc.want
				if r == 2 && want == ErrPeerFailed {
					want = nil // its own error, of no kind
				}
				others := slices.DeleteFunc([]error{ErrPeerFailed, ErrInvalid, ErrTimeout}, func(e error) bool { return e == want })
				var re *RankError
				if !errors.As(err, &re) || re.Rank != 2 || want != nil && !errors.Is(err, want) || slices.ContainsFunc(others, func(e error) bool { return errors.Is(err, e) }) ||
					strings.Count(err.Error(), initFailReason) != 1 {
					t.Errorf("rank %d: %v; want %v alone naming rank 2 and its reason", r, err, want)
				}
			}
		})
	}
}

// TestInitCauseLateAbandonment: a rank whose Init failed abandons the
// world and ends; another rank's bootstrap may find its gossip port
// refused before its abandonment arrives, and report it first as a death.
// Init's error must still say why it gave up, once, when the abandonment
// follows within abandonGrace (TestInitRankFailsAfterForm/rank=0/
// step=formed read "its gossip port refused a connection" without the
// reason, once, under load). A death that nothing follows is named as it
// was found.
func TestInitCauseLateAbandonment(t *testing.T) {
	refused := fmt.Errorf("%w: its gossip port refused a connection", bootstrap.ErrPeerDead)
	death := bootstrap.Failure{Rank: 0, Epoch: 1, Name: "r0-a", Err: &bootstrap.OpError{Op: "gossip", Rank: 1, Peer: 0, Err: refused}}
	why := &bootstrap.AbandonError{Cause: 0, Reason: initFailReason}
	abandon := bootstrap.Failure{Rank: 0, Epoch: 1, Name: "r0-a", Err: &bootstrap.OpError{Op: "gossip", Rank: 1, Peer: 0, Err: why}}
	for _, late := range []bool{true, false} {
		t.Run(fmt.Sprintf("abandonment=%v", late), func(t *testing.T) {
			fw := &failureSink{epoch: 1, died: make(chan struct{}), amended: make(chan struct{})}
			g := &gossipRendezvous{fw: fw, placed: bootstrap.World{Rank: 1, Epoch: 1}}
			fw.deliver(death)
			// The engine failed on the death's report.
			engErr := rankErr("init", &engine.PeerError{Rank: 0, Err: fmt.Errorf("%w: %w", ErrPeerFailed, death.Err)})
			got := make(chan error, 1)
			go func() { got <- g.initCause(context.Background(), engErr) }()
			if late {
				fw.deliver(abandon)
			}
			err := <-got
			var re *RankError
			if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrPeerFailed) {
				t.Fatalf("initCause: %v, want a *RankError naming rank 0, ErrPeerFailed", err)
			}
			msg := err.Error()
			if !late {
				if !strings.Contains(msg, "refused") {
					t.Errorf("initCause of a death: %q, want its refused port", msg)
				}
				return
			}
			if strings.Count(msg, initFailReason) != 1 || strings.Contains(msg, "refused") || strings.Contains(msg, "bootstrap") {
				t.Errorf("initCause: %q, want rank 0's reason %q once, without the refused port", msg, initFailReason)
			}
			var ab *bootstrap.AbandonError
			if !errors.As(err, &ab) {
				t.Errorf("initCause: %v does not wrap the abandonment", err)
			}
		})
	}
}

// TestFailureLine: GORUN_DEBUG's line for a rank that abandoned the world
// because another rank abandoned it names that rank and says "peer gave
// up on the world" once (it said it twice: the relay's reason is the first
// rank's whole error); a rank's own abandonment and a death read as the
// bootstrap reported them.
func TestFailureLine(t *testing.T) {
	const reason = "invalid argument: its device failed"
	report := func(rank int, err error) bootstrap.Failure {
		return bootstrap.Failure{Rank: rank, Epoch: 1, Name: "r", Err: &bootstrap.OpError{Op: "gossip", Rank: 1, Peer: rank, Err: err}}
	}
	own := report(2, &bootstrap.AbandonError{Cause: 2, Kind: "invalid", Reason: reason})
	relayed := report(0, &bootstrap.AbandonError{Cause: 2, Kind: "invalid", Reason: failureWords(own.Err)})
	death := report(3, fmt.Errorf("%w: its gossip port refused a connection", bootstrap.ErrPeerDead))
	for _, tc := range []struct {
		f    bootstrap.Failure
		want string
	}{
		{own, "rank 2 failed: bootstrap gossip rank 1 peer 2: peer gave up on the world: " + reason},
		{relayed, "rank 0 failed: it gave up after rank 2's failure: peer gave up on the world: " + reason},
		{death, "rank 3 failed: " + death.Err.Error()},
	} {
		if got := failureLine(tc.f); got != tc.want {
			t.Errorf("failureLine(%v) = %q, want %q", tc.f.Err, got, tc.want)
		}
		if got := failureLine(tc.f); strings.Count(got, bootstrap.ErrPeerAbandoned.Error()) > 1 {
			t.Errorf("failureLine(%v) = %q says %q more than once", tc.f.Err, got, bootstrap.ErrPeerAbandoned)
		}
	}
}
