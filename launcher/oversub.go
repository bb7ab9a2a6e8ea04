package launcher

import (
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

func sortedRanks(sets map[int][]int) []int {
	rs := make([]int, 0, len(sets))
	for r := range sets {
		rs = append(rs, r)
	}
	sort.Ints(rs)
	return rs
}
