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
	elastic bool          // on a peer's failure, Shrink and go on (elastic.go)
	regrow  bool          // admit restarted ranks with Grow at step boundaries (gorun --max-restarts)
	fresh   bool          // this process is a restarted rank: it joins the running job (GORUN_RESTART)
	waitNP  int           // with regrow: below this many ranks, wait at a step boundary for a rank to join
	waitFor time.Duration // and give up after this long
	uneven  int           // rank r runs out r×uneven batches before each epoch's end and joins (Bucketer.Join)
	// beforeSteps, if set, is called once the model is set up (shapes
	// checked, parameters broadcast, Bucketer made), before the first
	// step: BenchmarkStep times the steps from there.
	beforeSteps func(m *mlp)
	// clock times the steps' compute and comm (nil: time.Now); tests
	// give it a clock of their own.
	clock func() time.Time
}

func defaultTrainConfig() trainConfig {
	return trainConfig{dims: []int{16, 64, 64, 4}, samples: 8192, batch: 32, steps: 16, epochs: 5, lr: 0.05, overlap: true, seed: 1, waitFor: time.Minute}
}

type stats struct {
	compute, comm time.Duration
	steps         int       // steps completed by this rank (a step redone after a failure counts once)
	last          int       // the step reached: epochs*steps when training finished
	loss          []float64 // mean over the epoch, per epoch (this rank's shard)
	recoveries    []recovery
	rank, size    int // at the end (they change when the communicator shrinks)
}

// train runs data-parallel SGD on c. Every rank builds the same data set
// and model from the seed, checks that all ranks agree on the parameter
// shapes, takes rank 0's initial values, and averages gradients each step.
// With cfg.elastic, a step that fails because a peer died is redone on
// the survivors (elastic.go); the communicators Shrink makes are closed
// before train returns, c stays the caller's to close.
func train(ctx context.Context, c *comm.Comm, cfg trainConfig, log io.Writer) (*mlp, stats, error) {
	var st stats
	if cfg.batch <= 0 || cfg.steps <= 0 || cfg.epochs < 0 {
		return nil, st, fmt.Errorf("batch %d, steps %d, epochs %d: want batch and steps above 0", cfg.batch, cfg.steps, cfg.epochs)
	}
	if cfg.uneven < 0 || cfg.uneven > 0 && (cfg.elastic || cfg.fresh) {
		return nil, st, fmt.Errorf("uneven %d: want 0 or more, and not with elastic training", cfg.uneven)
	}
	// With uneven inputs, this rank's batches per epoch.
	mySteps := cfg.steps
	if cfg.uneven > 0 {
		cfg.ddp.UnevenInputs = true
		mySteps = max(0, cfg.steps-c.Rank()*cfg.uneven)
	}
	data := newDataset(cfg.samples, cfg.dims[0], cfg.dims[len(cfg.dims)-1], cfg.seed)
	model := newMLP(cfg.dims, cfg.seed+int64(c.Rank())) // different on purpose: the broadcast must fix it
	el := &elasticState{c: c, origRank: c.Rank()}
	for r := range c.Size() {
		el.members = append(el.members, r)
	}
	defer el.close()
	var b *ddp.Bucketer[float32]
	start := 0
	if cfg.fresh {
		// Restarted: the others admitted this rank with Grow; take the
		// step and the parameters from them.
		var err error
		if b, start, err = el.admit(ctx, cfg, model, 0, true); err != nil {
			return nil, st, err
		}
		if log != nil {
			fmt.Fprintf(log, "rank %d rejoined at step %d\n", c.Rank(), start)
		}
	} else {
		if err := ddp.CheckShapes(ctx, c, model.params); err != nil {
			return nil, st, err
		}
		if err := ddp.BroadcastParameters(ctx, c, model.params, 0); err != nil {
			return nil, st, err
		}
		var err error
		if b, err = ddp.NewBucketer(c, model.params, cfg.ddp); err != nil {
			return nil, st, err
		}
	}
	if cfg.beforeSteps != nil {
		cfg.beforeSteps(model)
	}
	var saved [][]float32
	classes := cfg.dims[len(cfg.dims)-1]
	total := cfg.epochs * cfg.steps
	lossSum, lossN := 0.0, 0
	now := cfg.clock
	if now == nil {
		now = time.Now
	}
	// The totals when the epoch began: each epoch's line gives its own
	// time per step, not the average since the first step.
	var epochStart stats
	lastGood := time.Now()
	pending := -1              // index of the last recovery, until a step completes after it
	checkJoiners := !cfg.fresh // a restarted rank joined at this step's check
	// endEpoch records the loss of the epoch that ends at step. A rank that
	// took another's parameters after a failure may skip a step (and an
	// epoch end): the loss is over the steps this rank ran, the epoch is
	// the step's.
	endEpoch := func(step int) {
		e := step/cfg.steps - 1
		st.loss = append(st.loss, lossSum/float64(lossN))
		lossSum, lossN = 0, 0
		if log != nil && el.c.Rank() == 0 {
			compute, cm, steps := st.compute-epochStart.compute, st.comm-epochStart.comm, st.steps-epochStart.steps
			fmt.Fprintf(log, "epoch %d  loss %.4f  step %s (compute %s, comm %s)\n", e, st.loss[len(st.loss)-1],
				perStep(compute+cm, steps), perStep(compute, steps), perStep(cm, steps))
		}
		epochStart.compute, epochStart.comm, epochStart.steps = st.compute, st.comm, st.steps
	}
	// join waits, with uneven inputs, in the others' steps until every
	// rank has run out, then takes the parameters of the rank that ran
	// longest.
	join := func() error {
		t := now()
		defer func() { st.comm += now().Sub(t) }()
		last, err := b.Join(ctx)
		if err != nil {
			return err
		}
		return ddp.BroadcastParameters(ctx, el.c, model.params, last)
	}
	for step := start; step < total; {
		if cfg.elastic && cfg.regrow && checkJoiners {
			nb, grew, err := el.maybeGrow(ctx, cfg, model, step)
			if err != nil && !peerLost(err) {
				return nil, st, fmt.Errorf("rank %d step %d: %w", el.c.Rank(), step, err)
			}
			if err == nil && grew {
				b = nb
				if log != nil && el.c.Rank() == 0 {
					fmt.Fprintf(log, "grew to %d ranks at step %d\n", el.c.Size(), step)
				}
			}
			// A failure here shows again in the step, which recovers.
		}
		checkJoiners = true
		c := el.c
		if cfg.elastic {
			saved = snapshot(model, saved)
		}
		if c.Size()*cfg.batch > cfg.samples {
			// Every rank sees the same size, so all stop here together.
			return nil, st, fmt.Errorf("rank %d step %d: batch %d × %d ranks is more than the %d samples", c.Rank(), step, cfg.batch, c.Size(), cfg.samples)
		}
		if cfg.uneven > 0 && step%cfg.steps >= mySteps { // out of batches for this epoch
			if err := join(); err != nil {
				return nil, st, fmt.Errorf("rank %d step %d: %w", el.c.Rank(), step, err)
			}
			step = (step/cfg.steps + 1) * cfg.steps
			endEpoch(step)
			continue
		}
		t0 := now()
		x, y := data.batch(step, c.Rank(), c.Size(), cfg.batch)
		b.ZeroGrad()
		sp := c.StartSpan("compute", "forward", int64(step)) // the timeline (gorun --timeline); free when off
		logits := model.forward(x, len(y))
		loss, dz := lossAndGrad(logits, y, classes)
		sp.End()
		var commTime time.Duration
		ready := func(i int) error {
			if !cfg.overlap {
				return nil
			}
			t := now()
			err := b.MarkReady(ctx, i)
			commTime += now().Sub(t)
			return err
		}
		sp = c.StartSpan("compute", "backward", int64(step))
		if err := model.backward(dz, len(y), ready); err != nil {
			return nil, st, err
		}
		sp.End()
		t1 := now()
		sp = c.StartSpan("compute", "wait for gradients", int64(step))
		err := b.Wait(ctx)
		sp.End()
		if err != nil {
			if !cfg.elastic || !peerLost(err) {
				return nil, st, fmt.Errorf("rank %d step %d: %w", c.Rank(), step, err)
			}
			nb, redo, rec, rerr := el.recoverStep(ctx, cfg, model, saved, step, lastGood, err)
			if rerr != nil {
				return nil, st, fmt.Errorf("rank %d step %d: %w", c.Rank(), step, rerr)
			}
			b, step = nb, redo
			st.recoveries = append(st.recoveries, rec)
			pending = len(st.recoveries) - 1
			if log != nil && el.c.Rank() == 0 {
				fmt.Fprintf(log, "%v (shrink took %v)\n", rec, rec.shrink.Round(time.Millisecond))
			}
			continue
		}
		commTime += now().Sub(t1)
		sp = c.StartSpan("compute", "optimizer", int64(step))
		model.sgd(cfg.lr)
		sp.End()
		lastGood = time.Now()
		if pending >= 0 {
			p := &st.recoveries[pending]
			p.firstStep = lastGood.Sub(p.failedAt)
			if log != nil && el.c.Rank() == 0 {
				fmt.Fprintf(log, "recovered: first step on %d ranks done %v after the failure was seen (last good step ended %v before it)\n",
					el.c.Size(), p.firstStep.Round(time.Millisecond), p.sinceGood.Round(time.Millisecond))
			}
			pending = -1
		}
		lossSum += loss
		st.comm += commTime
		st.compute += now().Sub(t0) - commTime
		st.steps++
		step++
		lossN++
		if step%cfg.steps == 0 {
			if cfg.uneven > 0 { // ran every batch: the others have joined or will
				if err := join(); err != nil {
					return nil, st, fmt.Errorf("rank %d step %d: %w", el.c.Rank(), step, err)
				}
			}
			endEpoch(step)
		}
	}
	st.rank, st.size, st.last = el.c.Rank(), el.c.Size(), total
	return model, st, nil
}

func perStep(d time.Duration, steps int) time.Duration {
	if steps == 0 {
		return 0
	}
	return (d / time.Duration(steps)).Round(time.Microsecond)
}
