package trace

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
)

// ChromeTrace is a Chrome Trace Event Format file as Merge writes it.
type ChromeTrace struct {
	TraceEvents []ChromeEvent `json:"traceEvents"`
}

// ChromeEvent is the part of an event SVG reads.
type ChromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

// ReadChrome parses a merged timeline.
func ReadChrome(r io.Reader) (*ChromeTrace, error) {
	var t ChromeTrace
	if err := json.NewDecoder(r).Decode(&t); err != nil {
		return nil, fmt.Errorf("not a Chrome trace: %w", err)
	}
	return &t, nil
}

// collColor is the fill of each collective; others (user spans) are grey,
// ddp buckets blue.
var collColor = map[string]string{
	"allreduce": "#e4572e", "broadcast": "#29335c", "allgather": "#f3a712", "reducescatter": "#a8c686",
	"reduce": "#669bbc", "gather": "#8e6c8a", "scatter": "#c17c74", "alltoall": "#6a994e",
	"barrier": "#555555", "send": "#bc4749", "recv": "#386641",
}

// spanColors fill user spans (compute), by their names' sorted order.
var spanColors = []string{"#8fbf6f", "#d9c38f", "#7fb7be", "#bbbbbb", "#c9a0dc", "#e0a3a3"}

const (
	svgWidth  = 1200
	svgLeft   = 150 // room for row labels
	svgRight  = 20
	rowHeight = 16
	rowGap    = 3
	rankGap   = 12
)

// SVG draws t as a Gantt chart: a band per rank, a row per thread (the
// communicators' collectives, coloured by kind, with their wait for the
// first peer message hatched; ddp buckets; user spans such as compute),
// and a time axis. from and to (µs from the start) select a window: from
// ≤ 0 is the start, to ≤ 0 the end, as gorun trace's -from and -to.
func SVG(w io.Writer, t *ChromeTrace, from, to float64) error {
	if to > 0 && to <= from {
		return fmt.Errorf("the window ends (%v µs) before it starts (%v µs)", to, from)
	}
	procs := map[int]string{}
	threads := map[[2]int]string{}
	var spans []ChromeEvent
	lo, hi := math.Inf(1), math.Inf(-1)
	userColor := map[string]string{} // user spans' fills, from the whole trace
	for _, e := range t.TraceEvents {
		if e.Ph == "X" && e.Cat != "collective" && !strings.HasPrefix(e.Name, "bucket") {
			userColor[e.Name] = ""
		}
		switch e.Ph {
		case "M":
			name, _ := e.Args["name"].(string)
			switch e.Name {
			case "process_name":
				procs[e.PID] = name
			case "thread_name":
				threads[[2]int{e.PID, e.TID}] = name
			}
		case "X":
			if e.TS+e.Dur < from || to > 0 && e.TS > to {
				continue
			}
			spans = append(spans, e)
			lo, hi = math.Min(lo, e.TS), math.Max(hi, e.TS+e.Dur)
		}
	}
	if len(spans) == 0 {
		return fmt.Errorf("no spans to draw")
	}
	// A user span's colour follows its name's place among all of them, so
	// that every window of one trace colours "backward" alike.
	userNames := make([]string, 0, len(userColor))
	for n := range userColor {
		userNames = append(userNames, n)
	}
	sort.Strings(userNames)
	for i, n := range userNames {
		userColor[n] = spanColors[i%len(spanColors)]
	}
	if from > 0 {
		lo = from
	}
	if to > 0 {
		hi = to
	}
	if hi <= lo {
		hi = lo + 1
	}
	// Rows: ranks in order, within a rank the threads that have spans.
	used := map[[2]int]bool{}
	for _, e := range spans {
		used[[2]int{e.PID, e.TID}] = true
	}
	var keys [][2]int
	for k := range used {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	rowY := map[[2]int]float64{}
	var b strings.Builder
	y := 40.0
	prev := -1
	var labels strings.Builder
	for _, k := range keys {
		if k[0] != prev {
			if prev >= 0 {
				y += rankGap
			}
			name := procs[k[0]]
			if name == "" {
				name = fmt.Sprintf("rank %d", k[0])
			}
			fmt.Fprintf(&labels, `<text x="4" y="%.0f" font-weight="bold">%s</text>`+"\n", y+11, html.EscapeString(name))
			y += rowHeight
			prev = k[0]
		}
		rowY[k] = y
		th := threads[k]
		if th == "" {
			th = fmt.Sprintf("thread %d", k[1])
		}
		fmt.Fprintf(&labels, `<text x="14" y="%.0f">%s</text>`+"\n", y+12, html.EscapeString(th))
		fmt.Fprintf(&labels, `<rect x="%d" y="%.0f" width="%d" height="%d" fill="#f4f4f4"/>`+"\n", svgLeft, y, svgWidth-svgLeft-svgRight, rowHeight)
		y += rowHeight + rowGap
	}
	height := y + 50
	scale := float64(svgWidth-svgLeft-svgRight) / (hi - lo)
	x := func(ts float64) float64 { return svgLeft + (math.Max(lo, math.Min(hi, ts))-lo)*scale }
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", svgWidth, height)
	b.WriteString(`<defs><pattern id="wait" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="2" height="4" fill="#ffffff" opacity="0.6"/></pattern></defs>` + "\n")
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	fmt.Fprintf(&b, `<text x="4" y="16" font-size="13" font-weight="bold">gorun timeline: %s</text>`+"\n", html.EscapeString(fmtUS(hi-lo)))
	b.WriteString(labels.String())
	// Spans: parents before children (sorted by start, then longest first).
	sort.SliceStable(spans, func(i, j int) bool {
		if spans[i].TS != spans[j].TS {
			return spans[i].TS < spans[j].TS
		}
		return spans[i].Dur > spans[j].Dur
	})
	kinds := map[string]string{} // legend: name -> fill
	for _, e := range spans {
		ry := rowY[[2]int{e.PID, e.TID}]
		x0, x1 := x(e.TS), x(e.TS+e.Dur)
		wd := math.Max(x1-x0, 0.5)
		title := fmt.Sprintf("%s %s", e.Name, fmtUS(e.Dur))
		if s, ok := e.Args["seq"]; ok {
			title = fmt.Sprintf("%s #%v %v, %v bytes: %s (wait %.1f µs, reduce %.1f µs)", e.Name, s, e.Args["algo"], e.Args["bytes"], fmtUS(e.Dur), e.Args["wait_us"], e.Args["reduce_us"])
		}
		switch {
		case e.Name == "wait" && e.Cat == "collective":
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%d" fill="url(#wait)"><title>waiting for the first peer message: %s</title></rect>`+"\n", x0, ry, wd, rowHeight, fmtUS(e.Dur))
		case e.Name == "transfer" && e.Cat == "collective":
			// drawn by its parent
		case e.Cat == "collective":
			c := collColor[e.Name]
			if c == "" {
				c = "#999999"
			}
			kinds[e.Name] = c
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%d" fill="%s"><title>%s</title></rect>`+"\n", x0, ry, wd, rowHeight, c, html.EscapeString(title))
		case strings.HasPrefix(e.Name, "bucket"):
			kinds["ddp bucket"] = "#3a86ff"
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%d" fill="#3a86ff" opacity="0.8"><title>%s</title></rect>`+"\n", x0, ry+2, wd, rowHeight-4, html.EscapeString(title))
		default:
			c := userColor[e.Name]
			kinds[e.Name] = c
			fmt.Fprintf(&b, `<rect x="%.2f" y="%.0f" width="%.2f" height="%d" fill="%s" stroke="#777777" stroke-width="0.5"><title>%s</title></rect>`+"\n", x0, ry+1, wd, rowHeight-2, c, html.EscapeString(title))
		}
	}
	// Axis.
	ay := y + 8
	fmt.Fprintf(&b, `<line x1="%d" y1="%.0f" x2="%d" y2="%.0f" stroke="black"/>`+"\n", svgLeft, ay, svgWidth-svgRight, ay)
	step := niceStep((hi - lo) / 8)
	for tk := math.Ceil(lo/step) * step; tk <= hi; tk += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="black"/>`+"\n", x(tk), ay, x(tk), ay+4)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", x(tk), ay+16, fmtUS(tk-lo))
	}
	// Legend.
	names := make([]string, 0, len(kinds))
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	lx := float64(svgLeft)
	for _, n := range names {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="%s"/><text x="%.0f" y="%.0f">%s</text>`+"\n", lx, ay+26, kinds[n], lx+14, ay+35, html.EscapeString(n))
		lx += 24 + 7*float64(len(n))
	}
	fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="10" height="10" fill="#e4572e"/><rect x="%.0f" y="%.0f" width="10" height="10" fill="url(#wait)"/><text x="%.0f" y="%.0f">wait for first peer message</text>`+"\n", lx, ay+26, lx, ay+26, lx+14, ay+35)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if raw <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func fmtUS(us float64) string {
	switch {
	case us >= 1e6:
		return fmt.Sprintf("%.3g s", us/1e6)
	case us >= 1e3:
		return fmt.Sprintf("%.3g ms", us/1e3)
	}
	return fmt.Sprintf("%.3g µs", us)
}
