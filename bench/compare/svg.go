package main

// The plots are plain SVG written with the standard library rather than
// drawn with a plotting library (gonum.org/v1/plot would bring a font
// stack and a dozen modules into go.mod): the project keeps its
// dependencies to the standard library, x/sys, x/sync, memberlist and cpuid,
// and two log-log panels of a few polylines are a hundred lines of XML.

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strings"
)

type point struct{ x, y float64 }

// series is one implementation's line in a panel.
type series struct {
	name string
	pts  []point
}

// panel is one log-log chart; all panels of a plot share the x axis.
type panel struct {
	ylabel string
	series []series
}

var colors = map[string]string{"gorun": "#d62728", "openmpi": "#1f77b4", "openmpi-spin": "#17becf", "mpich": "#2ca02c", "gloo": "#ff7f0e"}

const (
	panelW, panelH           = 440, 300
	marginL, marginR         = 70, 20
	marginT, marginB, legend = 50, 50, 30
)

// writePlot writes panels side by side under title, x in bytes (log2
// axis), y on log10 axes; points that are not positive are left out.
func writePlot(w io.Writer, title string, panels []panel) error {
	var xs []float64
	for _, p := range panels {
		for _, s := range p.series {
			for _, pt := range s.pts {
				if pt.x > 0 && pt.y > 0 {
					xs = append(xs, pt.x)
				}
			}
		}
	}
	x0, x1 := logRange(xs, 2)
	width := len(panels) * (marginL + panelW + marginR)
	height := marginT + panelH + marginB + legend
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="20" text-anchor="middle" font-size="15">%s</text>`+"\n", width/2, esc(title))
	names := []string{}
	seen := map[string]bool{}
	for k, p := range panels {
		ox := k*(marginL+panelW+marginR) + marginL
		var ys []float64
		for _, s := range p.series {
			for _, pt := range s.pts {
				if pt.x > 0 && pt.y > 0 {
					ys = append(ys, pt.y)
				}
			}
			if !seen[s.name] {
				seen[s.name] = true
				names = append(names, s.name)
			}
		}
		y0, y1 := logRange(ys, 10)
		px := func(x float64) float64 {
			return float64(ox) + (math.Log2(x)-math.Log2(x0))/(math.Log2(x1)-math.Log2(x0))*panelW
		}
		py := func(y float64) float64 {
			return float64(marginT+panelH) - (math.Log10(y)-math.Log10(y0))/(math.Log10(y1)-math.Log10(y0))*panelH
		}
		fmt.Fprintf(&b, `<g class="panel"><rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", ox, marginT, panelW, panelH)
		step := math.Exp2(math.Max(1, math.Ceil(math.Log2(x1/x0)/8))) // at most 9 ticks
		for e := math.Log2(x0); e <= math.Log2(x1)+1e-9; e += math.Log2(step) {
			x := math.Exp2(math.Round(e))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(x), marginT, px(x), marginT+panelH, px(x), marginT+panelH+16, esc(human(int64(x))))
		}
		for e := math.Round(math.Log10(y0)); e <= math.Log10(y1)+1e-9; e++ {
			y := math.Pow10(int(e))
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", ox, py(y), ox+panelW, py(y), ox-4, py(y)+4, esc(fmt.Sprintf("%g", y)))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">bytes</text>`+"\n", ox+panelW/2, marginT+panelH+34)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle" transform="rotate(-90 %d %d)">%s</text>`+"\n", ox-50, marginT+panelH/2, ox-50, marginT+panelH/2, esc(p.ylabel))
		for _, s := range p.series {
			var pts []string
			for _, pt := range s.pts {
				if pt.x > 0 && pt.y > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(pt.x), py(pt.y)))
				}
			}
			if len(pts) == 0 {
				continue
			}
			c := color(s.name)
			fmt.Fprintf(&b, `<g class="series" data-name="%s"><polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`, esc(s.name), c, strings.Join(pts, " "))
			for _, p := range pts {
				x, y, _ := strings.Cut(p, ",")
				fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, x, y, c)
			}
			fmt.Fprintf(&b, "</g>\n")
		}
		fmt.Fprintf(&b, "</g>\n")
	}
	for i, n := range names {
		x, y := marginL+i*130, height-12
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, y-4, color(n), x+18, y, esc(n))
	}
	fmt.Fprintf(&b, "</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// logRange is the smallest power-of-base interval holding v, at least one
// step wide; [1, base] when v is empty.
func logRange(v []float64, base float64) (lo, hi float64) {
	if len(v) == 0 {
		return 1, base
	}
	lo, hi = v[0], v[0]
	for _, x := range v {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	l := math.Log(base)
	lo = math.Pow(base, math.Floor(math.Log(lo)/l+1e-9))
	hi = math.Pow(base, math.Ceil(math.Log(hi)/l-1e-9))
	if hi <= lo {
		hi = lo * base
	}
	return lo, hi
}

func color(name string) string {
	if c, ok := colors[name]; ok {
		return c
	}
	return "#7f7f7f"
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// plotPanels is a scenario's two panels, time and busbw against size, one
// series per implementation of medians over rounds.
func (o *outcome) plotPanels() []panel {
	t := panel{ylabel: "time per call (µs)"}
	bw := panel{ylabel: "busbw (GB/s)"}
	for _, impl := range o.sc.impls {
		st, sb := series{name: impl}, series{name: impl}
		for i, size := range o.sc.sizes {
			us := o.medianUs(impl, i)
			if math.IsNaN(us) {
				continue
			}
			st.pts = append(st.pts, point{float64(size), us})
			sb.pts = append(sb.pts, point{float64(size), busbw(o.sc, size, us)})
		}
		t.series = append(t.series, st)
		bw.series = append(bw.series, sb)
	}
	return []panel{t, bw}
}
