package comm

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/collectives"
)

// TestCostFit fits the cost model's constants (collectives/cost.go) per
// provider from 2 ranks in this process, then checks the model's
// predictions against measured times at 2–64 ranks (mem; shm and tcp at 2
// and 4) and prints the error. It is a measurement, not a timed test: it
// fails only if a collective fails, and is skipped unless GORUN_COST_FIT
// is set (GORUN_COST_FIT=fit only fits).
//
//	GORUN_COST_FIT=1 go test -run CostFit -v -timeout 20m ./comm/
func TestCostFit(t *testing.T) {
	mode := os.Getenv("GORUN_COST_FIT")
	if mode == "" {
		t.Skip("set GORUN_COST_FIT=1 to fit and check the cost model")
	}
	fitted := map[string]collectives.Cost{}
	for _, p := range []string{"mem", "shm", "tcp"} {
		k, spread := fitCost(t, p)
		fitted[p] = k
		t.Logf("%s: Alpha %.3g s, Beta %.3g s/B (%.2f GB/s), Gamma %.3g s/B (%.2f GB/s); spread of the points (p90/p10) up to %.2f",
			p, k.Alpha, k.Beta, 1e-9/k.Beta, k.Gamma, 1e-9/k.Gamma, spread)
	}
	if mode == "fit" {
		return
	}
	cpus := runtime.GOMAXPROCS(0)
	t.Logf("%-4s %-10s %-5s %5s %8s | %10s %10s %7s", "prov", "coll", "algo", "ranks", "bytes", "measured", "predicted", "error")
	var errs []float64
	check := func(p string, c collectives.Collective, a collectives.Algo, n, bytes int) {
		k := fitted[p]
		m, _ := measure(t, p, c, a, n, bytes)
		pred := k.Estimate(c, a, n, bytes).Time(n, cpus)
		e := (pred - m) / m
		errs = append(errs, math.Abs(e))
		t.Logf("%-4s %-10s %-5s %5d %8d | %10s %10s %+6.0f%%", p, c, a, n, bytes, dur(m), dur(pred), 100*e)
	}
	sizes := []int{8, 64 << 10, 1 << 20}
	for _, n := range []int{2, 4, 8, 16, 32, 64} {
		for _, b := range sizes {
			for _, a := range collectives.Algos(collectives.AllReduce) {
				check("mem", collectives.AllReduce, a, n, b)
			}
			for _, a := range collectives.Algos(collectives.Broadcast) {
				check("mem", collectives.Broadcast, a, n, b)
			}
		}
	}
	for _, p := range []string{"shm", "tcp"} {
		for _, n := range []int{2, 4} {
			for _, b := range sizes {
				for _, a := range collectives.Algos(collectives.AllReduce) {
					check(p, collectives.AllReduce, a, n, b)
				}
			}
		}
	}
	slices.Sort(errs)
	t.Logf("prediction error over %d points: median %.0f%%, p90 %.0f%%, max %.0f%%; within 30%%: %d",
		len(errs), 100*errs[len(errs)/2], 100*errs[len(errs)*9/10], 100*errs[len(errs)-1], countBelow(errs, 0.3))
}

func countBelow(xs []float64, v float64) int {
	k := 0
	for _, x := range xs {
		if x <= v {
			k++
		}
	}
	return k
}

func dur(s float64) string { return time.Duration(s * 1e9).Round(100 * time.Nanosecond).String() }

// fitCost fits provider p's constants from 2 ranks: α and β by least
// squares on a broadcast (one message of S bytes, in pieces), γ from an
// allreduce by recursive doubling (one exchange and one reduction of S
// bytes) less its message. It returns the constants and the largest
// p90/p10 ratio of the measured points.
func fitCost(t *testing.T, p string) (collectives.Cost, float64) {
	sizes := []int{8, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20}
	var xs, qs, ys []float64
	spread := 1.0
	for _, s := range sizes {
		m, sp := measure(t, p, collectives.Broadcast, collectives.Tree, 2, s)
		xs = append(xs, float64(s))
		qs = append(qs, math.Max(1, math.Ceil(float64(s)/float64(collectives.ChunkBytes(collectives.Tree, 2, s)))))
		ys = append(ys, m)
		spread = max(spread, sp)
	}
	// Least squares of y = α·q + β·x, weighted by 1/y so that the small
	// sizes count as much as the large ones (relative error).
	var sqq, sqx, sxx, sqy, sxy float64
	for i := range xs {
		w := 1 / (ys[i] * ys[i])
		sqq += w * qs[i] * qs[i]
		sqx += w * qs[i] * xs[i]
		sxx += w * xs[i] * xs[i]
		sqy += w * qs[i] * ys[i]
		sxy += w * xs[i] * ys[i]
	}
	det := sqq*sxx - sqx*sqx
	k := collectives.Cost{Alpha: (sqy*sxx - sxy*sqx) / det, Beta: (sqq*sxy - sqx*sqy) / det}
	var gs []float64
	for _, s := range []int{256 << 10, 1 << 20, 4 << 20} {
		m, sp := measure(t, p, collectives.AllReduce, collectives.RecDoubling, 2, s)
		spread = max(spread, sp)
		q := math.Max(1, math.Ceil(float64(s)/float64(collectives.ChunkBytes(collectives.RecDoubling, 2, s))))
		gs = append(gs, (m-k.Alpha*q-k.Beta*float64(s))/float64(s))
	}
	slices.Sort(gs)
	k.Gamma = max(gs[len(gs)/2], 0)
	return k, spread
}

// measure runs c with algorithm a over n ranks in this process on
// provider p, bytes as collectives.Select takes them, and returns the
// seconds per call of the fastest batch, and the batches' p90/p10. The
// fastest, not the median: this machine is shared, and other processes'
// load only ever adds time.
func measure(t *testing.T, p string, c collectives.Collective, a collectives.Algo, n, bytes int) (float64, float64) {
	t.Helper()
	cs := newLocal(t, n, WithTransport(p), WithAlgorithm(fmt.Sprintf("%s:%s", c, a)))
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
		case collectives.AllGather:
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
		}
		return fmt.Errorf("measure: %s not measured", c)
	}
	// Calls per batch: about 20 ms of predicted work, at least 3.
	k, _ := collectives.CostOf(p)
	per := k.Estimate(c, a, n, bytes).Time(n, runtime.GOMAXPROCS(0))
	calls := max(3, min(200, int(0.02/max(per, 1e-7))))
	batches := 7
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
	return times[0], times[len(times)*9/10] / times[len(times)/10]
}
