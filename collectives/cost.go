package collectives

// The cost model.
//
// Each algorithm's time is predicted from three constants per provider, as
// in Hockney's model and Thakur, Rabenseifner and Gropp's analysis of the
// MPICH collectives: a message of m bytes between two ranks takes α + m·β,
// and reducing m bytes takes m·γ. An algorithm's time is the cost of its
// critical path: the messages, bytes and reduced bytes of the busiest rank
// in the order its steps depend on each other. A message larger than the
// pipelining chunk (ChunkBytes) is sent in pieces, each paying α.
//
// Ranks sharing too few CPUs (n ranks in one process on two cores) do not
// run their steps in parallel, so Estimate also gives the work of all ranks
// together; Time takes the larger of the path and the work spread over
// the CPUs.
//
// The constants (costs) are fitted on this machine by comm's TestCostFit
// (GORUN_COST_FIT=1), which also checks the predictions against measured
// times and prints the error. Select's table is not derived from the model
// yet: beyond 2 ranks on this 2-core machine the model's error is far above
// 30% (README, cost model), so it could not yet tell which of the two is
// right where they disagree.

import (
	"math"
	"math/bits"
)

// Cost holds a provider's constants, in seconds: Alpha per message, Beta
// per byte sent, Gamma per byte reduced.
type Cost struct {
	Alpha, Beta, Gamma float64
}

// costs are the fitted constants per provider: comm's TestCostFit,
// 2026-11-24 06:59 UTC, 2 ranks in one process, the fastest of 7 batches
// per point, on this 2-core machine at load 21-24 (batches' p90/p10 up to
// 6× on mem, 34× on shm, 26× on tcp). The README's cost model section has
// the prediction error.
var costs = map[string]Cost{
	"mem": {Alpha: 1.76e-6, Beta: 5.38e-11, Gamma: 2.22e-10},
	"shm": {Alpha: 2.08e-6, Beta: 2.89e-10, Gamma: 2.62e-10},
	"tcp": {Alpha: 53.2e-6, Beta: 1.01e-9, Gamma: 1.05e-9},
}

// CostOf returns the fitted constants of provider.
func CostOf(provider string) (Cost, bool) {
	k, ok := costs[provider]
	return k, ok
}

// Estimate is an algorithm's predicted cost: Path, the seconds of its
// critical path, and Work, the seconds all ranks spend together.
type Estimate struct {
	Path, Work float64
}

// Time is the predicted time when the ranks share cpus CPUs (0: one CPU
// per rank): the larger of the path and the work spread over the CPUs.
func (e Estimate) Time(ranks, cpus int) float64 {
	if cpus <= 0 || cpus >= ranks {
		return e.Path
	}
	return max(e.Path, e.Work/float64(cpus))
}

// terms count one rank's (or all ranks') messages, bytes sent and bytes
// reduced.
type terms struct{ msgs, bytes, red float64 }

func (k Cost) of(t terms) float64 { return t.msgs*k.Alpha + t.bytes*k.Beta + t.red*k.Gamma }

// Estimate predicts c with algorithm a over size ranks, bytes as Select
// takes them (the whole buffer of an allreduce, broadcast or reduce; one
// rank's block otherwise).
func (k Cost) Estimate(c Collective, a Algo, size, bytes int) Estimate {
	path, work := model(c, a, size, bytes)
	return Estimate{Path: k.of(path), Work: k.of(work)}
}

// npieces is how many messages of at most chunk bytes carry m bytes.
func npieces(m float64, chunk int) float64 { return max(1, math.Ceil(m/float64(chunk))) }

// log2 is ⌈log2 n⌉.
func log2(n int) float64 { return float64(bits.Len(uint(n - 1))) }

// model returns the critical path and the total work of c/a in terms.
func model(c Collective, a Algo, n, bytes int) (path, work terms) {
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
	chunk := ChunkBytes(a, n, bytes)
	switch c {
	case AllReduce:
		switch a {
		case Ring:
			q := npieces(S/N, chunk)
			path = terms{2 * (N - 1) * q, 2 * (N - 1) / N * S, (N - 1) / N * S}
			return path, scale(path, N)
		case RecDoubling:
			q := npieces(S, chunk)
			path = terms{(L2 + 2*fold) * q, (L2 + 2*fold) * S, (L2 + fold) * S}
			work = terms{(P2*L2 + 2*R) * q, (P2*L2 + 2*R) * S, (P2*L2 + R) * S}
			return path, work
		case HalvingDoubling:
			h := (1 - 1/P2) * S
			q := npieces(S, chunk)
			path = terms{2*L2 + 2*fold*q, 2*h + 2*fold*S, h + fold*S}
			work = terms{P2*2*L2 + 2*R*q, P2*2*h + 2*R*S, P2*h + R*S}
			return path, work
		case Tree:
			// Two binary trees, each reducing half the buffer up and
			// broadcasting it down in pieces; a rank is interior in one
			// tree (two children) and a leaf in the other. The busiest
			// rank sends four pieces and reduces two per piece of
			// the pipeline, after a fill of 2·depth steps.
			h := S / 2
			cb := min(float64(chunk), h)
			kp := npieces(h, chunk)
			D := math.Floor(math.Log2(N))
			path = terms{2*D + 4*kp, 2*D*cb + 4*h, D*cb + 2*h}
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
			// ⌈log2 n⌉ steps, then a local rotation of all n blocks.
			path = terms{log2(n), (2*N - 1) * S, 0}
			return path, scale(path, N)
		}
		path = terms{(N - 1) * npieces(S, chunk), (N - 1) * S, 0}
		return path, scale(path, N)
	case ReduceScatter:
		if a == RecDoubling {
			return model(AllReduce, RecDoubling, n, bytes*n)
		}
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

func scale(t terms, f float64) terms { return terms{t.msgs * f, t.bytes * f, t.red * f} }

// Best is the algorithm for c with the least predicted path over size
// ranks and bytes, and that path in seconds.
func (k Cost) Best(c Collective, size, bytes int) (Algo, float64) {
	best, bt := Algos(c)[0], math.Inf(1)
	for _, a := range Algos(c) {
		if t := k.Estimate(c, a, size, bytes).Path; t < bt {
			best, bt = a, t
		}
	}
	return best, bt
}
