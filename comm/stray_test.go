package comm

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Disagreements that no receive of the disagreeing call would see: the
// message that shows them waits on a link the waiting rank's schedule does
// not read (a broadcast's root), went to a rank that no longer waits (a
// gather's root), or no rank sends to one that waits (gather against
// scatter; a count of 0). Every rank must fail with ErrMismatch naming
// the odd rank, not with a timeout. The communicators' timeout is far
// longer than the engine's look (strayAfter, strayEvery, and the word to
// the rank waited for), so a timeout here is a miss, whatever the load.
func TestMismatchUnread(t *testing.T) {
	cases := []struct {
		name string
		call func(ctx context.Context, c *Comm) error
	}{
		{"broadcast root", func(ctx context.Context, c *Comm) error {
			root := 0
			if c.Rank() == 2 {
				root = 1
			}
			return Broadcast(ctx, c, make([]float32, 4), root)
		}},
		{"gather root", func(ctx context.Context, c *Comm) error {
			root := 0
			if c.Rank() == 2 {
				root = 3
			}
			return Gather(ctx, c, make([]float32, 2), make([]float32, 8), root)
		}},
		{"gather against scatter", func(ctx context.Context, c *Comm) error {
			if c.Rank() == 2 {
				return Scatter(ctx, c, make([]float32, 8), make([]float32, 2), 0)
			}
			return Gather(ctx, c, make([]float32, 2), make([]float32, 8), 0)
		}},
		{"allreduce count 0", func(ctx context.Context, c *Comm) error {
			n := 4
			if c.Rank() == 2 {
				n = 0
			}
			buf := make([]float32, n)
			return AllReduce(ctx, c, buf, buf, Sum)
		}},
		{"broadcast count 0", func(ctx context.Context, c *Comm) error {
			n := 16
			if c.Rank() == 2 {
				n = 0
			}
			return Broadcast(ctx, c, make([]int32, n), 0)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, 4, WithTimeout(60*time.Second))
			ctx := testCtx(t)
			// The ranks whose part completed make no other call until
			// every rank has returned: only the waiting ranks' look can
			// find the disagreement. Those fail at their next call.
			errs := onAll(cs, func(c *Comm) error { return tc.call(ctx, c) })
			checkEventually(t, tc.name, cs, errs, ErrMismatch, 2)
		})
	}
}

// A call of no elements on every rank still completes, and a communicator
// goes on after it.
func TestZeroCountAgreed(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 3)
	errs := onAll(cs, func(c *Comm) error {
		var none []float32
		if err := AllReduce(ctx, c, none, none, Sum); err != nil {
			return err
		}
		if err := Broadcast(ctx, c, none, 1); err != nil {
			return err
		}
		if err := AllGather(ctx, c, none, none); err != nil {
			return err
		}
		v := []float32{float32(c.Rank())}
		if err := AllReduce(ctx, c, v, v, Sum); err != nil {
			return err
		}
		if v[0] != 3 {
			return errors.New("wrong sum after the empty calls")
		}
		return nil
	})
	mustAll(t, "empty calls", errs)
}

// A context that ended before the call fails it, though it would have
// completed without waiting, and every rank's later call names the rank.
func TestContextDoneBeforeCall(t *testing.T) {
	cs := newLocal(t, 2)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	ctx := testCtx(t)
	errs := onAll(cs, func(c *Comm) error {
		if c.Rank() == 0 {
			return c.Barrier(done)
		}
		return c.Barrier(ctx)
	})
	if !errors.Is(errs[0], context.Canceled) || !errors.Is(errs[0], ErrAborted) {
		t.Fatalf("rank 0's barrier with its context cancelled: %v, want ErrAborted wrapping context.Canceled", errs[0])
	}
	if errs[1] == nil { // its barrier may have completed before the notice
		errs[1] = cs[1].Barrier(ctx)
	}
	checkErrs(t, "rank 1 after rank 0's cancelled call", errs[1:], ErrAborted, 0)
}

// A rank that comes late is waited for, not taken for a disagreement: the
// waiting ranks' word reaches it before its call (kept until its call
// starts) or during it, and the calls agree.
func TestLateRankNoMismatch(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 4)
	errs := onAll(cs, func(c *Comm) error {
		for i := range 3 {
			if c.Rank() == i+1 {
				time.Sleep(100 * time.Millisecond)
			}
			v := []float32{1}
			if err := AllReduce(ctx, c, v, v, Sum); err != nil || v[0] != 4 {
				return fmt.Errorf("allreduce %d: %v %v", i, err, v)
			}
			if err := Gather(ctx, c, []float32{1}, make([]float32, 4), i); err != nil {
				return err
			}
			if err := Broadcast(ctx, c, make([]float32, 3), 3-i); err != nil {
				return err
			}
		}
		return nil
	})
	mustAll(t, "late ranks", errs)
}
