package bootstrap

import (
	"errors"
	"testing"
	"time"
)

// TestAbandonedRankReported: a member that abandons the world is reported
// to the others as a failure with the rank it blames and its reason, not
// as a leave (TestClosedRankReported).
func TestAbandonedRankReported(t *testing.T) {
	nodes := startWorld(t, "abandon", 3, nil)
	if err := nodes[1].Abandon(2, "its device failed"); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for r, n := range nodes {
		if r == 1 {
			continue
		}
		select {
		case f := <-n.Failures():
			var ab *AbandonError
			var oe *OpError
			if f.Rank != 1 || f.Epoch != 1 || !errors.As(f.Err, &ab) || !errors.Is(f.Err, ErrPeerAbandoned) || errors.Is(f.Err, ErrPeerLeft) {
				t.Fatalf("rank %d got failure %+v (%v), want rank 1 abandoned", r, f, f.Err)
			}
			if ab.Cause != 2 || ab.Reason != "its device failed" || !errors.As(f.Err, &oe) || oe.Peer != 1 || oe.Rank != r {
				t.Errorf("rank %d: %v: cause %d, reason %q", r, f.Err, ab.Cause, ab.Reason)
			}
		case <-deadline:
			t.Fatalf("rank %d: no failure report for rank 1", r)
		}
	}
}
