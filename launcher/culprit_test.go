package launcher

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCulprit(t *testing.T) {
	fail := func(rank int) *RankError { return &RankError{Rank: rank, ExitCode: 1, Err: ErrRankFailed} }
	for _, tc := range []struct {
		name  string
		held  []int
		blame map[int]int
		rank  int
		text  string
	}{
		{"no reports: the first", []int{0, 2, 1}, nil, 0, "rank 0 exited with status 1; ranks 1,2 failed too"},
		{"blamed rank exited last", []int{0, 2, 1}, map[int]int{0: 1, 2: 1}, 1, "rank 1 exited with status 1; ranks 0,2 failed because of it"},
		{"a chain: 2 blames 0, 0 blames 1", []int{2, 0, 1}, map[int]int{2: 0, 0: 1}, 1, "rank 1 exited with status 1; ranks 0,2 failed because of it"},
		{"the blamed rank did not fail", []int{0, 2}, map[int]int{0: 1}, 2, "rank 2 exited with status 1; rank 0 failed too"},
		{"a cycle: the first", []int{0, 1}, map[int]int{0: 1, 1: 0}, 0, "rank 0 exited with status 1; rank 1 failed too"},
		{"alone", []int{3}, map[int]int{}, 3, "rank 3 exited with status 1"},
		// Rank 1 (running: frozen, say) is blamed and did not exit.
		{"the blamed rank still runs", []int{2, 0}, map[int]int{2: 1, 0: 1}, 2,
			"rank 2 exited with status 1; ranks 0,2 failed because of rank 1, which has not exited"},
		{"one blames a rank that runs", []int{2, 0}, map[int]int{0: 1}, 2, "rank 2 exited with status 1; rank 0 failed too"},
	} {
		var held []*RankError
		for _, r := range tc.held {
			held = append(held, fail(r))
		}
		err := culprit(held, tc.blame, func(rank int) bool { return rank == 1 })
		var re *RankError
		if !errors.As(err, &re) || re.Rank != tc.rank || err.Error() != tc.text {
			t.Errorf("%s: %q (rank %v), want rank %d: %q", tc.name, err, re, tc.rank, tc.text)
		}
	}
}

// A rank returns an error, closes its communicator and exits 1 half a
// second later (as Python's teardown does); the others' allreduces fail
// because it left, and they exit 1 first. gorun names rank 1, says the
// others failed because of it, and exits with its status (mpirun, and
// gorun before, named whichever exited first).
func TestCulpritExitsLast(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a comm program")
	}
	start := time.Now()
	stdout, stderr, err := runJob(t, "", Config{NP: 3, Program: "./testdata/timeline", Timeout: 90 * time.Second,
		Export: []string{"TL_FAIL_RANK=1", "TL_FAIL_DELAY=500ms"}})
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || ExitStatus(err) != 1 {
		t.Fatalf("Run = %v, want rank 1's exit 1\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if !strings.Contains(stderr, "gorun: rank 1 exited with status 1; ranks 0,2 failed because of it") {
		t.Errorf("the summary does not name rank 1 and its victims:\n%s", stderr)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("the job took %v", d)
	}
}
