package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// unevenGrad is rank r's gradient of parameter i, element j, at step s:
// whole numbers, so that sums are exact. The rank unused leaves
// parameter 1 unused (unmarked, zero) at even steps.
func unevenGrad(r, s, i, j, unused int) float64 {
	if r == unused && i == 1 && s%2 == 0 {
		return 0
	}
	return float64((r+1)*(s+1) + 3*i + j%5)
}

// unevenWant is the gradient a single process computes at step s over the
// ranks still training (those with more than s batches).
func unevenWant(batches []int, op comm.Op, s, i, j, unused int) float64 {
	sum, active := 0.0, 0
	for r, n := range batches {
		if n > s {
			sum += unevenGrad(r, s, i, j, unused)
			active++
		}
	}
	if op == comm.Avg {
		return sum / float64(active)
	}
	return sum
}

type unevenEpoch struct {
	batches []int // per rank
	last    int   // the rank Join must return
}

// trainUneven trains with SGD on len(epochs[0].batches) ranks, each epoch
// rank r running batches[r] steps and then Join. It checks every step's
// reduced gradients against unevenWant, Join's answer, that Join leaves
// the gradients zero, and, after BroadcastParameters from the rank Join
// returned, every rank's parameters against a single process's.
func trainUneven(t *testing.T, cfg Config, unused int, epochs ...unevenEpoch) {
	t.Helper()
	tol := map[Compression]float64{NoCompression: 0, FP16: 2e-3, BF16: 1.6e-2}[cfg.Compression]
	const lr = 0.125
	cfg.FirstBucketBytes, cfg.BucketBytes, cfg.UnevenInputs = 64, 512, true
	op := cfg.withDefaults().Op
	sizes := []int{10, 100, 3} // buckets {p2} {p1,p0}
	near := func(got float32, want float64) bool {
		if tol == 0 {
			return got == float32(want)
		}
		return math.Abs(float64(got)-want) <= tol*math.Abs(want)
	}
	errs := ranks(t, len(epochs[0].batches), func(ctx context.Context, c *comm.Comm) (err error) {
		defer func() {
			if err != nil { // the others' collectives fail at once, instead of waiting for this rank
				c.Abort(err)
			}
		}()
		r := c.Rank()
		ps := params(sizes...)
		// ref: the parameters of one process training on every rank's batches.
		ref := make([][]float32, len(sizes))
		for i, n := range sizes {
			ref[i] = make([]float32, n)
		}
		b, err := NewBucketer(c, ps, cfg)
		if err != nil {
			return err
		}
		if b.Buckets() != 2 {
			return fmt.Errorf("%d buckets, want 2", b.Buckets())
		}
		for e, ep := range epochs {
			for s := range ep.batches[r] {
				b.ZeroGrad()
				for i := len(ps) - 1; i >= 0; i-- {
					if r == unused && i == 1 && s%2 == 0 {
						continue
					}
					for j := range ps[i].Grad {
						ps[i].Grad[j] = float32(unevenGrad(r, s, i, j, unused))
					}
					if err := b.MarkReady(ctx, i); err != nil {
						return err
					}
				}
				if err := b.Wait(ctx); err != nil {
					return err
				}
				for i, p := range ps {
					for j, g := range p.Grad {
						want := unevenWant(ep.batches, op, s, i, j, unused)
						if !near(g, want) {
							return fmt.Errorf("rank %d epoch %d step %d p%d[%d] = %v, want %v", r, e, s, i, j, g, want)
						}
						p.Value[j] -= lr * g
					}
				}
			}
			last, err := b.Join(ctx)
			if err != nil {
				return err
			}
			if last != ep.last {
				return fmt.Errorf("rank %d epoch %d: Join returned %d, want %d", r, e, last, ep.last)
			}
			for _, p := range ps {
				for j, g := range p.Grad {
					if g != 0 {
						return fmt.Errorf("rank %d epoch %d: %s[%d] = %v after Join, want 0", r, e, p.Name, j, g)
					}
				}
			}
			if err := BroadcastParameters(ctx, c, ps, last); err != nil {
				return err
			}
			for s := range slices.Max(ep.batches) {
				for i := range ref {
					for j := range ref[i] {
						ref[i][j] -= lr * float32(unevenWant(ep.batches, op, s, i, j, unused))
					}
				}
			}
			for i, p := range ps {
				for j, v := range p.Value {
					if !near(v, float64(ref[i][j])) {
						return fmt.Errorf("rank %d epoch %d: %s[%d] = %v after Join and broadcast, want %v", r, e, p.Name, j, v, ref[i][j])
					}
				}
			}
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestJoinUnevenInputs: ranks with different numbers of batches train
// until each runs out and calls Join. Every step's gradients are the
// average (or sum) over the ranks still training, as one process computes
// it; Join returns the rank that trained longest, and broadcasting from it
// leaves every rank with the parameters of that single process. Without
// UnevenInputs and Join, the rank with 3 batches would leave the others
// waiting in their fourth step's allreduce until their timeout.
func TestJoinUnevenInputs(t *testing.T) {
	avg := Config{}
	sum := Config{Op: comm.Sum, OpSet: true}
	for _, tc := range []struct {
		name   string
		cfg    Config
		unused int // a rank that leaves p1 unused at even steps, or -1
		epochs []unevenEpoch
	}{
		{"avg", avg, -1, []unevenEpoch{{[]int{3, 5, 5, 7}, 3}}},
		{"sum", sum, -1, []unevenEpoch{{[]int{3, 5, 5, 7}, 3}}},
		{"fp16", Config{Compression: FP16}, -1, []unevenEpoch{{[]int{3, 5, 5, 7}, 3}}},
		{"bf16-sum", Config{Compression: BF16, Op: comm.Sum, OpSet: true}, -1, []unevenEpoch{{[]int{3, 5, 5, 7}, 3}}},
		{"unused", avg, 2, []unevenEpoch{{[]int{3, 5, 5, 7}, 3}}},
		{"before-first-step", avg, -1, []unevenEpoch{{[]int{0, 2, 4}, 2}}},
		{"first-rank-last", avg, -1, []unevenEpoch{{[]int{4, 1, 2}, 0}}},
		// Ranks that join in the same step tie: the highest-numbered wins.
		{"same-step", avg, -1, []unevenEpoch{{[]int{2, 2, 2}, 2}}},
		{"no-batches", avg, -1, []unevenEpoch{{[]int{0, 0}, 1}}},
		// Join counts steps from the previous Join, not from the start.
		{"two-epochs", avg, -1, []unevenEpoch{{[]int{4, 1}, 0}, {[]int{1, 3}, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trainUneven(t, tc.cfg, tc.unused, tc.epochs...)
		})
	}
}

// step runs one training step of ps on b with every gradient 1.
func step(ctx context.Context, b *Bucketer[float32], ps []*Param[float32]) error {
	for i := len(ps) - 1; i >= 0; i-- {
		for j := range ps[i].Grad {
			ps[i].Grad[j] = 1
		}
		if err := b.MarkReady(ctx, i); err != nil {
			return err
		}
	}
	return b.Wait(ctx)
}

// namesRank reports whether err is a *comm.RankError naming rank, and not
// the end of the test's 60-second context (a hang).
func namesRank(err error, rank int) bool {
	var re *comm.RankError
	return errors.As(err, &re) && re.Rank == rank && !errors.Is(err, context.DeadlineExceeded)
}

// TestJoinPeerFails: rank 1 fails (Abort) while rank 0 is in Join and
// rank 2 is still training: both return at once with an error naming
// rank 1, instead of waiting for it.
func TestJoinPeerFails(t *testing.T) {
	t0 := time.Now()
	errs := ranks(t, 3, func(ctx context.Context, c *comm.Comm) error {
		ps := params(8, 8)
		b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 32, UnevenInputs: true})
		if err != nil {
			return err
		}
		switch c.Rank() {
		case 0:
			_, err := b.Join(ctx)
			return err
		case 1:
			for range 2 {
				if err := step(ctx, b, ps); err != nil {
					return err
				}
			}
			c.Abort(errors.New("out of memory"))
			return nil
		}
		for range 10 {
			if err := step(ctx, b, ps); err != nil {
				return err
			}
		}
		return errors.New("rank 2 trained 10 steps after rank 1 failed")
	})
	for _, r := range []int{0, 2} {
		if !namesRank(errs[r], 1) || !strings.Contains(errs[r].Error(), "out of memory") {
			t.Errorf("rank %d: err = %v, want one naming rank 1", r, errs[r])
		}
	}
	if d := time.Since(t0); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestJoinContextEnds: Join returns when its context ends, naming the
// rank it was waiting for, which has stopped without joining; that rank's
// next step then fails at once with the same error instead of waiting for
// its own timeout.
func TestJoinContextEnds(t *testing.T) {
	joined := make(chan struct{})
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		ps := params(8)
		b, err := NewBucketer(c, ps, Config{UnevenInputs: true})
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			defer close(joined)
			jctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := b.Join(jctx)
			var re *comm.RankError
			if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &re) || re.Rank != 1 {
				return fmt.Errorf("Join: err = %v, want its context's end, naming rank 1", err)
			}
			return nil
		}
		if err := step(ctx, b, ps); err != nil { // paired with Join's first round
			return err
		}
		<-joined
		if err := step(ctx, b, ps); !namesRank(err, 1) || !errors.Is(err, comm.ErrTimeout) {
			return fmt.Errorf("step after the joined rank gave up: err = %v, want rank 0's timeout, naming rank 1", err)
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestJoinRefused: Join on a Bucketer without UnevenInputs, or in the
// middle of a step, fails on its rank and, naming it, on the others,
// which would otherwise wait in their step's allreduces.
func TestJoinRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		uneven  bool
		midStep bool
		why     string
	}{
		{"not-enabled", false, false, "UnevenInputs"},
		{"mid-step", true, true, "Wait first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ranks(t, 3, func(ctx context.Context, c *comm.Comm) error {
				ps := params(8, 8)
				b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 32, UnevenInputs: tc.uneven})
				if err != nil {
					return err
				}
				if c.Rank() != 1 {
					return step(ctx, b, ps)
				}
				if tc.midStep {
					if err := b.MarkReady(ctx, 1); err != nil {
						return err
					}
				}
				_, err = b.Join(ctx)
				return err
			})
			for r, err := range errs {
				if !namesRank(err, 1) || r == 1 && !strings.Contains(err.Error(), tc.why) {
					t.Errorf("rank %d: err = %v, want one naming rank 1 (%q on rank 1)", r, err, tc.why)
				}
			}
		})
	}
}

func TestUnevenInputsNeedsAvgOrSum(t *testing.T) {
	for _, op := range []comm.Op{comm.Max, comm.Min, comm.Prod} {
		if _, err := NewBucketer(nil, params(4), Config{Op: op, OpSet: true, UnevenInputs: true}); err == nil {
			t.Errorf("op %v: NewBucketer accepted UnevenInputs", op)
		}
	}
}

// TestUnevenInputsCost pins down what a step sends: its buckets'
// allreduces, and with UnevenInputs one int64 allreduce before them. Rank
// 1 makes those collectives by hand; a Bucketer that made any other would
// pair one of them with another kind, type or length, and fail.
func TestUnevenInputsCost(t *testing.T) {
	for _, uneven := range []bool{false, true} {
		errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
			ps := params(8, 8)
			cfg := Config{FirstBucketBytes: 32, Op: comm.Sum, OpSet: true, UnevenInputs: uneven}
			for range 2 {
				if c.Rank() == 0 {
					b, err := NewBucketer(c, ps, cfg)
					if err != nil {
						return err
					}
					if err := step(ctx, b, ps); err != nil {
						return err
					}
				} else {
					if uneven {
						if err := comm.AllReduce(ctx, c, []int64{1}, make([]int64, 1), comm.Sum); err != nil {
							return err
						}
					}
					for range 2 {
						if err := comm.AllReduce(ctx, c, make([]float32, 8), make([]float32, 8), comm.Sum); err != nil {
							return err
						}
					}
				}
			}
			return c.Barrier(ctx)
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("uneven %v: rank %d: %v", uneven, r, err)
			}
		}
	}
}
