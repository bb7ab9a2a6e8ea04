package trace

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// Two ranks whose clocks differ by 1 s: Merge applies the offsets, the
// report names the rank that entered last, the SVG is well-formed XML
// with a band per rank and a bar per collective in its kind's colour.
func TestMergeSummarizeSVG(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(rank int, offset, late int64) *RankFile {
		rf := &RankFile{Header: Header{Rank: rank, Size: 2, Host: "h"}, Lanes: []string{"comm", "compute"}, Offset: offset, RTT: 1000, Closed: true}
		for i := range int64(5) {
			start := i*10*ms + late - offset // on the launcher's clock: i*10ms + late
			rf.Events = append(rf.Events,
				Event{Kind: KindSpan, Lane: 1, Name: "backward", Start: start - 2*ms, End: start},
				Event{Kind: KindOp, Name: "allreduce", Algo: "ring", Seq: uint32(i), Bytes: 1 << 20,
					Start: start, End: i*10*ms + 5*ms - offset, Wait: 1 * ms, Reduce: 100})
		}
		return rf
	}
	files := []*RankFile{mk(0, 0, 0), mk(1, -int64(time.Second), 3*ms)}
	var buf bytes.Buffer
	if err := Merge(&buf, files); err != nil {
		t.Fatal(err)
	}
	ct, err := ReadChrome(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	first := map[int]float64{}
	for _, e := range ct.TraceEvents {
		if e.Ph == "X" && e.Name == "allreduce" && e.Args["seq"].(float64) == 0 {
			first[e.PID] = e.TS
		}
	}
	if first[0] != 2000 || first[1] != 5000 { // origin: rank 0's first backward
		t.Errorf("allreduce #0 at %v µs: want rank 0 at 2000, rank 1 at 5000 (offset applied)", first)
	}
	s := Summarize(files)
	if s.Straggler != 1 || s.Matched != 5 || s.Late[1].Last != 5 || s.Late[1].MeanLate != 3*time.Millisecond {
		t.Errorf("summary %+v", s)
	}
	if len(s.Colls) != 1 || s.Colls[0].Calls != 5 || s.Colls[0].Bytes != 5<<20 {
		t.Errorf("collectives %+v", s.Colls)
	}
	if !strings.Contains(s.String(), "straggler: rank 1 (last in 5 of 5 collectives, 3ms late on average)") {
		t.Errorf("report:\n%s", s)
	}
	var svg bytes.Buffer
	if err := SVG(&svg, ct, 0, 0); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	rects, texts := 0, ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "fill" && a.Value == collColor["allreduce"] {
					rects++
				}
			}
		}
		if cd, ok := tok.(xml.CharData); ok {
			texts += string(cd) + "|"
		}
	}
	if rects != 10+2 { // 5 per rank, the legend's and the wait sample's
		t.Errorf("%d allreduce bars, want 12", rects)
	}
	for _, want := range []string{"rank 0 (h)|", "rank 1 (h)|", "comm|", "compute|", "backward|"} {
		if !strings.Contains(texts, want) {
			t.Errorf("SVG lacks the text %q", want)
		}
	}
}

// A user span keeps its colour in every window of a trace: the colour
// follows the name, not what the window happens to show first.
func TestSVGSpanColoursStable(t *testing.T) {
	ct := &ChromeTrace{TraceEvents: []ChromeEvent{
		{Name: "thread_name", Ph: "M", Args: map[string]any{"name": "compute"}},
		{Name: "forward", Cat: "span", Ph: "X", TS: 0, Dur: 10},
		{Name: "backward", Cat: "span", Ph: "X", TS: 10, Dur: 10},
		{Name: "allreduce", Cat: "collective", Ph: "X", TID: 1, TS: 12, Dur: 5},
	}}
	fill := func(from, to float64) string {
		var b bytes.Buffer
		if err := SVG(&b, ct, from, to); err != nil {
			t.Fatal(err)
		}
		// The bar's fill precedes its title, "backward 10 µs".
		i := strings.Index(b.String(), "<title>backward")
		if i < 0 {
			t.Fatalf("no backward bar in window [%v, %v]:\n%s", from, to, b.String())
		}
		s := b.String()[:i]
		j := strings.LastIndex(s, `fill="`)
		return s[j+6 : j+6+7]
	}
	all, late := fill(0, 0), fill(11, 20)
	if all != late {
		t.Errorf("backward is %s in the whole trace, %s in a window without forward", all, late)
	}
	if all == collColor["allreduce"] {
		t.Errorf("backward has allreduce's colour %s", all)
	}
}

// ddp buckets get their own rows and colour, drawn against the compute
// row, so that a bucket launched during the backward pass overlaps it.
func TestSVGBuckets(t *testing.T) {
	ct := &ChromeTrace{TraceEvents: []ChromeEvent{
		{Name: "thread_name", Ph: "M", TID: 1, Args: map[string]any{"name": "compute"}},
		{Name: "thread_name", Ph: "M", TID: 2, Args: map[string]any{"name": "ddp bucket 0"}},
		{Name: "backward", Cat: "span", Ph: "X", TID: 1, TS: 0, Dur: 100},
		{Name: "bucket allreduce", Cat: "span", Ph: "X", TID: 2, TS: 50, Dur: 80, Args: map[string]any{"arg": 0.0}},
	}}
	var b bytes.Buffer
	if err := SVG(&b, ct, 0, 0); err != nil {
		t.Fatal(err)
	}
	type bar struct{ x0, x1, y float64 }
	bars := map[string]bar{} // by title's first word
	labels := map[string]bool{}
	d := xml.NewDecoder(&b)
	var cur map[string]string
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if tok.Name.Local == "rect" {
				cur = map[string]string{}
				for _, a := range tok.Attr {
					cur[a.Name.Local] = a.Value
				}
			}
		case xml.CharData:
			s := string(tok)
			labels[s] = true
			if cur != nil && (strings.HasPrefix(s, "backward") || strings.HasPrefix(s, "bucket")) {
				var x, w, y float64
				fmt.Sscan(cur["x"], &x)
				fmt.Sscan(cur["width"], &w)
				fmt.Sscan(cur["y"], &y)
				bars[strings.Fields(s)[0]] = bar{x, x + w, y}
				if strings.HasPrefix(s, "bucket") && cur["fill"] != "#3a86ff" {
					t.Errorf("bucket bar filled %s, want ddp blue", cur["fill"])
				}
			}
		case xml.EndElement:
			if tok.Name.Local == "rect" {
				cur = nil
			}
		}
	}
	if !labels["ddp bucket 0"] || !labels["compute"] || !labels["ddp bucket"] {
		t.Errorf("rows or legend missing: %v", labels)
	}
	bw, bk := bars["backward"], bars["bucket"]
	if bk.y <= bw.y || bk.x0 >= bw.x1 || bk.x1 <= bw.x1 {
		t.Errorf("bucket bar %+v should sit below backward %+v, starting inside it and ending after", bk, bw)
	}
}

// The report's bytes and time per rank are means over the ranks that
// made the call: a rank that left no events (killed, or its file lost)
// and a send that only one rank makes do not divide them. Before, a
// 3-rank job whose rank 2 left nothing reported a third less of each.
func TestSummarizeMeansOverCallers(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(rank int, p2p string) *RankFile {
		rf := &RankFile{Header: Header{Rank: rank, Size: 3, Host: "h"}, Lanes: []string{"comm"}, Closed: true}
		if p2p == "" {
			return rf
		}
		for i := range int64(2) {
			rf.Events = append(rf.Events, Event{Kind: KindOp, Name: "allreduce", Algo: "ring", Seq: uint32(i), Bytes: 1 << 20,
				Start: i * 10 * ms, End: i*10*ms + ms})
		}
		rf.Events = append(rf.Events, Event{Kind: KindOp, Name: p2p, Seq: 2, Bytes: 100, Start: 30 * ms, End: 32 * ms})
		return rf
	}
	s := Summarize([]*RankFile{mk(0, "send"), mk(1, "recv"), mk(2, "")})
	want := map[string]CollStat{
		"allreduce": {Name: "allreduce", Calls: 2, Bytes: 2 << 20, Total: 2 * time.Millisecond},
		"send":      {Name: "send", Calls: 1, Bytes: 100, Total: 2 * time.Millisecond},
		"recv":      {Name: "recv", Calls: 1, Bytes: 100, Total: 2 * time.Millisecond},
	}
	if len(s.Colls) != len(want) {
		t.Fatalf("collectives %+v", s.Colls)
	}
	for _, c := range s.Colls {
		w := want[c.Name]
		if c.Calls != w.Calls || c.Bytes != w.Bytes || c.Total != w.Total {
			t.Errorf("%s: calls %d, bytes %d, total %v; want %d, %d, %v", c.Name, c.Calls, c.Bytes, c.Total, w.Calls, w.Bytes, w.Total)
		}
	}
	if len(s.Silent) != 1 || s.Silent[0] != 2 {
		t.Errorf("silent %v, want [2]", s.Silent)
	}
}

// A rank whose file has a header but no events (killed before its first
// flush, as rank 2 of an elastic job killed in its first second) is named
// silent and left out of the arrivals; the others' operations still
// match. Before, no operation was complete without it: the report had no
// arrivals and named no straggler.
func TestSummarizeSilentRankLeavesArrivals(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(rank int, late int64) *RankFile {
		rf := &RankFile{Header: Header{Rank: rank, Size: 3, Host: "h"}, Lanes: []string{"comm"}}
		if late < 0 {
			return rf
		}
		for i := range int64(5) {
			rf.Events = append(rf.Events, Event{Kind: KindOp, Name: "allreduce", Algo: "ring", Seq: uint32(i + 1), Bytes: 8,
				Start: i*10*ms + late, End: i*10*ms + 5*ms})
		}
		return rf
	}
	s := Summarize([]*RankFile{mk(0, 0), mk(1, 3*ms), mk(2, -1)})
	if s.Matched != 5 || s.Straggler != 1 || len(s.Late) != 2 || s.Late[1].Rank != 1 || s.Late[1].Last != 5 {
		t.Errorf("summary %+v, want 5 matched, rank 1 the straggler, arrivals of ranks 0 and 1", s)
	}
	if len(s.Silent) != 1 || s.Silent[0] != 2 {
		t.Errorf("silent %v, want [2]", s.Silent)
	}
	if r := s.String(); !strings.Contains(r, "straggler: rank 1 (last in 5 of 5") || !strings.Contains(r, "no events from rank 2") {
		t.Errorf("report:\n%s", r)
	}
}

// -from alone draws from there to the end, -to alone from the start, as
// gorun trace's flags say (-to 0: the end); a window that ends before it
// starts is an error. Before, -from without -to drew the whole trace.
func TestSVGWindow(t *testing.T) {
	ct := &ChromeTrace{}
	for i := range 3 {
		ct.TraceEvents = append(ct.TraceEvents, ChromeEvent{Name: "allreduce", Cat: "collective", Ph: "X",
			TS: float64(100 * i), Dur: 10, Args: map[string]any{"seq": float64(i)}})
	}
	drawn := func(from, to float64) string {
		var b bytes.Buffer
		if err := SVG(&b, ct, from, to); err != nil {
			t.Fatalf("SVG(%v, %v): %v", from, to, err)
		}
		var seqs []string
		for _, s := range []string{"#0 ", "#1 ", "#2 "} {
			if strings.Contains(b.String(), "<title>allreduce "+s) {
				seqs = append(seqs, s[:2])
			}
		}
		return strings.Join(seqs, " ")
	}
	for _, tc := range []struct {
		from, to float64
		want     string
	}{
		{0, 0, "#0 #1 #2"},
		{150, 0, "#2"},
		{0, 50, "#0"},
		{50, 150, "#1"},
	} {
		if got := drawn(tc.from, tc.to); got != tc.want {
			t.Errorf("window [%v, %v] draws %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
	if err := SVG(io.Discard, ct, 150, 100); err == nil {
		t.Error("a window that ends before it starts drew")
	}
}

// A group of sends and receives (ISend and IRecv run together: a
// "sendrecv") numbers its messages per peer, not in the communicator's
// collective sequence, so arrivals leave it out as they do send and recv.
// Before, sendrecv #k took the place of allreduce #k: rank 1, 3 ms late
// to every allreduce, was averaged with on-time exchanges.
func TestSummarizeLeavesOutSendRecvGroups(t *testing.T) {
	ms := int64(time.Millisecond)
	mk := func(rank int, late int64) *RankFile {
		rf := &RankFile{Header: Header{Rank: rank, Size: 2, Host: "h"}, Lanes: []string{"comm"}}
		for i := range int64(5) {
			t0 := i * 20 * ms
			rf.Events = append(rf.Events,
				Event{Kind: KindOp, Name: "allreduce", Algo: "ring", Seq: uint32(i + 1), Bytes: 8, Start: t0 + late, End: t0 + 5*ms},
				Event{Kind: KindOp, Name: "sendrecv", Algo: "direct", Seq: uint32(i), Bytes: 8, Arg: int64(1 - rank), Start: t0 + 10*ms, End: t0 + 11*ms})
		}
		return rf
	}
	s := Summarize([]*RankFile{mk(0, 0), mk(1, 3*ms)})
	if s.Matched != 5 || s.Straggler != 1 || s.Late[1].Last != 5 || s.Late[1].MeanLate != 3*time.Millisecond {
		t.Errorf("summary %+v: want 5 allreduces matched, rank 1 last in all, 3ms late", s)
	}
}

// busbw's factor: nccl-tests' for the collectives it has, and the
// fixed-count kin's for the v-collectives (before, 1: an allgatherv on 4
// ranks showed 4/3 of an allgather's busbw for the same bytes and time).
func TestBusFactor(t *testing.T) {
	for name, want := range map[string]float64{
		"allreduce": 1.5, "allgather": 0.75, "allgatherv": 0.75, "reducescatter": 0.75, "alltoall": 0.75, "alltoallv": 0.75,
		"gather": 0.75, "gatherv": 0.75, "scatter": 0.75, "scatterv": 0.75, "broadcast": 1, "reduce": 1, "send": 1,
	} {
		if got := busFactor(name, 4); got != want {
			t.Errorf("busFactor(%s, 4) = %v, want %v", name, got, want)
		}
	}
}
