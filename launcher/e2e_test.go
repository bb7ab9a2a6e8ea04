package launcher

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gorun -np 4 of a real program whose ranks join with comm.Init and
// allreduce over the transports comm picks.
func TestEndToEndAllReduce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	out, stderr, err := runJob(t, "", Config{NP: 4, Program: "./testdata/allreduce", Timeout: 90 * time.Second,
		Export: []string{"DONE_DIR=" + t.TempDir()}})
	if err != nil && strings.Contains(err.Error(), "undefined: comm.Init") {
		t.Skip("comm.Init is not written yet")
	}
	if err != nil {
		t.Fatalf("Run: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	lines := rankLines(t, out)
	for r := 0; r < 4; r++ {
		want := fmt.Sprintf("rank %d of 4: allreduce ok", r)
		if len(lines[r]) != 1 || lines[r][0] != want {
			t.Errorf("rank %d printed %q, want %q", r, lines[r], want)
		}
	}
}

// A real straggler: rank 2 stops calling collectives; gorun's stall
// report, fed by comm through jobctl, names it and the waiting ranks.
func TestEndToEndStallReport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	sigs := make(chan os.Signal, 1)
	watch := &watchWriter{want: "gorun: stall: ", seen: func() { sigs <- syscall.SIGTERM }}
	out, _, err := runJob(t, "", Config{NP: 4, Program: "./testdata/straggler", Timeout: 90 * time.Second,
		StallTimeout: 2 * time.Second, Signals: sigs, Stderr: watch})
	stderr := watch.String()
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("Run = %v, want the SIGTERM sent after the report\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	m := regexp.MustCompile(`gorun: stall: ranks 0,1,3 in allreduce #(\d+) for \d+s; rank 2 idle after allreduce #(\d+) for \d+s`).FindStringSubmatch(stderr)
	if m == nil {
		t.Fatalf("no stall report naming the straggler:\n%s", stderr)
	}
	if mustAtoi(m[1]) != mustAtoi(m[2])+1 {
		t.Errorf("waiting ranks in allreduce #%s, straggler after #%s: want consecutive", m[1], m[2])
	}
}
