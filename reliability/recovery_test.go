package reliability

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// TestRecoveryTime measures elastic recovery as a user sees it: from the
// SIGKILL of one rank of 4 to the first allreduce that completes, with the
// right result, on the survivors' shrunk communicator (the latest of the
// three survivors' completion times). Trials run one job at a time,
// REL_TRIALS per transport (default 3; 20 or more for RELIABILITY.md),
// with the victim drawn from all ranks (rank 0 is the gossip seed). The
// test checks correctness and logs the figures; it asserts no time.
func TestRecoveryTime(t *testing.T) { recoveryTimes(t, syscall.SIGKILL, "kill") }

// recoveryTimes runs TestRecoveryTime's trials with the victim sent sig.
func recoveryTimes(t *testing.T, sig syscall.Signal, what string) {
	if testing.Short() {
		t.Skip("sequential jobs")
	}
	trials := envInt("REL_TRIALS", 3)
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			var took, errAt []time.Duration
			for i := range trials {
				victim := rand.IntN(4)
				d, e := recoveryTrial(t, tr, victim, sig)
				if d > 0 {
					took, errAt = append(took, d), append(errAt, e)
					t.Logf("trial %d, victim %d: first error %v after the %s, first good allreduce after %v", i, victim, e.Round(time.Millisecond), what, d.Round(time.Millisecond))
				}
			}
			if len(took) > 0 {
				slices.Sort(took)
				slices.Sort(errAt)
				t.Logf("%s, %d trials: %s → first good allreduce after Shrink: median %v, min %v, max %v; %s → first error: median %v, min %v, max %v",
					tr, len(took), what, took[len(took)/2].Round(time.Millisecond), took[0].Round(time.Millisecond),
					took[len(took)-1].Round(time.Millisecond), what, errAt[len(errAt)/2].Round(time.Millisecond),
					errAt[0].Round(time.Millisecond), errAt[len(errAt)-1].Round(time.Millisecond))
			}
		})
	}
}

// recoveryTrial runs one job, sends victim sig (SIGKILL, or SIGSTOP to
// freeze it), and returns the time from the signal to the survivors' first
// good allreduce and to their first error (the latest survivor's, each).
func recoveryTrial(t *testing.T, tr string, victim int, sig syscall.Signal) (recovered, firstErr time.Duration) {
	t.Helper()
	recovered, firstErr, _ = recoveryTrialSpec(t, jobSpec{n: 4, role: "recover", transport: tr, timeout: 10 * time.Second,
		env: []string{"REL_REINIT=0"}}, victim, sig)
	return recovered, firstErr
}

// recoveryTrialSpec is recoveryTrial for a job of spec (4 ranks, role
// "recover"); it also returns the survivors' first errors.
func recoveryTrialSpec(t *testing.T, spec jobSpec, victim int, sig syscall.Signal) (recovered, firstErr time.Duration, errs []event) {
	t.Helper()
	j := startJob(t, spec)
	defer j.kill()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	j.waitReady(ctx)
	time.Sleep(50 * time.Millisecond)
	killed := time.Now()
	j.ranks[victim].signal(sig)
	for _, rk := range j.ranks {
		if rk.id == victim {
			continue
		}
		a, ok := rk.waitEvent(ctx, "after")
		if !ok {
			t.Fatalf("rank %d: no report (hang?)\n%s", rk.id, rk.log())
		}
		if e, bad := rk.event("wrong"); bad {
			t.Fatalf("rank %d: %s\n%s", rk.id, e.Err, rk.log())
		}
		r, ok := rk.event("recovered")
		if !ok {
			t.Fatalf("rank %d: did not recover\n%s", rk.id, rk.log())
		}
		if want := rk.id - b2i(rk.id > victim); r.Iter != want {
			t.Errorf("rank %d became rank %d, want %d", rk.id, r.Iter, want)
		}
		if a.Leak != "" {
			t.Errorf("rank %d: leaked after Close: %s", rk.id, a.Leak)
		}
		recovered = max(recovered, time.Unix(0, r.T).Sub(killed))
		if e, ok := rk.event("error"); ok {
			firstErr = max(firstErr, time.Unix(0, e.T).Sub(killed))
			errs = append(errs, e)
		}
	}
	if os.Getenv("REL_SHOW_LOGS") != "" {
		t.Logf("SIGSTOP/kill at %s\n%s", killed.Format("15:04:05.000000"), j.logs())
	}
	return recovered, firstErr, errs
}

// A second rank dies while the survivors shrink after the first death
// (SIGKILL 0–400 ms after the first): the two survivors end with a
// 2-rank communicator that computes correctly, whether the second death
// hit their agreement, their reconnection or their first allreduce.
func TestDeathDuringShrink(t *testing.T) {
	if testing.Short() {
		t.Skip("sequential jobs")
	}
	for i := range envInt("REL_TRIALS", 3) {
		tr := []string{"tcp", "shm"}[i%2]
		delay := time.Duration(rand.IntN(400)) * time.Millisecond
		t.Run(fmt.Sprintf("%s/%d", tr, i), func(t *testing.T) {
			j := startJob(t, jobSpec{n: 4, role: "recover", transport: tr, timeout: 10 * time.Second,
				env: []string{"REL_REINIT=0", "REL_RUN_MS=1500"}})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			j.waitReady(ctx)
			j.ranks[1].signal(syscall.SIGKILL)
			time.Sleep(delay)
			j.ranks[3].signal(syscall.SIGKILL)
			for _, id := range []int{0, 2} {
				rk := j.ranks[id]
				if _, ok := rk.waitEvent(ctx, "after"); !ok {
					t.Fatalf("rank %d: no report (hang?)\n%s", id, rk.log())
				}
				if e, bad := rk.event("wrong"); bad {
					t.Fatalf("rank %d: %s\n%s", id, e.Err, rk.log())
				}
				d, ok := rk.event("done")
				if !ok || d.Iter != id/2 || !strings.HasPrefix(d.Err, "size 2 ") {
					t.Fatalf("rank %d: done %+v, want rank %d of size 2\n%s", id, d, id/2, rk.log())
				}
				t.Logf("second kill %v after the first: rank %d → %d, %s", delay, id, d.Iter, d.Err)
			}
		})
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// childRecover runs allreduces until one fails, shrinks, and reports the
// time its first allreduce on the shrunk communicator completed
// ("recovered", with the new rank in Iter); a few more follow, checked.
func childRecover(rank int) int {
	base := takeSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		emit(event{Kind: "error", Rank: rank, Err: "init: " + err.Error(), ErrRank: errRank(err)})
		return after(rank, base, nil)
	}
	emit(event{Kind: "ready", Rank: rank})
	buf := make([]int64, 64)
	for {
		if err = comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
			break
		}
	}
	emit(event{Kind: "error", Rank: rank, Err: err.Error(), ErrRank: errRank(err)})
	// Shrink until 5 allreduces in a row succeed: another rank may die
	// during or after a Shrink.
	s := c
	for shrinks := 0; ; shrinks++ {
		if s, err = s.Shrink(ctx); err != nil {
			kind := "wrong"
			if errors.Is(err, comm.ErrExpelled) {
				kind = "expelled" // the others went on without this rank (TestResumedRankExpelled)
			}
			emit(event{Kind: kind, Rank: rank, Err: "shrink: " + err.Error(), ErrRank: errRank(err)})
			return after(rank, base, c)
		}
		if err = checkedAllReduces(ctx, s, buf, 5, func() {
			emit(event{Kind: "recovered", Rank: rank, Iter: s.Rank()})
		}); err == nil {
			emit(event{Kind: "done", Rank: rank, Iter: s.Rank(), Err: fmt.Sprintf("size %d after %d shrinks", s.Size(), shrinks+1)})
			return after(rank, base, s)
		}
		if shrinks == 3 {
			emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("still failing after %d shrinks: %v", shrinks+1, err)})
			return after(rank, base, s)
		}
	}
}

// checkedAllReduces runs k allreduces on s and checks their results;
// first runs after the first one succeeded.
func checkedAllReduces(ctx context.Context, s *comm.Comm, buf []int64, k int, first func()) error {
	n := s.Size()
	// REL_RUN_MS: keep going for that long (the ranks agree on the count
	// through an allreduce of "want more").
	until := time.Now().Add(time.Duration(envInt("REL_RUN_MS", 0)) * time.Millisecond)
	for it := 0; ; it++ {
		if it >= k {
			more := []int64{b2i64(time.Now().Before(until))}
			if err := comm.AllReduce(ctx, s, more, more, comm.Min); err != nil {
				return err
			}
			if more[0] == 0 {
				return nil
			}
		}
		for i := range buf {
			buf[i] = int64(s.Rank()*1000 + i + it)
		}
		if err := comm.AllReduce(ctx, s, buf, buf, comm.Sum); err != nil {
			return err
		}
		if it == 0 {
			first()
		}
		for i, v := range buf {
			if want := int64(1000*n*(n-1)/2 + n*(i+it)); v != want {
				emit(event{Kind: "wrong", Rank: s.Rank(), Err: fmt.Sprintf("after shrink [%d] = %d, want %d", i, v, want)})
				os.Exit(3)
			}
		}
	}
}

func b2i64(b bool) int64 { return int64(b2i(b)) }
