package ddp_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/ddp"
)

// A training step on each of two ranks (in one process here; under gorun
// each rank calls comm.Init instead): check the parameters agree, start
// from rank 0's values, mark each gradient ready as the backward pass
// finishes it (last layer first), Wait, then step the optimizer with the
// averaged gradients.
func ExampleBucketer() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	var wg sync.WaitGroup
	out := make([]string, len(cs))
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			params := []*ddp.Param[float32]{
				{Name: "fc.weight", Shape: []int{2, 2}, Value: make([]float32, 4)},
				{Name: "fc.bias", Shape: []int{2}, Value: make([]float32, 2)},
			}
			if err := ddp.CheckShapes(ctx, c, params); err != nil {
				out[r] = err.Error()
				return
			}
			if err := ddp.BroadcastParameters(ctx, c, params, 0); err != nil {
				out[r] = err.Error()
				return
			}
			b, err := ddp.NewBucketer(c, params, ddp.Config{})
			if err != nil {
				out[r] = err.Error()
				return
			}
			b.ZeroGrad()
			for i := len(params) - 1; i >= 0; i-- { // the backward pass
				for j := range params[i].Grad {
					params[i].Grad[j] = float32(c.Rank() + 1) // rank 0: 1, rank 1: 2
				}
				if err := b.MarkReady(ctx, i); err != nil {
					out[r] = err.Error()
					return
				}
			}
			if err := b.Wait(ctx); err != nil {
				out[r] = err.Error()
				return
			}
			out[r] = fmt.Sprintf("rank %d: bias gradient %v", c.Rank(), params[1].Grad)
		}()
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0: bias gradient [1.5 1.5]
	// rank 1: bias gradient [1.5 1.5]
}

// A model with float32 and float64 parameters uses a Bucketer for each,
// each on its own communicator (Comm.Dup): the ranks pair allreduces in
// the order they start on a communicator, and a Bucketer orders only its
// own buckets, so two sharing one would pair one's bucket with the
// other's when ranks leave different parameters unused.
func ExampleNewBucketer_twoElementTypes() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	var wg sync.WaitGroup
	out := make([]string, len(cs))
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			out[r] = func() string {
				c64, err := c.Dup(ctx)
				if err != nil {
					return err.Error()
				}
				defer c64.Close()
				p32 := []*ddp.Param[float32]{{Name: "w", Shape: []int{2}, Value: make([]float32, 2)}}
				p64 := []*ddp.Param[float64]{{Name: "scale", Shape: []int{1}, Value: make([]float64, 1)}}
				b32, err := ddp.NewBucketer(c, p32, ddp.Config{})
				if err != nil {
					return err.Error()
				}
				b64, err := ddp.NewBucketer(c64, p64, ddp.Config{})
				if err != nil {
					return err.Error()
				}
				// The backward pass: w first, then scale.
				p32[0].Grad[0], p32[0].Grad[1] = float32(c.Rank()), float32(c.Rank())
				if c.Rank() == 1 { // unused on rank 0: Wait reduces the zeros it holds
					if err := b32.MarkReady(ctx, 0); err != nil {
						return err.Error()
					}
				}
				p64[0].Grad[0] = float64(10 * (c.Rank() + 1))
				if err := b64.MarkReady(ctx, 0); err != nil {
					return err.Error()
				}
				if err := b32.Wait(ctx); err != nil {
					return err.Error()
				}
				if err := b64.Wait(ctx); err != nil {
					return err.Error()
				}
				return fmt.Sprintf("rank %d: %v %v", c.Rank(), p32[0].Grad, p64[0].Grad)
			}()
		}()
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0: [0.5 0.5] [15]
	// rank 1: [0.5 0.5] [15]
}

// Uneven inputs: ranks 0, 1 and 2 have 1, 2 and 3 batches. A rank that
// runs out calls Join and takes part in the others' steps with zero
// gradients, so each step's average is over the ranks still training:
// (1+2+3)/3, then (2+3)/2, then 3. Join returns the rank that joined
// last, and the others copy its parameters.
func ExampleBucketer_Join() {
	ctx := context.Background()
	cs, err := comm.NewLocal(ctx, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	var wg sync.WaitGroup
	out := make([]string, len(cs))
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			out[r] = func() string {
				params := []*ddp.Param[float32]{{Name: "w", Shape: []int{1}, Value: make([]float32, 1)}}
				b, err := ddp.NewBucketer(c, params, ddp.Config{UnevenInputs: true})
				if err != nil {
					return err.Error()
				}
				var grads []float32
				for range c.Rank() + 1 { // this rank's batches
					b.ZeroGrad()
					params[0].Grad[0] = float32(c.Rank() + 1) // the backward pass
					if err := b.MarkReady(ctx, 0); err != nil {
						return err.Error()
					}
					if err := b.Wait(ctx); err != nil {
						return err.Error()
					}
					grads = append(grads, params[0].Grad[0])
					params[0].Value[0] -= 0.5 * params[0].Grad[0] // the optimizer step
				}
				last, err := b.Join(ctx)
				if err != nil {
					return err.Error()
				}
				if err := ddp.BroadcastParameters(ctx, c, params, last); err != nil {
					return err.Error()
				}
				return fmt.Sprintf("rank %d: gradients %v, last to join %d, w %v", c.Rank(), grads, last, params[0].Value)
			}()
		}()
	}
	wg.Wait()
	for _, s := range out {
		fmt.Println(s)
	}
	// Output:
	// rank 0: gradients [2], last to join 2, w [-3.75]
	// rank 1: gradients [2 2.5], last to join 2, w [-3.75]
	// rank 2: gradients [2 2.5 3], last to join 2, w [-3.75]
}
