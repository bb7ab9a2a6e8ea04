package main

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

// runWorld trains cfg on n in-process ranks and returns every rank's model.
func runWorld(tb testing.TB, n int, cfg trainConfig, opts ...comm.Option) []*mlp {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, n, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	models := make([]*mlp, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			models[i], _, errs[i] = train(ctx, c, cfg, nil)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return models
}

func small() trainConfig {
	cfg := defaultTrainConfig()
	cfg.epochs, cfg.steps, cfg.batch = 3, 8, 8
	cfg.ddp.FirstBucketBytes, cfg.ddp.BucketBytes = 2048, 8192 // several buckets
	return cfg
}

// Four ranks with batch B must end where one rank with batch 4B ends: the
// averaged gradient of equal shards is the combined batch's gradient. Only
// float32 reassociation separates them; the tolerance is relative 1e-4 of
// the parameter scale after 24 steps.
// matchesReference fails t unless every rank of ranks holds rank 0's
// parameters exactly, and ref's within relative 1e-4 (what: the ranks,
// for the message).
func matchesReference(t *testing.T, ranks []*mlp, ref *mlp, what string) {
	t.Helper()
	for r, m := range ranks {
		for i, p := range m.params {
			q := ref.params[i]
			for j := range p.Value {
				if r > 0 && p.Value[j] != ranks[0].params[i].Value[j] {
					t.Fatalf("rank %d %s[%d] = %v differs from rank 0's %v: replicas diverged", r, p.Name, j, p.Value[j], ranks[0].params[i].Value[j])
				}
				if d := math.Abs(float64(p.Value[j] - q.Value[j])); d > 1e-4*(1+math.Abs(float64(q.Value[j]))) {
					t.Fatalf("rank %d %s[%d]: %s %v, 1 rank %v (|Δ| %.3g)", r, p.Name, j, what, p.Value[j], q.Value[j], d)
				}
			}
		}
	}
}

func TestDataParallelMatchesCombinedBatch(t *testing.T) {
	cfg := small()
	four := runWorld(t, 4, cfg)
	one := cfg
	one.batch = 4 * cfg.batch
	ref := runWorld(t, 1, one)[0]

	matchesReference(t, four, ref, "4 ranks")
	if ref.params[0].Value[0] == newMLP(cfg.dims, cfg.seed).params[0].Value[0] {
		t.Fatal("training did not change the parameters")
	}
}

// With the Deterministic option float sums are bitwise reproducible, so two
// runs of the same world end with identical parameters.
func TestDeterministicRunsAreBitwiseEqual(t *testing.T) {
	cfg := small()
	a := runWorld(t, 4, cfg, comm.Deterministic())
	b := runWorld(t, 4, cfg, comm.Deterministic())
	for i, p := range a[0].params {
		for j, v := range p.Value {
			if math.Float32bits(v) != math.Float32bits(b[0].params[i].Value[j]) {
				t.Fatalf("%s[%d]: %v vs %v between two deterministic runs", p.Name, j, v, b[0].params[i].Value[j])
			}
		}
	}
}

func TestLossDecreases(t *testing.T) {
	cfg := small()
	cfg.epochs = 6
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	_, st, err := train(ctx, cs[0], cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.loss[len(st.loss)-1] >= st.loss[0]*0.8 {
		t.Fatalf("loss per epoch %v: not learning", st.loss)
	}
}

// With -uneven, rank r runs out r×uneven batches before each epoch's end
// and joins (ddp's Bucketer.Join); each step's gradient is then the
// average over the ranks still training. Four such ranks must end, every
// one of them, where one process ends that trains at each step on the
// combined batch of the ranks still training (relative 1e-4, as
// TestDataParallelMatchesCombinedBatch).
func TestUnevenInputsMatchCombinedBatch(t *testing.T) {
	cfg := small()
	cfg.uneven = 3 // 8, 5, 2 and 0 batches per epoch
	const n = 4
	four := runWorld(t, n, cfg)

	data := newDataset(cfg.samples, cfg.dims[0], cfg.dims[len(cfg.dims)-1], cfg.seed)
	ref := newMLP(cfg.dims, cfg.seed) // rank 0's, which BroadcastParameters gives every rank
	noop := func(int) error { return nil }
	for e := range cfg.epochs {
		for s := range cfg.steps {
			var x []float32
			var y []int
			for r := range n {
				if s < cfg.steps-r*cfg.uneven {
					xr, yr := data.batch(e*cfg.steps+s, r, n, cfg.batch)
					x, y = append(x, xr...), append(y, yr...)
				}
			}
			for _, p := range ref.params {
				clear(p.Grad)
			}
			_, dz := lossAndGrad(ref.forward(x, len(y)), y, cfg.dims[len(cfg.dims)-1])
			if err := ref.backward(dz, len(y), noop); err != nil {
				t.Fatal(err)
			}
			ref.sgd(cfg.lr)
		}
	}
	matchesReference(t, four, ref, "4 uneven ranks")
}

// BenchmarkStep compares reducing buckets during the backward pass with
// reducing them all after it, on a model big enough to have many buckets.
// It times the b.N steps only: not the world's setup (NewLocal, the
// shapes' check, the parameters' broadcast, the Bucketer) nor its Close.
func BenchmarkStep(b *testing.B) {
	for _, overlap := range []bool{true, false} {
		name := "overlap=false"
		if overlap {
			name = "overlap=true"
		}
		b.Run(name+"/ranks=2", func(b *testing.B) {
			cfg := defaultTrainConfig()
			cfg.dims = []int{16, 512, 512, 512, 4}
			cfg.batch, cfg.epochs, cfg.steps = 16, 1, b.N
			cfg.overlap = overlap
			cfg.ddp.FirstBucketBytes, cfg.ddp.BucketBytes = 256<<10, 1<<20
			b.StopTimer()
			stepWorld(b, 2, cfg)
		})
	}
}

// stepWorld trains cfg on n in-process ranks with b's timer running from
// the moment every rank is set up to the end of the last step.
func stepWorld(b *testing.B, n int, cfg trainConfig) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, n)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	arrived, steps, done := make(chan struct{}, n), make(chan struct{}), make(chan struct{})
	cfg.beforeSteps = func(*mlp) {
		arrived <- struct{}{}
		<-steps
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = train(ctx, c, cfg, nil)
		}()
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	for range n {
		select {
		case <-arrived:
		case <-done: // a rank failed in its setup
		}
	}
	b.StartTimer()
	close(steps)
	<-done
	b.StopTimer()
	for r, err := range errs {
		if err != nil {
			b.Fatalf("rank %d: %v", r, err)
		}
	}
}

// beforeSteps is called on every rank once its model is set up, before
// the first step: the ranks' parameters are then the same (broadcast from
// rank 0) and they have not moved yet (training moves them after).
func TestBeforeStepsIsBetweenSetupAndSteps(t *testing.T) {
	const n = 2
	cfg := small()
	var mu sync.Mutex
	at := make([][][]float32, n)
	cfg.beforeSteps = func(m *mlp) {
		var vals [][]float32
		for _, p := range m.params {
			vals = append(vals, append([]float32(nil), p.Value...))
		}
		mu.Lock()
		defer mu.Unlock()
		for r := range at {
			if at[r] == nil {
				at[r] = vals
				return
			}
		}
		t.Errorf("beforeSteps called more than %d times", n)
	}
	models := runWorld(t, n, cfg)
	if at[0] == nil || at[1] == nil {
		t.Fatalf("beforeSteps called %d times, want %d", len(at), n)
	}
	moved := false
	for i, p := range models[0].params {
		for j, v := range p.Value {
			if at[0][i][j] != at[1][i][j] {
				t.Fatalf("%s[%d] at beforeSteps: %v on one rank, %v on the other: not broadcast yet", p.Name, j, at[0][i][j], at[1][i][j])
			}
			moved = moved || v != at[0][i][j]
		}
	}
	if !moved {
		t.Fatal("no parameter moved after beforeSteps: it was called after the steps")
	}
}

// Elastic mode without a failure is plain training: the per-step snapshot
// must not change the result.
func TestElasticWithoutFailureIsPlain(t *testing.T) {
	cfg := small()
	plain := runWorld(t, 2, cfg, comm.Deterministic())
	cfg.elastic = true
	el := runWorld(t, 2, cfg, comm.Deterministic())
	for i, p := range plain[0].params {
		for j, v := range p.Value {
			if math.Float32bits(v) != math.Float32bits(el[1].params[i].Value[j]) {
				t.Fatalf("%s[%d]: %v plain, %v elastic", p.Name, j, v, el[1].params[i].Value[j])
			}
		}
	}
}

// A peer lost in a world that cannot shrink (NewLocal) fails training
// with Shrink's ErrInvalid, after the step that saw it: rank 1 trains one
// epoch and closes, rank 0 wants three.
func TestElasticCannotShrinkLocalWorld(t *testing.T) {
	cfg := small()
	cfg.elastic = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	short := cfg
	short.epochs = 1
	done := make(chan error, 1)
	go func() {
		_, _, err := train(ctx, cs[1], short, nil)
		cs[1].Close()
		done <- err
	}()
	_, _, err = train(ctx, cs[0], cfg, nil)
	if e := <-done; e != nil {
		t.Fatalf("rank 1: %v", e)
	}
	if !errors.Is(err, comm.ErrInvalid) || !strings.Contains(err.Error(), "shrink") {
		t.Fatalf("err = %v, want Shrink's ErrInvalid", err)
	}
	if want := fmt.Sprintf("step %d", short.epochs*short.steps); !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want it at %s", err, want)
	}
}

// -wait-np above the world's size holds training at the first step until
// a rank joins; none can join a world in one process, so every rank gives
// up after -wait-timeout with an error that says why, and none trains a
// step on its own. (TestElasticRegrow in reliability/ runs the wait that
// ends with a restarted rank.)
func TestWaitNPGivesUp(t *testing.T) {
	cfg := small()
	cfg.elastic, cfg.regrow = true, true
	cfg.waitNP, cfg.waitFor = 3, 50*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	errs := make([]error, len(cs))
	steps := make([]int, len(cs))
	var wg sync.WaitGroup
	t0 := time.Now()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st stats
			_, st, errs[i] = train(ctx, c, cfg, nil)
			steps[i] = st.steps
		}()
	}
	wg.Wait()
	if d := time.Since(t0); d < cfg.waitFor {
		t.Errorf("gave up after %v, before -wait-timeout %v", d, cfg.waitFor)
	}
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "fewer than -wait-np 3") || !strings.Contains(err.Error(), "step 0") {
			t.Errorf("rank %d: err = %v, want the -wait-np timeout at step 0", i, err)
		}
		if steps[i] != 0 {
			t.Errorf("rank %d trained %d steps while waiting", i, steps[i])
		}
	}
}

// A global batch larger than the data set, or a batch of 0, is an error
// on every rank. Before, -batch 4096 on 4 ranks (8192 samples) panicked
// with an integer divide by zero in dataset.batch.
func TestBadBatchIsAnError(t *testing.T) {
	for _, batch := range []int{4096, 0} {
		cfg := small()
		cfg.batch = batch
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cs, err := comm.NewLocal(ctx, 4)
		if err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(cs))
		var wg sync.WaitGroup
		for i, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _, errs[i] = train(ctx, c, cfg, nil)
			}()
		}
		wg.Wait()
		for _, c := range cs {
			c.Close()
		}
		cancel()
		for i, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "batch") {
				t.Errorf("batch %d: rank %d: err = %v, want one about the batch", batch, i, err)
			}
		}
	}
}

// epochLog is train's log for TestEpochStepTimesArePerEpoch: it keeps the
// lines, and every epoch line makes the clock's tick 10 times longer.
type epochLog struct {
	lines []string
	tick  time.Duration
}

func (l *epochLog) Write(p []byte) (int, error) {
	l.lines = append(l.lines, string(p))
	if strings.HasPrefix(string(p), "epoch ") {
		l.tick *= 10
	}
	return len(p), nil
}

// Each epoch's line gives that epoch's time per step, not the average
// since the first: with a clock whose every reading is a tick later, and
// a tick 10 times longer each epoch, every epoch's figures are 10 times
// the last's (a running average gives 5.5 and 37 times the first's).
func TestEpochStepTimesArePerEpoch(t *testing.T) {
	cfg := small()
	log := &epochLog{tick: time.Microsecond}
	var at time.Time
	cfg.clock = func() time.Time {
		at = at.Add(log.tick)
		return at
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := comm.NewLocal(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer cs[0].Close()
	if _, _, err := train(ctx, cs[0], cfg, log); err != nil {
		t.Fatal(err)
	}
	var per [][3]time.Duration
	for _, l := range log.lines {
		var e int
		var loss float64
		var step, compute, cm string
		if _, err := fmt.Sscanf(l, "epoch %d  loss %f  step %s (compute %s comm %s", &e, &loss, &step, &compute, &cm); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		var d [3]time.Duration
		for i, s := range []string{step, strings.TrimSuffix(compute, ","), strings.TrimSuffix(cm, ")")} {
			if d[i], err = time.ParseDuration(s); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
		}
		per = append(per, d)
	}
	if len(per) != cfg.epochs {
		t.Fatalf("%d epoch lines, want %d:\n%s", len(per), cfg.epochs, strings.Join(log.lines, ""))
	}
	for e := 1; e < len(per); e++ {
		for i, what := range []string{"all", "compute", "comm"} {
			if per[0][i] == 0 || per[e][i] != 10*per[e-1][i] {
				t.Errorf("epoch %d: %s %v per step, want 10 × epoch %d's %v:\n%s", e, what, per[e][i], e-1, per[e-1][i], strings.Join(log.lines, ""))
			}
		}
	}
}

// Ranks that gorun --add-ranks starts (--max-np) wait in Init for a Grow,
// as restarted ranks do: -regrow must be on by default for both. With it
// off under --max-np, the added ranks waited until the job ended and then
// failed Init, and gorun exited 1 (2026-12-01, by hand).
func TestRegrowByDefault(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"GORUN_ELASTIC": "1"}, false},
		{map[string]string{"GORUN_ELASTIC": "1", "GORUN_MAX_RESTARTS": "1"}, true},
		{map[string]string{"GORUN_ELASTIC": "1", "GORUN_MAX_NP": "8"}, true},
	} {
		if got := regrowByDefault(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("regrowByDefault(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}
