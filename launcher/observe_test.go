package launcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/prom"
)

type chromeEvent struct {
	Name string         `json:"name"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	Args map[string]any `json:"args"`
}

// skewSeconds is how far ahead rank 1's clock runs in the timeline test.
const skewSeconds = 100

// gorun --timeline --report with 2 real ranks; rank 1 runs in a time
// namespace whose CLOCK_MONOTONIC is 100 s ahead (a real skew, as between
// hosts; skipped where time namespaces are not available), and rank 0
// sleeps 20 ms before each allreduce. The merged trace must have both
// ranks, properly nested spans, increasing times, the right names and the
// clocks aligned; the report must name rank 0, not the skewed rank 1, as
// the straggler.
func TestEndToEndTimelineAndReport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	skew := exec.Command("unshare", "--time", "--monotonic", "1", "--fork", "true").Run() == nil
	if !skew {
		t.Log("no time namespaces here (needs root and Linux ≥ 5.6): the clocks are not skewed")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "timeline.json")
	export := []string{"TL_SLEEP_RANK=0", "TL_SLEEP=20ms"}
	if skew {
		export = append(export, "TL_SKEW_RANK=1", fmt.Sprintf("TL_SKEW=%d", skewSeconds))
	}
	stdout, stderr, err := runJob(t, "", Config{NP: 2, Program: "./testdata/timeline", Timeout: 90 * time.Second,
		Timeline: out, Report: true, Export: export})
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, "gorun: timeline: "+out+" (2 ranks") {
		t.Errorf("no timeline message:\n%s", stderr)
	}
	doc := readMerged(t, out)
	procs := map[int]string{}
	byRank := map[int][]chromeEvent{}
	for _, e := range doc.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" {
			procs[e.PID], _ = e.Args["name"].(string)
		}
		if e.Ph == "X" {
			byRank[e.PID] = append(byRank[e.PID], e)
		}
	}
	for r := range 2 {
		if !strings.HasPrefix(procs[r], fmt.Sprintf("rank %d", r)) {
			t.Errorf("process %d named %q", r, procs[r])
		}
		evs := byRank[r]
		// Times increase within a rank (the file is in time order), and
		// spans on one thread nest.
		stack := map[int][]chromeEvent{}
		names := map[string]int{}
		for i, e := range evs {
			if i > 0 && e.TS < evs[i-1].TS {
				t.Errorf("rank %d: event %d (%s) at %.3f µs before the previous at %.3f", r, i, e.Name, e.TS, evs[i-1].TS)
			}
			st := stack[e.TID]
			for len(st) > 0 && st[len(st)-1].TS+st[len(st)-1].Dur <= e.TS+0.001 {
				st = st[:len(st)-1]
			}
			if len(st) > 0 {
				if p := st[len(st)-1]; e.TS+e.Dur > p.TS+p.Dur+0.001 {
					t.Errorf("rank %d: %s [%.3f, %.3f] overlaps %s [%.3f, %.3f] without nesting", r, e.Name, e.TS, e.TS+e.Dur, p.Name, p.TS, p.TS+p.Dur)
				}
			}
			stack[e.TID] = append(st, e)
			if e.Name != "wait" && e.Name != "transfer" {
				names[e.Name]++
			}
		}
		if want := map[string]int{"allreduce": 10, "broadcast": 1, "barrier": 1, "compute": 10}; fmt.Sprint(names) != fmt.Sprint(want) {
			t.Errorf("rank %d: spans %v, want %v", r, names, want)
		}
	}
	// Clock correction: each allreduce overlaps itself on the other rank
	// (neither can finish before both entered), give or take the offset's
	// error (half a loopback round trip; 5 ms is generous).
	ar := func(r int) []chromeEvent {
		var s []chromeEvent
		for _, e := range byRank[r] {
			if e.Name == "allreduce" {
				s = append(s, e)
			}
		}
		sort.Slice(s, func(i, j int) bool { return s[i].Args["seq"].(float64) < s[j].Args["seq"].(float64) })
		return s
	}
	a, b := ar(0), ar(1)
	for i := range min(len(a), len(b)) {
		if a[i].TS > b[i].TS+b[i].Dur+5000 || b[i].TS > a[i].TS+a[i].Dur+5000 {
			t.Errorf("allreduce #%v: rank 0 [%.0f, %.0f] µs, rank 1 [%.0f, %.0f] µs: clocks not aligned", a[i].Args["seq"],
				a[i].TS, a[i].TS+a[i].Dur, b[i].TS, b[i].TS+b[i].Dur)
		}
	}
	// The report.
	if !regexp.MustCompile(`(?m)^\s+allreduce\s+10\s+320 B\s`).MatchString(stderr) {
		t.Errorf("report has no allreduce line of 10 calls, 320 bytes:\n%s", stderr)
	}
	if !strings.Contains(stderr, "straggler: rank 0 (last in ") {
		t.Errorf("report does not name rank 0 as the straggler:\n%s", stderr)
	}
}

// An unwritable --timeline fails before any rank starts.
func TestTimelineUnwritable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "timeline.json")
	_, stderr, err := runJob(t, "env", Config{NP: 2, Timeline: path})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Run = %v, want a usage error naming %s\n%s", err, path, stderr)
	}
}

// countWriter calls seen once when want has appeared n times.
type countWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	n    int
	seen chan struct{}
}

func (w *countWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.seen != nil && strings.Count(w.buf.String(), w.want) >= w.n {
		close(w.seen)
		w.seen = nil
	}
	return len(p), nil
}

// heldJob runs ./testdata/timeline under cfg with --metrics until holders
// ranks hold, scrapes gorun's /metrics once, checks it parses (with
// prom.Parse and the reference parser), lets the ranks go and waits for
// the job, which must succeed (or with rankFailed, end with ErrRankFailed).
func heldJob(t *testing.T, cfg Config, holders int, rankFailed bool) []prom.Family {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hold := filepath.Join(t.TempDir(), "release")
	seen := make(chan struct{})
	stdout := &countWriter{want: ": holding", n: holders, seen: seen}
	var stderr bytes.Buffer
	cfg.Program, cfg.Timeout, cfg.UseSrun, cfg.Metrics = "./testdata/timeline", 90*time.Second, "no", addr
	cfg.Export = append(cfg.Export, "TL_HOLD="+hold)
	cfg.Stdout, cfg.Stderr, cfg.KillGrace = stdout, &stderr, time.Second
	done := make(chan error, 1)
	go func() { done <- Run(context.Background(), cfg) }()
	select {
	case <-seen:
	case err := <-done:
		t.Fatalf("job ended before holding: %v\n%s\n%s", err, stdout.buf.String(), stderr.String())
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		os.WriteFile(hold, nil, 0o644)
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	os.WriteFile(hold, nil, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fams, err := prom.Parse(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("gorun's /metrics does not parse: %v", err)
	}
	checkReferenceParser(t, body, fams)
	err = <-done
	if rankFailed && !errors.Is(err, ErrRankFailed) || !rankFailed && err != nil {
		t.Fatalf("Run: %v (a rank's failure wanted: %v)\n%s", err, rankFailed, stderr.String())
	}
	return fams
}

// gorun --metrics serves both ranks' counters, labelled by rank, while the
// job runs; the exposition parses.
func TestEndToEndMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	fams := heldJob(t, Config{NP: 2}, 2, false)
	for r := range 2 {
		rank := prom.Label{Name: "rank", Value: fmt.Sprint(r)}
		if v, ok := prom.Get(fams, "gorun_rank_up", rank); !ok || v != 1 {
			t.Errorf("gorun_rank_up{rank=%d} = %v %v", r, v, ok)
		}
		if v, ok := prom.Get(fams, "gorun_collective_calls_total", rank, prom.Label{Name: "collective", Value: "allreduce"}); !ok || v != 10 {
			t.Errorf("rank %d: allreduce calls %v %v, want 10", r, v, ok)
		}
		if v, ok := prom.Get(fams, "gorun_refused_connections_total", rank, prom.Label{Name: "provider", Value: "shm"}); !ok || v != 0 {
			t.Errorf("rank %d: shm refused connections %v %v, want 0", r, v, ok)
		}
		if v, ok := prom.Get(fams, "gorun_reconnects_total", rank); !ok || v != 0 {
			t.Errorf("rank %d: reconnects %v %v, want 0", r, v, ok)
		}
	}
}

// gorun --elastic --metrics: rank 1 of 3 exits, the survivors shrink and
// reconnect. Their counters count the reconnections and the failed
// operation, and rank 1 is down.
func TestEndToEndMetricsAfterShrink(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	// The job fails in the end (rank 1 exited 3), as elastic jobs do.
	fams := heldJob(t, Config{NP: 3, Elastic: true, Export: []string{"TL_DIE_RANK=1"}}, 2, true)
	if v, ok := prom.Get(fams, "gorun_rank_up", prom.Label{Name: "rank", Value: "1"}); !ok || v != 0 {
		t.Errorf("gorun_rank_up{rank=1} = %v %v, want 0 (it exited)", v, ok)
	}
	for _, r := range []int{0, 2} {
		rank := prom.Label{Name: "rank", Value: fmt.Sprint(r)}
		if v, ok := prom.Get(fams, "gorun_reconnects_total", rank); !ok || v < 1 {
			t.Errorf("rank %d: reconnects %v %v, want at least 1 (the shrunk world's connection)", r, v, ok)
		}
		failed := 0.0
		for _, kind := range []string{"peer_failed", "peer_closed"} {
			v, _ := prom.Get(fams, "gorun_errors_total", rank, prom.Label{Name: "kind", Value: kind})
			failed += v
		}
		if failed < 1 {
			t.Errorf("rank %d: no failed operation counted (peer_failed + peer_closed = %v)", r, failed)
		}
	}
}

// An address gorun cannot listen on fails before any rank starts.
func TestMetricsAddrInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, _, err = runJob(t, "env", Config{NP: 2, Metrics: ln.Addr().String()})
	if !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "--metrics") {
		t.Fatalf("Run = %v, want a usage error about --metrics", err)
	}
}

// A rank whose timeline outgrew its ring: gorun's closing message says
// how many events it dropped, and the merged file marks the gap.
func TestTimelineDropsReported(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tl.json")
	for r, dropped := range []string{"", `{"k":"dropped","n":12}` + "\n"} {
		text := fmt.Sprintf(`{"k":"header","version":1,"rank":%d,"size":2,"host":"h","pid":1,"clock":"monotonic"}`+"\n", r) +
			dropped +
			`{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":12,"bytes":8,"arg":0,"ts":1000,"end":2000,"wait":-1,"reduce":0}` + "\n" +
			`{"k":"clock","offset":0,"rtt":1000}` + "\n"
		if err := os.WriteFile(fmt.Sprintf("%s.%d", out, r), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	o := &obsRun{size: 2, timeline: out, base: out}
	o.finish(&console{stdout: &stderr, stderr: &stderr})
	if !strings.Contains(stderr.String(), "(2 ranks") || !strings.Contains(stderr.String(), "rank 1 dropped 12 events") {
		t.Errorf("gorun's message does not say rank 1 dropped 12 events:\n%s", stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"name":"12 events dropped (the writer fell behind)","ph":"i"`) {
		t.Errorf("the merged timeline does not mark the gap:\n%s", data)
	}
}

// A job where a rank crashes (exit 3, no Close) and gorun stops the others
// with SIGTERM: every rank's events up to the crash were flushed on the
// timer, gorun merges them, notes that no rank closed its communicator,
// prints the report and removes the per-rank files; the summary names
// the crashed rank.
func TestEndToEndTimelineOfCrashedJob(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "timeline.json")
	stdout, stderr, err := runJob(t, "", Config{NP: 3, Program: "./testdata/timeline", Timeout: 90 * time.Second,
		Timeline: out, Report: true, Export: []string{"TL_CRASH_RANK=1"}})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || re.ExitCode != 3 {
		t.Fatalf("Run = %v, want rank 1's exit 3\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, "gorun: timeline: "+out+" (3 ranks") || !strings.Contains(stderr, "ranks 0-2 did not close the communicator") {
		t.Errorf("no merged timeline of 3 ranks noting rank 1:\n%s", stderr)
	}
	if !regexp.MustCompile(`(?m)^\s+allreduce\s+10\s`).MatchString(stderr) {
		t.Errorf("no report with 10 allreduces:\n%s", stderr)
	}
	doc := readMerged(t, out)
	barriers := map[int]bool{}
	for _, e := range doc.TraceEvents {
		if e.Ph == "X" && e.Name == "barrier" {
			barriers[e.PID] = true
		}
	}
	if len(barriers) != 3 {
		t.Errorf("barriers of ranks %v in the merged timeline, want 0, 1, 2", barriers)
	}
}

// Ranks that wrote nothing (an empty file: killed before their first
// flush; no file) do not stop the merge: the others are merged, and the
// message and the report name the silent ranks; the empty files go too.
func TestTimelineEmptyRankFiles(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tl.json")
	os.WriteFile(out+".0", nil, 0o644)
	text := `{"k":"header","version":1,"rank":2,"size":4,"host":"h","pid":1,"clock":"monotonic"}` + "\n" +
		`{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":12,"bytes":8,"arg":0,"ts":1000,"end":2000,"wait":-1,"reduce":0}` + "\n" +
		`{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":13,"by`
	if err := os.WriteFile(out+".2", []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	o := &obsRun{size: 4, timeline: out, base: out, report: true}
	o.finish(&console{stdout: &stderr, stderr: &stderr})
	for _, want := range []string{"gorun: timeline: " + out + " (1 ranks", "no events from ranks 0,1,3", "rank 2 did not close",
		"the file of rank 2 ends in a cut line", "report: 1 of 4 ranks", "no events from rank 0, 1, 3"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("gorun's messages do not say %q:\n%s", want, stderr.String())
		}
	}
	if m, _ := filepath.Glob(out + ".*"); len(m) != 0 {
		t.Errorf("per-rank files left behind: %v", m)
	}
	if data, err := os.ReadFile(out); err != nil || !strings.Contains(string(data), `"name":"allreduce"`) {
		t.Errorf("merged timeline: %v\n%s", err, data)
	}
}

// A restarted rank's notes are its last incarnation's (FILE.RANK.restartN):
// rank 1, killed in its first incarnation and closed properly in its
// restart, did not fail to close; rank 2, which closed in its first and
// not in its restart, did. Both are noted as restarted, and the dropped
// events are every incarnation's. Before, the notes read the first
// incarnation only.
func TestTimelineNotesLastIncarnation(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tl.json")
	const op = `{"k":"op","lane":0,"name":"allreduce","algo":"ring","seq":12,"bytes":8,"arg":0,"ts":1000,"end":2000,"wait":-1,"reduce":0}` + "\n"
	const clock = `{"k":"clock","offset":0,"rtt":1000}` + "\n"
	header := func(r int) string {
		return fmt.Sprintf(`{"k":"header","version":1,"rank":%d,"size":3,"host":"h","pid":1,"clock":"monotonic"}`+"\n", r)
	}
	for path, text := range map[string]string{
		out + ".0":          header(0) + op + clock,
		out + ".1":          header(1) + `{"k":"dropped","n":5}` + "\n" + op, // killed
		out + ".1.restart1": header(1) + `{"k":"dropped","n":2}` + "\n" + op + clock,
		out + ".2":          header(2) + op + clock,
		out + ".2.restart1": header(2) + op, // killed
	} {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var stderr bytes.Buffer
	o := &obsRun{size: 3, timeline: out, base: out}
	o.finish(&console{stdout: &stderr, stderr: &stderr})
	msg := stderr.String()
	for _, want := range []string{"(3 ranks", "rank 1 dropped 7 events", "ranks 1,2 restarted", "; rank 2 did not close the communicator"} {
		if !strings.Contains(msg, want) {
			t.Errorf("gorun's message does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "rank 1 did not close") || strings.Contains(msg, "ranks 1,2 did not close") {
		t.Errorf("gorun's message says rank 1, closed in its restart, did not close:\n%s", msg)
	}
}

// checkReferenceParser parses text with the Prometheus project's own
// parser (prometheus_client, Python; CI installs python3-prometheus-client)
// and checks it finds the families and samples prom.Parse found. Skipped,
// with a note, where the module is missing.
func checkReferenceParser(t *testing.T, text []byte, fams []prom.Family) {
	t.Helper()
	const script = `import sys
from prometheus_client.parser import text_string_to_metric_families
fams = list(text_string_to_metric_families(sys.stdin.read()))
print(len(fams), sum(len(f.samples) for f in fams))`
	py := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} { // Debian's modules are in the second
		if exec.Command(p, "-c", "import prometheus_client").Run() == nil {
			py = p
			break
		}
	}
	if py == "" {
		t.Log("python3-prometheus-client is not installed: the reference parser's check is skipped")
		return
	}
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = bytes.NewReader(text)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("prometheus_client rejects gorun's exposition: %v\n%s\n%s", err, out, text)
	}
	samples := 0
	for _, f := range fams {
		samples += len(f.Samples)
	}
	if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("%d %d", len(fams), samples); got != want {
		t.Errorf("prometheus_client finds %s families and samples, prom.Parse %s", got, want)
	}
}

// readMerged reads gorun's merged timeline out, and fails the test if a
// rank's file was left behind or the timeline is not Chrome trace JSON.
func readMerged(t *testing.T, out string) (doc struct {
	TraceEvents []chromeEvent `json:"traceEvents"`
}) {
	t.Helper()
	if m, _ := filepath.Glob(out + ".*"); len(m) != 0 {
		t.Errorf("per-rank files left behind: %v", m)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("merged timeline is not JSON: %v", err)
	}
	return doc
}
