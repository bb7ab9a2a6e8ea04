package comm

import (
	"context"
	"errors"
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
