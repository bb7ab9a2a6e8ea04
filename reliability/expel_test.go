package reliability

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A rank frozen (SIGSTOP) long enough for the others to shrink without it,
// then resumed (SIGCONT), finds its communicator broken and calls Shrink
// from its old world. It must learn that it was expelled (ErrExpelled)
// while the others still run, and never go on as a job of its own (before:
// its Shrink waited until the others left, 52-85 s in the chaos soak, then
// agreed on a world of itself). The others run on, 3 ranks, checked. Victim
// rank 0 is the gossip seed and the old coordinator.
func TestResumedRankExpelled(t *testing.T) {
	cases := []struct {
		tr     string
		victim int
	}{{"tcp", 2}, {"shm", 0}}
	if testing.Short() {
		cases = cases[:1]
	}
	for _, c := range cases {
		t.Run(c.tr, func(t *testing.T) {
			// The survivors go on for 8 s after they recover: the victim
			// must be told while they run.
			j := startJob(t, jobSpec{n: 4, role: "recover", transport: c.tr, timeout: 10 * time.Second,
				env: []string{"REL_REINIT=0", "REL_RUN_MS=8000"}})
			defer j.kill()
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			j.waitReady(ctx)
			victim := j.ranks[c.victim]
			victim.signal(syscall.SIGSTOP)
			for _, rk := range j.ranks {
				if rk != victim {
					if _, ok := rk.waitEvent(ctx, "recovered"); !ok {
						victim.signal(syscall.SIGCONT)
						t.Fatalf("rank %d did not recover with rank %d frozen\n%s", rk.id, c.victim, j.logs())
					}
				}
			}
			resumed := time.Now()
			victim.signal(syscall.SIGCONT)
			if _, ok := victim.waitEvent(ctx, "after"); !ok {
				t.Fatalf("victim rank %d: no report after its resume (hang?)\n%s", c.victim, victim.log())
			}
			x, expelled := victim.event("expelled")
			if r, ok := victim.event("recovered"); ok {
				t.Errorf("victim rank %d went on as rank %d of a world without the others\n%s", c.victim, r.Iter, victim.log())
			}
			if !expelled {
				t.Fatalf("victim rank %d: not told it was expelled\n%s", c.victim, victim.log())
			}
			if !strings.Contains(x.Err, "declared dead") {
				t.Errorf("victim's error %q does not say it was declared dead", x.Err)
			}
			t.Logf("victim rank %d: expelled %v after SIGCONT: %s", c.victim, time.Unix(0, x.T).Sub(resumed).Round(time.Millisecond), x.Err)
			for _, rk := range j.ranks {
				if rk == victim {
					continue
				}
				d, ok := rk.waitEvent(ctx, "done")
				if !ok || !strings.HasPrefix(d.Err, "size 3 ") {
					t.Fatalf("rank %d: done %+v, want a world of 3\n%s", rk.id, d, j.logs())
				}
				if d.T < x.T {
					t.Errorf("rank %d finished (%v) before the victim learned it was expelled", rk.id, time.Unix(0, d.T).Sub(resumed))
				}
				if e, bad := rk.event("wrong"); bad {
					t.Errorf("rank %d: %s", rk.id, e.Err)
				}
			}
		})
	}
}
