package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// run is one implementation's results in one interleaved round.
type run struct {
	round int
	res   []result
}

// outcome is what one scenario measured.
type outcome struct {
	sc            scenario
	runs          map[string][]run // by implementation
	missing       []string         // implementations whose tools are not installed
	failed        []string         // "impl round r: first line of the error", in run order
	before, after placement
}

// busbw is nccl-tests' bus bandwidth in GB/s of a call of b bytes taking us
// µs: algbw times 2(n-1)/n for allreduce, 1 for broadcast; 0 for barrier.
func busbw(sc scenario, b int64, us float64) float64 {
	if us <= 0 || sc.coll == "barrier" {
		return 0
	}
	f := 1.0
	if sc.coll == "allreduce" {
		f = 2 * float64(sc.ranks-1) / float64(sc.ranks)
	}
	return float64(b) / us / 1e3 * f
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// medianUs is impl's median time at size index i, NaN if it has no run.
func (o *outcome) medianUs(impl string, i int) float64 {
	var us []float64
	for _, r := range o.runs[impl] {
		us = append(us, r.res[i].us)
	}
	return median(us)
}

// ratio is gorun's time over the best (fastest) of peers' at size index i,
// paired within each round (the interleaving exists so that a pair shares
// the machine's state) and then the median over rounds; NaN without a
// pair. Its inverse is the busbw ratio, gorun's over the best peer's.
func (o *outcome) ratio(i int, peers []string) float64 {
	best := map[int]float64{}
	for _, p := range peers {
		for _, r := range o.runs[p] {
			if b, ok := best[r.round]; !ok || r.res[i].us < b {
				best[r.round] = r.res[i].us
			}
		}
	}
	var rs []float64
	for _, r := range o.runs["gorun"] {
		if b, ok := best[r.round]; ok && b > 0 {
			rs = append(rs, r.res[i].us/b)
		}
	}
	return median(rs)
}

// peersOf is every implementation of the scenario but gorun.
func peersOf(sc scenario) []string {
	var p []string
	for _, impl := range sc.impls {
		if impl != "gorun" {
			p = append(p, impl)
		}
	}
	return p
}

// latencyBound says whether size b is reported by time rather than busbw.
func latencyBound(sc scenario, b int64) bool { return sc.coll == "barrier" || b <= 64<<10 }

// render is the scenario's section of RESULTS.md: placement, medians per
// implementation, and the paired ratio to the best peer.
func (o *outcome) render(plot string) string {
	sc := o.sc
	var w strings.Builder
	fabric := map[string]string{"shm": "same host, shared memory", "tcp": "TCP loopback"}[sc.fab]
	if sc.hosts > 0 {
		fabric = fmt.Sprintf("%d namespace hosts × %d, 2 Gbit/s links", sc.hosts, sc.ranks/sc.hosts)
	}
	fmt.Fprintf(&w, "\n## %s: %s, %d ranks, %s\n\n", sc.name, sc.coll, sc.ranks, fabric)
	fmt.Fprintf(&w, "vCPU placement (cache-line round trip CPU 0 ↔ 1): %s at the start, %s at the end.\n\n", o.before, o.after)
	fmt.Fprintf(&w, "| bytes |")
	for _, impl := range sc.impls {
		if sc.coll == "barrier" {
			fmt.Fprintf(&w, " %s µs |", impl)
		} else {
			fmt.Fprintf(&w, " %s µs | %s busbw GB/s |", impl, impl)
		}
	}
	fmt.Fprintf(&w, " gorun vs best peer |\n|---:|")
	for range sc.impls {
		if sc.coll == "barrier" {
			fmt.Fprintf(&w, "---:|")
		} else {
			fmt.Fprintf(&w, "---:|---:|")
		}
	}
	fmt.Fprintf(&w, "---|\n")
	for i, size := range sc.sizes {
		fmt.Fprintf(&w, "| %s |", human(size))
		for _, impl := range sc.impls {
			us := o.medianUs(impl, i)
			switch {
			case math.IsNaN(us) && sc.coll == "barrier":
				fmt.Fprintf(&w, " – |")
			case math.IsNaN(us):
				fmt.Fprintf(&w, " – | – |")
			case sc.coll == "barrier":
				fmt.Fprintf(&w, " %.2f |", us)
			default:
				fmt.Fprintf(&w, " %.2f | %.3g |", us, busbw(sc, size, us))
			}
		}
		fmt.Fprintf(&w, " %s |\n", ratioText(o.ratio(i, peersOf(sc)), latencyBound(sc, size)))
	}
	fmt.Fprintf(&w, "\nRuns per implementation:")
	for _, impl := range sc.impls {
		fmt.Fprintf(&w, " %s %d;", impl, len(o.runs[impl]))
	}
	fmt.Fprintf(&w, " the last column is the median over rounds of gorun's time over the round's fastest peer (time: lower is better for gorun) or its inverse (busbw: higher is better).\n")
	for _, f := range o.failed {
		fmt.Fprintf(&w, "\nFailed, left out of the medians: %s\n", f)
	}
	for _, impl := range o.missing {
		fmt.Fprintf(&w, "\n%s was not run: its tools are not installed.\n", impl)
	}
	if plot != "" {
		fmt.Fprintf(&w, "\n![%s](%s)\n", sc.name, plot)
	}
	return w.String()
}

func ratioText(timeRatio float64, latency bool) string {
	switch {
	case math.IsNaN(timeRatio):
		return "–"
	case latency:
		return fmt.Sprintf("time %.2f×", timeRatio)
	}
	return fmt.Sprintf("busbw %.2f×", 1/timeRatio)
}

func human(b int64) string {
	switch {
	case b >= 1<<20 && b%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", b>>20)
	case b >= 1<<10 && b%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", b>>10)
	case b == 0:
		return "–"
	}
	return fmt.Sprintf("%d B", b)
}
