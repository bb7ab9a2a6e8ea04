package comm

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
	"github.com/gorun-hpc/gorun/internal/engine"
)

// TestCostFit measures the points the cost model (collectives/cost.go) is
// fitted on and checked against for mem, all ranks in this process: 2
// ranks (the fit set: a broadcast of 8 B to 4 MiB, an allreduce by
// recursive doubling of 256 KiB to 4 MiB), then allreduce (4 algorithms)
// and broadcast (2) at 2–64 ranks, 8 B to 16 MiB (16 MiB up to 8 ranks),
// and allgather and reduce-scatter (2 each) in blocks of 8 B to 1 MiB (1
// MiB up to 8 ranks); GORUN_COST_COLLS=allgather,reducescatter measures
// only those (without the fit set, which needs allreduce and broadcast),
// and GORUN_COST_RANKS and GORUN_COST_SIZES (counts separated by commas)
// replace the rank counts and sizes (beyond 64 ranks: the README's
// points at 128 and 256), and GORUN_COST_ALGOS (names separated by
// commas) measures only those algorithms' check points, without the fit
// set: to measure one algorithm again after a change to it.
// shm's and tcp's points are measured under the launcher, a process per
// rank, as jobs run them (below); it measured them in one process too
// until 2026-11-28, where ranks wait as goroutines. Every point is
// measured in each of GORUN_COST_ROUNDS passes over the whole set
// (default 3), and each pass keeps the fastest of its batches, so that a
// burst of other load spoils one pass of a point, not the point. The
// points go to the CSV file GORUN_COST_CSV names (one row per pass);
// collectives' TestCostPoints fits the constants from it and prints the
// error. Each row also records the vCPU placement probe (placementNs)
// before and after the point: the host moves this machine's two vCPUs
// between a near and a far placement on its own, which changes a point
// 1.5-3x, so TestCostPoints fits and checks the points of one placement.
// cost.go's constants for mem come from these points; its shm and tcp
// constants from the same grid measured under the launcher
// (scripts/cluster/costpoints.sh -local, collectives'
// TestCostPointsLaunch). This test logs each point's fastest pass
// against the prediction of the constants in cost.go. It is a
// measurement, not a timed test: it fails only if a collective fails, and
// is skipped unless GORUN_COST_FIT is set. 5 passes took 8 minutes on
// this 2-core machine for allreduce and broadcast, 3.3 for allgather and
// reduce-scatter.
//
//	GORUN_COST_FIT=1 GORUN_COST_CSV=$PWD/collectives/cost_points.csv go test -run CostFit -v -timeout 60m ./comm/
func TestCostFit(t *testing.T) {
	if os.Getenv("GORUN_COST_FIT") == "" {
		t.Skip("set GORUN_COST_FIT=1 to measure the cost model's points")
	}
	rounds := 3
	if s := os.Getenv("GORUN_COST_ROUNDS"); s != "" {
		if _, err := fmt.Sscan(s, &rounds); err != nil || rounds < 1 {
			t.Fatalf("GORUN_COST_ROUNDS=%q: want a count", s)
		}
	}
	var csv *os.File
	if path := os.Getenv("GORUN_COST_CSV"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := f.Close(); err != nil {
				t.Error(err)
			}
		}()
		fmt.Fprintln(f, "set,round,provider,collective,algo,ranks,bytes,window,calls,min_s,median_s,p90_p10,rtt_before_ns,rtt_after_ns")
		csv = f
	}
	type point struct {
		set   string
		p     string
		c     collectives.Collective
		a     collectives.Algo
		n, b  int
		win   int // the staging window (costTime.window)
		fast  float64
		worst float64 // the slowest pass's fastest batch
	}
	var pts []*point
	add := func(set, p string, c collectives.Collective, a collectives.Algo, n, b int) {
		pts = append(pts, &point{set: set, p: p, c: c, a: a, n: n, b: b, fast: math.Inf(1)})
	}
	ar, bc := collectives.AllReduce, collectives.Broadcast
	ag, rs := collectives.AllGather, collectives.ReduceScatter
	colls := []collectives.Collective{ar, bc, ag, rs}
	if s := os.Getenv("GORUN_COST_COLLS"); s != "" {
		colls = nil
		for f := range strings.SplitSeq(s, ",") {
			c, err := collectives.ParseCollective(f)
			if err != nil || !slices.Contains([]collectives.Collective{ar, bc, ag, rs}, c) {
				t.Fatalf("GORUN_COST_COLLS=%q: want allreduce, broadcast, allgather or reducescatter", s)
			}
			colls = append(colls, c)
		}
	}
	var algos []collectives.Algo // nil: all
	if s := os.Getenv("GORUN_COST_ALGOS"); s != "" {
		for f := range strings.SplitSeq(s, ",") {
			a, err := collectives.ParseAlgo(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("GORUN_COST_ALGOS=%q: %v", s, err)
			}
			algos = append(algos, a)
		}
	}
	if algos == nil && slices.Contains(colls, ar) && slices.Contains(colls, bc) {
		for _, s := range []int{8, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20} {
			add("fit", "mem", bc, collectives.Tree, 2, s)
		}
		for _, s := range []int{256 << 10, 1 << 20, 4 << 20} {
			add("fit", "mem", ar, collectives.RecDoubling, 2, s)
		}
	}
	// The powers of two are the check; the rank counts between them
	// train what ranks sharing CPUs cost (collectives' TestCostPoints).
	// Allgather and reduce-scatter take one rank's block: n of them make
	// a rank's buffer, so their largest block is 64 KiB from 12 ranks
	// on (64 ranks' buffers of 4 MiB) and 1 MiB to 8.
	sizes := envInts(t, "GORUN_COST_SIZES", []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20})
	ranks := envInts(t, "GORUN_COST_RANKS", []int{2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64})
	for _, n := range ranks {
		for _, b := range sizes {
			for _, c := range colls {
				switch {
				case b > 1<<20 && n > 8:
					continue // seconds per call, and nothing a smaller size does not show
				case (c == ag || c == rs) && (b > 1<<20 || b > 64<<10 && n > 8):
					continue
				}
				for _, a := range collectives.Algos(c) {
					if algos != nil && !slices.Contains(algos, a) {
						continue
					}
					add("check", "mem", c, a, n, b)
				}
			}
		}
	}
	for r := range rounds {
		for _, q := range pts {
			before := placementNs()
			m := measure(t, q.p, q.c, q.a, q.n, q.b)
			after := placementNs()
			q.fast = min(q.fast, m.fastest)
			q.worst = max(q.worst, m.fastest)
			q.win = m.window
			if csv != nil {
				fmt.Fprintf(csv, "%s,%d,%s,%s,%s,%d,%d,%d,%d,%.4g,%.4g,%.3g,%.0f,%.0f\n",
					q.set, r, q.p, q.c, q.a, q.n, q.b, m.window, m.calls, m.fastest, m.median, m.spread, before, after)
			}
		}
	}
	cpus := runtime.GOMAXPROCS(0)
	t.Logf("%-5s %-4s %-10s %-5s %5s %8s | %10s %6s %10s %7s", "set", "prov", "coll", "algo", "ranks", "bytes", "measured", "passes", "cost.go", "error")
	for _, q := range pts {
		k, _ := collectives.CostOf(q.p)
		pred := k.EstimateWindow(q.c, q.a, q.n, q.b, q.win).Time(q.n, cpus)
		t.Logf("%-5s %-4s %-10s %-5s %5d %8d | %10s %5.2fx %10s %+6.0f%%", q.set, q.p, q.c, q.a, q.n, q.b,
			dur(q.fast), q.worst/q.fast, dur(pred), 100*(pred-q.fast)/q.fast)
	}
}

// envInts returns the comma-separated counts in the environment variable
// name, or def if it is unset.
func envInts(t *testing.T, name string, def []int) []int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	var vs []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			t.Fatalf("%s=%q: want counts separated by commas", name, s)
		}
		vs = append(vs, v)
	}
	return vs
}

func dur(s float64) string { return time.Duration(s * 1e9).Round(100 * time.Nanosecond).String() }

// costTime is one measured point: the seconds per call of the fastest
// batch and of the median one, the batches' p90/p10, the calls per
// batch, and the bytes a link's staging holds (engine.Window), which
// bounds the schedules' pieces.
type costTime struct {
	fastest, median, spread float64
	calls, window           int
}

// measure runs c with algorithm a over n ranks in this process on
// provider p, bytes as collectives.Select takes them, in 4 batches after
// one that warms up. The fastest batch, not the median, is the figure:
// this machine is shared, and other processes' load only ever adds time.
func measure(t *testing.T, p string, c collectives.Collective, a collectives.Algo, n, bytes int) costTime {
	t.Helper()
	// NewLocal, not newLocal: its cleanup would keep every point's
	// communicators, and their staging, until the test ends (the whole
	// grid's took 24 GB and the kernel's OOM killer ended the test).
	ictx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cs, err := NewLocal(ictx, n, WithTransport(p), WithAlgorithm(fmt.Sprintf("%s:%s", c, a)))
	cancel()
	if err != nil {
		t.Fatalf("NewLocal(%d): %v", n, err)
	}
	defer func() {
		for _, c := range cs {
			c.Close()
		}
	}()
	ctx := testCtx(t)
	count := max(bytes/4, 2)
	bufs := make([][]float32, n)
	for i := range bufs {
		switch c {
		case collectives.AllGather, collectives.ReduceScatter:
			bufs[i] = make([]float32, count*(n+1))
		default:
			bufs[i] = make([]float32, count)
		}
	}
	body := func(cm *Comm) error {
		b := bufs[cm.Rank()]
		switch c {
		case collectives.AllReduce:
			return AllReduce(ctx, cm, b, b, Sum)
		case collectives.Broadcast:
			return Broadcast(ctx, cm, b, 0)
		case collectives.AllGather:
			return AllGather(ctx, cm, b[:count], b[count:])
		case collectives.ReduceScatter:
			return ReduceScatter(ctx, cm, b[count:], b[:count], Sum)
		}
		return fmt.Errorf("measure: %s not measured", c)
	}
	// Calls per batch: about 20 ms of predicted work, at least 3.
	k, _ := collectives.CostOf(p)
	per := k.Estimate(c, a, n, bytes).Time(n, runtime.GOMAXPROCS(0))
	calls := max(3, min(200, int(0.02/max(per, 1e-7))))
	batches := 4
	times := make([]float64, 0, batches+1)
	for b := range batches + 1 {
		var wg sync.WaitGroup
		errs := make([]error, n)
		start := time.Now()
		for i, cm := range cs {
			wg.Go(func() {
				for range calls {
					if err := body(cm); err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start).Seconds() / float64(calls)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s %s/%s %d ranks %d B: rank %d: %v", p, c, a, n, bytes, r, err)
			}
		}
		if b > 0 { // the first batch warms up: connections, registration
			times = append(times, el)
		}
	}
	slices.Sort(times)
	return costTime{fastest: times[0], median: times[len(times)/2], spread: times[len(times)*9/10] / times[len(times)/10],
		calls: calls, window: engine.Window(stagingFor(cs[0].cfg, n))}
}
