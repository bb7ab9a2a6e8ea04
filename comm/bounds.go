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
//	                                  rings per connection: measured
//	                                  ≈ 2.5 MiB per rank at 1,024 ranks on
//	                                  mem, 3.6-4.8 MiB up to 204 ranks
//	                                  (localFloor; README, "Scale")
//
// A connection made later, on demand, that hits the descriptor limit
// fails the operation naming the peer and RLIMIT_NOFILE.

import (
	"errors"
	"fmt"
	"os"
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
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
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
