package launcher

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
)

// Fake ranks that use jobctl hang in mismatched collectives; gorun names
// them, then the job's timeout stops them.
func TestStallReportNamesStuckRanks(t *testing.T) {
	// SIGTERM the job as soon as a report names every rank. (On a loaded
	// machine the first report may come before some ranks have told
	// gorun where they are, "silent"; gorun reports again each second.)
	sigs := make(chan os.Signal, 1)
	watch := &watchWriter{want: "in broadcast #811 for ", seen: func() { sigs <- syscall.SIGTERM }}
	_, _, err := runJob(t, "stall", Config{NP: 4, StallTimeout: time.Second, Timeout: 30 * time.Second,
		Signals: sigs, Stderr: watch})
	stderr := watch.String()
	t.Logf("stderr:\n%s", stderr)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run = %v, want the interruption", err)
	}
	var report string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "gorun: stall: ") {
			report = l // the last one
		}
	}
	if report == "" {
		t.Fatalf("no stall report:\n%s", stderr)
	}
	for _, want := range []string{"ranks 0,1,3 in allreduce #812 for ", "rank 2 in broadcast #811 for "} {
		if !strings.Contains(report, want) {
			t.Errorf("stall report %q lacks %q", report, want)
		}
	}
}

// Under --elastic the job goes on when a rank fails; the stall report
// says what the failed rank's process did. It said "finished" of a rank
// that closed its client (comm's Close after a failed operation) and
// exited 1.
func TestStallReportNamesFailedRank(t *testing.T) {
	sigs := make(chan os.Signal, 1)
	// In a report, after another rank's place; "gorun: rank 3 exited ..."
	// says the job goes on.
	watch := &watchWriter{want: "; rank 3 exited with status 1", seen: func() { sigs <- syscall.SIGTERM }}
	_, _, err := runJob(t, "stall", Config{NP: 4, StallTimeout: time.Second, Timeout: 30 * time.Second, Elastic: true,
		Signals: sigs, Stderr: watch, Export: []string{"GORUN_TEST_FAIL=3"}})
	stderr := watch.String()
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 3 {
		t.Errorf("Run = %v, want rank 3's failure (--elastic)", err)
	}
	var report string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "gorun: stall: ") && strings.Contains(l, "rank 3 ") {
			report = l
		}
	}
	for _, want := range []string{"ranks 0,1 in allreduce #812 for ", "rank 2 in broadcast #811 for ", "rank 3 exited with status 1"} {
		if !strings.Contains(report, want) {
			t.Errorf("stall report %q lacks %q\n%s", report, want, stderr)
		}
	}
	if strings.Contains(stderr, "finished") {
		t.Errorf("a report says a rank finished:\n%s", stderr)
	}
}

// fakeStatus is a statusSource with a fixed snapshot.
type fakeStatus jobctl.Snapshot

func (f fakeStatus) Snapshot() jobctl.Snapshot { return jobctl.Snapshot(f) }

// The report says what each rank's process did, from the runner, where
// jobctl's view has only what the rank last reported: "finished" for a
// rank that closed its client, whether its process then failed or still
// runs; and a rank killed in a collective stays in it, which alone made
// the job look stalled.
func TestStallReportRankStates(t *testing.T) {
	now := time.Now()
	in := func(rank int) jobctl.RankState {
		return jobctl.RankState{Rank: rank, Joined: true, Op: "allreduce", Seq: 5, InOp: true, Since: now.Add(-40 * time.Second), Connected: true}
	}
	closed := func(rank int, blamed bool) jobctl.RankState {
		r := in(rank)
		r.Done, r.Blamed, r.Cause = true, blamed, 0
		return r
	}
	killed := in(5)
	killed.Connected = false
	for _, tc := range []struct {
		name  string
		ranks []jobctl.RankState
		ended map[int]string
		want  string // "": no report
	}{
		{"failed and closed", []jobctl.RankState{in(0), in(1), closed(2, false), closed(3, false), closed(4, true)},
			map[int]string{2: "exited with status 1", 6: "was killed by signal 9 (killed)"},
			"gorun: stall: ranks 0,1 in allreduce #5 for 40s; rank 2 exited with status 1; " +
				"rank 3 closed its communicator, and has not exited; rank 4 closed its communicator, failed because of rank 0, and has not exited; " +
				"rank 6 was killed by signal 9 (killed); ranks 5,7 silent\n"},
		// Under srun gorun does not know the tasks' ends.
		{"srun", []jobctl.RankState{in(0), closed(1, false)}, nil,
			"gorun: stall: rank 0 in allreduce #5 for 40s; rank 1 closed its communicator; ranks 2-7 silent\n"},
		{"killed in a collective", []jobctl.RankState{
			{Rank: 0, Joined: true, Op: "allreduce", Seq: 5, Since: now.Add(-40 * time.Second), Connected: true},
			killed}, map[int]string{5: "was killed by signal 9 (killed)"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var errb strings.Builder
			m := newMonitor(&console{stdout: io.Discard, stderr: &errb}, fakeStatus{Ranks: tc.ranks, LastProgress: now.Add(-40 * time.Second)},
				8, time.Hour, 30*time.Second)
			m.formed = true
			m.ended = func() map[int]string { return tc.ended }
			m.tick(now)
			if errb.String() != tc.want {
				t.Errorf("report\n %q\nwant\n %q", errb.String(), tc.want)
			}
		})
	}
}

// A slow start shows a status line; a fast job that does not report stays
// quiet.
func TestStartupStatus(t *testing.T) {
	_, stderr, err := runJob(t, "slow-join", Config{NP: 2, StatusDelay: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	if !regexp.MustCompile(`(?m)^gorun: [01]/2 ranks joined \(.*(bootstrap|connecting).*\), \d+s$`).MatchString(stderr) {
		t.Errorf("no start-up status:\n%s", stderr)
	}
	if !strings.Contains(stderr, "gorun: all 2 ranks joined after ") {
		t.Errorf("no joined message:\n%s", stderr)
	}
	_, stderr, err = runJob(t, "env", Config{NP: 2})
	if err != nil || stderr != "" {
		t.Errorf("quiet job: err %v, stderr %q", err, stderr)
	}
}

func TestStatusLineOnTerminal(t *testing.T) {
	var out, errb strings.Builder
	con := &console{stdout: &out, stderr: &errb, tty: true}
	con.setStatus("gorun: 1/2 ranks joined")
	w := newRankWriter(con, &out, 1, true)
	w.Write([]byte("hello\n"))
	con.message("gorun: note")
	con.setStatus("")
	want := "\r\x1b[K" + "gorun: 1/2 ranks joined" + "\r\x1b[K" + "gorun: 1/2 ranks joined" + // around the rank line (on stdout)
		"\r\x1b[K" + "gorun: note\n" + "gorun: 1/2 ranks joined" + "\r\x1b[K"
	if errb.String() != want {
		t.Errorf("stderr = %q\nwant     %q", errb.String(), want)
	}
	if out.String() != "[1] hello\n" {
		t.Errorf("stdout = %q", out.String())
	}
}

// watchWriter collects output and calls seen once when want appears.
type watchWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen func()
	done bool
}

func (w *watchWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.done && strings.Contains(w.buf.String(), w.want) {
		w.done = true
		w.seen()
	}
	return len(p), nil
}

func (w *watchWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
