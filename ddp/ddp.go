package ddp

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/gorun-hpc/gorun/comm"
)

// Float is the element type of trainable parameters.
type Float interface{ float32 | float64 }

// Param is one trainable tensor.
type Param[T Float] struct {
	Name  string
	Shape []int
	Value []T
	// Grad is the gradient. NewBucketer replaces it with a view into the
	// parameter's bucket (copying what it held), so that the backward pass
	// writes straight into communication buffers.
	Grad []T
}

// Len is the number of elements the shape describes.
func (p *Param[T]) Len() int {
	n := 1
	for _, d := range p.Shape {
		n *= d
	}
	return n
}

func (p *Param[T]) check() error {
	if len(p.Value) != p.Len() {
		return fmt.Errorf("parameter %q: %d values for shape %v", p.Name, len(p.Value), p.Shape)
	}
	if p.Grad != nil && len(p.Grad) != len(p.Value) {
		return fmt.Errorf("parameter %q: %d gradient elements for %d values", p.Name, len(p.Grad), len(p.Value))
	}
	return nil
}

// signature hashes one parameter's name, shape and element type.
func signature[T Float](p *Param[T]) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%v|%T", p.Name, p.Shape, *new(T))
	return h.Sum64()
}

// CheckShapes verifies that every rank has the same parameters in the same
// order (names, shapes, element type), each with as many values (and
// gradient elements, if any) as its shape says. On a mismatch every rank
// returns an error naming the first rank and tensor that differ from
// rank 0; a parameter that does not fit its own shape fails the check on
// every rank, naming the rank that holds it.
func CheckShapes[T Float](ctx context.Context, c *comm.Comm, params []*Param[T]) error {
	// The local check's result travels with round 1, so that a rank with
	// a bad parameter does not leave the others waiting in the allgather.
	bad, badErr := int64(-1), error(nil)
	for i, p := range params {
		if err := p.check(); err != nil {
			bad, badErr = int64(i), err
			break
		}
	}
	n := c.Size()
	// Round 1: every rank's parameter count and its first bad parameter.
	counts := make([]int64, 2*n)
	if err := comm.AllGather(ctx, c, []int64{int64(len(params)), bad}, counts); err != nil {
		return err
	}
	for r := range n {
		if i := counts[2*r+1]; i >= 0 {
			if r == c.Rank() {
				return fmt.Errorf("ddp: rank %d: %w", r, badErr)
			}
			return fmt.Errorf("ddp: rank %d: tensor #%d does not fit its shape (its values or gradient have another length)", r, i)
		}
	}
	longest := int64(0)
	for r := range n {
		longest = max(longest, counts[2*r])
	}
	// Round 2: per-parameter signatures, padded to the longest list.
	mine := make([]uint64, longest)
	for i, p := range params {
		mine[i] = signature(p)
	}
	all := make([]uint64, int(longest)*n)
	if err := comm.AllGather(ctx, c, mine, all); err != nil {
		return err
	}
	ref := all[:longest]
	for r := 1; r < n; r++ {
		if counts[2*r] != counts[0] {
			return fmt.Errorf("ddp: rank %d has %d parameters, rank 0 has %d", r, counts[2*r], counts[0])
		}
		theirs := all[int(longest)*r : int(longest)*(r+1)]
		for i := range ref {
			if theirs[i] != ref[i] {
				what := fmt.Sprintf("tensor #%d", i)
				if i < len(params) {
					what = fmt.Sprintf("tensor #%d (here %q, shape %v)", i, params[i].Name, params[i].Shape)
				}
				return fmt.Errorf("ddp: rank %d differs from rank 0 at %s", r, what)
			}
		}
	}
	return nil
}

// BroadcastParameters copies every parameter's values from root to all
// ranks, so that replicas start identical.
func BroadcastParameters[T Float](ctx context.Context, c *comm.Comm, params []*Param[T], root int) error {
	for _, p := range params {
		if err := comm.Broadcast(ctx, c, p.Value, root); err != nil {
			return fmt.Errorf("ddp: broadcasting %q: %w", p.Name, err)
		}
	}
	return nil
}
