package comm

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// TestSplitHonoursContext: a rank that calls Split while another rank never
// does returns when its context ends, with an error of op "split" that
// names the rank it waited for and wraps the context's. The communicator
// is then aborted: a rank in the same Split with a longer context, and the
// rank that never called it, fail at once with the timeout instead of
// waiting out their own contexts.
func TestSplitHonoursContext(t *testing.T) {
	for _, tr := range []string{"mem", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			cs := newLocal(t, 3, WithTransport(tr))
			ctx := testCtx(t)
			long, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel2()
			type result struct {
				sub  *Comm
				err  error
				took time.Duration
			}
			res := [2]chan result{make(chan result, 1), make(chan result, 1)}
			for r, cctx := range []context.Context{short, long} { // rank 2 never calls Split
				go func() {
					start := time.Now()
					sub, err := cs[r].Split(cctx, 0, r)
					res[r] <- result{sub, err, time.Since(start)}
				}()
			}
			// A hang, not a slow machine: the short context ends after 300 ms.
			limit := time.After(10 * time.Second)
			for r := range 2 {
				select {
				case got := <-res[r]:
					t.Logf("rank %d: Split returned after %v: %v", r, got.took.Round(time.Millisecond), got.err)
					if got.sub != nil {
						got.sub.Close()
						t.Fatalf("rank %d: Split returned a communicator without rank 2", r)
					}
					var re *RankError
					if !errors.As(got.err, &re) || re.Op != "split" || re.Rank != 2 || !errors.Is(got.err, ErrTimeout) {
						t.Fatalf("rank %d: Split: %v, want a *RankError of op split naming rank 2, wrapping ErrTimeout", r, got.err)
					}
					if r == 0 && !errors.Is(got.err, context.DeadlineExceeded) {
						t.Fatalf("rank 0: Split whose context ended: %v, want it to wrap context.DeadlineExceeded", got.err)
					}
				case <-limit:
					t.Fatalf("rank %d: Split did not return 10 s after rank 0's 300 ms context ended", r)
				}
			}
			// The rank that never called Split does not wait for the others.
			err := cs[2].Barrier(long)
			var re *RankError
			if !errors.As(err, &re) || re.Op != "barrier" || !errors.Is(err, ErrTimeout) {
				t.Fatalf("rank 2's Barrier after the others gave up on Split: %v, want the abort's ErrTimeout", err)
			}
		})
	}
}

// TestSplitMeetsAllGather: rank 0 calls Split (or Dup) where rank 1 calls
// an AllGather of the shape of Split's first exchange (two int64s). Both
// fail at once with ErrMismatch, where the AllGather took rank 0's color
// and key for data and returned nil, and rank 0 waited in Split's second
// exchange until the timeout.
func TestSplitMeetsAllGather(t *testing.T) {
	for _, op := range []string{"split", "dup"} {
		t.Run(op, func(t *testing.T) {
			cs := newLocal(t, 2, WithTimeout(30*time.Second))
			ctx := testCtx(t)
			start := time.Now()
			errs := onAll(cs, func(c *Comm) error {
				if c.Rank() == 1 {
					return AllGather(ctx, c, []int64{0, 1}, make([]int64, 4))
				}
				var sub *Comm
				var err error
				if op == "split" {
					sub, err = c.Split(ctx, 0, 0)
				} else {
					sub, err = c.Dup(ctx)
				}
				if sub != nil {
					sub.Close()
				}
				return err
			})
			took := time.Since(start)
			for r, err := range errs {
				want := []string{op, "allgather"}[r]
				var re *RankError
				if !errors.As(err, &re) || re.Op != want || !errors.Is(err, ErrMismatch) {
					t.Errorf("rank %d: %v, want a *RankError of op %s wrapping ErrMismatch", r, err, want)
				} else if r == 0 && !strings.Contains(err.Error(), splitNote) {
					// Rank 1's says so where its text names the roots,
					// which the engine's may not.
					t.Errorf("rank %d: %v, want it to say %q", r, err, splitNote)
				}
				t.Logf("rank %d: %v", r, err)
			}
			if took > 10*time.Second { // the mismatch vote takes under a second
				t.Errorf("the ranks failed after %v, not at once", took)
			}
		})
	}
}

// TestSplitMarkHierarchical: Split's mark reaches both phases of a
// hierarchical allgather (an exchange of 64 KiB or more across hosts,
// as the endpoints' of a Split of some 200 ranks): a rank in it and ranks
// in an AllGather of the same shape fail with ErrMismatch.
func TestSplitMarkHierarchical(t *testing.T) {
	ctx := testCtx(t)
	cs := newLocal(t, 4, withHosts(0, 0, 1, 1), WithTimeout(30*time.Second))
	const n = 4096 // int32s a rank: 64 KiB gathered
	if !cs[0].hierFor(collectives.AllGather, 4*4*n) {
		t.Fatal("the allgather does not run hierarchically")
	}
	start := time.Now()
	errs := onAll(cs, func(c *Comm) error {
		send, recv := make([]int32, n), make([]int32, 4*n)
		var err error
		if c.Rank() == 0 {
			err = allGather(ctx, c, c.ticket(), send, recv, splitRoot)
		} else {
			err = AllGather(ctx, c, send, recv)
		}
		if err == nil {
			err = c.Barrier(ctx) // a rank whose part completed fails at its next operation
		}
		return err
	})
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if !errors.Is(err, ErrMismatch) {
			t.Errorf("rank %d: %v, want ErrMismatch", r, err)
		}
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the ranks failed after %v, not at once", took)
	}
}

// TestSplitConnectFailureNamesParentRank: a rank whose Split or
// CreateGroup fails after the endpoints' exchange, before the new
// communicator connects, is named by its rank in the communicator it was
// called on, the only one the caller knows: the others' call fails with a
// *RankError of its op naming parent rank 2, and its text says rank 2,
// not its rank in the communicator that was never returned (0: the keys,
// and the group's order, reverse the ranks).
func TestSplitConnectFailureNamesParentRank(t *testing.T) {
	for _, op := range []string{"split", "creategroup"} {
		t.Run(op, func(t *testing.T) {
			cs := newLocal(t, 3, WithTimeout(30*time.Second))
			ctx := testCtx(t)
			exchangedHook = func(parent int, _ string) error {
				if parent == 2 {
					return errors.New("rank 2 leaves after the exchange")
				}
				return nil
			}
			t.Cleanup(func() { exchangedHook = nil })
			errs := onAll(cs, func(c *Comm) error {
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				var sub *Comm
				var err error
				if op == "split" {
					sub, err = c.Split(cctx, 0, 2-c.Rank())
				} else {
					sub, err = c.CreateGroup(cctx, []int{2, 1, 0}, 7)
				}
				if sub != nil {
					sub.Close()
				}
				return err
			})
			for r, err := range errs {
				t.Logf("rank %d: %v", r, err)
				var re *RankError
				if !errors.As(err, &re) || re.Op != op || re.Rank != 2 {
					t.Errorf("rank %d: %v, want a *RankError of op %s naming rank 2", r, err, op)
					continue
				}
				if r < 2 && (!strings.Contains(err.Error(), "rank 2") || strings.Contains(err.Error(), "rank 0")) {
					t.Errorf("rank %d: %q, want its text to name rank 2, not the child's rank 0", r, err)
				}
			}
		})
	}
}

// TestSplitChildNamesItsOwnRanks: once connected, a communicator made by
// Split names its own ranks, as MPI does, not the parent's that named
// them while it connected (TestSplitConnectFailureNamesParentRank): with
// the keys reversing the order, its rank 0 (parent rank 2) calling Max
// where the others call Sum is rank 0 in every rank's error and text.
func TestSplitChildNamesItsOwnRanks(t *testing.T) {
	cs := newLocal(t, 3, WithTimeout(30*time.Second))
	ctx := testCtx(t)
	errs := onAll(cs, func(c *Comm) error {
		sub, err := c.Split(ctx, 0, 2-c.Rank())
		if err != nil {
			return err
		}
		defer sub.Close()
		op := Sum
		if sub.Rank() == 0 {
			op = Max
		}
		buf := []float64{1}
		return AllReduce(ctx, sub, buf, buf, op)
	})
	// The words that say whose call differs: "rank 2 disagrees with rank
	// 0: op sum, this rank max" (rank 0 has max). "rank 0 found that rank
	// 2's call differs from its own" does not say which is wrong.
	culprit := regexp.MustCompile(`disagrees with rank (\d+): op sum, this rank max`)
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if err == nil {
			continue
		}
		for _, m := range culprit.FindAllStringSubmatch(err.Error(), -1) {
			if n := m[1]; n != "0" {
				t.Errorf("rank %d: %q names rank %s as the one whose call differs, want 0", r, err, n)
			}
		}
	}
	checkNamed(t, "child's mismatch", errs, ErrMismatch, 0, 0, 1, 2)
}
