package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"testing"
)

// fakeOutcome has gorun and two peers over three sizes in two rounds.
func fakeOutcome() *outcome {
	sc := scenario{name: "shm2", coll: "allreduce", ranks: 2, fab: "shm", sizes: []int64{8, 1 << 20, 16 << 20}, impls: []string{"gorun", "openmpi", "mpich"}}
	res := func(us ...float64) []result {
		var r []result
		for i, u := range us {
			r = append(r, result{bytes: sc.sizes[i], us: u})
		}
		return r
	}
	return &outcome{sc: sc, runs: map[string][]run{
		"gorun":   {{0, res(10, 100, 1000)}, {1, res(30, 100, 1000)}},
		"openmpi": {{0, res(5, 200, 2000)}, {1, res(10, 300, 2000)}},
		"mpich":   {{1, res(5, 400, 500)}}, // missed round 0
	}}
}

func TestRatioPairsWithinRounds(t *testing.T) {
	o := fakeOutcome()
	// 8 B: round 0 10/5 = 2, round 1 30/min(10,5) = 6; median 4.
	if r := o.ratio(0, []string{"openmpi", "mpich"}); r != 4 {
		t.Errorf("8 B ratio %v, want 4", r)
	}
	// Open MPI alone: 10/5 = 2, 30/10 = 3.
	if r := o.ratio(0, []string{"openmpi"}); r != 2.5 {
		t.Errorf("8 B ratio to openmpi %v, want 2.5", r)
	}
	if r := o.ratio(0, []string{"gloo"}); !math.IsNaN(r) {
		t.Errorf("ratio without peer runs %v, want NaN", r)
	}
	if m := o.medianUs("gorun", 0); m != 20 {
		t.Errorf("median %v, want 20", m)
	}
	if bw := busbw(o.sc, 1<<20, 100); math.Abs(bw-10.48576) > 1e-9 {
		t.Errorf("busbw %v", bw)
	}
}

func TestJudge(t *testing.T) {
	outs := map[string]*outcome{"shm2": fakeOutcome()}
	ts := []target{
		{"shm2", 8, false, mpis, 1.5},        // 4x: missed
		{"shm2", 8, false, mpis, 5},          // met
		{"shm2", 1 << 20, true, mpis, 1.2},   // busbw: 1/median(100/200, 100/300) = 2.4: met
		{"shm2", 16 << 20, true, mpis, 1.2},  // 2000/1000, 500/1000 -> 1/median(0.5, 2) = 0.8: missed
		{"shm2", 256 << 20, true, mpis, 1.2}, // size not run
		{"tcp2", 8, false, openMPI, 1.5},     // scenario not run
	}
	vs := judge(outs, ts)
	want := []struct {
		ratio float64
		met   bool
	}{{4, false}, {4, true}, {2.4, true}, {0.8, false}}
	for i, w := range want {
		if math.Abs(vs[i].ratio-w.ratio) > 1e-9 || vs[i].met() != w.met {
			t.Errorf("%s: ratio %v met %v, want %v %v", vs[i].target, vs[i].ratio, vs[i].met(), w.ratio, w.met)
		}
	}
	for _, v := range vs[4:] {
		if !math.IsNaN(v.ratio) {
			t.Errorf("%s: ratio %v for a run that did not happen", v.target, v.ratio)
		}
	}
	table := renderTargets(vs)
	if rows := strings.Count(table, "\n| shm2"); rows != 4 {
		t.Errorf("%d rows, want 4:\n%s", rows, table)
	}
	if strings.Count(table, "| met |") != 2 || strings.Count(table, "**missed**") != 2 {
		t.Errorf("verdicts:\n%s", table)
	}
	if !strings.Contains(table, "| shm2 8 B time ≤ 1.5× best of openmpi, mpich | 4.00× | **missed** |") {
		t.Errorf("row text:\n%s", table)
	}
	if renderTargets(judge(nil, ts)) != "No target's scenario ran.\n" {
		t.Error("an empty run printed targets")
	}
}

// TestTargetsNameScenarios keeps the targets in step with the scenarios.
func TestTargetsNameScenarios(t *testing.T) {
	for _, tg := range targets {
		i := slices.IndexFunc(allScenarios(), func(sc scenario) bool { return sc.name == tg.scen })
		if i < 0 || !slices.Contains(allScenarios()[i].sizes, tg.bytes) {
			t.Errorf("target %s names no scenario size", tg)
			continue
		}
		for _, p := range tg.peers {
			if !slices.Contains(allScenarios()[i].impls, p) {
				t.Errorf("target %s: %s does not run in %s", tg, p, tg.scen)
			}
		}
	}
}

func TestPlotIsWellFormedSVG(t *testing.T) {
	o := fakeOutcome()
	var b bytes.Buffer
	if err := writePlot(&b, "shm2 <&> \"title\"", o.plotPanels()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "9999") || !strings.Contains(b.String(), ">0.001<") || !strings.Contains(b.String(), ">16 MiB<") {
		t.Errorf("tick labels are not round powers:\n%s", b.String())
	}
	series := map[string]int{}
	polylines, circles := 0, 0
	d := xml.NewDecoder(&b)
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "g":
				for _, a := range se.Attr {
					if a.Name.Local == "data-name" {
						series[a.Value]++
					}
				}
			case "polyline":
				polylines++
			case "circle":
				circles++
				for _, a := range se.Attr {
					var v float64
					if (a.Name.Local == "cx" || a.Name.Local == "cy") && (scanFloat(a.Value, &v) != nil || v < 0 || v > 1200) {
						t.Errorf("circle %s=%q outside the picture", a.Name.Local, a.Value)
					}
				}
			}
		}
	}
	for _, impl := range o.sc.impls {
		if series[impl] != 2 { // one per panel
			t.Errorf("series %s drawn %d times, want 2", impl, series[impl])
		}
	}
	// 3+3+3 points per panel (mpich has a median at every size from its one run).
	if polylines != 6 || circles != 18 {
		t.Errorf("%d polylines, %d circles; want 6, 18", polylines, circles)
	}
}

func TestPlotWithoutPoints(t *testing.T) {
	var b bytes.Buffer
	if err := writePlot(&b, "empty", []panel{{ylabel: "µs", series: []series{{name: "gorun"}}}}); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(&b)
	for {
		if _, err := d.Token(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("not well-formed: %v", err)
		}
	}
}

func scanFloat(s string, v *float64) error {
	_, err := fmt.Sscan(s, v)
	return err
}

func TestLogRange(t *testing.T) {
	for _, c := range []struct {
		v      []float64
		base   float64
		lo, hi float64
	}{
		{[]float64{8, 256 << 20}, 2, 8, 256 << 20},
		{[]float64{0.3, 120}, 10, 0.1, 1000},
		{[]float64{100}, 10, 100, 1000},
		{nil, 10, 1, 10},
	} {
		lo, hi := logRange(c.v, c.base)
		if math.Abs(lo-c.lo) > 1e-9*c.lo || math.Abs(hi-c.hi) > 1e-9*c.hi {
			t.Errorf("logRange(%v, %v) = %v, %v; want %v, %v", c.v, c.base, lo, hi, c.lo, c.hi)
		}
	}
}

func TestSelectScenarios(t *testing.T) {
	scs, err := selectScenarios("shm4, barrier", false, true, 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sc := range scs {
		names = append(names, sc.name)
		spin := slices.Contains(sc.impls, "openmpi-spin")
		if spin != (sc.ranks > 2 && sc.fab == "shm") {
			t.Errorf("%s: openmpi-spin %v", sc.name, spin)
		}
	}
	if got := strings.Join(names, ","); got != "shm4,barrier-shm2,barrier-shm4,barrier-tcp2,barrier-tcp4" {
		t.Errorf("selected %s", got)
	}
	if slices.Contains(allScenarios()[1].impls, "openmpi-spin") {
		t.Error("selectScenarios changed the scenario table")
	}
	if _, err := selectScenarios("shm3", false, false, 2); err == nil {
		t.Error("an unknown scenario was accepted")
	}
	all, _ := selectScenarios("", true, false, 2)
	if len(all) != len(allScenarios()) {
		t.Errorf("empty list selected %d scenarios", len(all))
	}
	for _, sc := range all {
		if len(sc.sizes) == 0 || (sc.name != "bcast4" && slices.Max(sc.sizes) > 1<<20) {
			t.Errorf("quick %s sizes %v", sc.name, sc.sizes)
		}
		if sc.name == "sweep-shm2" && !slices.Equal(sc.sizes, []int64{8, 32, 128, 512, 2048, 8192, 32768, 65536}) {
			t.Errorf("quick sweep %v", sc.sizes)
		}
	}
}

func TestOpenMPIArgs(t *testing.T) {
	tcp := strings.Join(openMPIArgs("mpirun", scenario{ranks: 4, fab: "tcp"}, 2, false), " ")
	for _, want := range []string{"--mca pml ob1", "--mca btl tcp,self", "--mca mpi_yield_when_idle 1", "--oversubscribe"} {
		if !strings.Contains(tcp, want) {
			t.Errorf("tcp, 4 ranks on 2 CPUs: %q lacks %q", tcp, want)
		}
	}
	shm := strings.Join(openMPIArgs("mpirun", scenario{ranks: 2, fab: "shm"}, 2, false), " ")
	if !strings.Contains(shm, "--mca btl self,vader") || !strings.Contains(shm, "mpi_yield_when_idle 0") {
		t.Errorf("shm, 2 ranks on 2 CPUs: %q", shm)
	}
	if spin := strings.Join(openMPIArgs("mpirun", scenario{ranks: 4, fab: "shm"}, 2, true), " "); !strings.Contains(spin, "mpi_yield_when_idle 0") {
		t.Errorf("spin: %q", spin)
	}
}

func TestParse(t *testing.T) {
	gorun := "# gorun allreduce_perf\n#  size count\n          8            2    float    sum      30.0    0.00    0.00      0      31.5    0.00    0.00      0\n    1048576       262144    float    sum     449.1    2.33    2.33      0     450.2    2.33    2.33      3\n"
	r := parse([]byte(gorun), true)
	if len(r) != 2 || r[0] != (result{8, 31.5, 0}) || r[1] != (result{1 << 20, 450.2, 3}) {
		t.Errorf("gorun: %+v", r)
	}
	mpi := "8 2 4.24 0.002 0.002 0\n0 0 1.81 0 0 0\nnoise\n"
	r = parse([]byte(mpi), false)
	if len(r) != 2 || r[0] != (result{8, 4.24, 0}) || r[1] != (result{0, 1.81, 0}) {
		t.Errorf("mpi: %+v", r)
	}
}

// TestPlotTicks: ticks are exact powers, labelled as such, across many
// decades (repeated multiplication drifts to 9.999999999999999e-06).
func TestPlotTicks(t *testing.T) {
	var b bytes.Buffer
	p := panel{ylabel: "busbw", series: []series{{name: "gorun", pts: []point{{8, 3e-6}, {64 << 10, 0.5}}}}}
	if err := writePlot(&b, "ticks", []panel{p}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{">1e-06<", ">1e-05<", ">0.1<", ">1<", ">8 B<", ">32 KiB<"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no tick %s", want)
		}
	}
	if strings.Contains(b.String(), "9999") || strings.Contains(b.String(), "0000001") {
		t.Errorf("inexact tick labels:\n%s", b.String())
	}
}

func TestRender(t *testing.T) {
	o := fakeOutcome()
	o.before, o.after = placement{ns: 25}, placement{ns: 430}
	o.failed = []string{"gorun round 2: exit status 1"}
	s := o.render("shm2.svg")
	for _, want := range []string{
		"25 ns (near) at the start, 430 ns (far) at the end",
		"| 8 B | 20.00 | 0.0004 | 7.50 | 0.00107 | 5.00 | 0.0016 | time 4.00× |",
		"| 16 MiB |", "busbw 0.80× |",
		"Failed, left out of the medians: gorun round 2: exit status 1",
		"![shm2](shm2.svg)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("no %q in:\n%s", want, s)
		}
	}
}

func TestLoadWarning(t *testing.T) {
	if w := loadWarning("0.50, 1.00, 2.00", "1.90, 1.00, 0.50", 2); w != "" {
		t.Errorf("quiet machine warned: %s", w)
	}
	if w := loadWarning("0.50, 1.00, 2.00", "11.01, 12.94, 11.01", 2); !strings.Contains(w, "up to 11.0 on 2 CPUs") {
		t.Errorf("loaded machine: %q", w)
	}
	if w := loadWarning("unknown", "unknown", 2); w != "" {
		t.Errorf("unknown load warned: %s", w)
	}
}
