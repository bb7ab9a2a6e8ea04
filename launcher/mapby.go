package launcher

import "fmt"

// PlaceBy is Place with a mapping policy, as mpirun's --map-by: "slot"
// (or "") fills each host before the next; "node" deals ranks round-robin
// over the hosts, one per host per round, within each host's slots.
func PlaceBy(hosts []Host, np int, mapBy string) ([]Slot, error) {
	switch mapBy {
	case "", "slot", "core":
		return Place(hosts, np)
	case "node":
	default:
		return nil, fmt.Errorf("%w: --map-by %q: want slot or node", ErrUsage, mapBy)
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

// oversubscribe gives hosts at least np slots (--oversubscribe): the
// ranks beyond their slots are dealt over the hosts in turn, one more
// slot for each per round, so that by-slot mapping keeps each host's
// ranks together. Without hosts (this machine alone) gorun takes any
// number of ranks already.
func oversubscribe(hosts []Host, np int) []Host {
	if len(hosts) == 0 {
		return hosts
	}
	hosts = mergeLocal(hosts) // a copy
	total := 0
	for _, h := range hosts {
		total += h.Slots
	}
	for i := 0; total < np; i = (i + 1) % len(hosts) {
		hosts[i].Slots++
		total++
	}
	return hosts
}

// CapSlots limits every host to n slots (--npernode); n ≤ 0 changes nothing.
func CapSlots(hosts []Host, n int) []Host {
	if n <= 0 {
		return hosts
	}
	out := make([]Host, len(hosts))
	for i, h := range hosts {
		h.Slots = min(h.Slots, n)
		out[i] = h
	}
	return out
}
