package engine

import (
	"errors"
	"testing"
	"time"
)

// A gossip report of a peer's death after that peer said bye (it closed
// its communicator after its last call, then its process ended, and a
// witness on its host saw that before its leave reached the gossip)
// fails nothing; before the bye, the same report aborts the engine.
// Before 2026-12-01 both aborted, and a rank that had finished its part
// of a job's last collective sent the abort on to ranks still in it,
// which failed naming the rank that had closed (32 ranks on 2 hosts).
func TestPeerFailedAfterBye(t *testing.T) {
	e := pairEngines(t, "mem", LinkParams{Slots: 4, SlotBytes: 4096})
	if err := e[1].Close(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); !link(e[0]).closed.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("rank 0 never saw rank 1's bye")
		}
	}
	e[0].PeerFailed(1, errors.New("its process is gone (seen on its host)"))
	if err := e[0].Err(); err != nil {
		t.Fatalf("a death reported after the peer's bye failed the engine: %v", err)
	}

	f := pairEngines(t, "mem", LinkParams{Slots: 4, SlotBytes: 4096})
	f[0].PeerFailed(1, errors.New("its process is gone (seen on its host)"))
	var pe *PeerError
	if err := f[0].Err(); !errors.As(err, &pe) || pe.Rank != 1 || !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("a death reported with the link open: %v, want ErrPeerFailed naming rank 1", err)
	}
}
