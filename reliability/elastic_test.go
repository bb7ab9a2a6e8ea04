package reliability

// Elastic recovery across more than one failure, and elastic training
// under gorun. This file is owned by the elastic-training maintainer. Its
// rank program ("shrink-twice") is dispatched from init below rather than
// from runChild, so that the file stands alone.

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
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
			for _, rk := range j.ranks {
				if _, ok := rk.waitEvent(ctx, "ready"); !ok {
					t.Fatalf("rank %d never ready\n%s", rk.id, j.logs())
				}
			}
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
