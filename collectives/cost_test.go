package collectives

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"testing"
)

// TestCostModelShape checks the model against what the algorithms must do
// whatever the constants: latency-bound small messages favour log-step
// algorithms, the ring's bandwidth term is 2(n-1)/n·S, all ranks' work
// exceeds one rank's path at 64 ranks and more, and a world of one costs nothing.
func TestCostModelShape(t *testing.T) {
	k := Cost{Alpha: 1e-5, Beta: 1e-9, Gamma: 1e-9, Overhead: 1e-5, Turn: 1e-6}
	if a, _ := k.Best(AllReduce, 1024, 0, 8); a != RecDoubling {
		t.Errorf("8 B over 1,024 ranks: best %s, want rd", a)
	}
	if a, _ := k.Best(Broadcast, 1024, 0, 8); a != Tree {
		t.Errorf("8 B broadcast over 1,024 ranks: best %s, want tree", a)
	}
	ring := Cost{Beta: 1}.Estimate(AllReduce, Ring, 8, 1<<20).Path
	if want := 2 * 7.0 / 8 * (1 << 20); math.Abs(ring-want) > 1e-6*want {
		t.Errorf("ring bandwidth term %g, want %g", ring, want)
	}
	for _, c := range []Collective{AllReduce, Broadcast, AllGather, ReduceScatter, Barrier} {
		for _, a := range Algos(c) {
			for _, n := range []int{2, 3, 64, 1000, 4096} {
				for _, b := range []int{8, 1 << 20, 64 << 20} {
					if b > math.MaxInt/n {
						continue // n blocks of b bytes: no such buffer on a 32-bit platform
					}
					e := k.Estimate(c, a, n, b)
					if e.Path <= 0 || e.Work <= 0 || (n >= 64 && e.Work < e.Path) {
						t.Errorf("%s/%s n=%d %d B: path %g, work %g", c, a, n, b, e.Path, e.Work)
					}
				}
			}
			if e := k.Estimate(c, a, 1, 1<<20); e.Path != 0 || e.Work != 0 {
				t.Errorf("%s/%s alone: %+v", c, a, e)
			}
		}
	}
}

// TestCostPlot writes the model's predicted allreduce time against rank
// count (2 to 4,096) per algorithm at 8 B, 1 MiB and 64 MiB, for the
// provider in GORUN_COST_PLOT_PROVIDER (default shm), as plain SVG to the
// file GORUN_COST_PLOT names; skipped without it.
//
//	GORUN_COST_PLOT=$PWD/docs/cost-model.svg go test -run CostPlot ./collectives/
func TestCostPlot(t *testing.T) {
	path := os.Getenv("GORUN_COST_PLOT")
	if path == "" {
		t.Skip("set GORUN_COST_PLOT=file.svg to draw the cost model")
	}
	p := os.Getenv("GORUN_COST_PLOT_PROVIDER")
	if p == "" {
		p = "shm"
	}
	k, ok := CostOf(p)
	if !ok {
		t.Fatalf("no constants for %q", p)
	}
	var b bytes.Buffer
	sizes := []int{8, 1 << 20, 64 << 20}
	names := []string{"8 B", "1 MiB", "64 MiB"}
	colors := map[Algo]string{Ring: "#d62728", Tree: "#1f77b4", RecDoubling: "#2ca02c", HalvingDoubling: "#ff7f0e"}
	const pw, ph, ml, mt = 360, 280, 70, 50
	w, h := len(sizes)*(pw+ml+20), ph+mt+80
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="15">allreduce, predicted time by the cost model, one CPU per rank (%s: α %.2g s, λ %.2g s, β %.2g s/B, γ %.2g s/B, spill %.2g above %d MiB)</text>`+"\n",
		w/2, p, k.Alpha, k.Latency, k.Beta, k.Gamma, k.Spill, int(k.Cache)>>20)
	for i, s := range sizes {
		x0 := i*(pw+ml+20) + ml
		// y range: decades around this panel's values.
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, a := range Algos(AllReduce) {
			for n := 2; n <= 4096; n *= 2 {
				v := k.Estimate(AllReduce, a, n, s).Path
				lo, hi = min(lo, v), max(hi, v)
			}
		}
		y0, y1 := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
		if y1 == y0 {
			y1++
		}
		px := func(n float64) float64 { return float64(x0) + math.Log2(n/2)/11*pw }
		py := func(v float64) float64 { return mt + ph - (math.Log10(v)-y0)/(y1-y0)*ph }
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", x0, mt, pw, ph)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", x0+pw/2, mt-8, names[i])
		for n := 2; n <= 4096; n *= 4 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", px(float64(n)), mt+ph+15, n)
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">ranks</text>`+"\n", x0+pw/2, mt+ph+32)
		for e := y0; e <= y1; e++ {
			y := py(math.Pow(10, e))
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, x0+pw, y, y)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, secs(math.Pow(10, e)))
		}
		for _, a := range Algos(AllReduce) {
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="`, colors[a])
			for n := 2; n <= 4096; n++ {
				if n <= 64 || n&(n-1) == 0 || n%16 == 0 {
					fmt.Fprintf(&b, "%.1f,%.1f ", px(float64(n)), py(k.Estimate(AllReduce, a, n, s).Path))
				}
			}
			b.WriteString(`"/>` + "\n")
		}
	}
	for j, a := range Algos(AllReduce) {
		x := ml + j*120
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%d" y="%d">%s</text>`+"\n",
			x, x+20, h-15, h-15, colors[a], x+25, h-11, a)
	}
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// secs formats a power of ten of seconds.
func secs(v float64) string {
	switch {
	case v >= 1:
		return fmt.Sprintf("%gs", v)
	case v >= 1e-3:
		return fmt.Sprintf("%gms", v*1e3)
	case v >= 1e-6:
		return fmt.Sprintf("%gµs", v*1e6)
	}
	return fmt.Sprintf("%gns", v*1e9)
}

// TestTreeShape checks treeShape: the depth against both trees' parent
// links, the sends and reductions per piece against the double tree's
// schedules.
func TestTreeShape(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 7, 8, 64, 100} {
		depth, snd, red := treeShape(n)
		for _, tree := range []func(n, r int) (int, int, int){btree, dtree} {
			d := 0
			for r := range n {
				k := 0
				for v := r; ; k++ {
					up, _, _ := tree(n, v)
					if up < 0 {
						break
					}
					v = up
				}
				d = max(d, k)
			}
			if float64(d) != depth {
				t.Errorf("n=%d: depth %d, treeShape %g", n, d, depth)
			}
		}
		const pieces = 16 // per half, of one element each
		ms, mr := 0, 0
		for r := range n {
			s, c := 0, 0
			for _, op := range DoubleTreeAllReduce(r, n, 2*pieces, 1).Ops {
				switch op.Kind {
				case Send:
					s++
				case RecvReduce:
					c++
				}
			}
			ms, mr = max(ms, s), max(mr, c)
		}
		if float64(ms) != snd*pieces || float64(mr) != red*pieces {
			t.Errorf("n=%d: schedules send %d and reduce %d pieces, treeShape %g and %g per piece of %d", n, ms, mr, snd, red, pieces)
		}
	}
}
