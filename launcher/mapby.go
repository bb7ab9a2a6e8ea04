package launcher

import (
	"fmt"
	"slices"
	"strings"
)

// PlaceBy is Place with a mapping policy, as mpirun's --map-by: "slot"
// (or "") fills each host before the next; "node" deals ranks round-robin
// over the hosts, one per host per round, within each host's slots.
func PlaceBy(hosts []Host, np int, mapBy string) ([]Slot, error) {
	switch mapBy {
	case "", "slot", "core":
		return Place(hosts, np)
	case "node":
	default:
		return nil, fmt.Errorf("%w: --map-by %q: want slot or node%s", ErrUsage, mapBy, mapByHint(mapBy))
	}
	if np < 1 || len(hosts) == 0 {
		return Place(hosts, np)
	}
	hosts = mergeLocal(hosts)
	used := make([]int, len(hosts))
	var slots []Slot
	for len(slots) < np {
		placed := false
		for i, h := range hosts {
			if used[i] < h.Slots && len(slots) < np {
				slots = append(slots, Slot{Rank: len(slots), Host: h.Name, LocalRank: used[i]})
				used[i]++
				placed = true
			}
		}
		if !placed {
			total := 0
			for _, h := range hosts {
				total += h.Slots
			}
			return nil, fmt.Errorf("%w: -np %d but the hosts have %d slots (--oversubscribe allows more)", ErrUsage, np, total)
		}
	}
	for i := range slots {
		for j, h := range hosts {
			if h.Name == slots[i].Host {
				slots[i].LocalSize = used[j]
				break
			}
		}
	}
	return slots, nil
}

// mapByHint is gorun's way of doing what Open MPI's --map-by value does,
// for the values gorun does not take, or "".
func mapByHint(v string) string {
	base, mods, _ := strings.Cut(strings.ToLower(v), ":")
	switch {
	case strings.Contains(mods, "oversubscribe"):
		return fmt.Sprintf(" (Open MPI's :OVERSUBSCRIBE is --oversubscribe here: --map-by %s --oversubscribe)", base)
	case base == "ppr":
		return " (Open MPI's ppr:N:node is --npernode N here)"
	case strings.Contains(mods, "pe="):
		return " (gorun has no CPUs-per-rank mapping: --bind-to core|numa binds each rank, and it gets its share of the CPUs as GOMAXPROCS)"
	case base == "socket" || base == "package" || base == "numa" || base == "l3cache" || base == "hwthread":
		return " (gorun places ranks on hosts only; --bind-to core|numa binds them within a host)"
	}
	return ""
}

// fitSlots gives hosts slots for np ranks where they may take more than
// their slots, as Open MPI does: a host with max_slots up to it, and with
// --oversubscribe (oversub) a host without max_slots without bound. The ranks
// beyond the slots are dealt over those hosts in turn, one more slot for
// each per round, so that by-slot mapping keeps each host's ranks
// together. When the hosts cannot take np ranks, the error names those
// that reached their max_slots. --npernode (perNode > 0) caps every host
// first (CapSlots) and overrides --oversubscribe. Without hosts (this
// machine alone) gorun takes any number of ranks already.
func fitSlots(hosts []Host, np int, oversub bool, perNode int) ([]Host, error) {
	if len(hosts) == 0 {
		return hosts, nil
	}
	hosts = CapSlots(mergeLocal(hosts), perNode) // a copy
	oversub = oversub && perNode <= 0
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	more := func(h Host) bool { return h.MaxSlots > h.Slots || h.MaxSlots == 0 && oversub }
	for total < np && slices.ContainsFunc(hosts, more) {
		for i := range hosts {
			if total < np && more(hosts[i]) {
				hosts[i].Slots++
				total++
			}
		}
	}
	if total >= np {
		return hosts, nil
	}
	if perNode > 0 {
		return nil, fmt.Errorf("%w: -np %d but the hosts take at most %d ranks with --npernode %d", ErrUsage, np, total, perNode)
	}
	var full []string
	unbounded := false
	for _, h := range hosts {
		if h.MaxSlots > 0 {
			full = append(full, fmt.Sprintf("%s max_slots=%d", h.Name, h.MaxSlots))
		} else {
			unbounded = true
		}
	}
	if len(full) == 0 {
		return nil, fmt.Errorf("%w: -np %d but the hosts have %d slots (--oversubscribe allows more)", ErrUsage, np, total)
	}
	hint := ""
	if unbounded && !oversub {
		hint = "; --oversubscribe allows more on the hosts without max_slots"
	}
	return nil, fmt.Errorf("%w: -np %d but the hosts take at most %d ranks (%s)%s", ErrUsage, np, total, strings.Join(full, ", "), hint)
}

// CapSlots limits every host to n slots (--npernode), max_slots too; n ≤ 0
// changes nothing.
func CapSlots(hosts []Host, n int) []Host {
	if n <= 0 {
		return hosts
	}
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		h.Slots = min(h.Slots, n)
		if h.MaxSlots > 0 {
			h.MaxSlots = min(h.MaxSlots, n)
		}
		out[i] = h
	}
	return out
}
