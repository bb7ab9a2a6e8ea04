package main

import (
	"fmt"
	"math"
	"strings"
)

// target is one figure the issue "Latency: the caller drives progress" asks
// for. A time target is met when gorun's time over the best peer's is at
// most limit; a busbw target when gorun's busbw over the best peer's is at
// least limit. Both come from outcome.ratio: paired within rounds.
type target struct {
	scen  string
	bytes int64
	busbw bool
	peers []string
	limit float64
}

var (
	mpis       = []string{"openmpi", "mpich"}
	openMPI    = []string{"openmpi"}
	openMPIGlo = []string{"openmpi", "gloo"}
)

var targets = []target{
	// The 8 B time twice: the shm2 and tcp2 rows time 30 calls, the first
	// of a fresh job (its start-up transient: README), the sweep's 2000
	// after 1000 warm-up (-lat-warmup), as OSU's latency tests do.
	{"shm2", 8, false, mpis, 1.5},
	{"sweep-shm2", 8, false, mpis, 1.5},
	{"barrier-shm2", 0, false, mpis, 1.5},
	{"shm2", 1 << 20, true, mpis, 1.2},
	{"shm2", 16 << 20, true, mpis, 1.2},
	{"shm2", 256 << 20, true, mpis, 1.2},
	{"shm4", 8, false, openMPI, 2},
	{"shm4", 1 << 20, true, mpis, 1.2},
	{"shm4", 16 << 20, true, mpis, 1.2},
	{"tcp2", 8, false, openMPI, 1.5},
	{"sweep-tcp2", 8, false, openMPI, 1.5},
	{"tcp4", 8, false, openMPI, 1.5},
	{"tcp2", 1 << 20, true, openMPIGlo, 1.5},
	{"tcp2", 16 << 20, true, openMPIGlo, 1.5},
	{"tcp4", 1 << 20, true, openMPIGlo, 1.5},
	{"tcp4", 16 << 20, true, openMPIGlo, 1.5},
	// Across hosts (issue 12): hierarchical against flat and Open MPI.
	{"cluster-2x2", 16 << 20, true, []string{"gorun-flat"}, 1.3},
	{"cluster-2x2", 8, false, openMPI, 1.5},
	{"cluster-2x2", 1 << 20, true, openMPI, 1.2},
	{"cluster-2x2", 16 << 20, true, openMPI, 1.2},
	{"cluster-2x2", 64 << 20, true, openMPI, 1.2},
	{"cluster-4x1", 8, false, openMPI, 1.5},
	{"cluster-4x1", 1 << 20, true, openMPI, 1.2},
	{"cluster-4x1", 16 << 20, true, openMPI, 1.2},
	{"cluster-4x1", 64 << 20, true, openMPI, 1.2},
}

func (t target) String() string {
	what := "time"
	cmp := "≤"
	if t.busbw {
		what, cmp = "busbw", "≥"
	}
	size := human(t.bytes)
	if t.bytes == 0 {
		size = "barrier"
	}
	return fmt.Sprintf("%s %s %s %s %.1f× best of %s", t.scen, size, what, cmp, t.limit, strings.Join(t.peers, ", "))
}

// verdict is a target's measured ratio (gorun/peer time, or gorun/peer
// busbw), NaN when the run lacks the scenario, the size or a pair.
type verdict struct {
	target
	ratio float64
}

func (v verdict) met() bool {
	if v.busbw {
		return v.ratio >= v.limit
	}
	return v.ratio <= v.limit
}

// judge evaluates every target against the outcomes by scenario name.
func judge(outs map[string]*outcome, ts []target) []verdict {
	var vs []verdict
	for _, t := range ts {
		v := verdict{target: t, ratio: math.NaN()}
		if o := outs[t.scen]; o != nil {
			for i, b := range o.sc.sizes {
				if b == t.bytes {
					r := o.ratio(i, t.peers)
					if t.busbw {
						r = 1 / r
					}
					v.ratio = r
				}
			}
		}
		vs = append(vs, v)
	}
	return vs
}

// renderTargets is the table of targets: measured ratio, met or missed;
// targets whose scenario or size did not run are left out.
func renderTargets(vs []verdict) string {
	var w strings.Builder
	fmt.Fprintf(&w, "| target | measured | met? |\n|---|---:|---|\n")
	n := 0
	for _, v := range vs {
		if math.IsNaN(v.ratio) {
			continue
		}
		n++
		verdict := "met"
		if !v.met() {
			verdict = "**missed**"
		}
		fmt.Fprintf(&w, "| %s | %.2f× | %s |\n", v.target, v.ratio, verdict)
	}
	if n == 0 {
		return "No target's scenario ran.\n"
	}
	return w.String()
}
