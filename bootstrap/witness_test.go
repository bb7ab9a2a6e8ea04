package bootstrap

import (
	"errors"
	"testing"
	"time"
)

// A member a witness saw frozen (its process stopped: its gossip port
// still accepts, so no probe can confirm it) is reported at once on the
// witness and, through msgStopped, on every other member, which believe it
// without a probe; the survivors then shrink without it. memberlist's own
// detector is too slow to matter here (slowGossip).
func TestWitnessedMemberReportedEverywhere(t *testing.T) {
	nodes := startWorld(t, "witness", 4, slowGossip)
	// Rank 2 stays up (it would answer probes): only the witness's word can remove it.
	nodes[0].Witnessed(nodes[0].World().Epoch+1, 2) // another epoch: ignored
	nodes[0].Witnessed(1, 0)                        // itself: ignored
	nodes[0].Witnessed(1, 2)
	survivors := []*Node{nodes[0], nodes[1], nodes[3]}
	for _, n := range survivors {
		select {
		case f := <-n.Failures():
			if f.Rank != 2 || f.Epoch != 1 || !errors.Is(f.Err, ErrPeerDead) || !errors.Is(f.Err, errStopped) {
				t.Errorf("%s: failure %+v (%v), want rank 2 of epoch 1 stopped", n.Name(), f, f.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no failure report for rank 2", n.Name())
		}
	}
	// Rank 2 hears of its own death and ignores it: it is not reported to itself.
	select {
	case f := <-nodes[2].Failures():
		t.Errorf("rank 2 was told of its own failure: %+v", f)
	default:
	}
	worlds := shrinkAll(t, survivors, 10*time.Second)
	for i, w := range worlds {
		if w.Size != 3 || w.Rank != i || w.Digest != worlds[0].Digest {
			t.Errorf("survivor %d: world %+v", i, w)
		}
	}
}
