package comm

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

// A Wait whose own context ends before its operation returns a *RankError
// naming this rank and the operation, which wraps the context's error, as
// every other error of comm does; the operation goes on, and its own error
// (here the abort when its context is cancelled) is what a later Wait
// returns.
func TestRequestWaitContextError(t *testing.T) {
	cases := []struct {
		op    string
		start func(ctx context.Context, c *Comm) *Request
	}{
		{"allreduce", func(ctx context.Context, c *Comm) *Request {
			buf := make([]float32, 4)
			return IAllReduce(ctx, c, buf, buf, Sum)
		}},
		{"barrier", func(ctx context.Context, c *Comm) *Request { return c.IBarrier(ctx) }},
		{"allgatherv", func(ctx context.Context, c *Comm) *Request {
			return IAllGatherV(ctx, c, make([]int32, 1), make([]int32, 2), []int{1, 1}, nil)
		}},
		{"recv", func(ctx context.Context, c *Comm) *Request { return IRecv(ctx, c, make([]int32, 1), 0, 0) }},
		{"allreduce", func(ctx context.Context, c *Comm) *Request {
			buf := make([]ValueIndex[float32], 1)
			return IAllReduceLoc(ctx, c, buf, buf, MaxLoc)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.op, func(t *testing.T) {
			cs := newLocal(t, 2)
			opCtx, stop := context.WithCancel(testCtx(t))
			defer stop()
			r := tc.start(opCtx, cs[1]) // rank 0 never joins it
			for _, want := range []error{context.DeadlineExceeded, context.Canceled} {
				wctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				if want == context.Canceled {
					cancel()
				}
				err := r.Wait(wctx)
				cancel()
				var re *RankError
				if !errors.Is(err, want) || !errors.As(err, &re) || re.Rank != 1 || re.Op != tc.op {
					t.Fatalf("Wait with an ended context: %#v (%v), want a *RankError of rank 1, op %s, wrapping %v", err, err, tc.op, want)
				}
				if done, err := r.Test(); done || err != nil {
					t.Fatalf("Test after Wait gave up: %v, %v; the operation should still run", done, err)
				}
			}
			stop()
			err := r.Wait(testCtx(t))
			if errors.Is(err, context.DeadlineExceeded) || err == nil {
				t.Fatalf("Wait after the operation's context was cancelled: %v, want its failure", err)
			}
			if done, err2 := r.Test(); !done || err2 != err {
				t.Fatalf("Test after completion: %v, %v; want true, %v", done, err2, err)
			}
		})
	}
}

// TestIAllReduceAllocs: a started IAllReduce allocates its request and
// nothing else (its arguments live in the request, and its goroutine is
// started without a closure); Wait adds the channel it sleeps on only
// when the operation has not completed yet.
func TestIAllReduceAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	cs := newLocal(t, 2)
	ctx := testCtx(t)
	bufs := [][]float32{make([]float32, 1024), make([]float32, 1024)}
	start, done := make(chan struct{}), make(chan error)
	go func() {
		for range start {
			done <- AllReduce(ctx, cs[1], bufs[1], bufs[1], Sum)
		}
	}()
	defer close(start)
	poll := func() {
		start <- struct{}{}
		r := IAllReduce(ctx, cs[0], bufs[0], bufs[0], Sum)
		for {
			if ok, err := r.Test(); ok {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
			runtime.Gosched()
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	wait := func() {
		start <- struct{}{}
		if err := IAllReduce(ctx, cs[0], bufs[0], bufs[0], Sum).Wait(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	poll()
	if a := testing.AllocsPerRun(200, poll); a > 1 {
		t.Errorf("IAllReduce, Test until done: %v allocations, want 1 (the request)", a)
	}
	if a := testing.AllocsPerRun(200, wait); a > 2 {
		t.Errorf("IAllReduce, Wait: %v allocations, want at most 2 (the request, the channel Wait sleeps on)", a)
	}
}
