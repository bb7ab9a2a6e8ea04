package launcher

// The stall report says where each rank is. jobctl knows what the ranks
// reported: to it a rank that closed its client "closed its job-control
// connection", which it may have done after its operation failed, or
// while its process hangs in its teardown, and a rank killed inside a
// collective stays in it. The runner knows how each rank's process ended, so the monitor
// takes the ranks whose process ended, and those that closed their
// client, out of jobctl's view, and says what they did.

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gorun-hpc/gorun/internal/jobctl"
)

// liveRanks is snap without the ranks whose process ended (ended: rank →
// how), whose last report may leave them in a collective for ever.
func liveRanks(snap jobctl.Snapshot, ended map[int]string) jobctl.Snapshot {
	if len(ended) == 0 {
		return snap
	}
	live := snap
	live.Ranks = nil
	for _, r := range snap.Ranks {
		if _, gone := ended[r.Rank]; !gone {
			live.Ranks = append(live.Ranks, r)
		}
	}
	return live
}

// stallReport is jobctl's stall report for the ranks whose process runs
// and that have not closed their client, followed by the others: what
// their process did ("rank 2 exited with status 1"), or that they closed
// their communicator and still run; then the ranks that never reported.
// ended nil: no rank's end is known (srun).
func stallReport(snap jobctl.Snapshot, now time.Time, size int, ended map[int]string) string {
	live := snap
	live.Ranks = nil
	groups := map[string][]int{}
	add := func(what string, rank int) { groups[what] = append(groups[what], rank) }
	running := ", and has not exited"
	if ended == nil {
		running = "" // not known (srun's tasks)
	}
	seen := map[int]bool{}
	for _, r := range snap.Ranks {
		seen[r.Rank] = true
		how, gone := ended[r.Rank]
		switch {
		case gone:
			add(how, r.Rank)
		case r.Done && r.Blamed:
			add(fmt.Sprintf("closed its communicator, failed because of rank %d%s", r.Cause, running), r.Rank)
		case r.Done:
			add("closed its communicator"+running, r.Rank)
		default:
			live.Ranks = append(live.Ranks, r)
		}
	}
	for rank, how := range ended {
		if !seen[rank] && rank < size {
			seen[rank] = true
			add(how, rank) // ended before its first report
		}
	}
	var parts []string
	if len(live.Ranks) > 0 {
		// size 0: jobctl lists no rank as silent; this does, below.
		parts = append(parts, strings.TrimPrefix(live.StallReport(now, 0), "stall: "))
	}
	whats := make([]string, 0, len(groups))
	for what, ranks := range groups {
		slices.Sort(ranks)
		whats = append(whats, what)
	}
	slices.SortFunc(whats, func(a, b string) int { return groups[a][0] - groups[b][0] })
	for _, what := range whats {
		parts = append(parts, rankWord(groups[what])+" "+what)
	}
	var silent []int
	for i := range size {
		if !seen[i] {
			silent = append(silent, i)
		}
	}
	if len(silent) > 0 {
		parts = append(parts, rankWord(silent)+" silent")
	}
	return "stall: " + strings.Join(parts, "; ")
}
