package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// Kill rank 2 of 4; the survivors shrink and keep computing; the test
// starts rank 2 again (as gorun --max-restarts would): its comm.Init joins
// the running job, the survivors see it (Joiners, agreed with an
// allreduce), Grow, and all 4 — with their original ranks — run checked
// allreduces. Nothing is left behind.
func TestGrowAfterRestart(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			const victim = 2
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			j := growJobAfterKill(ctx, t, tr, victim, "REL_REINIT=0")
			restartGrown(ctx, t, j, victim)
		})
	}
}

// A rank that dies while the others Grow to admit it: the restarted rank 2
// is killed (GORUN_FAULT) at its third send, so that some members have
// connected to it and some have not. Every member must then do the same
// thing next — before, a member whose connection failed agreed again
// inside Grow and returned a communicator of the 3 live ranks, while the
// members that had connected returned from Grow and shrank after their
// next operation failed: the first ran its after-Grow step against the
// others' after-Shrink step (seen in the chaos soak as a collective
// mismatch and a 30 s stall). Then rank 2 is started again, without the
// fault, and all 4 end grown.
func TestGrowWhileJoinerDies(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			const victim = 2
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			j := growJobAfterKill(ctx, t, tr, victim, "REL_REINIT=0", "REL_GROW_SHARE=1")
			dying := j.restart(victim, "REL_RESTARTED=1", "GORUN_FAULT=rank=2:kill:send:2")
			select {
			case <-dying.exited:
			case <-ctx.Done():
				t.Fatalf("the restarted rank 2 was not killed by its fault\n%s", j.logs())
			}
			j.restart(victim, "REL_RESTARTED=1")
			for _, rk := range j.ranks {
				checkGrown(ctx, t, j, rk)
			}
		})
	}
}

// growJobAfterKill starts a job of 4 "grow" ranks over transport tr (env
// added), waits until all are ready, kills victim and waits until the
// others have shrunk.
func growJobAfterKill(ctx context.Context, t *testing.T, tr string, victim int, env ...string) *job {
	t.Helper()
	return growSpecAfterKill(ctx, t, jobSpec{n: 4, role: "grow", transport: tr, timeout: 20 * time.Second, env: env}, victim)
}

// growSpecAfterKill is growJobAfterKill for the job spec describes.
func growSpecAfterKill(ctx context.Context, t *testing.T, spec jobSpec, victim int) *job {
	t.Helper()
	j := startJob(t, spec)
	j.waitReady(ctx)
	j.ranks[victim].signal(syscall.SIGKILL)
	<-j.ranks[victim].exited
	for _, rk := range j.ranks {
		if rk.id != victim {
			if _, ok := rk.waitEvent(ctx, "shrunk"); !ok {
				t.Fatalf("rank %d did not shrink\n%s", rk.id, rk.log())
			}
		}
	}
	return j
}

// restartGrown starts the ranks victims of j again, as gorun
// --max-restarts would, and checks that every rank ends grown
// (checkGrown), logging how long after the restart.
func restartGrown(ctx context.Context, t *testing.T, j *job, victims ...int) {
	t.Helper()
	restarted := time.Now()
	for _, r := range victims {
		j.restart(r, "REL_RESTARTED=1")
	}
	for _, rk := range j.ranks {
		g := checkGrown(ctx, t, j, rk)
		t.Logf("rank %d: %s, %v after the restart", rk.id, g.Err, time.Unix(0, g.T).Sub(restarted).Round(time.Millisecond))
	}
}

// checkGrown waits for rk's report and checks that it ended grown, as its
// own rank of 4, with every result right; it returns the "grown" event.
func checkGrown(ctx context.Context, t *testing.T, j *job, rk *rank) event {
	t.Helper()
	if _, ok := rk.waitEvent(ctx, "after"); !ok {
		t.Fatalf("rank %d: no report (hang?)\n%s", rk.id, j.logs())
	}
	if e, bad := rk.event("wrong"); bad {
		t.Fatalf("rank %d: %s\n%s", rk.id, e.Err, j.logs())
	}
	g, ok := rk.event("grown")
	if !ok || g.Iter != rk.id {
		t.Fatalf("rank %d: grown %+v, want rank %d of 4\n%s", rk.id, g, rk.id, rk.log())
	}
	if _, ok := rk.event("done"); !ok {
		t.Fatalf("rank %d: did not finish\n%s", rk.id, rk.log())
	}
	return g
}

// childGrow: run allreduces; on a failure shrink ("shrunk"); at every step
// agree on whether ranks wait to join (an allreduce of Joiners, Max) and
// grow when they do ("grown", with the rank in Iter). A restarted rank
// (REL_RESTARTED=1) is admitted by comm.Init. Once the communicator has 4
// ranks again, 20 checked allreduces and "done".
// TestGrowBeyondStartSize: a job of 4 ranks started with GORUN_MAX_NP=6
// (gorun --max-np 6) runs; the test launches ranks 4 and 5 for it, with
// the job's environment (as a launcher adding ranks would); the 4 see them
// (Joiners), Grow, and all 6 run checked allreduces as ranks 0-5 of 6. A
// seventh rank launched beyond --max-np is refused by its own Init.
func TestGrowBeyondStartSize(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			j := startJob(t, jobSpec{n: 4, role: "grow", transport: tr, timeout: 20 * time.Second,
				env: []string{"REL_REINIT=0", "GORUN_MAX_NP=6", "REL_GROW_TO=6"}})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			j.waitReady(ctx)
			launched := time.Now()
			j.add("REL_RESTARTED=1")
			j.add("REL_RESTARTED=1")
			for _, rk := range j.ranks {
				if _, ok := rk.waitEvent(ctx, "after"); !ok {
					t.Fatalf("rank %d: no report (hang?)\n%s", rk.id, j.logs())
				}
				if e, bad := rk.event("wrong"); bad {
					t.Fatalf("rank %d: %s\n%s", rk.id, e.Err, j.logs())
				}
				g, ok := rk.event("grown")
				if !ok || g.Iter != rk.id || !strings.HasSuffix(g.Err, " of 6") {
					t.Fatalf("rank %d: grown %+v, want rank %d of 6\n%s", rk.id, g, rk.id, rk.log())
				}
				if _, ok := rk.event("done"); !ok {
					t.Fatalf("rank %d: did not finish\n%s", rk.id, rk.log())
				}
				t.Logf("rank %d: %s, %v after the launch", rk.id, g.Err, time.Unix(0, g.T).Sub(launched).Round(time.Millisecond))
			}
			extra := j.add("REL_RESTARTED=1") // rank 6 of a job whose --max-np is 6
			e, ok := extra.waitEvent(ctx, "error")
			if !ok || !strings.Contains(e.Err, "GORUN_RANK") {
				t.Fatalf("rank 6 beyond --max-np: %+v, want its Init to refuse GORUN_RANK\n%s", e, extra.log())
			}
		})
	}
}

func childGrow(rank int) int {
	base := takeSnapshot()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := comm.Init(ctx)
	if err != nil {
		emit(event{Kind: "error", Rank: rank, Err: "init: " + err.Error(), ErrRank: errRank(err)})
		return after(rank, base, nil)
	}
	buf := make([]int64, 64)
	fmt.Fprintf(os.Stderr, "rank %d: init: rank %d of %d\n", rank, c.Rank(), c.Size())
	want := envInt("REL_GROW_TO", 4)
	// A joiner (restarted, or launched to grow the job) takes part in the
	// same loop as the others: ranks may join one Grow at a time.
	grown := os.Getenv("REL_RESTARTED") == "1"
	how := "joined as"
	if !grown {
		emit(event{Kind: "ready", Rank: rank})
		how = "grew to"
	}
	// REL_GROW_SHARE=1: as examples/soak and gorun.elastic do, the ranks
	// run one step after a Grow (rank 0 broadcasts its state, checked
	// against the lowest rank as started, an allreduce of Max) and another
	// after a Shrink (they agree on the step to redo, an allreduce of Min);
	// ranks that disagree on which of the two they did fail with a
	// mismatch, a wrong result or a hang.
	share := os.Getenv("REL_GROW_SHARE") == "1"
	// REL_GROW_LARGE=1: that step also runs an allreduce and a broadcast
	// above comm's hierarchical threshold, checked ("large-grow",
	// "large-shrink", with the size in Iter).
	large := os.Getenv("REL_GROW_LARGE") == "1"
	next := "" // the step owed: "grow" or "shrink"
	if grown && share {
		next = "grow"
	}
	for next != "" || !grown || c.Size() != want {
		var err error
		switch next {
		case "grow":
			// Rank 0 of a grown world is its member of the lowest rank
			// as started (growTable): rank 0 once every rank is back.
			// A Grow whose joiners left before the members agreed
			// admits none, and its rank 0 is the lowest survivor: in
			// TestPartitionHealExpelsLoneRank, the side that goes on
			// may count the expelled ranks as joiners on their way out
			// (in CI on 2026-11-30 a 2|2 split's ranks 2 and 3 grew
			// into a world of themselves; the broadcast gave 2).
			lo := []int64{-int64(rank)}
			v := []int64{int64(rank)}
			if err = comm.AllReduce(ctx, c, lo, lo, comm.Max); err == nil {
				err = comm.Broadcast(ctx, c, v, 0)
			}
			if err == nil && v[0] != -lo[0] {
				emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("after grow: broadcast from rank 0 gave %d, want %d, the lowest rank as started", v[0], -lo[0])})
				return after(rank, base, c)
			}
			if err == nil && large {
				err = largeChecked(ctx, c, rank, "grow")
			}
		case "shrink":
			v := []int64{int64(100 + c.Rank())}
			if err = comm.AllReduce(ctx, c, v, v, comm.Min); err == nil && v[0] != 100 {
				emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("after shrink: min %d, want 100", v[0])})
				return after(rank, base, c)
			}
			if err == nil && large {
				err = largeChecked(ctx, c, rank, "shrink")
			}
		}
		next = ""
		if err == nil {
			k := []int64{int64(c.Joiners())}
			err = comm.AllReduce(ctx, c, k, k, comm.Max)
			if err == nil && k[0] > 0 {
				fmt.Fprintf(os.Stderr, "rank %d: growing (%d joiners)\n", rank, k[0])
				if c, err = c.Grow(ctx); err != nil {
					emit(event{Kind: "wrong", Rank: rank, Err: "grow: " + err.Error()})
					return after(rank, base, nil)
				}
				fmt.Fprintf(os.Stderr, "rank %d: grew: rank %d of %d\n", rank, c.Rank(), c.Size())
				grown = true
				if share {
					next = "grow"
				}
				continue
			}
		}
		if err == nil {
			err = comm.AllReduce(ctx, c, buf, buf, comm.Sum)
		}
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, comm.ErrMismatch) {
				emit(event{Kind: "wrong", Rank: rank, Err: err.Error()})
				return after(rank, base, c)
			}
			fmt.Fprintf(os.Stderr, "rank %d: shrinking after %v\n", rank, err)
			if c, err = c.Shrink(ctx); err != nil {
				emit(event{Kind: "wrong", Rank: rank, Err: "shrink: " + err.Error()})
				return after(rank, base, nil)
			}
			emit(event{Kind: "shrunk", Rank: rank, Iter: c.Rank()})
			if share {
				next = "shrink"
			}
		}
		time.Sleep(time.Millisecond)
	}
	emit(event{Kind: "grown", Rank: rank, Iter: c.Rank(), Err: fmt.Sprintf("%s rank %d of %d", how, c.Rank(), c.Size())})
	if err := checkedAllReduces(ctx, c, buf, 20, func() {}); err != nil {
		emit(event{Kind: "wrong", Rank: rank, Err: "after grow: " + err.Error()})
		return after(rank, base, c)
	}
	emit(event{Kind: "done", Rank: rank, Iter: c.Rank()})
	return after(rank, base, c)
}

// largeElems is a buffer of int64 above comm's hierarchical threshold
// (64 KiB): 128 KiB.
const largeElems = 16 << 10

// largeChecked runs an allreduce (Sum) and a broadcast from rank 0 of
// largeElems int64 on c and checks them; it reports "large-"+after with
// c's size in Iter, or exits 3 on a wrong result ("wrong").
func largeChecked(ctx context.Context, c *comm.Comm, rank int, after string) error {
	n, v := c.Size(), make([]int64, largeElems)
	for i := range v {
		v[i] = int64(c.Rank()*largeElems + i)
	}
	if err := comm.AllReduce(ctx, c, v, v, comm.Sum); err != nil {
		return err
	}
	for i, x := range v {
		if want := int64(largeElems*n*(n-1)/2 + n*i); x != want {
			emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("after %s: large allreduce [%d] = %d, want %d", after, i, x, want)})
			os.Exit(3)
		}
	}
	for i := range v {
		v[i] = -1
		if c.Rank() == 0 {
			v[i] = int64(7*i + 1)
		}
	}
	if err := comm.Broadcast(ctx, c, v, 0); err != nil {
		return err
	}
	for i, x := range v {
		if x != int64(7*i+1) {
			emit(event{Kind: "wrong", Rank: rank, Err: fmt.Sprintf("after %s: large broadcast [%d] = %d, want %d", after, i, x, 7*i+1)})
			os.Exit(3)
		}
	}
	emit(event{Kind: "large-" + after, Rank: rank, Iter: n})
	return nil
}
