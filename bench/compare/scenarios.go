package main

import (
	"fmt"
	"strings"
)

// scenario is one table: one collective, one world size, one fabric, and
// the implementations that run it interleaved.
type scenario struct {
	name  string
	coll  string // allreduce, broadcast or barrier
	ranks int
	fab   string // shm or tcp
	sizes []int64
	impls []string
	lat   bool // latency-bound: runs -lat-iters iterations instead of -iters
	// hosts > 0: the ranks run on that many hosts of the namespace cluster
	// (scripts/cluster, 2 Gbit/s links), ranks/hosts on each (fab "cluster").
	hosts int
}

// sweep is 8 B to 64 KiB by factors of step.
func sweep(step int64) []int64 {
	var s []int64
	for b := int64(8); b <= 64<<10; b *= step {
		s = append(s, b)
	}
	if s[len(s)-1] != 64<<10 {
		s = append(s, 64<<10)
	}
	return s
}

// clusterSizes are the cluster scenarios' sizes, 8 B to 64 MiB.
var clusterSizes = []int64{8, 64 << 10, 1 << 20, 16 << 20, 64 << 20}

// clusterPeers: gorun as its table picks (hierarchical across hosts above
// 64 KiB), gorun forced flat (GORUN_ALGO=allreduce:ring,broadcast:chain),
// Open MPI started through ssh into the hosts, and Gloo.
var clusterPeers = []string{"gorun", "gorun-flat", "openmpi", "gloo"}

// allScenarios is every scenario in the order they run. Open MPI runs with
// pml ob1 and the btl the fabric names (self,vader for shm; tcp,self on
// loopback for tcp); MPICH (ch4:ucx in Debian) picks its own shared-memory
// path and is left out of the TCP scenarios, as the targets compare TCP with
// Open MPI and Gloo. Gloo always runs over TCP loopback; it stands beside
// gorun in the TCP scenarios only.
func allScenarios() []scenario {
	shmPeers := []string{"gorun", "openmpi", "mpich"}
	tcpPeers := []string{"gorun", "openmpi", "gloo"}
	return []scenario{
		{name: "shm2", coll: "allreduce", ranks: 2, fab: "shm", sizes: []int64{8, 1 << 20, 16 << 20, 256 << 20}, impls: shmPeers},
		{name: "shm4", coll: "allreduce", ranks: 4, fab: "shm", sizes: []int64{8, 64 << 10, 1 << 20, 16 << 20}, impls: shmPeers},
		{name: "tcp2", coll: "allreduce", ranks: 2, fab: "tcp", sizes: []int64{8, 1 << 20, 16 << 20}, impls: tcpPeers},
		{name: "tcp4", coll: "allreduce", ranks: 4, fab: "tcp", sizes: []int64{8, 1 << 20, 16 << 20}, impls: tcpPeers},
		{name: "bcast4", coll: "broadcast", ranks: 4, fab: "shm", sizes: []int64{16 << 20}, impls: shmPeers},
		{name: "barrier-shm2", coll: "barrier", ranks: 2, fab: "shm", sizes: []int64{0}, impls: shmPeers, lat: true},
		{name: "barrier-shm4", coll: "barrier", ranks: 4, fab: "shm", sizes: []int64{0}, impls: shmPeers, lat: true},
		{name: "barrier-tcp2", coll: "barrier", ranks: 2, fab: "tcp", sizes: []int64{0}, impls: tcpPeers, lat: true},
		{name: "barrier-tcp4", coll: "barrier", ranks: 4, fab: "tcp", sizes: []int64{0}, impls: tcpPeers, lat: true},
		{name: "sweep-shm2", coll: "allreduce", ranks: 2, fab: "shm", sizes: sweep(2), impls: shmPeers, lat: true},
		{name: "sweep-tcp2", coll: "allreduce", ranks: 2, fab: "tcp", sizes: sweep(2), impls: tcpPeers, lat: true},
		{name: "cluster-2x2", coll: "allreduce", ranks: 4, hosts: 2, fab: "cluster", sizes: clusterSizes, impls: clusterPeers},
		{name: "cluster-4x1", coll: "allreduce", ranks: 4, hosts: 4, fab: "cluster", sizes: clusterSizes, impls: clusterPeers},
		{name: "cluster-bcast2x2", coll: "broadcast", ranks: 4, hosts: 2, fab: "cluster", sizes: []int64{8, 1 << 20, 16 << 20}, impls: clusterPeers},
	}
}

// selectScenarios picks the scenarios a comma-separated list names: a full
// name (shm2, barrier-tcp4) or a group, the part before the dash (barrier,
// sweep). An empty list is all of them. quick keeps sizes up to 1 MiB (the
// smallest at least) and sweeps by factors of 4; spin adds Open MPI
// busy-polling to the scenarios with more ranks than CPUs.
func selectScenarios(list string, quick, spin bool, cpus int) ([]scenario, error) {
	var out []scenario
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	used := map[string]bool{}
	for _, sc := range allScenarios() {
		group, _, _ := strings.Cut(sc.name, "-")
		if len(want) > 0 && !want[sc.name] && !want[group] {
			continue
		}
		used[sc.name], used[group] = true, true
		if quick {
			sc.sizes = quickSizes(sc)
		}
		if spin && sc.ranks > cpus && sc.fab == "shm" {
			sc.impls = append(append([]string(nil), sc.impls...), "openmpi-spin")
		}
		out = append(out, sc)
	}
	for n := range want {
		if !used[n] {
			return nil, fmt.Errorf("unknown scenario %q", n)
		}
	}
	return out, nil
}

func quickSizes(sc scenario) []int64 {
	if strings.HasPrefix(sc.name, "sweep") {
		return sweep(4)
	}
	var s []int64
	for _, b := range sc.sizes {
		if b <= 1<<20 || len(s) == 0 {
			s = append(s, b)
		}
	}
	return s
}
