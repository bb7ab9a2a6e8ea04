package launcher

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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
