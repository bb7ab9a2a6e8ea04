package collectives

import (
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
