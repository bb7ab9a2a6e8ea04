package main

import (
	"bytes"
	"io"
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

// --timeline, --report and --metrics reach the launcher's Config, and
// GORUN_TIMELINE / GORUN_REPORT=1 in gorun's environment do what the
// flags do (flags win).
func TestObservabilityFlags(t *testing.T) {
	for _, tc := range []struct {
		env              map[string]string
		args             []string
		timeline, metric string
		report           bool
	}{
		{args: []string{"-np", "2", "prog"}},
		{args: []string{"-np", "2", "--timeline", "tl.json", "--report", "--metrics", "127.0.0.1:9400", "prog"},
			timeline: "tl.json", report: true, metric: "127.0.0.1:9400"},
		{env: map[string]string{"GORUN_REPORT": "1", "GORUN_TIMELINE": "env.json"}, args: []string{"-np", "2", "prog"},
			timeline: "env.json", report: true},
		{env: map[string]string{"GORUN_REPORT": "1", "GORUN_TIMELINE": "env.json"}, args: []string{"-np", "2", "--report=false", "--timeline", "f.json", "prog"},
			timeline: "f.json"},
		{env: map[string]string{"GORUN_REPORT": "0"}, args: []string{"-np", "2", "prog"}},
	} {
		t.Run("", func(t *testing.T) {
			t.Setenv("GORUN_REPORT", "")
			t.Setenv("GORUN_TIMELINE", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			cfg, err := parseArgs(tc.args, io.Discard, io.Discard)
			if err != nil {
				t.Fatalf("parseArgs(%q): %v", tc.args, err)
			}
			if cfg.Timeline != tc.timeline || cfg.Report != tc.report || cfg.Metrics != tc.metric {
				t.Errorf("env %v, parseArgs(%q): timeline %q report %v metrics %q; want %q %v %q",
					tc.env, tc.args, cfg.Timeline, cfg.Report, cfg.Metrics, tc.timeline, tc.report, tc.metric)
			}
		})
	}
}
