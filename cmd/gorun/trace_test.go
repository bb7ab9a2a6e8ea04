package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

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

// stragglerRank1 is the report's line naming rank 1 the straggler; its
// submatch, the mean lateness.
var stragglerRank1 = regexp.MustCompile(`straggler: rank 1 \(last in \d+ of \d+ collectives, (\S+) late on average\)`)

// gorun --elastic --max-restarts 1 --timeline --report, examples/train on
// 3 ranks, rank 1 killed at its 40th write (after a 1.5 s delay at its
// 30th, so that its first incarnation flushes events first) and
// restarted (the survivors wait for it to rejoin, -wait-np): the merged
// timeline has both of rank 1's incarnations in its process, and the
// report does not name it the straggler. Before, the restarted process
// overwrote tl.json.1, and the report compared its first communicator
// (the one the survivors grew to admit it) with the survivors' first
// world: "straggler: rank 1", seconds late to all.
func TestTimelineOfRestartedRank(t *testing.T) {
	if testing.Short() {
		t.Skip("builds examples/train")
	}
	dir := t.TempDir()
	train := filepath.Join(dir, "train")
	if out, err := exec.Command("go", "build", "-o", train, "../../examples/train").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tl := filepath.Join(dir, "tl.json")
	cmd := exec.CommandContext(ctx, testBinary(t), "--srun=no", "--elastic", "--max-restarts", "1", "-np", "3",
		"--fault", "rank=1:delay:write:30:before:1500ms;rank=1:kill:write:40", "--timeline", tl, "--report",
		train, "-epochs", "2", "-steps", "12", "-wait-np", "3") // the survivors wait for rank 1 to rejoin
	cmd.Env = append(os.Environ(), "GORUN_TEST_ROLE=gorun")
	out, _ := cmd.CombinedOutput() // 137: a killed rank fails the job, restarted or not (launcher/README.md)
	if !strings.Contains(string(out), "restarted it (1 of 1") {
		t.Fatalf("rank 1 was not restarted:\n%s", out)
	}
	// The bug made rank 1 seconds late to every collective (1.579 s). A
	// restarted process is a little late now and then on a loaded machine
	// (CI's -race run: 1-3 ms in 29-46 of 56 collectives, at the base
	// commit too), which the report may rightly call a straggler; it must
	// not be that bug.
	if !strings.Contains(string(out), "restarted: rank 1") {
		t.Errorf("report:\n%s", out)
	}
	if m := stragglerRank1.FindSubmatch(out); m != nil {
		if late, err := time.ParseDuration(string(m[1])); err != nil || late >= 100*time.Millisecond {
			t.Errorf("rank 1 is %s late on average (the restarted incarnation compared with the first world?); report:\n%s", m[1], out)
		}
	}
	b, err := os.ReadFile(tl)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var doc struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			PID  int            `json:"pid"`
			TID  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	ops := map[int]int{} // rank 1's collectives per incarnation
	for _, e := range doc.TraceEvents {
		if e.PID == 1 && e.Ph == "X" && e.Args["seq"] != nil {
			ops[e.TID>>16]++
		}
	}
	if ops[0] == 0 || ops[1] == 0 {
		t.Errorf("rank 1's collectives per incarnation: %v; want some in both\n%s", ops, out)
	}
	if left, _ := filepath.Glob(tl + ".*"); len(left) != 0 {
		t.Errorf("per-rank files left: %v", left)
	}
}
