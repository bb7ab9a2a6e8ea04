package launcher

import (
	"strings"
	"testing"
	"time"
)

// Fake ranks that use jobctl hang in mismatched collectives; gorun names
// them, then the job's timeout stops them.
func TestStallReportNamesStuckRanks(t *testing.T) {
	_, stderr, err := runJob(t, "stall", Config{NP: 4, StallTimeout: time.Second, Timeout: 3 * time.Second})
	t.Logf("stderr:\n%s", stderr)
	if ExitStatus(err) != 124 {
		t.Fatalf("Run = %v, want the timeout", err)
	}
	var report string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "gorun: stall: ") {
			report = l
			break
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
	if !strings.Contains(stderr, "gorun: 0/2 ranks joined (2 bootstrap)") &&
		!strings.Contains(stderr, "gorun: 0/2 ranks joined (1 bootstrap, 1 connecting)") {
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
