package collectives

// The cost model.
//
// Each algorithm's time is predicted from a few constants per provider.
// As in Hockney's model and Thakur, Rabenseifner and Gropp's analysis of
// the MPICH collectives, a message of m bytes between two ranks takes
// α + m·β and reducing m bytes takes m·γ; an algorithm's path is the cost
// of its critical path, the messages, bytes and reduced bytes of the
// busiest rank in the order its steps depend on each other. A message
// larger than the pipelining chunk (ChunkBytes, capped by the link's
// staging window) goes in pieces, each paying α. A block of less than an
// element is not sent (ElemBytes). A step that waits for a message its
// peer sent in the same call (every step of an allreduce) adds the
// latency λ (Latency); back-to-back calls of a broadcast overlap it.
//
// Ranks that share too few CPUs (n ranks in one process on two cores) do
// not run their steps in parallel. There the time is bounded by the CPU
// time of all ranks spread over the CPUs: per message o (LogP's overhead),
// twice that where a piece fills the staging window and waits for its
// credit, β and γ per byte, and an idle turn for every rank at each
// dependent step of the path whose receiver must wait for its next turn
// (an idle rank hands the CPU on: WaitPolicy.InProcess), a turn costing
// more the more ranks take turns, up to a bound (Crowd), and a step whose
// partner is ranks apart taking more rounds of turns the more ranks there
// are (Far). β and γ grow once the ranks' buffers outgrow the share of
// the last-level cache they keep (Spill, Cache).
//
// The constants (costs) are fitted by collectives' TestCostPoints from
// points that comm's TestCostFit measures on this machine (README, cost
// model, for the commands and the error).

import (
	"math"
	"math/bits"
	"slices"
)

// Cost holds a provider's constants, in seconds.
type Cost struct {
	// Alpha is what a message costs the path where nothing waits for
	// it: a pipeline of back-to-back messages (a broadcast's) takes Alpha
	// per message.
	Alpha float64
	// Beta is the time per byte sent, Gamma per byte reduced, while the
	// ranks' buffers fit in the last-level cache.
	Beta, Gamma float64
	// Latency is what a dependent step adds to Alpha: the time from a
	// message's send until its receiver, waiting for it, may use it,
	// where the receiver's next step needs it. Every step of an
	// allreduce waits for a message of the same call (steps); back-to-back
	// calls of a rooted collective (broadcast) overlap it, as the root
	// does not wait for its children. A 2-rank allreduce on mem takes
	// twice a broadcast's time per message at 8 B (0.88 against 0.50 µs):
	// an exchange pays the one-way latency that a broadcast's pipeline
	// hides.
	Latency float64
	// Overhead is the CPU time a message costs its ranks where they share
	// CPUs (LogP's o at both ends, with the polls and hand-offs it takes
	// there): what the work bound counts per message, where much of Alpha
	// is latency waited out while other ranks run.
	Overhead float64
	// Turn is the CPU time of one idle turn of a rank that shares its CPU
	// with others: a poll that finds nothing and hands the CPU on
	// (WaitPolicy.InProcess), among Crowd ranks or more (fewer: Crowd).
	// Where ranks outnumber CPUs, every rank takes about one turn per
	// dependent step of the path.
	Turn float64
	// Spill is how much more a byte sent or reduced costs out of the
	// cache than in it: β and γ grow by Spill times the share of the
	// ranks' buffers that does not fit in Cache.
	Spill float64
	// Cache is the bytes of the ranks' buffers that stay in the cache:
	// less than the last-level cache (CacheBytes), which this virtual
	// machine's 2 CPUs share with the host's other cores, and the ranks
	// with their staging. It is the power of two whose fit has the least
	// loss on the points it was fitted with: 16 MiB for shm and tcp (two
	// ranks' allreduce of 16 MiB took 1.6-1.9 times its 1 MiB time per
	// byte on mem and shm, where 2 × 16 MiB just fill the L3). mem's
	// points in the far placement, where the two vCPUs do not share
	// their caches, fit best at 1 MiB, its spill 25% (the loss 0.5%
	// higher from 8 MiB on).
	Cache float64
	// Crowd is the rank count from which an idle turn costs Turn: over
	// n < Crowd ranks it costs Turn·n/Crowd. A rank that takes its turn
	// finds its stack and state evicted by the others' turns since its
	// last, more of them the more ranks take turns between its own, until
	// none is left (measured, 8 B by the ring, where each step is a turn
	// of every rank and carries no data: 0.31 µs a turn at 8 ranks,
	// 0.17-0.50 from 12 to 256, cost_points_large.csv). A turn that grew
	// without bound, Turn·(1 + c·n) as fitted before 2026-11-29,
	// predicted 6x the ring's 8 B time at 64 ranks. Fitted where the points span rank counts
	// (mem: 2-64 ranks in one process); shm's and tcp's points (2-4 ranks
	// under the launcher) cannot tell it from Turn, and have none (0: a
	// turn costs Turn).
	Crowd float64
	// Far is how many more rounds of turns a dependent step takes, per
	// doubling of the ranks, where its partner is not the next rank in
	// turn: a step of recursive doubling, halving-doubling, the double
	// tree or Bruck takes 1 + Far·log2 n times its turns (turns). The
	// ring's steps go to the next rank and take one round at every count
	// (measured, 8 B allreduce on mem at 0.3 µs a turn: the ring 0.5-1.7
	// rounds a step from 4 to 256 ranks; recursive doubling 3.4 at 4
	// ranks, 6.4 at 16, 9.2 at 64, 12 at 128; the double tree 2.9, 5.4,
	// 7.7, 9.8). A broadcast's piece crosses all ranks in one round at
	// any count. Fitted, as Crowd, where the points span rank counts.
	Far float64

	// fac is the allreduce factors the estimates use (a Tuning's); nil:
	// allReduceFactor.
	fac *[numAlgos]float64
}

// CacheBytes is this machine's last-level cache (its L3: 32 MiB). The
// ranks' buffers spill well before they fill it (Cost.Cache).
const CacheBytes = 32 << 20

// ElemBytes is the element size the model counts messages in: a block of
// a ring or halving-doubling smaller than one element is not sent.
const ElemBytes = 4

// costs are the fitted constants per provider. mem's: collectives'
// TestCostPoints (GORUN_COST_FACTORS=keep: with the allreduce factors as
// they are) on cost_points.csv, which comm's TestCostFit measured all
// ranks in one process on this 2-core machine with the staging floor
// (comm's localFloor), in 20 passes of allreduce and broadcast and 15 of
// allgather and reduce-scatter: on 2026-11-28 (allreduce and broadcast at
// 17:00-17:06 and 17:20-17:28 UTC, 1-minute load 1.0-1.9, allgather and
// reduce-scatter at 18:57-19:00; rounds 0-9) and on 2026-11-29 00:05-00:25
// (all four, load 0.4-2.7; rounds 10-19), the fastest pass of each point
// kept; the points of the far placement (the near ones are too few to fit
// apart). Within 30% at 190 of mem's 241 check points, refitted on
// 2026-11-29 with Crowd as a bound on the turn's growth and Far (187
// without Far; the form before, Turn·(1 + c·n), refitted on these points:
// 178; its constants of 2026-11-28 on them: 179, on their own 10 passes:
// 183; fitted on allreduce and broadcast alone, before runsAs: 172, 116 of
// their 157; before Crowd: 87; fitted on 2026-11-27's points, before the
// floor: 35).
// shm's and tcp's: TestCostPointsLaunch
// on cost_points_launch.csv, which scripts/cluster/costpoints.sh -local
// measured on 2026-11-28 14:43-14:56 UTC under the launcher, a process per
// rank (12 passes, each point's fastest in any placement), with the
// allreduce factors and the cache as they were: within 30% at 59 of its
// 70 check points, median 15%, p90 40% (cost.go's constants before them,
// fitted with all ranks in one process: 30, 37%, 83%). A message and an
// idle turn cost microseconds of CPU where processes share CPUs (o, turn),
// not a goroutine switch's fraction of one. shm's γ comes out at its floor
// (0): shm's reductions hide in its copies; so does tcp's spill.
var costs = map[string]Cost{
	"mem": {Alpha: 4.14e-07, Latency: 4.28e-07, Beta: 5.03e-11, Gamma: 1.22e-10, Overhead: 9.31e-07, Turn: 6.51e-07, Spill: 0.392, Cache: 1 << 20, Crowd: 27.3, Far: 0.119},
	"shm": {Alpha: 1.42e-07, Latency: 1.09e-07, Beta: 8.09e-11, Gamma: 0, Overhead: 1.9e-06, Turn: 1.28e-06, Spill: 1.51, Cache: 16 << 20},
	"tcp": {Alpha: 1.05e-05, Latency: 1.75e-06, Beta: 2.66e-10, Gamma: 3.06e-10, Overhead: 1.57e-05, Turn: 3.07e-06, Spill: 0, Cache: 16 << 20},
	// Between hosts: cost_net.go, fitted apart on the namespace cluster.
	netProvider: netCost,
}

// CostOf returns the fitted constants of provider.
func CostOf(provider string) (Cost, bool) {
	k, ok := costs[provider]
	return k, ok
}

// Estimate is an algorithm's predicted cost: Path, the seconds of its
// critical path with one CPU per rank; Work, the CPU seconds all ranks
// spend on their messages and bytes together; Idle, the CPU seconds they
// spend on idle turns where they share CPUs.
type Estimate struct {
	Path, Work, Idle float64
}

// Time is the predicted time when the ranks share cpus CPUs (0: one CPU
// per rank): the path, or where ranks outnumber CPUs the larger of the
// path and all ranks' work and idle turns spread over the CPUs.
func (e Estimate) Time(ranks, cpus int) float64 {
	if cpus <= 0 || cpus >= ranks {
		return e.Path
	}
	return max(e.Path, (e.Work+e.Idle)/float64(cpus))
}

// terms count one rank's (or all ranks') messages, bytes sent and bytes
// reduced.
type terms struct{ msgs, bytes, red float64 }

// spill is the factor on β and γ for size ranks' buffers of bytes each.
func (k Cost) spill(size, bytes int) float64 {
	ws := float64(size) * float64(bytes)
	return 1 + k.Spill*max(0, 1-k.Cache/ws)
}

// Estimate predicts c with algorithm a over size ranks, bytes as Select
// takes them (the whole buffer of an allreduce, broadcast or reduce; one
// rank's block otherwise), in pieces of ChunkBytes.
func (k Cost) Estimate(c Collective, a Algo, size, bytes int) Estimate {
	return k.EstimateWindow(c, a, size, bytes, 0)
}

// EstimateWindow is Estimate where a link's staging holds window bytes
// (engine.Window; 0: no bound), which caps the pieces: a world in one
// process gives a link 128 KiB of staging or more up to 204 ranks (a
// window of 130,816 bytes from 13 ranks on), 32 KiB from 205 (8 slots
// of 4 KiB, a window of 32,512 bytes; comm's stagingFor).
func (k Cost) EstimateWindow(c Collective, a Algo, size, bytes, window int) Estimate {
	if a == Auto {
		a = Algos(c)[0]
	}
	fac := k.fac
	if fac == nil {
		fac = &allReduceFactor
	}
	return k.estimate(c, a, size, bytes, window, fac)
}

// runsAs is the collective and bytes whose schedule c/a runs: a
// reduce-scatter by recursive doubling is an allreduce of all n blocks
// (Build), and costs one, its factor, turns and staging included.
func runsAs(c Collective, a Algo, size, bytes int) (Collective, int) {
	if c == ReduceScatter && a == RecDoubling {
		return AllReduce, bytes * size
	}
	return c, bytes
}

// allReduceFactor scales each allreduce algorithm's prediction: what its
// schedule costs beyond the messages, bytes, reductions and turns the
// model counts, one factor per algorithm for every provider, the ring's
// 1. Without them the model underpredicted the double tree by 30% and
// overpredicted recursive doubling by 20% at the median of the check
// points, every provider alike (mem, shm, tcp: tree -31, -25, -34%; rd
// +22, +21, +2%): the double tree runs two trees at once and each rank is
// interior in one of them, so its pieces contend at the rank that both
// trees pass through; recursive doubling's exchange sends and receives at
// once. Fitted with the constants (TestCostPoints); refitted with
// Latency, Cache and the tree's shape (treeShape): tree 1.40, rd 0.835
// (0.883 before), hd 1.10 (1.15 before halving-doubling's pieces). The
// tree's 1.40 was fitted while its schedule held a piece's way up behind
// another's way down (before 71da1d8 and b7901ae); it is 1.2 since the
// afternoon of 2026-11-30, from the EPYC's points measured again with the
// new schedule (testdata/epyc-2026-11-30-near). A fit on mem's gives
// tree 1.09 with rd 0.783 and hd 1.02, each of those 6-7% under the
// factors kept here. Under the launcher, at 3 ranks, the median of the
// tree's measured time over its prediction without a factor, taken over
// the ring's, fell from 1.41 to 1.17 (shm) and from 1.03 to 0.91 (tcp)
// against the points of 2026-11-28. 1.2 moves 249 table cells at 2-64
// ranks to the tree. The ones measured with a barrier before each call
// (README, the double tree's factor: mem, shm and tcp at 8-64 ranks on
// 2 CPUs, 16-256 KiB) were faster or level; back to back, mem's 20 and
// 24 ranks at 64 KiB were 1.36x slower. tcp's with a CPU per rank
// (42-63 ranks, 1-2 MiB) cannot be measured here.
var allReduceFactor = [numAlgos]float64{Ring: 1, Tree: 1.2, RecDoubling: 0.835, HalvingDoubling: 1.1}

// estimate is EstimateWindow with the allreduce factors fac
// (allReduceFactor, or ones being fitted), of the collective c/a runs as.
func (k Cost) estimate(c Collective, a Algo, size, bytes, window int, fac *[numAlgos]float64) Estimate {
	c, bytes = runsAs(c, a, size, bytes)
	f := 1.0
	if c == AllReduce {
		f = fac[a]
	}
	chunk := ChunkBytes(a, size, bytes)
	if window > 0 {
		chunk = min(chunk, window)
	}
	path, work := model(c, a, size, bytes, chunk)
	stall := window > 0 && 2*min(chunk, message(c, a, size, bytes)) >= window
	if stall {
		// A piece of half the window or more makes its receiver owe
		// half of it, so it returns an explicit credit message before
		// the next piece can go (internal/engine/link.go).
		work.msgs *= 2
	}
	sp := k.spill(size, bytes)
	return Estimate{
		Path: f * (path.msgs*k.Alpha + steps(c, a, size)*k.Latency + sp*(path.bytes*k.Beta+path.red*k.Gamma)),
		Work: f * (work.msgs*k.Overhead + sp*(work.bytes*k.Beta+work.red*k.Gamma)),
		Idle: f * turns(c, a, size, bytes, chunk, stall, path) * k.far(c, a, size) * float64(size) * k.turn(size),
	}
}

// far is the factor on c/a's turns over n ranks for steps whose partner
// is not the next rank in turn (Far).
func (k Cost) far(c Collective, a Algo, n int) float64 {
	if k.Far == 0 || n < 2 || c == Broadcast {
		return 1
	}
	switch a {
	case RecDoubling, HalvingDoubling, Tree, Bruck, Dissemination:
		return 1 + k.Far*math.Log2(float64(n))
	}
	return 1
}

// turn is the CPU time of one idle turn where n ranks take turns (Crowd).
func (k Cost) turn(n int) float64 {
	if k.Crowd > 0 && float64(n) < k.Crowd {
		return k.Turn * float64(n) / k.Crowd
	}
	return k.Turn
}

// turns is how many turns each rank takes, where ranks share CPUs, while
// c/a runs: one per message of the path whose receiver must wait for its
// next turn to take it. The ranks take their turns in rank order (each
// hands the CPU on to the back of the run queue), so a message to a
// higher rank (relative to the root) is taken in the same round: a
// broadcast's piece crosses all ranks in one. Recursive doubling's
// exchange takes two (the lower rank of a pair takes its partner's half
// a round later). The ring's steps take one each, even where a step has
// no block to send (measured: 126 rounds for 8 B over 64 ranks). Bruck's
// steps off its chain of waits (bruckChain) share a turn with another. A
// staging window that holds one piece doubles them.
func turns(c Collective, a Algo, n, bytes, chunk int, stall bool, path terms) float64 {
	t := path.msgs
	switch {
	case c == Broadcast:
		t = npieces(float64(bytes), chunk)
	case c == AllReduce && a == RecDoubling:
		t = 2 * path.msgs
	case c == AllGather && a == Bruck:
		t -= (log2(n) - bruckChain(n)) * npieces(float64(bytes), chunk)
	}
	if stall {
		// A piece fills half the window or more: the sender waits a
		// turn of the receiver's for its credit before the next.
		t *= 2
	}
	return t
}

// steps is how many steps of c/a over n ranks wait for a message that a
// rank sent in the same call after a wait of its own: the latency the
// next call cannot overlap. The pieces of a step pipeline behind its
// first. A rooted collective's calls (broadcast, reduce, gather, scatter)
// overlap back to back, and have none.
func steps(c Collective, a Algo, n int) float64 {
	if n < 2 {
		return 0
	}
	N, L := float64(n), log2(n)
	p2 := 1 << (bits.Len(uint(n)) - 1)
	L2 := float64(bits.Len(uint(p2)) - 1)
	fold := 0.0
	if n != p2 {
		fold = 2
	}
	switch c {
	case AllReduce:
		switch a {
		case Ring:
			return 2 * (N - 1)
		case RecDoubling:
			return rdChain(n)
		case HalvingDoubling:
			return 2*L2 + fold
		case Tree:
			D, _, _ := treeShape(n)
			return 2 * D
		}
	case ReduceScatter:
		return N - 1
	case AllGather:
		if a == Bruck {
			return bruckChain(n)
		}
		return N - 1
	case Barrier:
		return L
	case AllToAll, AllToAllV, AllGatherV:
		return N - 1
	}
	return 0
}

// rdChain is the longest chain of recursive doubling's steps over n ranks
// that wait for each other, the folds' included. Over a power of two it is
// the exchanges; otherwise a rank whose partner has no folded rank sends
// its first exchange at once, beside the fold-in, and the chain is one or
// two steps more than the exchanges (3, 5, 6 ranks: one; 7: two). It
// follows the schedule (halving.go's fold): rank r ≥ p folds into r-p.
func rdChain(n int) float64 {
	p := 1 << (bits.Len(uint(n)) - 1)
	if n == p {
		return float64(bits.Len(uint(p)) - 1)
	}
	rem := n - p
	d := make([]int, p) // when each active rank's last receive arrives
	for i := range rem {
		d[i] = 1
	}
	next := make([]int, p)
	for k := 1; k < p; k <<= 1 {
		for i := range d {
			next[i] = max(d[i], d[i^k]+1)
		}
		d, next = next, d
	}
	chain := slices.Max(d)
	for i := range rem {
		chain = max(chain, d[i]+1)
	}
	return float64(chain)
}

// bruckChain is the longest chain of Bruck's steps over n ranks that wait
// for each other: the step at distance d sends the nb = min(d, n-d)
// blocks from a rank's own, the last of them received at the step whose
// distance is the largest power of two below nb, so it comes 1 +
// ⌈log2 nb⌉ steps into the chain. Over a power of two that is every step;
// over 3 ranks one (both steps send a rank's own block alone), over 6 two.
func bruckChain(n int) float64 {
	k := 0
	for d := 1; d < n; d <<= 1 {
		k = max(k, 1+bits.Len(uint(min(d, n-d)-1)))
	}
	return float64(k)
}

// npieces is how many messages of at most chunk bytes carry m bytes.
func npieces(m float64, chunk int) float64 { return max(1, math.Ceil(m/float64(chunk))) }

// elems is how many elements of ElemBytes make up m bytes (at least one).
func elems(m float64) float64 { return max(1, math.Floor(m/ElemBytes)) }

// log2 is ⌈log2 n⌉.
func log2(n int) float64 { return float64(bits.Len(uint(n - 1))) }

// model returns the critical path and the total work of c/a in terms,
// messages cut into pieces of at most chunk bytes.
func model(c Collective, a Algo, n, bytes, chunk int) (path, work terms) {
	if n < 2 {
		return terms{}, terms{}
	}
	if a == Auto {
		a = Algos(c)[0]
	}
	S, N := float64(bytes), float64(n)
	p2 := 1 << (bits.Len(uint(n)) - 1) // largest power of two ≤ n
	L2, P2, R := float64(bits.Len(uint(p2))-1), float64(p2), float64(n-p2)
	fold := 0.0 // recursive doubling and halving: ranks beyond p2 fold in and out
	if n != p2 {
		fold = 1
	}
	switch c {
	case AllReduce:
		switch a {
		case Ring:
			// Of the n blocks only those of one element or more are
			// sent: each goes round the ring twice, so the path is
			// 2(n-1) messages, but a rank sends only its share.
			q := npieces(S/N, chunk)
			path = terms{2 * (N - 1) * q, 2 * (N - 1) / N * S, (N - 1) / N * S}
			sent := min(1, elems(S)/N)
			return path, terms{2 * (N - 1) * q * N * sent, 2 * (N - 1) * S, (N - 1) * S}
		case RecDoubling:
			q := npieces(S, chunk)
			path = terms{(L2 + 2*fold) * q, (L2 + 2*fold) * S, (L2 + fold) * S}
			work = terms{(P2*L2 + 2*R) * q, (P2*L2 + 2*R) * S, (P2*L2 + R) * S}
			return path, work
		case HalvingDoubling:
			// Step i of the halving sends S/2^i bytes, none once that
			// is less than one element; the doubling mirrors it.
			// Fewer elements than ranks: as in the ring, each element
			// is sent by all but one rank in each half.
			// A step's half goes in pieces of chunk bytes like any
			// message (a window of 8 KiB makes 124 pieces of 1 MiB's
			// halving at 32 ranks).
			h := (1 - 1/P2) * S
			q := npieces(S, chunk)
			hq := 0.0 // the pieces of one rank's halving
			for i, m := 0.0, S/2; i < L2; i, m = i+1, m/2 {
				hq += npieces(m, chunk)
			}
			path = terms{2*hq + 2*fold*q, 2*h + 2*fold*S, h + fold*S}
			work = terms{2*min(P2*hq, elems(S)*(P2-1)) + 2*R*q, P2*2*h + 2*R*S, P2*h + R*S}
			return path, work
		case Tree:
			// Two binary trees, each reducing half the buffer up and
			// broadcasting it down in pieces; a rank is interior in one
			// tree and a leaf in the other. A piece takes depth steps
			// up and depth down; the busiest rank then sends snd pieces
			// and reduces red for each further piece of the pipeline:
			// four and two where it has two children, two and one over
			// two ranks, where each is the other's only child.
			h := S / 2
			cb := min(float64(chunk), h)
			kp := npieces(h, chunk)
			D, snd, red := treeShape(n)
			path = terms{2*D + snd*(kp-1), (2*D + snd*(kp-1)) * cb, (D + red*(kp-1)) * cb}
			work = terms{4 * (N - 1) * kp, 2 * (N - 1) * S, (N - 1) * S}
			return path, work
		}
	case Broadcast, Reduce:
		red := 0.0
		if c == Reduce {
			red = 1
		}
		if a == Chain {
			kp := npieces(S, chunk)
			cb := min(float64(chunk), S)
			path = terms{N - 2 + kp, (N-2)*cb + S, red * ((N-2)*cb + S)}
			work = terms{(N - 1) * kp, (N - 1) * S, red * (N - 1) * S}
			return path, work
		}
		// Binomial tree: the root sends the whole buffer to ⌈log2 n⌉
		// children in turn.
		q, L := npieces(S, chunk), log2(n)
		path = terms{L * q, L * S, red * L * S}
		work = terms{(N - 1) * q, (N - 1) * S, red * (N - 1) * S}
		return path, work
	case AllGather:
		if a == Bruck {
			// ⌈log2 n⌉ steps; at distance d a rank sends the nb =
			// min(d, n-d) blocks from its own, in place: where they
			// wrap past the last block (nb-1 of the ranks), in two
			// messages. The busiest rank, n-1, wraps at every step.
			for d := 1; d < n; d <<= 1 {
				nb := min(d, n-d)
				B := float64(nb) * S
				path.msgs += npieces(B, chunk)
				work.msgs += float64(n-nb+1) * npieces(B, chunk)
				if nb > 1 {
					path.msgs += npieces(S, chunk) + npieces(B-S, chunk) - npieces(B, chunk)
				}
				for j := 1; j < nb; j++ {
					work.msgs += npieces(float64(j)*S, chunk) + npieces(float64(nb-j)*S, chunk)
				}
			}
			path.bytes, work.bytes = (N-1)*S, N*(N-1)*S
			return path, work
		}
		path = terms{(N - 1) * npieces(S, chunk), (N - 1) * S, 0}
		return path, scale(path, N)
	case ReduceScatter:
		path = terms{(N - 1) * npieces(S, chunk), (N - 1) * S, (N - 1) * S}
		return path, scale(path, N)
	case Barrier:
		path = terms{log2(n), 0, 0}
		return path, scale(path, N)
	case Gather, Scatter, AllToAll, GatherV, ScatterV, AllToAllV, AllGatherV:
		path = terms{(N - 1) * npieces(S, chunk), (N - 1) * S, 0}
		if c == Gather || c == Scatter || c == GatherV || c == ScatterV {
			return path, path
		}
		return path, scale(path, N)
	}
	// Scans and point-to-point: one message per log step.
	path = terms{log2(n) * npieces(S, chunk), log2(n) * S, log2(n) * S}
	return path, scale(path, N)
}

// message is the largest message c/a sends, before pieces: a ring's
// block, halving-doubling's first half, the double tree's half.
func message(c Collective, a Algo, n, bytes int) int {
	switch {
	case c == AllReduce && a == Ring:
		return bytes / n
	case c == AllReduce && (a == HalvingDoubling || a == Tree):
		return bytes / 2
	}
	return bytes
}

// treeShape returns the depth of btree over n ranks (dtree's is the
// same), the longest walk from a rank up to the root, and the most pieces
// a rank sends (snd) and reduces (red) per piece of each half in the
// double tree: to its parent and each child, from each child, in both
// trees.
func treeShape(n int) (depth, snd, red float64) {
	d, ms, mr := 0, 0, 0
	for r := range n {
		k := 0
		for v := r; v > 0; v, _, _ = btree(n, v) {
			k++
		}
		d = max(d, k)
		s, c := 0, 0
		for _, t := range [2]func(int, int) (int, int, int){btree, dtree} {
			up, d0, d1 := t(n, r)
			for _, x := range [3]int{up, d0, d1} {
				if x >= 0 {
					s++
				}
			}
			for _, x := range [2]int{d0, d1} {
				if x >= 0 {
					c++
				}
			}
		}
		ms, mr = max(ms, s), max(mr, c)
	}
	return float64(d), float64(ms), float64(mr)
}

func scale(t terms, f float64) terms { return terms{t.msgs * f, t.bytes * f, t.red * f} }

// Best is the algorithm for c with the least predicted time over size
// ranks sharing cpus CPUs (0: one CPU per rank) and bytes, and that time
// in seconds.
func (k Cost) Best(c Collective, size, cpus, bytes int) (Algo, float64) {
	best, bt := Algos(c)[0], math.Inf(1)
	for _, a := range Algos(c) {
		if t := k.Estimate(c, a, size, bytes).Time(size, cpus); t < bt {
			best, bt = a, t
		}
	}
	return best, bt
}
