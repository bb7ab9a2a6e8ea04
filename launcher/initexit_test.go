package launcher

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestInitExitNotice: under --elastic, rank 2 of 3 exits before it calls
// Init, so gossip never sees it. gorun tells the forming ranks over jobctl,
// and their Init fails naming rank 2 (bootstrap's formloss.go: a first
// world smaller than -np is not formed), not at the formation timeout,
// which is 10 minutes here: the job ending inside runJob's minute proves
// the notice.
func TestInitExitNotice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	out, stderr, err := runJob(t, "", Config{NP: 3, Elastic: true, Program: "./testdata/initexit", Timeout: 5 * time.Minute,
		Export: []string{"GORUN_TEST_EXIT=2", "GORUN_TIMEOUT=10m"}})
	if !errors.Is(err, ErrRankFailed) || errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v, want rank 2's failure\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	lines := rankLines(t, out)
	for r := range 2 {
		got := strings.Join(lines[r], "\n")
		if !strings.Contains(got, "INIT ERROR: gorun: init: rank 2: ") || !strings.Contains(got, "before it joined (while the world formed)") {
			t.Errorf("rank %d: want Init to fail naming rank 2, got:\n%s\nstderr:\n%s", r, got, stderr)
		}
	}
}
