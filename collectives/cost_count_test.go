package collectives

import (
	"fmt"
	"math"
	"testing"
)

// TestCostCounts checks the messages the model counts for all ranks
// together (its work) against the sends of the schedules themselves, for
// allreduce, broadcast, allgather and reduce-scatter (the collectives
// TestCostFit measures), over world sizes to 64 and buffers of fewer
// elements than ranks to many pieces. It found Bruck's allgather counted
// as ⌈log2 n⌉ messages per rank, with a local rotation after them: the
// schedule sends in place, in pieces, in two messages where a step's
// blocks wrap (441 messages at 64 ranks, 4,032 at 1 MiB, against 384).
func TestCostCounts(t *testing.T) {
	for _, c := range []Collective{AllReduce, Broadcast, AllGather, ReduceScatter} {
		for _, a := range Algos(c) {
			for _, n := range []int{2, 3, 4, 5, 8, 12, 16, 33, 64} {
				for _, count := range []int{2, 1000, 1 << 18} {
					bytes := count * ElemBytes
					chunk := ChunkBytes(a, n, bytes)
					sends := 0
					for r := range n {
						s, err := Build(c, a, r, n, 0, count, chunk/ElemBytes)
						if err != nil {
							t.Fatal(err)
						}
						for _, op := range s.Ops {
							if op.Kind == Send {
								sends++
							}
						}
					}
					rc, rb := runsAs(c, a, n, bytes)
					_, work := model(rc, a, n, rb, chunk)
					if math.Abs(work.msgs-float64(sends)) > 0.02*float64(sends) {
						t.Errorf("%s/%s n=%d %d elements: model %g messages, schedules %d", c, a, n, count, work.msgs, sends)
					}
				}
			}
		}
	}
}

// TestCostSteps checks the dependent steps the model counts (steps: the
// latencies an allreduce, allgather, reduce-scatter or barrier pays)
// against the schedules: the longest chain of messages in which each is
// sent only after the one before it has arrived. It found two miscounts
// between powers of two: recursive doubling's fold counted as two steps
// where the schedules mostly take one more than the exchanges (the
// fold-in overlaps the first exchange of ranks without a folded partner),
// and Bruck's allgather counted as ⌈log2 n⌉ steps where a step waits only
// for the one that brought its last block (3 ranks: 1 step; 6: 2; 12: 3).
// Since the chain follows the sends to one peer in program order, it also
// finds a send held behind a send that waits: the double tree's way up
// in one tree behind its way down in the other, which took 4 steps over
// 2 ranks before 71da1d8 (2·depth since b7901ae).
func TestCostSteps(t *testing.T) {
	for _, c := range []Collective{AllReduce, AllGather, ReduceScatter, Barrier} {
		for _, a := range Algos(c) {
			for _, n := range []int{2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 33, 64} {
				for _, count := range []int{2 * n, 1000} {
					chunk := ChunkBytes(a, n, count*ElemBytes)
					got, err := chainOf(c, a, n, count, chunk/ElemBytes)
					if err != nil {
						t.Fatal(err)
					}
					rc, _ := runsAs(c, a, n, count*ElemBytes)
					if want := steps(rc, a, n); float64(got) != want {
						t.Errorf("%s/%s n=%d %d elements: model %g dependent steps, schedules %d", c, a, n, count, want, got)
					}
				}
			}
		}
	}
}

// chainOf returns the longest chain of dependent messages in the
// schedules of c/a over n ranks, by the executor's rules (Schedule): a
// receive arrives one hop after its matching send (the k-th send from r
// to p matches p's k-th receive from r), an op starts after its deps,
// and a send is posted no earlier than the rank's send before it to the
// same peer.
func chainOf(c Collective, a Algo, n, count, chunk int) (int, error) {
	ss := make([]*Schedule, n)
	type pair struct{ from, to int }
	sends := map[pair][]int{} // the indices of r's sends to p, in order
	for r := range n {
		s, err := Build(c, a, r, n, 0, count, chunk)
		if err != nil {
			return 0, err
		}
		ss[r] = s
		for i, op := range s.Ops {
			if op.Kind == Send {
				sends[pair{r, op.Peer}] = append(sends[pair{r, op.Peer}], i)
			}
		}
	}
	depth := make([][]int, n)
	for r, s := range ss {
		depth[r] = make([]int, len(s.Ops))
	}
	// Relax until nothing changes: the schedules together are acyclic.
	longest := 0
	for changed := true; changed; {
		changed = false
		for r, s := range ss {
			k := map[int]int{}    // receives from each peer so far
			last := map[int]int{} // the index of the latest send to each peer, plus one
			for i, op := range s.Ops {
				d := 0
				for _, j := range op.Deps {
					d = max(d, depth[r][j])
				}
				if op.Kind == Send {
					if j := last[op.Peer]; j > 0 {
						d = max(d, depth[r][j-1])
					}
					last[op.Peer] = i + 1
				}
				if op.Kind != Send {
					from := sends[pair{op.Peer, r}]
					if k[op.Peer] >= len(from) {
						return 0, fmt.Errorf("%s/%s n=%d: rank %d receives more from %d than it sends", c, a, n, r, op.Peer)
					}
					d = max(d, depth[op.Peer][from[k[op.Peer]]]+1)
					k[op.Peer]++
				}
				if d != depth[r][i] {
					depth[r][i], changed = d, true
				}
				longest = max(longest, d)
			}
		}
	}
	return longest, nil
}

// TestDoubleTreeChain: a double tree's pieces pipeline. The longest chain
// of messages (chainOf: a send is posted after the rank's earlier sends to
// the same peer) is 2·depth for one piece and for eight, at every rank
// count; a piece that waits behind another's way down makes it longer (25
// steps for 8 pieces over 4 ranks before the schedule sent every piece up
// before any down).
func TestDoubleTreeChain(t *testing.T) {
	for _, n := range []int{2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 33, 64} {
		D, _, _ := treeShape(n)
		for _, pieces := range []int{1, 2, 8} {
			const chunk = 16
			got, err := chainOf(AllReduce, Tree, n, 2*chunk*pieces, chunk)
			if err != nil {
				t.Fatal(err)
			}
			if float64(got) != 2*D {
				t.Errorf("n=%d, %d pieces a tree: a chain of %d messages, want 2·depth = %g", n, pieces, got, 2*D)
			}
		}
	}
}
