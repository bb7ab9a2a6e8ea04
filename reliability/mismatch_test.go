package reliability

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// A rank that calls a different collective, count, type, op or root than
// its peers gets an error on every rank naming it: never a hang, never a
// result computed from mismatched buffers.
func TestMismatchFailsEveryRank(t *testing.T) {
	for _, kind := range []string{"coll", "count", "type", "type-same-bytes", "op", "root"} {
		for _, tr := range []string{"tcp", "shm"} {
			t.Run(kind+"/"+tr, func(t *testing.T) {
				t.Parallel()
				trialSlots <- struct{}{}
				defer func() { <-trialSlots }()
				j := startJob(t, jobSpec{n: 4, role: "mismatch", transport: tr, timeout: 5 * time.Second,
					env: []string{"REL_MISMATCH=" + kind, "REL_ODD=2", "REL_REINIT=0"}})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				named := map[int]int{}
				for _, rk := range j.ranks {
					a, ok := rk.waitEvent(ctx, "after")
					if h, hung := rk.event("closehang"); hung {
						closeHangs(t, []string{fmt.Sprintf("rank %d: %s", rk.id, h.Err)})
						continue
					}
					if !ok {
						t.Fatalf("rank %d: no report (hang?)\n%s", rk.id, j.logs())
					}
					if e, ok := rk.event("wrong"); ok {
						t.Errorf("rank %d: WRONG RESULT: %s", rk.id, e.Err)
					}
					e, ok := rk.event("error")
					if !ok {
						t.Errorf("rank %d: no error for a mismatched call", rk.id)
						continue
					}
					if !strings.Contains(e.Err, "mismatch: ") {
						t.Logf("rank %d: not ErrMismatch: %s", rk.id, e.Err)
					}
					named[e.ErrRank]++
					if a.Leak != "" {
						t.Errorf("rank %d: leaked after Close: %s", rk.id, a.Leak)
					}
					t.Logf("rank %d: %s", rk.id, e.Err)
				}
				t.Logf("ranks named: %v", named)
				// The vote (internal/engine/mismatch.go) names the odd rank
				// on every rank, also where the others' part of a root
				// mismatch completed and went on to the next call.
				if len(named) != 1 || named[2] == 0 {
					t.Errorf("ranks named %v, want rank 2 by every rank", named)
				}
			})
		}
	}
}
