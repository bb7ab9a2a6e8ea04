package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gorun-hpc/gorun/comm"
	"github.com/gorun-hpc/gorun/ddp"
)

type trainConfig struct {
	dims    []int // input, hidden…, classes
	samples int
	batch   int // per rank
	steps   int // per epoch
	epochs  int
	lr      float32
	overlap bool // reduce buckets during backward (false: all after backward)
	ddp     ddp.Config
	seed    int64
}

func defaultTrainConfig() trainConfig {
	return trainConfig{dims: []int{16, 64, 64, 4}, samples: 8192, batch: 32, steps: 16, epochs: 5, lr: 0.05, overlap: true, seed: 1}
}

type stats struct {
	compute, comm time.Duration
	steps         int
	loss          []float64 // mean over the epoch, per epoch (this rank's shard)
}

// train runs data-parallel SGD on c. Every rank builds the same data set
// and model from the seed, checks that all ranks agree on the parameter
// shapes, takes rank 0's initial values, and averages gradients each step.
func train(ctx context.Context, c *comm.Comm, cfg trainConfig, log io.Writer) (*mlp, stats, error) {
	var st stats
	data := newDataset(cfg.samples, cfg.dims[0], cfg.dims[len(cfg.dims)-1], cfg.seed)
	model := newMLP(cfg.dims, cfg.seed+int64(c.Rank())) // different on purpose: the broadcast must fix it
	if err := ddp.CheckShapes(ctx, c, model.params); err != nil {
		return nil, st, err
	}
	if err := ddp.BroadcastParameters(ctx, c, model.params, 0); err != nil {
		return nil, st, err
	}
	b, err := ddp.NewBucketer(c, model.params, cfg.ddp)
	if err != nil {
		return nil, st, err
	}
	classes := cfg.dims[len(cfg.dims)-1]
	step := 0
	for e := 0; e < cfg.epochs; e++ {
		lossSum := 0.0
		for s := 0; s < cfg.steps; s++ {
			t0 := time.Now()
			x, y := data.batch(step, c.Rank(), c.Size(), cfg.batch)
			b.ZeroGrad()
			logits := model.forward(x, len(y))
			loss, dz := lossAndGrad(logits, y, classes)
			lossSum += loss
			var commTime time.Duration
			ready := func(i int) error {
				if !cfg.overlap {
					return nil
				}
				t := time.Now()
				err := b.MarkReady(ctx, i)
				commTime += time.Since(t)
				return err
			}
			if err := model.backward(dz, len(y), ready); err != nil {
				return nil, st, err
			}
			t1 := time.Now()
			if err := b.Wait(ctx); err != nil {
				return nil, st, fmt.Errorf("rank %d step %d: %w", c.Rank(), step, err)
			}
			commTime += time.Since(t1)
			model.sgd(cfg.lr)
			st.comm += commTime
			st.compute += time.Since(t0) - commTime
			st.steps++
			step++
		}
		st.loss = append(st.loss, lossSum/float64(cfg.steps))
		if log != nil && c.Rank() == 0 {
			fmt.Fprintf(log, "epoch %d  loss %.4f  step %s (compute %s, comm %s)\n", e, st.loss[e],
				perStep(st.compute+st.comm, st.steps), perStep(st.compute, st.steps), perStep(st.comm, st.steps))
		}
	}
	return model, st, nil
}

func perStep(d time.Duration, steps int) time.Duration {
	if steps == 0 {
		return 0
	}
	return (d / time.Duration(steps)).Round(time.Microsecond)
}
