package launcher

import (
	"cmp"
	"fmt"
	"sort"
)

// bindWarning is the warning for --bind-to core when this host's ranks
// outnumber its cores, so that two ranks are bound to the same CPUs; ""
// when no CPU is shared.
func bindWarning(mode string, sets map[int][]int) string {
	if mode != "core" {
		return ""
	}
	owner := map[int]int{}
	var shared []int
	for _, r := range sortedRanks(sets) {
		for _, c := range sets[r] {
			if o, ok := owner[c]; ok && o != r {
				shared = append(shared, r)
				break
			}
			owner[c] = r
		}
	}
	if len(shared) == 0 {
		return ""
	}
	return fmt.Sprintf("gorun: --bind-to core: %d local ranks on %d CPUs: ranks %v share cores with others (oversubscribed; collectives will be slow; use fewer ranks or --bind-to none)",
		len(sets), len(owner), shared)
}

// bindingReport is what --report-bindings prints, a line per rank: the
// CPUs a rank on this host is bound to at fork (sets), or that it runs
// unbound; a remote rank binds itself in comm.Init (GORUN_BIND).
func bindingReport(slots []Slot, sets map[int][]int, mode string) []string {
	lines := make([]string, 0, len(slots))
	for _, s := range slots {
		var line string
		switch {
		case !isLocalHost(s.Host) && mode != "" && mode != "none":
			line = fmt.Sprintf("gorun: rank %d on %s: binds itself at start (--bind-to %s)", s.Rank, s.Host, mode)
		case !isLocalHost(s.Host):
			line = fmt.Sprintf("gorun: rank %d on %s: not bound (--bind-to none)", s.Rank, s.Host)
		case len(sets[s.Rank]) > 0:
			line = fmt.Sprintf("gorun: rank %d bound to CPUs %v (--bind-to %s)", s.Rank, sets[s.Rank], mode)
		default:
			line = fmt.Sprintf("gorun: rank %d not bound: may run on any CPU (--bind-to %s)", s.Rank, cmp.Or(mode, "none"))
		}
		lines = append(lines, line)
	}
	return lines
}

func sortedRanks(sets map[int][]int) []int {
	rs := make([]int, 0, len(sets))
	for r := range sets {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}
