package comm

import (
	"testing"

	"github.com/gorun-hpc/gorun/collectives"
)

// TestAlgoTableEveryKind: every collective kind, the last included, can be
// forced to each of its algorithms (the table is sized by the kinds).
func TestAlgoTableEveryKind(t *testing.T) {
	for k := range collectives.NumCollectives {
		coll := collectives.Collective(k)
		for _, a := range collectives.Algos(coll) {
			cfg, err := newConfig(WithAlgorithm(coll.String() + ":" + a.String()))
			if err != nil {
				t.Fatalf("%s:%s: %v", coll, a, err)
			}
			if cfg.algos[coll] != a {
				t.Fatalf("%s:%s: table holds %s", coll, a, cfg.algos[coll])
			}
		}
	}
}

// TestAllTCPAlgos: two ranks linked by tcp allreduce by recursive
// doubling at mid (the tcp table derived from the cost model), and 4 ranks
// forced onto tcp by halving-doubling (on this machine's 2 CPUs its
// measured exception, collectives.Exceptions; with a CPU each the model's
// own choice) where mem's table with a CPU per rank (Select) picks
// another; every rank alike, and a job on another transport, or of 3
// ranks on tcp, follows its own table (its provider and CPUs: TableFor)
// throughout. A run of each choice that differs from Select's gives the
// sum.
func TestAllTCPAlgos(t *testing.T) {
	for _, tc := range []struct {
		name     string
		n        int
		opts     []Option
		mid, big int
		want     collectives.Algo // at mid; Auto: the communicator's table's
	}{
		{"tcp-pair", 2, []Option{WithTransport("tcp")}, 64 << 10, 2 << 20, collectives.RecDoubling},
		{"mem-pair", 2, nil, 64 << 10, 2 << 20, collectives.Auto},
		{"tcp-four", 4, []Option{WithTransport("tcp")}, 1 << 20, 16 << 20, collectives.HalvingDoubling},
		{"mem-four", 4, nil, 1 << 20, 16 << 20, collectives.Auto},
		{"tcp-three", 3, []Option{WithTransport("tcp")}, 1 << 20, 16 << 20, collectives.Auto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, tc.n, tc.opts...)
			for _, c := range cs {
				table := collectives.TableFor(c.costProvider(), c.Size(), c.costCPUs())
				want := tc.want
				if want == collectives.Auto {
					want = table.Algo(collectives.AllReduce, tc.mid)
				}
				if got := c.algoFor(collectives.AllReduce, tc.mid); got != want {
					t.Errorf("rank %d: %d bytes: %s, want %s", c.Rank(), tc.mid, got, want)
				}
				if got, want := c.algoFor(collectives.AllReduce, tc.big), table.Algo(collectives.AllReduce, tc.big); got != want {
					t.Errorf("rank %d: %d bytes: %s, want %s", c.Rank(), tc.big, got, want)
				}
			}
			if cs[0].algoFor(collectives.AllReduce, tc.mid) == collectives.Select(collectives.AllReduce, tc.n, tc.mid) {
				return
			}
			ctx := testCtx(t)
			bufs := make([][]float32, tc.n)
			mustAll(t, "allreduce", onAll(cs, func(c *Comm) error {
				b := make([]float32, tc.mid/4)
				for i := range b {
					b[i] = float32(c.Rank() + i%5)
				}
				bufs[c.Rank()] = b
				return AllReduce(ctx, c, b, b, Sum)
			}))
			for r, b := range bufs {
				for i, v := range b {
					if want := float32(tc.n*(tc.n-1)/2 + tc.n*(i%5)); v != want {
						t.Fatalf("rank %d element %d: %v, want %v", r, i, v, want)
					}
				}
			}
		})
	}
}
