package collectives

import (
	"fmt"
	"strings"
)

// Collective names an operation.
type Collective uint8

const (
	AllReduce Collective = iota
	Reduce
	Broadcast
	AllGather
	ReduceScatter
	Gather
	Scatter
	AllToAll
	Barrier
	SendRecv
	AllGatherV
	GatherV
	ScatterV
	AllToAllV
	Scan
	ExScan
	numCollectives
)

var collNames = [...]string{"allreduce", "reduce", "broadcast", "allgather", "reducescatter", "gather", "scatter", "alltoall", "barrier", "sendrecv",
	"allgatherv", "gatherv", "scatterv", "alltoallv", "scan", "exscan"}

func (c Collective) String() string {
	if int(c) < len(collNames) {
		return collNames[c]
	}
	return fmt.Sprintf("collective(%d)", uint8(c))
}

// Algo names an algorithm. Auto lets the selection table decide.
type Algo uint8

const (
	Auto Algo = iota
	Ring
	Tree            // allreduce: double binary tree; broadcast, reduce: binomial tree
	RecDoubling     // allreduce: recursive doubling
	HalvingDoubling // allreduce: Rabenseifner
	Chain           // broadcast: pipelined chain
	Bruck           // allgather
	Dissemination   // barrier
	Direct          // gather, scatter, alltoall, send/recv
	numAlgos
)

var algoNames = [...]string{"auto", "ring", "tree", "rd", "hd", "chain", "bruck", "dissemination", "direct"}

func (a Algo) String() string {
	if int(a) < len(algoNames) {
		return algoNames[a]
	}
	return fmt.Sprintf("algo(%d)", uint8(a))
}

// ParseAlgo accepts an Algo's name and a few aliases.
func ParseAlgo(s string) (Algo, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return Auto, nil
	case "ring":
		return Ring, nil
	case "tree", "dbtree", "binomial":
		return Tree, nil
	case "rd", "recursive_doubling", "recursivedoubling":
		return RecDoubling, nil
	case "hd", "rabenseifner", "halving_doubling":
		return HalvingDoubling, nil
	case "chain", "pipeline":
		return Chain, nil
	case "bruck":
		return Bruck, nil
	case "dissemination":
		return Dissemination, nil
	case "direct", "linear", "pairwise":
		return Direct, nil
	}
	return Auto, fmt.Errorf("unknown algorithm %q", s)
}

// ParseCollective accepts a Collective's name.
func ParseCollective(s string) (Collective, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	for i, n := range collNames {
		if n == s {
			return Collective(i), nil
		}
	}
	if s == "reduce_scatter" {
		return ReduceScatter, nil
	}
	return 0, fmt.Errorf("unknown collective %q", s)
}

// Algos lists the algorithms implemented for c; the first is the fallback.
func Algos(c Collective) []Algo {
	switch c {
	case AllReduce:
		return []Algo{Ring, Tree, RecDoubling, HalvingDoubling}
	case Reduce:
		return []Algo{Tree}
	case Broadcast:
		return []Algo{Tree, Chain}
	case AllGather:
		return []Algo{Ring, Bruck}
	case ReduceScatter:
		return []Algo{Ring, RecDoubling}
	case Barrier:
		return []Algo{Dissemination}
	case Scan, ExScan:
		return []Algo{RecDoubling}
	}
	return []Algo{Direct}
}

// Supports reports whether a is implemented for c.
func Supports(c Collective, a Algo) bool {
	for _, x := range Algos(c) {
		if x == a {
			return true
		}
	}
	return false
}

// Select is the selection table's algorithm for c moving bytes (the full
// buffer of an allreduce or broadcast, one rank's block otherwise) over
// size ranks in one process (mem), one CPU per rank. The table is derived
// from the cost model (select_table.go): the model's fastest algorithm,
// with a 10% hysteresis between neighbouring sizes, and the measured
// exceptions in Exceptions. A communicator uses the table for its own
// provider and CPUs (TableFor, from comm's algoFor); Select is for
// callers without one.
func Select(c Collective, size int, bytes int) Algo {
	return TableFor("mem", size, 0).Algo(c, bytes)
}

// ChunkBytes is the pipelining unit for a buffer of bytes over size ranks:
// small enough to keep several chunks in flight, large enough to amortise
// per-message cost.
func ChunkBytes(a Algo, size, bytes int) int {
	if size == 2 && (a == Ring || a == Tree) {
		// Two ranks exchange halves (the double tree too: each rank
		// sends one half up and takes the other back down): in one
		// piece each, a rank reduces only once the whole half has
		// arrived, and its wait outlasts the spin before a yield
		// (shareAfter in internal/engine/wait.go). A quarter of the
		// buffer overlaps the copy of one piece with the reduction of
		// the last: shm, 2 processes, in place, 2026-11-24, with the
		// yield, the ring's 1 MiB 340-357 us in one piece against 230
		// in quarters; against the code before the yield, level to 10%
		// faster from 1 to 4 MiB. The double tree took the tree's
		// pieces until 2026-11-30 (64 and 256 KiB): 1.15-1.85x slower
		// than with these from 1 to 16 MiB on shm and tcp (medians of 3
		// interleaved rounds), level on mem. With
		// more ranks the blocks are smaller already, and 4 ranks on 2
		// CPUs were slower with finer pieces.
		return min(max(bytes/4, 128<<10), 1<<20)
	}
	if a == Tree || a == Chain {
		if bytes >= 4<<20 {
			return 256 << 10
		}
		return 64 << 10
	}
	return 1 << 20
}

// Build returns rank's schedule of c with algorithm a over count elements
// (per-rank block for allgather, reducescatter, gather, scatter, alltoall),
// pieces of at most chunk elements. For SendRecv, root is the peer and a
// send is encoded as count ≥ 0 with send=true via BuildSendRecv.
func Build(c Collective, a Algo, rank, size, root, count, chunk int) (*Schedule, error) {
	if chunk <= 0 {
		chunk = 1
	}
	if a == Auto {
		a = Algos(c)[0]
	}
	if !Supports(c, a) {
		return nil, fmt.Errorf("collectives: %s has no %s algorithm", c, a)
	}
	switch c {
	case AllReduce:
		switch a {
		case Ring:
			return RingAllReduce(rank, size, count, chunk), nil
		case Tree:
			return DoubleTreeAllReduce(rank, size, count, chunk), nil
		case RecDoubling:
			return RecursiveDoublingAllReduce(rank, size, count, chunk), nil
		case HalvingDoubling:
			return HalvingDoublingAllReduce(rank, size, count, chunk), nil
		}
	case Reduce:
		return BinomialReduce(rank, size, root, count, chunk), nil
	case Broadcast:
		if a == Chain {
			return ChainBroadcast(rank, size, root, count, chunk), nil
		}
		return BinomialBroadcast(rank, size, root, count, chunk), nil
	case AllGather:
		if a == Bruck {
			return BruckAllGather(rank, size, count, chunk), nil
		}
		return RingAllGather(rank, size, count, chunk), nil
	case ReduceScatter:
		if a == RecDoubling {
			// Every rank ends with the whole reduction, its own block
			// included.
			return RecursiveDoublingAllReduce(rank, size, size*count, chunk), nil
		}
		return RingReduceScatter(rank, size, count, chunk), nil
	case Gather:
		return DirectGather(rank, size, root, count, chunk), nil
	case Scatter:
		return DirectScatter(rank, size, root, count, chunk), nil
	case AllToAll:
		return PairwiseAllToAll(rank, size, count, chunk), nil
	case Barrier:
		return DisseminationBarrier(rank, size), nil
	case Scan:
		return HillisSteeleScan(rank, size, count, chunk), nil
	case ExScan:
		return HillisSteeleExScan(rank, size, count, chunk), nil
	}
	return nil, fmt.Errorf("collectives: cannot build %s", c)
}
