package comm

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A rank that finishes a collective and closes at once must not fail the
// peers still finishing theirs: its bye follows everything it sent.
func TestCloseRightAfterCollective(t *testing.T) {
	for _, transport := range []string{"mem", "tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			for trial := 0; trial < 5; trial++ {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				cs, err := NewLocal(ctx, 4, WithTransport(transport))
				if err != nil {
					cancel()
					t.Fatal(err)
				}
				errs := make([]error, len(cs))
				var wg sync.WaitGroup
				for i, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := make([]float32, 1<<16+i) // ranks disagree on nothing but timing
						buf = buf[:1<<16]
						for j := range buf {
							buf[j] = float32(i)
						}
						if err := AllReduce(ctx, c, buf, buf, Sum); err != nil {
							errs[i] = err
						} else if buf[7] != 6 {
							errs[i] = errors.New("wrong sum")
						}
						if err := c.Close(); err != nil && errs[i] == nil {
							errs[i] = err
						}
					}()
				}
				wg.Wait()
				cancel()
				for r, err := range errs {
					if err != nil {
						t.Errorf("trial %d rank %d: %v", trial, r, err)
					}
				}
			}
		})
	}
}

// An operation that needs a rank which has closed its communicator fails
// promptly with ErrPeerClosed naming that rank, rather than timing out.
func TestOperationNeedingClosedPeerFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := NewLocal(ctx, 3, WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs[2].Close(); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = cs[i].Barrier(ctx)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 2 || !errors.Is(err, ErrPeerClosed) {
			t.Errorf("rank %d: barrier with a closed rank 2: %v", r, err)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v: a closed peer must fail the operation promptly, not at the timeout", d)
	}
	cs[0].Close()
	cs[1].Close()
}
