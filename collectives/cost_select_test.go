package collectives

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestCostSelect prints the selection table derived from the cost model
// (Best at each collective, rank count and size, one CPU per rank, no
// staging bound, as for one process per rank) beside Select's, for each
// provider, and counts where they agree; skipped unless GORUN_COST_SELECT
// is set. A cell shows Select's choice, then "~" and the model's where
// the model predicts its own within costTie of Select's (a tie, given the
// model's error), or "/" and the model's and how much faster it predicts
// its own to be.
//
//	GORUN_COST_SELECT=1 go test -run CostSelect -v ./collectives/
func TestCostSelect(t *testing.T) {
	if os.Getenv("GORUN_COST_SELECT") == "" {
		t.Skip("set GORUN_COST_SELECT=1 to print the derived selection table")
	}
	ranks := []int{2, 3, 4, 8, 16, 32, 64}
	var sizes []int
	for b := 8; b <= 64<<20; b *= 2 {
		sizes = append(sizes, b)
	}
	for _, p := range []string{"shm", "tcp", "mem"} {
		k, _ := CostOf(p)
		for _, c := range []Collective{AllReduce, Broadcast, AllGather, ReduceScatter} {
			same, agree, all := 0, 0, 0
			var b strings.Builder
			fmt.Fprintf(&b, "%s %s: Select[~model (a tie) or /model (its predicted gain)]\n%8s", p, c, "bytes")
			for _, n := range ranks {
				fmt.Fprintf(&b, " %16d", n)
			}
			b.WriteByte('\n')
			for _, s := range sizes {
				fmt.Fprintf(&b, "%8s", sizeName(s))
				for _, n := range ranks {
					sel := Select(c, n, s)
					best, bt := k.Best(c, n, 0, s)
					st := k.Estimate(c, sel, n, s).Time(n, 0)
					cell := sel.String()
					all++
					switch {
					case best == sel:
						same++
						agree++
					case st < costTie*bt:
						agree++
						cell += "~" + best.String()
					default:
						cell = fmt.Sprintf("%s/%s (%.2fx)", sel, best, st/bt)
					}
					fmt.Fprintf(&b, " %16s", cell)
				}
				b.WriteByte('\n')
			}
			t.Logf("%sthe same at %d of %d, ties included at %d\n", b.String(), same, all, agree)
		}
	}
}

// costTie is the ratio of predicted times under which the derived table
// counts Select's choice as the model's.
const costTie = 1.1

// sizeName prints a power-of-two size in B, KiB or MiB.
func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}
