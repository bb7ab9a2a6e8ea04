package comm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestPointToPointWaitsForEachOther: a point-to-point call and a
// collective that wait for each other fail promptly on every rank, with
// ErrMismatch naming one rank on all of them, not at the operation
// timeout (a minute here): the point-to-point rank tells the other that
// it waits for it, and the other finds that it waits in turn (the
// engine's checkBlockedPeers). Where the others called the collective,
// the rank in the point-to-point call is the one named. Two ranks that
// each wait for the other in a Recv, or in a Send too large to be
// buffered, likewise, naming the higher rank.
func TestPointToPointWaitsForEachOther(t *testing.T) {
	big := func() []int32 { return make([]int32, 1<<17) } // direct on every provider
	small := func() []int32 { return make([]int32, 4) }
	for _, tc := range []struct {
		name string
		n    int
		odd  func(ctx context.Context, c *Comm) error // rank 0's call
		coll func(ctx context.Context, c *Comm) error // the others'
		want int                                      // the rank named; -1 either
	}{
		{"recv/broadcast", 2,
			func(ctx context.Context, c *Comm) error { return Recv(ctx, c, small(), 1, 0) },
			func(ctx context.Context, c *Comm) error { return Broadcast(ctx, c, small(), 0) }, -1},
		{"recv/gather", 2,
			func(ctx context.Context, c *Comm) error { return Recv(ctx, c, small(), 1, 0) },
			func(ctx context.Context, c *Comm) error { return Gather(ctx, c, small(), make([]int32, 8), 1) }, -1},
		{"big recv/broadcast", 2,
			func(ctx context.Context, c *Comm) error { return Recv(ctx, c, big(), 1, 0) },
			func(ctx context.Context, c *Comm) error { return Broadcast(ctx, c, big(), 0) }, -1},
		{"big send/broadcast", 2,
			func(ctx context.Context, c *Comm) error { return Send(ctx, c, big(), 1, 0) },
			func(ctx context.Context, c *Comm) error { return Broadcast(ctx, c, big(), 1) }, -1},
		{"recv/recv", 2,
			func(ctx context.Context, c *Comm) error { return Recv(ctx, c, small(), 1, 0) },
			func(ctx context.Context, c *Comm) error { return Recv(ctx, c, small(), 0, 0) }, 1},
		{"big send/big send", 2,
			func(ctx context.Context, c *Comm) error { return Send(ctx, c, big(), 1, 0) },
			func(ctx context.Context, c *Comm) error { return Send(ctx, c, big(), 0, 0) }, 1},
		{"irecv/reduce, 3 ranks", 3,
			func(ctx context.Context, c *Comm) error {
				r := IRecv(ctx, c, small(), 1, 0)
				return r.Wait(ctx)
			},
			func(ctx context.Context, c *Comm) error { return Reduce(ctx, c, small(), small(), Sum, 1) }, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			cs := newLocal(t, tc.n, WithTimeout(time.Minute))
			start := time.Now()
			errs := onAll(cs, func(c *Comm) error {
				if c.Rank() == 0 {
					return tc.odd(ctx, c)
				}
				return tc.coll(ctx, c)
			})
			took := time.Since(start)
			named := -2
			for r, err := range errs {
				var re *RankError
				if tc.n > 2 && r == 2 && err == nil {
					continue // a leaf of the reduce: done before rank 1 waits
				}
				if !errors.Is(err, ErrMismatch) || !errors.As(err, &re) {
					t.Errorf("rank %d: %v; want ErrMismatch, a *RankError", r, err)
					continue
				}
				if named == -2 {
					named = re.Rank
				}
				if re.Rank != named || tc.want >= 0 && re.Rank != tc.want {
					t.Errorf("rank %d: %v; want the rank named on every rank (%d), rank %d if not -1", r, err, named, tc.want)
				}
			}
			if took > 10*time.Second {
				t.Errorf("took %v, the operation timeout's doing (a minute)", took)
			}
			t.Logf("%v: %v", took.Round(time.Millisecond), errs)
		})
	}
}

// TestPointToPointBeforeCollectiveOK: a message sent before a collective
// and received late by a rank whose peer already waits in that collective
// is taken, and both calls complete: the peer's word that it waits is no
// evidence while its message is there to take.
func TestPointToPointBeforeCollectiveOK(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 2, WithTimeout(time.Minute))
	for _, n := range []int{4, 1 << 17} {
		errs := onAll(cs, func(c *Comm) error {
			b := make([]int32, n)
			if c.Rank() == 1 {
				if err := Send(ctx, c, b, 0, 0); err != nil {
					return err
				}
				return Broadcast(ctx, c, b[:4], 0)
			}
			time.Sleep(30 * time.Millisecond) // rank 1 has waited and spoken
			if err := Recv(ctx, c, b, 1, 0); err != nil {
				return err
			}
			time.Sleep(30 * time.Millisecond)
			return Broadcast(ctx, c, b[:4], 0)
		})
		mustAll(t, "send, then broadcast", errs)
	}
}

// TestPointToPointCycle: point-to-point calls that wait for each other
// around a cycle of three ranks or more, with nothing on its way to any,
// fail promptly on every rank with ErrMismatch naming the highest rank in
// the cycle, not at the operation timeout (a minute here): each rank's
// Run, told that the rank before it waits for it, passes on the highest
// rank it has heard of (the engine's passLabels), and that rank hears its
// own back. Receives (staged), large sends (each waiting for a
// clear-to-send) and the two mixed; a rank outside the cycle that waits
// for one in it (a higher rank, which must not hide the cycle) fails
// too. Over mem, shm and tcp.
func TestPointToPointCycle(t *testing.T) {
	big := func() []int32 { return make([]int32, 1<<17) } // direct on every provider
	small := func() []int32 { return make([]int32, 4) }
	recvNext := func(n int) func(ctx context.Context, c *Comm) error {
		return func(ctx context.Context, c *Comm) error { return Recv(ctx, c, small(), (c.Rank()+1)%n, 0) }
	}
	sendNext := func(n int) func(ctx context.Context, c *Comm) error {
		return func(ctx context.Context, c *Comm) error { return Send(ctx, c, big(), (c.Rank()+1)%n, 0) }
	}
	for _, tc := range []struct {
		name string
		n    int
		call func(ctx context.Context, c *Comm) error
		want int // the rank named on every rank
	}{
		{"recv cycle of 3", 3, recvNext(3), 2},
		{"recv cycle of 5", 5, recvNext(5), 4},
		// each rank hears ever higher labels from the next, one more at
		// each step, and passes every one on
		{"recv cycle of 24", 24, recvNext(24), 23},
		{"big send cycle of 3", 3, sendNext(3), 2},
		{"mixed cycle of 3", 3, func(ctx context.Context, c *Comm) error {
			switch c.Rank() {
			case 0:
				return Recv(ctx, c, small(), 1, 0) // a message of rank 1's
			case 1:
				return Send(ctx, c, big(), 2, 0) // rank 2's clear-to-send
			}
			return Recv(ctx, c, small(), 0, 0)
		}, 2},
		{"recv cycle of 3, waited for by ranks 3 and 4", 5, func(ctx context.Context, c *Comm) error {
			if c.Rank() >= 3 {
				return Recv(ctx, c, small(), c.Rank()-3, 0)
			}
			return Recv(ctx, c, small(), (c.Rank()+1)%3, 0)
		}, 2},
	} {
		for _, transport := range []string{"mem", "shm", "tcp"} {
			if transport != "mem" && tc.n > 3 {
				continue
			}
			t.Run(transport+"/"+tc.name, func(t *testing.T) {
				ctx := testCtx(t)
				cs := newLocal(t, tc.n, WithTimeout(time.Minute), WithTransport(transport))
				start := time.Now()
				errs := onAll(cs, func(c *Comm) error { return tc.call(ctx, c) })
				took := time.Since(start)
				for r, err := range errs {
					var re *RankError
					if !errors.Is(err, ErrMismatch) || !errors.As(err, &re) || re.Rank != tc.want {
						t.Errorf("rank %d: %v; want ErrMismatch naming rank %d", r, err, tc.want)
					}
				}
				if took > 10*time.Second {
					t.Errorf("took %v, the operation timeout's doing (a minute)", took)
				}
				t.Logf("%v: %v", took.Round(time.Millisecond), errs[0])
			})
		}
	}
}

// TestPointToPointCycleOK: exchanges around a ring and down a pipeline,
// where ranks wait for each other long enough to speak (a rank late by
// 50 ms) but each wait ends, complete without a false ErrMismatch: a
// shift (each rank sends to the next, then receives from the one before),
// large sends started before the receive that clears the rank before
// them, and a pipeline whose ranks wait for the rank before them while
// rank 0 is late.
func TestPointToPointCycleOK(t *testing.T) {
	const n = 4
	for _, transport := range []string{"mem", "shm", "tcp"} {
		t.Run(transport, func(t *testing.T) {
			ctx := testCtx(t)
			cs := newLocal(t, n, WithTimeout(time.Minute), WithTransport(transport))
			for round := range 3 {
				late := round % n
				errs := onAll(cs, func(c *Comm) error {
					r := c.Rank()
					next, prev := (r+1)%n, (r+n-1)%n
					if r == late {
						time.Sleep(50 * time.Millisecond)
					}
					// a shift of small messages
					if err := Send(ctx, c, []int32{int32(r)}, next, 1); err != nil {
						return err
					}
					got := []int32{-1}
					if err := Recv(ctx, c, got, prev, 1); err != nil {
						return err
					}
					if got[0] != int32(prev) {
						return fmt.Errorf("shift: got %d from rank %d", got[0], prev)
					}
					// large sends, each waiting for the next rank's receive
					out, in := make([]int32, 1<<17), make([]int32, 1<<17)
					out[0] = int32(r)
					req := ISend(ctx, c, out, next, 2)
					if r == late {
						time.Sleep(50 * time.Millisecond)
					}
					if err := Recv(ctx, c, in, prev, 2); err != nil {
						return err
					}
					if err := req.Wait(ctx); err != nil {
						return err
					}
					if in[0] != int32(prev) {
						return fmt.Errorf("large ring: got %d from rank %d", in[0], prev)
					}
					// a pipeline from rank 0, late
					v := []int32{0}
					if r == 0 {
						time.Sleep(50 * time.Millisecond)
					} else if err := Recv(ctx, c, v, r-1, 3); err != nil {
						return err
					}
					v[0]++
					if r < n-1 {
						return Send(ctx, c, v, r+1, 3)
					}
					if v[0] != n {
						return fmt.Errorf("pipeline: got %d", v[0])
					}
					return nil
				})
				mustAll(t, fmt.Sprintf("round %d (rank %d late)", round, late), errs)
			}
		})
	}
}
