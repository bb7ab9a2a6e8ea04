package collectives

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestFinalizeMatchesDirect checks Finalize's piece lists against checking
// every pair, on schedules of blocks (a ring's: the lists), of wide ranges
// over narrow ones (the fallback) and of both, with Input, empty and
// explicit (After) deps mixed in.
func TestFinalizeMatchesDirect(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 400 {
		k := 1 + rng.IntN(400)
		work := 1 + rng.IntN(200)
		wide := trial%3 != 0 // some ops span many blocks
		s := &Schedule{Rank: 0, Size: 2}
		for i := range k {
			o := Op{Kind: Kind(rng.IntN(3)), Peer: 1}
			if o.Kind == Send && rng.IntN(8) == 0 {
				o.Buf = Input
			}
			switch {
			case rng.IntN(10) == 0:
				o.Off = rng.IntN(work)
			case wide && rng.IntN(4) == 0:
				o.Off = rng.IntN(work)
				o.Len = 1 + rng.IntN(work-o.Off)
			default:
				blk := 1 + work/16
				o.Off = min(work-1, rng.IntN(16)*blk)
				o.Len = min(blk, work-o.Off)
			}
			if i > 0 && rng.IntN(5) == 0 {
				o.Deps = []int32{int32(rng.IntN(i))}
			}
			s.Ops = append(s.Ops, o)
		}
		want := &Schedule{Rank: 0, Size: 2, Ops: slices.Clone(s.Ops)}
		for i := range want.Ops {
			want.Ops[i].Deps = slices.Clone(want.Ops[i].Deps)
			want.depsDirect(i)
		}
		s.Finalize()
		for i := range s.Ops {
			if !slices.Equal(s.Ops[i].Deps, want.Ops[i].Deps) {
				t.Fatalf("trial %d (%d ops) op %d (%v): deps %v, want %v", trial, k, i, s.Ops[i], s.Ops[i].Deps, want.Ops[i].Deps)
			}
		}
	}
}
