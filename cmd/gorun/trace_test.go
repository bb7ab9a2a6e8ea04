package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gorun-hpc/gorun/internal/trace"
)

// gorun trace -merge BASE (files from another launcher) then
// gorun trace FILE -o x.svg.
func TestTraceCommand(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "tl")
	for r := range 2 {
		rec, err := trace.Create(base+"."+string(rune('0'+r)), trace.Header{Rank: r, Size: 2}, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range int64(3) {
			rec.Add(&trace.Event{Kind: trace.KindOp, Name: "broadcast", Algo: "tree", Seq: uint32(i), Bytes: 8, Start: 1000 * i, End: 1000*i + 500, Wait: -1})
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
	}
	var out, errb bytes.Buffer
	merged := filepath.Join(dir, "timeline.json")
	if code := traceMain([]string{"-merge", base, "-o", merged, "-report"}, &out, &errb); code != 0 {
		t.Fatalf("merge: status %d\n%s", code, errb.String())
	}
	if !strings.Contains(out.String(), "broadcast") || !strings.Contains(out.String(), "2 ranks") {
		t.Errorf("report:\n%s", out.String())
	}
	svg := filepath.Join(dir, "timeline.svg")
	if code := traceMain([]string{merged, "-o", svg}, &out, &errb); code != 0 {
		t.Fatalf("svg: status %d\n%s", code, errb.String())
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
		t.Fatalf("svg file: %v %.40q", err, b)
	}
	if code := traceMain([]string{filepath.Join(dir, "missing.json"), "-o", svg}, &out, &errb); code != 1 {
		t.Errorf("a missing file: status %d, want 1", code)
	}
}
