package comm

// Bounds: what a communicator needs of the process, checked before it
// connects, so that a limit gives an error that names it and says how to
// raise it, not a hang or the kernel's OOM killer.
//
//	ranks in one process (NewLocal)   maxLocalRanks (4096)
//	descriptors, tcp                  one per connection: about
//	                                  2·log2(n)+4 per rank at start-up, up to
//	                                  n-1 after alltoall (both ends count in
//	                                  one process), and one per rank for its
//	                                  completion queue's epoll; RLIMIT_NOFILE
//	descriptors, shm                  four per connection (its socket, the
//	                                  peer's pidfd, its eventfd and the
//	                                  peer's): 252 with 64 ranks on a host,
//	                                  not checked
//	memory mappings, mem              three per connection end, but
//	                                  adjacent ones merge: 359 in all at
//	                                  512 ranks (vm.max_map_count 65530)
//	memory                            staging (stagingFor) and receive
//	                                  rings per connection: measured on
//	                                  mem 3.1-4.7 MiB per rank up to 204
//	                                  ranks (localFloor), 2.1 at 1,024, 1.7
//	                                  at 4,096 (README, "Scale"); NewLocal
//	                                  checks its world's estimate
//	                                  (localWorldBytes) against the memory
//	                                  available (MemAvailable, the cgroup's
//	                                  limit)
//
// A connection made later, on demand, that hits the descriptor limit
// fails the operation naming the peer and RLIMIT_NOFILE.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gorun-hpc/gorun/collectives"
)

// maxLocalRanks bounds NewLocal: beyond it the schedules' set-up and the
// goroutines (about 11 per rank) make a world that no test needs.
const maxLocalRanks = 4096

// ErrLimit: a process limit is too low for the communicator asked for;
// the error names the limit and how to raise it.
var ErrLimit = errors.New("process limit too low")

// checkBounds checks, before connecting, that this process can hold the
// start-up connections of ranks ranks of a size-rank world (ranks > 1 for
// NewLocal, whose ranks share the process) over provider names.
func checkBounds(names []string, size, ranks int) error {
	if ranks > maxLocalRanks {
		return fmt.Errorf("gorun: %d ranks in one process: %w: at most %d (run more processes, with gorun -np)", ranks, ErrLimit, maxLocalRanks)
	}
	conns := ranks * collectives.MaxInitPeers(size)
	for _, name := range names {
		switch name {
		case "tcp":
			if err := checkFDs(conns, ranks, openFDs(), nofile()); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkFDs checks that the descriptors of conns connections and of ranks
// completion queues (tcp's readiness check holds an epoll instance) fit
// under the limit with open already in use.
func checkFDs(conns, ranks, open int, limit uint64) error {
	need := conns + ranks
	if limit == 0 || uint64(open+need+16) <= limit {
		return nil
	}
	return fmt.Errorf("gorun: %d tcp connections of %d ranks need %d descriptors with %d open: %w: RLIMIT_NOFILE is %d (raise it: ulimit -n %d, or LimitNOFILE= in a systemd unit)",
		conns, ranks, need, open, ErrLimit, limit, 2*(open+need+16))
}

// nofile is the soft RLIMIT_NOFILE (0 unknown).
func nofile() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}

// openFDs counts this process's open descriptors (0 if unknown).
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// maxMapCount is vm.max_map_count (0 unknown).
func maxMapCount() int {
	n, _ := readNumber("/proc/sys/vm/max_map_count")
	return int(n)
}

// limitHint adds the limit to raise to a connection error caused by one.
func limitHint(err error) error {
	switch {
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return fmt.Errorf("%w (%w: RLIMIT_NOFILE is %d; raise it: ulimit -n)", err, ErrLimit, nofile())
	case errors.Is(err, syscall.ENOMEM):
		return fmt.Errorf("%w (%w: memory, or vm.max_map_count = %d)", err, ErrLimit, maxMapCount())
	}
	return err
}

// Memory of a world in one process. Its start-up links' staging is counted
// twice (the receive slots, and the send side's headers, about as much
// again), and each rank holds localRankBytes more (its goroutines' stacks,
// engine, device, completion queues) and localPeerBytes for each rank of
// the world (its tables of peers, its schedules' plans; the endpoints are
// shared, localHall.endpoints). Set above the peak resident set of every
// world TestScale measured (16 to 4,096 ranks, formed and run;
// 2026-11-29, README, Scale) by 6-36%: 1,749 MiB against 1,653 at 1,261
// ranks, 7,936 against 7,112-7,141 at 4,096.
const (
	localRankBytes = 768 << 10
	localPeerBytes = 192
)

// localWorldBytes estimates the memory n ranks in one process take once
// their communicator is formed, before any buffer of the caller's.
func localWorldBytes(cfg *config, n int) float64 {
	if n < 2 {
		return localRankBytes
	}
	p := stagingFor(cfg, n)
	ends := float64(n) * float64(collectives.MaxInitPeers(n))
	return 2*ends*float64(p.Slots*p.SlotBytes) + float64(n)*(localRankBytes+localPeerBytes*float64(n))
}

// memFiles are where availableMemory reads (a fake tree in tests).
var memFiles = struct{ meminfo, cgroup, cgroupRoot string }{
	"/proc/meminfo", "/proc/self/cgroup", "/sys/fs/cgroup",
}

// availableMemory is the memory this process may still take, and what
// bounds it: the kernel's MemAvailable, or less where the process's cgroup
// (v2 memory.max, v1 memory.limit_in_bytes) leaves less. ok is false where
// neither can be read.
func availableMemory() (avail float64, what string, ok bool) {
	if b, err := os.ReadFile(memFiles.meminfo); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
				if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
					avail, what, ok = kb*1024, "MemAvailable in /proc/meminfo", true
				}
			}
		}
	}
	b, err := os.ReadFile(memFiles.cgroup)
	if err != nil {
		return avail, what, ok
	}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		// "0::/path" (v2) or "N:memory:/path" (v1)
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 {
			continue
		}
		var limit, usage string
		switch {
		case f[0] == "0" && f[1] == "":
			dir := memFiles.cgroupRoot + f[2]
			limit, usage = dir+"/memory.max", dir+"/memory.current"
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir := memFiles.cgroupRoot + "/memory" + f[2]
			limit, usage = dir+"/memory.limit_in_bytes", dir+"/memory.usage_in_bytes"
		default:
			continue
		}
		lim, err1 := readNumber(limit)
		use, err2 := readNumber(usage)
		if err1 != nil || err2 != nil || lim >= 1<<60 { // "max", or v1's "no limit"
			continue
		}
		if left := max(0, lim-use); !ok || left < avail {
			avail, what, ok = left, "the cgroup's limit ("+limit+" less "+filepath.Base(usage)+")", true
		}
	}
	return avail, what, ok
}

// readNumber reads a file holding one number.
func readNumber(path string) (float64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
}

// checkMemory fails a world of n ranks in one process whose estimate
// (localWorldBytes) exceeds the memory available, before it takes any:
// the kernel's OOM killer would end the process, not with an error.
func checkMemory(cfg *config, n int) error {
	need := localWorldBytes(cfg, n)
	avail, what, ok := availableMemory()
	if !ok || need <= avail {
		return nil
	}
	return fmt.Errorf("gorun: NewLocal(%d): its links and schedules need about %.1f GiB, and %.1f GiB is available (%s): %w: run fewer ranks in one process (gorun -np N runs a process per rank), smaller staging (WithStaging), or free memory",
		n, need/(1<<30), avail/(1<<30), what, ErrLimit)
}
