package numa

import (
	"fmt"
	"slices"
)

// BindMode is the launcher's --bind-to: how local ranks are placed.
type BindMode uint8

const (
	BindNone BindMode = iota // no binding: the OS schedules freely
	BindCore                 // each local rank gets its own block of cores
	BindNUMA                 // each local rank gets every CPU of one node
)

func (m BindMode) String() string {
	switch m {
	case BindNone:
		return "none"
	case BindCore:
		return "core"
	case BindNUMA:
		return "numa"
	}
	return fmt.Sprintf("bindmode(%d)", uint8(m))
}

// ParseBindMode parses "none", "core" or "numa" ("" is none).
func ParseBindMode(s string) (BindMode, error) {
	switch s {
	case "", "none":
		return BindNone, nil
	case "core":
		return BindCore, nil
	case "numa":
		return BindNUMA, nil
	}
	return BindNone, opErr("parse bind mode", s, ErrInvalid)
}

// CPUSetFor returns the CPUs local rank localRank of localSize should run
// on under mode, ascending; nil for BindNone.
//
// BindCore splits the cores (hardware threads of one core stay together)
// into localSize equal blocks in node order, so consecutive ranks share a
// node; leftover cores stay unused. With more ranks than cores, ranks share
// cores round-robin. BindNUMA gives rank r every CPU of the node
// r·nodes/localSize among the nodes that have CPUs, so consecutive ranks
// share a node and the nodes are used evenly.
func (t *Topology) CPUSetFor(localRank, localSize int, mode BindMode) ([]int, error) {
	if localSize <= 0 || localRank < 0 || localRank >= localSize {
		return nil, opErr("cpu set", fmt.Sprintf("local rank %d of %d", localRank, localSize), ErrInvalid)
	}
	switch mode {
	case BindNone:
		return nil, nil
	case BindCore:
		cores := t.cores()
		if len(cores) == 0 {
			return nil, opErr("cpu set", "bind-to core", ErrInvalid)
		}
		if localSize > len(cores) {
			return slices.Clone(cores[localRank%len(cores)]), nil
		}
		per := len(cores) / localSize
		var cpus []int
		for _, c := range cores[localRank*per : (localRank+1)*per] {
			cpus = append(cpus, c...)
		}
		slices.Sort(cpus)
		return cpus, nil
	case BindNUMA:
		var nodes []Node
		for _, n := range t.Nodes {
			if len(n.CPUs) > 0 {
				nodes = append(nodes, n)
			}
		}
		if len(nodes) == 0 {
			return nil, opErr("cpu set", "bind-to numa", ErrInvalid)
		}
		return slices.Clone(nodes[localRank*len(nodes)/localSize].CPUs), nil
	}
	return nil, opErr("cpu set", mode, ErrInvalid)
}

// cores lists the cores, each as its CPUs, in node order and then by
// first CPU.
func (t *Topology) cores() [][]int {
	var out [][]int
	for _, n := range t.Nodes {
		byFirst := map[int][]int{}
		var firsts []int
		for _, c := range n.CPUs {
			f := t.cpuCore[c]
			if _, ok := byFirst[f]; !ok {
				firsts = append(firsts, f)
			}
			byFirst[f] = append(byFirst[f], c)
		}
		slices.Sort(firsts)
		for _, f := range firsts {
			out = append(out, byFirst[f])
		}
	}
	return out
}
