package ddp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/comm"
)

// ranks runs f on every rank of an in-process world made with opts and
// returns the errors, once every rank has closed.
func ranks(t *testing.T, n int, f func(ctx context.Context, c *comm.Comm) error, opts ...comm.Option) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := comm.NewLocal(ctx, n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(ctx, c)
		}()
	}
	wg.Wait()
	return errs
}

func params(sizes ...int) []*Param[float32] {
	var ps []*Param[float32]
	for i, n := range sizes {
		ps = append(ps, &Param[float32]{Name: fmt.Sprintf("p%d", i), Shape: []int{n}, Value: make([]float32, n), Grad: make([]float32, n)})
	}
	return ps
}

func TestBucketAssignment(t *testing.T) {
	// 4-byte elements: params of 100, 300, 50, 400 elements; first bucket
	// capped at 1000 bytes (250 elements), the rest at 2000 bytes.
	ps := params(100, 300, 50, 400)
	ps[1].Grad[7] = 3 // NewBucketer keeps existing gradient values
	b, err := NewBucketer[float32](nil, ps, Config{FirstBucketBytes: 1000, BucketBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	// Reverse order: p3 (1600 B) alone overflows the first bucket's cap but
	// a bucket always takes at least one parameter; then p2+p1+p0 = 1800 B.
	if b.Buckets() != 2 {
		t.Fatalf("got %d buckets, want 2", b.Buckets())
	}
	if b.of[3] != 0 || b.of[2] != 1 || b.of[1] != 1 || b.of[0] != 1 {
		t.Fatalf("bucket of params = %v", b.of)
	}
	if ps[1].Grad[7] != 3 {
		t.Fatal("gradient value lost when turned into a view")
	}
	ps[0].Grad[0] = 42
	found := false
	for _, v := range b.buckets[1].data {
		found = found || v == 42
	}
	if !found {
		t.Fatal("Grad is not a view into its bucket")
	}
}

func TestAveragesAcrossRanks(t *testing.T) {
	const n = 4
	errs := ranks(t, n, func(ctx context.Context, c *comm.Comm) error {
		ps := params(10, 1000, 3)
		b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 64, BucketBytes: 4096})
		if err != nil {
			return err
		}
		for step := 0; step < 3; step++ {
			b.ZeroGrad()
			for i := len(ps) - 1; i >= 0; i-- {
				for j := range ps[i].Grad {
					ps[i].Grad[j] = float32((c.Rank() + 1) * (step + 1) * (j%5 + 1))
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
					want := float32(2.5 * float64((step+1)*(j%5+1))) // mean of 1..4 = 2.5
					if g != want {
						return fmt.Errorf("rank %d step %d p%d[%d] = %v, want %v", c.Rank(), step, i, j, g, want)
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

func TestBucketStartsBeforeWait(t *testing.T) {
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		ps := params(16, 16)
		b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 64, BucketBytes: 64})
		if err != nil {
			return err
		}
		if b.Buckets() != 2 {
			return fmt.Errorf("%d buckets, want 2", b.Buckets())
		}
		if err := b.MarkReady(ctx, 1); err != nil { // completes the first bucket
			return err
		}
		if b.buckets[0].req == nil || b.buckets[1].req != nil {
			return fmt.Errorf("after the first bucket's last gradient only it must be in flight")
		}
		if err := b.MarkReady(ctx, 1); err == nil || !strings.Contains(err.Error(), "twice") {
			return fmt.Errorf("marking ready twice: err = %v", err)
		}
		return b.Wait(ctx) // starts the second bucket itself
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestNoSyncAccumulates(t *testing.T) {
	errs := ranks(t, 3, func(ctx context.Context, c *comm.Comm) error {
		ps := params(8)
		b, err := NewBucketer(c, ps, Config{OpSet: true, Op: comm.Sum})
		if err != nil {
			return err
		}
		b.ZeroGrad()
		if err := b.SetNoSync(true); err != nil {
			return err
		}
		for micro := 0; micro < 2; micro++ {
			for j := range ps[0].Grad {
				ps[0].Grad[j] += float32(c.Rank() + 1)
			}
			if err := b.MarkReady(ctx, 0); err != nil {
				return err
			}
			if err := b.Wait(ctx); err != nil {
				return err
			}
			if ps[0].Grad[0] != float32((micro+1)*(c.Rank()+1)) {
				return fmt.Errorf("no-sync step communicated: grad %v", ps[0].Grad[0])
			}
		}
		if err := b.SetNoSync(false); err != nil {
			return err
		}
		if err := b.MarkReady(ctx, 0); err != nil {
			return err
		}
		if err := b.Wait(ctx); err != nil {
			return err
		}
		if want := float32(2 * (1 + 2 + 3)); ps[0].Grad[3] != want {
			return fmt.Errorf("sum after accumulation = %v, want %v", ps[0].Grad[3], want)
		}
		return nil
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestCompression(t *testing.T) {
	for _, comp := range []Compression{FP16, BF16} {
		tol := map[Compression]float64{FP16: 1e-3, BF16: 8e-3}[comp] // relative: 2^-10, 2^-7 plus one rounding per hop
		errs := ranks(t, 4, func(ctx context.Context, c *comm.Comm) error {
			ps := params(257)
			b, err := NewBucketer(c, ps, Config{Compression: comp})
			if err != nil {
				return err
			}
			for j := range ps[0].Grad {
				ps[0].Grad[j] = float32(math.Sin(float64(j)+float64(c.Rank()))) + 2
			}
			if err := b.Wait(ctx); err != nil {
				return err
			}
			for j, g := range ps[0].Grad {
				want := 0.0
				for r := 0; r < 4; r++ {
					want += math.Sin(float64(j)+float64(r)) + 2
				}
				want /= 4
				if math.Abs(float64(g)-want) > tol*math.Abs(want)+1e-6 {
					return fmt.Errorf("compression %d: grad[%d] = %v, want %v", comp, j, g, want)
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
}

func TestCheckShapesNamesRankAndTensor(t *testing.T) {
	errs := ranks(t, 4, func(ctx context.Context, c *comm.Comm) error {
		ps := params(4, 6, 8)
		if c.Rank() == 2 {
			ps[1] = &Param[float32]{Name: "p1", Shape: []int{3, 2}, Value: make([]float32, 6)}
		}
		return CheckShapes(ctx, c, ps)
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 2") || !strings.Contains(err.Error(), "#1") {
			t.Errorf("rank %d: err = %v, want one naming rank 2 and tensor #1", r, err)
		}
	}
	errs = ranks(t, 3, func(ctx context.Context, c *comm.Comm) error {
		return CheckShapes(ctx, c, params(4, 6, 8))
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: matching shapes: %v", r, err)
		}
	}
}

// TestCheckShapesBadParamFailsEveryRank: a parameter whose values do not
// fit its shape on one rank fails CheckShapes at once on every rank,
// naming that rank. Before, that rank returned its own error before the
// allgather and the others waited there until their context ended.
func TestCheckShapesBadParamFailsEveryRank(t *testing.T) {
	for _, grad := range []bool{false, true} {
		t0 := time.Now()
		errs := ranks(t, 3, func(ctx context.Context, c *comm.Comm) error {
			ps := params(4, 6, 8)
			if c.Rank() == 1 {
				if grad {
					ps[1].Grad = make([]float32, 5)
				} else {
					ps[1].Value = make([]float32, 5)
				}
			}
			return CheckShapes(ctx, c, ps)
		})
		for r, err := range errs {
			if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, comm.ErrTimeout) ||
				!strings.Contains(err.Error(), "rank 1") {
				t.Errorf("grad %v: rank %d: err = %v, want one naming rank 1 at once", grad, r, err)
			}
		}
		if !strings.Contains(errs[1].Error(), `"p1"`) || !strings.Contains(errs[0].Error(), "#1") {
			t.Errorf("grad %v: errors %q, %q: want rank 1's to name p1, the others' tensor #1", grad, errs[1], errs[0])
		}
		if d := time.Since(t0); d > 30*time.Second {
			t.Errorf("grad %v: took %v", grad, d)
		}
	}
}

func TestBroadcastParameters(t *testing.T) {
	errs := ranks(t, 3, func(ctx context.Context, c *comm.Comm) error {
		ps := params(5, 9)
		for _, p := range ps {
			for j := range p.Value {
				p.Value[j] = float32(c.Rank()*100 + j)
			}
		}
		if err := BroadcastParameters(ctx, c, ps, 1); err != nil {
			return err
		}
		for _, p := range ps {
			for j, v := range p.Value {
				if v != float32(100+j) {
					return fmt.Errorf("rank %d %s[%d] = %v, want root 1's %d", c.Rank(), p.Name, j, v, 100+j)
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

// TestUnusedParamsKeepBucketOrder: rank 0 never marks p3 (unused there, as
// with torch's find_unused_parameters), rank 1 marks every parameter. Both
// must reduce bucket 0 then bucket 1, so that their n-th allreduces pair
// the same bucket: rank 0 holds bucket 1 back until Wait starts bucket 0.
// Before, rank 0 started bucket 1 first: with equal buckets the sums mixed
// buckets silently, with unequal ones the ranks failed with ErrMismatch.
func TestUnusedParamsKeepBucketOrder(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		first int
		rest  int
	}{
		{"equal", []int{4, 4, 4, 4}, 32, 32},   // buckets {p3,p2} {p1,p0}, 32 B each
		{"unequal", []int{8, 8, 4, 4}, 32, 64}, // buckets {p3,p2} 32 B, {p1,p0} 64 B
	} {
		t.Run(tc.name, func(t *testing.T) {
			errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
				ps := params(tc.sizes...)
				b, err := NewBucketer(c, ps, Config{FirstBucketBytes: tc.first, BucketBytes: tc.rest, Op: comm.Sum, OpSet: true})
				if err != nil {
					return err
				}
				if b.Buckets() != 2 || b.of[3] != 0 || b.of[0] != 1 {
					return fmt.Errorf("buckets %v, want {p3,p2} {p1,p0}", b.of)
				}
				for i, p := range ps {
					for j := range p.Grad {
						p.Grad[j] = float32(100*i + j)
					}
				}
				var order error
				if c.Rank() == 0 {
					clear(ps[3].Grad) // unused here: Wait reduces what it holds
				}
				for i := len(ps) - 1; i >= 0; i-- {
					if c.Rank() == 0 && i == 3 {
						continue
					}
					if err := b.MarkReady(ctx, i); err != nil {
						return err
					}
					switch { // noted, not returned: the other rank waits in the allreduces
					case c.Rank() == 1 && i == 2 && b.buckets[0].req == nil:
						order = fmt.Errorf("bucket 0 full but not started: no overlap with backward")
					case c.Rank() == 0 && b.buckets[1].req != nil:
						order = fmt.Errorf("bucket 1 started before bucket 0")
					}
				}
				if c.Rank() == 1 && b.buckets[1].req == nil {
					order = fmt.Errorf("bucket 1 full after bucket 0 but not started before Wait")
				}
				if err := b.Wait(ctx); err != nil {
					return errors.Join(order, err)
				}
				if order != nil {
					return order
				}
				for i, p := range ps {
					for j, g := range p.Grad {
						want := float32(2 * (100*i + j))
						if i == 3 {
							want = float32(100*i + j) // rank 1's alone
						}
						if g != want {
							return fmt.Errorf("rank %d p%d[%d] = %v, want %v", c.Rank(), i, j, g, want)
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
		})
	}
}

// TestOutOfOrderMarksLaunchInOrder: a later bucket that fills first waits
// for the earlier ones; the mark that completes bucket 0 starts both.
func TestOutOfOrderMarksLaunchInOrder(t *testing.T) {
	errs := ranks(t, 2, func(ctx context.Context, c *comm.Comm) error {
		ps := params(16, 16)
		b, err := NewBucketer(c, ps, Config{FirstBucketBytes: 64, BucketBytes: 64})
		if err != nil {
			return err
		}
		if err := b.MarkReady(ctx, 0); err != nil { // fills bucket 1
			return err
		}
		var order error // noted, not returned: the other rank waits in the allreduces
		if b.buckets[1].req != nil {
			order = fmt.Errorf("bucket 1 started before bucket 0")
		}
		if err := b.MarkReady(ctx, 1); err != nil { // fills bucket 0
			return err
		}
		if b.buckets[0].req == nil || b.buckets[1].req == nil {
			order = errors.Join(order, fmt.Errorf("both buckets full, not both started"))
		}
		return errors.Join(order, b.Wait(ctx))
	})
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestCompressedAvgDoesNotOverflow: an average that fits the wire type
// arrives, though the sum of the ranks' gradients does not fit: each rank
// divides by the world size before it rounds to the wire type (as torch's
// fp16_compress_hook), and the ranks sum. Before, fp16 partial sums of
// 4 × 30000 overflowed to +Inf (bf16: 4 × 2e38).
func TestCompressedAvgDoesNotOverflow(t *testing.T) {
	for _, tc := range []struct {
		comp Compression
		g    float32
		tol  float64
	}{
		{FP16, 30000, 0},    // 7500 and 30000 are exact in fp16
		{BF16, 2e38, 4e-3},  // bf16: 8 significant bits
		{FP16, -30000, 0},   // and towards -Inf
		{BF16, -2e38, 4e-3}, //
	} {
		errs := ranks(t, 4, func(ctx context.Context, c *comm.Comm) error {
			ps := params(5)
			b, err := NewBucketer(c, ps, Config{Compression: tc.comp})
			if err != nil {
				return err
			}
			for j := range ps[0].Grad {
				ps[0].Grad[j] = tc.g
			}
			if err := b.MarkReady(ctx, 0); err != nil {
				return err
			}
			if err := b.Wait(ctx); err != nil {
				return err
			}
			for j, g := range ps[0].Grad {
				if math.Abs(float64(g)-float64(tc.g)) > tc.tol*math.Abs(float64(tc.g)) {
					return fmt.Errorf("compression %d: average of 4 × %v: grad[%d] = %v", tc.comp, tc.g, j, g)
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
}
