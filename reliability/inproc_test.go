package reliability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// inProcess runs op on every rank of an n-rank in-process communicator
// over transport with GORUN_FAULT=fault, and returns each rank's error and
// the time it came back.
func inProcess(t *testing.T, transport, fault string, timeout time.Duration, iters int) ([]error, []time.Duration) {
	t.Helper()
	t.Setenv("GORUN_FAULT", fault)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := comm.NewLocal(ctx, 4, comm.WithTransport(transport), comm.WithTimeout(timeout))
	if err != nil {
		t.Fatalf("NewLocal: %v", err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	errs := make([]error, len(cs))
	took := make([]time.Duration, len(cs))
	start := time.Now()
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := len(cs)
			buf := make([]float64, 1024)
			for it := 0; it < iters; it++ {
				for i := range buf {
					buf[i] = float64(r + i + it)
				}
				if err := comm.AllReduce(ctx, c, buf, buf, comm.Sum); err != nil {
					errs[r], took[r] = err, time.Since(start)
					return
				}
				for i, v := range buf {
					if want := float64(n*(n-1)/2 + n*(i+it)); v != want {
						errs[r] = fmt.Errorf("WRONG RESULT at iteration %d: [%d] = %v, want %v", it, i, v, want)
						return
					}
				}
			}
			took[r] = time.Since(start)
		}()
	}
	wg.Wait()
	return errs, took
}

// A connection cut under one rank (faulty Cut: its socket closes, the
// process lives) fails the collective on every rank, promptly, naming one
// of the cut link's two ends: rank 2, or the peer rank 2 itself names (a
// broken link does not say which end broke it).
func TestCutConnectionNamed(t *testing.T) {
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			errs, took := inProcess(t, tr, "rank=2:cut:write:20", 5*time.Second, 200)
			other := -1
			var re2 *comm.RankError
			if errors.As(errs[2], &re2) {
				other = re2.Rank
			}
			for r, err := range errs {
				var re *comm.RankError
				if err == nil {
					t.Errorf("rank %d: no error after rank 2's connection was cut", r)
					continue
				}
				if !errors.As(err, &re) {
					t.Errorf("rank %d: %v is not a *comm.RankError", r, err)
					continue
				}
				if took[r] > 5*time.Second {
					t.Errorf("rank %d: error after %v", r, took[r])
				}
				t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
				if r != 2 && re.Rank != 2 && re.Rank != other {
					t.Errorf("rank %d: error names rank %d, want 2 or %d", r, re.Rank, other)
				}
			}
		})
	}
}

// Silently lost writes (faulty Drop on every write of rank 1 after its
// 10th) are caught by the operation timeout on every rank: no hang, no
// wrong result. The rank named is the one each rank waited for; the test
// records whether that is rank 1.
func TestDroppedWritesTimeOut(t *testing.T) {
	const timeout = 2 * time.Second
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			errs, took := inProcess(t, tr, "rank=1:drop:write:0", timeout, 50)
			named := 0
			for r, err := range errs {
				if err == nil {
					continue // every write dropped from the first: see below
				}
				var re *comm.RankError
				if !errors.As(err, &re) || !errors.Is(err, comm.ErrTimeout) && !errors.Is(err, comm.ErrAborted) && !errors.Is(err, comm.ErrPeerFailed) {
					t.Errorf("rank %d: %v", r, err)
				}
				if took[r] > timeout+2*time.Second {
					t.Errorf("rank %d: error after %v, timeout %v", r, took[r], timeout)
				}
				if re != nil && re.Rank == 1 {
					named++
				}
				t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), err)
			}
			for r, err := range errs {
				if err == nil {
					t.Errorf("rank %d: no error although rank 1 drops its writes", r)
				}
			}
			t.Logf("%d of 4 ranks name rank 1", named)
		})
	}
}

// A slow rank (every write delayed) slows the job but never changes a
// result.
func TestSlowRankStillCorrect(t *testing.T) {
	errs, _ := inProcess(t, "tcp", "rank=3:delay:write:0:before:2ms", 20*time.Second, 20)
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// A rank that closes its communicator right after the last collective
// must not fail the peers still finishing it: Close is not collective
// (MPI_Finalize is), but what the peers need from this rank was already
// sent. (Until cfe5215 the peers' barrier failed with ErrPeerFailed,
// "recv flushed", or ErrPeerClosed.)
func TestCloseAfterLastCollective(t *testing.T) {
	for _, tr := range []string{"mem", "tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			t.Setenv("GORUN_FAULT", "")
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			failed := 0
			var first error
			const rounds = 10
			for range rounds {
				cs, err := comm.NewLocal(ctx, 4, comm.WithTransport(tr), comm.WithTimeout(5*time.Second))
				if err != nil {
					t.Fatal(err)
				}
				errs := make([]error, 4)
				var wg sync.WaitGroup
				for r, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						buf := []float32{1, 2}
						if errs[r] = comm.AllReduce(ctx, c, buf, buf, comm.Sum); errs[r] == nil {
							errs[r] = c.Barrier(ctx)
						}
						c.Close()
					}()
				}
				wg.Wait()
				if err := errors.Join(errs...); err != nil {
					failed++
					first = cmpOr(first, err)
				}
			}
			if failed > 0 {
				msg := fmt.Sprintf("%d of %d jobs failed a peer by closing after the final barrier; first: %v", failed, rounds, first)
				t.Fatal(msg)
			}
		})
	}
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// A rank of an in-process world that fails while connecting ends the
// others' start-up: NewLocal returns its error promptly. Ranks that waited
// for it to dial them had no link on which to learn of it, and waited for
// the caller's context (4,096 ranks, 2026-11-29: 22 ranks past 3 minutes).
func TestNewLocalRankFailsConnecting(t *testing.T) {
	for _, fault := range []string{"rank=1:cut:any:0", "rank=1:cut:any:1", "rank=1:cut:any:2"} {
		t.Setenv("GORUN_FAULT", fault)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		cs, err := comm.NewLocal(ctx, 8)
		took := time.Since(start)
		cancel()
		for _, c := range cs {
			c.Close()
		}
		t.Logf("%s: %v after %v", fault, err, took.Round(time.Millisecond))
		if err == nil {
			t.Fatalf("NewLocal(8) with GORUN_FAULT=%s formed", fault)
		}
		if errors.Is(err, context.DeadlineExceeded) || took > 20*time.Second {
			t.Fatalf("NewLocal(8) with GORUN_FAULT=%s: %v after %v, want rank 1's error before the caller's deadline", fault, err, took)
		}
	}
}
