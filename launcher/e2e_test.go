package launcher

import (
	"fmt"
	"strings"
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
