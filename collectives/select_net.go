package collectives

// The table between hosts.
//
// A communicator whose ranks span hosts (linked by tcp or verbs over a
// network) has no fitted constants: the tcp constants are loopback's (β
// 0.16 ns/B, where the namespace cluster's 2 Gbit/s links take 4 ns/B, and
// a real network something else), and nothing here measures a network to
// fit. Its table ("net") is the hand-made one that preceded the cost model
// (bench/compare's cluster figures, bench/compare/CLUSTER.md, were taken
// with it), with comm's rule for a pair linked by tcp (recursive doubling
// up to 512 KiB). A fit on the cluster's points would replace it.

// netProvider names the links between hosts in TableFor and NewTable.
const netProvider = "net"

// netSelect is the table between hosts: c moving bytes over size ranks.
func netSelect(c Collective, size, bytes int) Algo {
	switch c {
	case AllReduce:
		switch {
		case bytes <= 16<<10:
			return RecDoubling
		case size <= 2 && bytes <= 512<<10:
			// One exchange of the whole buffer against two dependent
			// ones of halves (tcp loopback, 2 processes, 2026-11-24:
			// 128 KiB 151-174 -> 89-113 us, 512 KiB 325-348 -> 184-211).
			return RecDoubling
		case size <= 2:
			return Ring
		case bytes <= 256<<10:
			return HalvingDoubling
		case size > 16 && bytes <= 4<<20:
			return Tree
		}
		return Ring
	case Broadcast:
		if bytes <= 256<<10 || size <= 2 {
			return Tree
		}
		return Chain
	case AllGather:
		if bytes*size <= 64<<10 {
			return Bruck
		}
		return Ring
	case ReduceScatter:
		if bytes*size <= 16<<10 {
			return RecDoubling
		}
		return Ring
	}
	return Algos(c)[0]
}
