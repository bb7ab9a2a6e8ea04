package reliability

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// TestShrinkAfterKill kills one of 4 ranks in the middle of allreduces;
// the 3 survivors Shrink (agreeing through the gossip bootstrap), are
// renumbered by their old rank, and run correct allreduces on 3 ranks.
// Rank 0 (the gossip seed) is among the victims.
func TestShrinkAfterKill(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		for _, victim := range []int{0, 2} {
			t.Run(fmt.Sprintf("%s/victim=%d", tr, victim), func(t *testing.T) {
				t.Parallel()
				trialSlots <- struct{}{}
				defer func() { <-trialSlots }()
				j := startJob(t, jobSpec{n: 4, role: "shrink", transport: tr, timeout: 10 * time.Second,
					env: []string{"REL_REINIT=0"}})
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				j.waitReady(ctx)
				time.Sleep(100 * time.Millisecond)
				j.ranks[victim].signal(syscall.SIGKILL)
				var hangs []string
				for _, rk := range j.ranks {
					if rk.id == victim {
						continue
					}
					a, ok := rk.waitEvent(ctx, "after")
					if h, hung := rk.event("closehang"); hung {
						hangs = append(hangs, fmt.Sprintf("rank %d: %s", rk.id, h.Err))
						continue
					}
					if !ok {
						t.Errorf("rank %d: no report (hang?)\n%s", rk.id, rk.log())
						continue
					}
					if e, bad := rk.event("wrong"); bad {
						t.Errorf("rank %d: %s\n%s", rk.id, e.Err, rk.log())
						continue
					}
					d, ok := rk.event("done")
					if !ok {
						t.Errorf("rank %d: did not finish\n%s", rk.id, rk.log())
						continue
					}
					want := rk.id
					if rk.id > victim {
						want--
					}
					if d.Iter != want {
						t.Errorf("rank %d became rank %d, want %d", rk.id, d.Iter, want)
					}
					if a.Leak != "" {
						t.Errorf("rank %d: leaked after Close: %s", rk.id, a.Leak)
					}
					t.Logf("rank %d → %d: %s", rk.id, d.Iter, d.Err)
				}
				closeHangs(t, hangs)
			})
		}
	}
}
