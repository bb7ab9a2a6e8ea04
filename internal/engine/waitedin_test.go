//go:build linux

package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/kernels"
)

// p2pRun is a point-to-point message of n float32s between the two
// engines' ranks: rank's side of it, sending or receiving.
func p2pRun(rank int, send bool, n, tag int, seq uint32) (*Plan, *Call) {
	b := make([]byte, 4*n)
	return Compile(collectives.DirectSendRecv(rank, 2, 1-rank, send, n, n)),
		&Call{Coll: collectives.SendRecv, DType: kernels.Float32, Root: tag, Count: n, Seq: seq, Work: b, Input: b}
}

// bcastRun is rank's side of a broadcast of n float32s from root, the
// collective of operation seq.
func bcastRun(rank, root, n int, seq uint32) (*Plan, *Call) {
	b := make([]byte, 4*n)
	return Compile(collectives.ChainBroadcast(rank, 2, root, n, n)),
		&Call{Coll: collectives.Broadcast, DType: kernels.Float32, Root: root, Count: n, Seq: seq, Work: b, Input: b}
}

// TestPointToPointAgainstCollective: a rank in a point-to-point call and
// its peer in a collective, where each waits for the other, fail promptly
// with ErrMismatch on both ranks, naming the same rank, not at the
// operation timeout (a minute here): the point-to-point rank tells its
// peer that it waits for it (tellBlocked), and the peer, which has sent it
// nothing since and has taken everything it sent, knows that neither can
// move (checkBlockedPeers). Two ranks that each wait for the other in
// point-to-point calls likewise, naming the higher rank. Over shm and
// tcp, with staged messages and direct ones (a receive that clears the
// sender ahead, a send that waits to be cleared).
func TestPointToPointAgainstCollective(t *testing.T) {
	for _, provider := range []string{"shm", "tcp"} {
		direct := DirectMin / 4
		if provider == "tcp" {
			direct = tcpDirectMin / 4
		}
		for _, tc := range []struct {
			name        string
			p           [2]func() (*Plan, *Call)
			wantCulprit int
		}{
			// rank 0 receives from rank 1, which waits for rank 0's
			// broadcast
			{"recv/bcast-staged", [2]func() (*Plan, *Call){
				func() (*Plan, *Call) { return p2pRun(0, false, 4, 7, 0) },
				func() (*Plan, *Call) { return bcastRun(1, 0, 4, 0) }}, 0},
			{"recv/bcast-direct", [2]func() (*Plan, *Call){
				func() (*Plan, *Call) { return p2pRun(0, false, direct, 7, 0) },
				func() (*Plan, *Call) { return bcastRun(1, 0, direct, 0) }}, 0},
			// rank 0 sends a direct message to rank 1, which sends its
			// broadcast's direct message to rank 0: both wait to be
			// cleared
			{"send/bcast-direct", [2]func() (*Plan, *Call){
				func() (*Plan, *Call) { return p2pRun(0, true, direct, 7, 0) },
				func() (*Plan, *Call) { return bcastRun(1, 1, direct, 0) }}, 0},
			// each receives from the other; each sends the other a
			// direct message
			{"recv/recv", [2]func() (*Plan, *Call){
				func() (*Plan, *Call) { return p2pRun(0, false, 4, 7, 0) },
				func() (*Plan, *Call) { return p2pRun(1, false, 4, 7, 0) }}, 1},
			{"send/send-direct", [2]func() (*Plan, *Call){
				func() (*Plan, *Call) { return p2pRun(0, true, direct, 7, 0) },
				func() (*Plan, *Call) { return p2pRun(1, true, direct, 7, 0) }}, 1},
		} {
			t.Run(provider+"/"+tc.name, func(t *testing.T) {
				e := pairEngines(t, provider, LinkParams{Slots: 4, SlotBytes: 64 << 10})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				var p [2]*Plan
				var c [2]*Call
				for r := range 2 {
					p[r], c[r] = tc.p[r]()
				}
				start := time.Now()
				errs := runPair(ctx, e, p, c)
				took := time.Since(start)
				for r, err := range errs {
					var pe *PeerError
					if !errors.Is(err, ErrMismatch) || !errors.As(err, &pe) || pe.Rank != tc.wantCulprit {
						t.Errorf("rank %d: %v; want ErrMismatch naming rank %d", r, err, tc.wantCulprit)
					}
				}
				if took > 10*time.Second {
					t.Errorf("took %v: the operation timeout's doing, not the look", took)
				}
				t.Logf("%v: %v | %v", took.Round(time.Millisecond), errs[0], errs[1])
			})
		}
	}
}

// TestPointToPointBeforeCollective: the words of a collective that waits
// for its peer do not fail the peer's point-to-point call that takes a
// message the collective's rank sent before it: rank 1 sends rank 0 a
// message and enters a broadcast from rank 0, waiting for it; rank 0
// receives the message late (after rank 1's word), then broadcasts. Staged
// and direct, the receive starting before and after the word.
func TestPointToPointBeforeCollective(t *testing.T) {
	for _, provider := range []string{"shm", "tcp"} {
		direct := DirectMin / 4
		if provider == "tcp" {
			direct = tcpDirectMin / 4
		}
		for _, n := range []int{4, direct} {
			for _, late := range []time.Duration{0, 3 * time.Millisecond, 30 * time.Millisecond} {
				t.Run(fmt.Sprintf("%s/%d/%v", provider, n, late), func(t *testing.T) {
					e := pairEngines(t, provider, LinkParams{Slots: 4, SlotBytes: 64 << 10})
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					for round := range 3 {
						var errs [2]error
						done := make(chan struct{})
						go func() {
							defer close(done)
							p, c := p2pRun(1, true, n, 3, uint32(round))
							if errs[1] = e[1].Run(ctx, p, c, 0); errs[1] != nil {
								return
							}
							p, c = bcastRun(1, 0, 4, uint32(round))
							errs[1] = e[1].Run(ctx, p, c, 0)
						}()
						time.Sleep(late)
						p, c := p2pRun(0, false, n, 3, uint32(round))
						if errs[0] = e[0].Run(ctx, p, c, 0); errs[0] == nil {
							time.Sleep(late)
							p, c = bcastRun(0, 0, 4, uint32(round))
							errs[0] = e[0].Run(ctx, p, c, 0)
						}
						<-done
						if errs[0] != nil || errs[1] != nil {
							t.Fatalf("round %d: %v", round, errs)
						}
					}
				})
			}
		}
	}
}

// TestBlockedPeerCounts: a peer's word that its point-to-point Run waits
// for this rank fails this rank's Run that waits for it only while the
// word holds and nothing is on its way: here rank 0's broadcast from rank
// 1 waits for rank 1, and the words are given to rank 0 as its link
// would. Rank 1's message still counted as on its way (sent 1, none taken)
// and a word this rank has answered since (it had taken a message of this
// rank's, which has sent none) fail by the deadline; the word that holds
// is ErrMismatch.
func TestBlockedPeerCounts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		b, c    uint64 // as ctrlP2PWaiting carries them
		wantErr error
	}{
		{"on its way", 1 << 62, 1, ErrTimeout},
		{"answered", 1<<62 | 1, 0, ErrTimeout},
		{"holds", 1 << 62, 0, ErrMismatch},
		{"holds for a clear-to-send", 1 << 63, 0, ErrMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := shmEngines(t, LinkParams{Slots: 4, SlotBytes: 4096})
			p, c := bcastRun(0, 1, 4, 0)
			e[0].p2pWaitedOn(1, tc.b, tc.c|0xabcd<<32)
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if err := e[0].Run(ctx, p, c, 0); !errors.Is(err, tc.wantErr) {
				t.Fatalf("%v; want %v", err, tc.wantErr)
			}
		})
	}
}
