package comm

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// A Barrier with a short context, queued behind an AllReduce that cannot
// finish (its peer never calls it), returns when its context ends, with
// the context's error; the communicator is then aborted, so the stuck
// AllReduce ends, a later operation does not wait for the ticket given up,
// and the peer's next operation fails naming this rank.
func TestQueuedOperationHonoursContext(t *testing.T) {
	for _, tr := range []string{"mem", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			cs := newLocal(t, 2, WithTransport(tr))
			ctx := testCtx(t)
			buf := make([]float32, 16)
			stuck := IAllReduce(ctx, cs[0], buf, buf, Sum) // rank 1 never joins it

			short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := cs[0].Barrier(short)
			took := time.Since(start)
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrTimeout) {
				t.Fatalf("queued Barrier: %v, want context.DeadlineExceeded and ErrTimeout", err)
			}
			var re *RankError
			if !errors.As(err, &re) || re.Rank != 0 || re.Op != "barrier" {
				t.Fatalf("queued Barrier: %#v, want a *RankError of rank 0, op barrier", err)
			}
			if took > 2*time.Second {
				t.Fatalf("queued Barrier with a 100 ms context returned after %v", took)
			}

			bounded, cancel2 := context.WithTimeout(ctx, 30*time.Second)
			defer cancel2()
			if err := stuck.Wait(bounded); !errors.As(err, &re) || re.Op != "allreduce" || !errors.Is(err, ErrTimeout) {
				t.Fatalf("the stuck AllReduce: %v, want the abort (ErrTimeout)", err)
			}
			// The ticket given up is skipped: this does not wait for it.
			if err := cs[0].Barrier(bounded); !errors.Is(err, ErrTimeout) {
				t.Fatalf("Barrier after the abort: %v, want the abort's ErrTimeout", err)
			}
			err = cs[1].Barrier(bounded)
			if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrTimeout) {
				t.Fatalf("peer's Barrier: %v, want ErrTimeout naming rank 0", err)
			}
		})
	}
}

// Tickets given up are skipped in order: several queued operations whose
// contexts end, behind one that completes, leave the turn consistent.
func TestGivenUpTicketsSkipped(t *testing.T) {
	cs := newLocal(t, 1)
	ctx := testCtx(t)
	c := cs[0]
	t0 := c.ticket() // held by the test, as a running operation would
	if err := c.enter(ctx, t0, "test"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 3)
	for range 3 {
		tk := c.ticket()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		go func() { errs <- c.enter(cctx, tk, "test") }()
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, context.Canceled) || !errors.Is(err, ErrAborted) {
			t.Fatalf("given up: %v, want context.Canceled and ErrAborted", err)
		}
	}
	next := c.ticket()
	c.release()
	if err := c.enter(ctx, next, "test"); err != nil {
		t.Fatal(err)
	}
	c.release()
	c.turnMu.Lock()
	defer c.turnMu.Unlock()
	if c.serving.Load() != next+1 || len(c.skip) != 0 || c.turnCh != nil {
		t.Fatalf("turn after release: serving %d (want %d), skip %v, waiters' channel %v", c.serving.Load(), next+1, c.skip, c.turnCh)
	}
}

// TestTurnsUnderContention: many goroutines take tickets at once, some
// give theirs up while they wait; every ticket kept is served exactly
// once, in ticket order, and the order is consistent afterwards (the
// uncontended fast path of enter and release takes no lock, so this is
// what guards its ordering with the waiters and the skips).
func TestTurnsUnderContention(t *testing.T) {
	cs := newLocal(t, 1)
	ctx := testCtx(t)
	c := cs[0]
	const n = 400
	var (
		mu     sync.Mutex
		served []uint64
		wg     sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tk := c.ticket()
			cctx := ctx
			if i%7 == 3 {
				var cancel context.CancelFunc
				cctx, cancel = context.WithTimeout(ctx, time.Duration(i%5)*time.Microsecond)
				defer cancel()
			}
			if err := c.enter(cctx, tk, "test"); err != nil {
				if cctx == ctx {
					t.Errorf("ticket %d: %v", tk, err)
				}
				return
			}
			mu.Lock()
			served = append(served, tk)
			mu.Unlock()
			runtime.Gosched()
			c.release()
		}()
	}
	wg.Wait()
	for i := 1; i < len(served); i++ {
		if served[i] <= served[i-1] {
			t.Fatalf("served out of order: %d after %d", served[i], served[i-1])
		}
	}
	if len(served) < n-n/7-1 {
		t.Fatalf("%d of %d tickets served", len(served), n)
	}
	next := c.ticket()
	if got := c.serving.Load(); got != next {
		t.Fatalf("after all: serving %d, next ticket %d", got, next)
	}
}
