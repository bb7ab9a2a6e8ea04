package launcher

import (
	"fmt"
	"testing"
	"time"
)

// A process a rank leaves behind in its process group dies with the rank,
// even when the rank succeeds (cmd/gorun's TestSignalLeavesNothingBehind
// covers the helpers of ranks stopped by a signal).
func TestRankHelpersDieWithTheRank(t *testing.T) {
	out, stderr, err := runJob(t, "helper", Config{NP: 2})
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, stderr)
	}
	lines := rankLines(t, out)
	for r := 0; r < 2; r++ {
		var pid int
		if len(lines[r]) == 1 {
			fmt.Sscanf(lines[r][0], "helper %d", &pid)
		}
		if pid <= 0 {
			t.Fatalf("rank %d printed %q", r, lines[r])
		}
		// gorun killed it before it reaped the rank; the kill takes a
		// moment to land.
		for end := time.Now().Add(5 * time.Second); alive(pid); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(end) {
				t.Errorf("rank %d's helper %d outlived the job", r, pid)
				break
			}
		}
	}
}
