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

// TestPairOverTCPRecDoubling: two ranks linked by tcp allreduce by
// recursive doubling up to pairTCPRecDoublingMax, both ranks alike, and
// by the selection table above it; a pair on another transport, or more
// ranks on tcp, follow the table throughout. A run over tcp gives the sum.
func TestPairOverTCPRecDoubling(t *testing.T) {
	mid, big := 64<<10, 2<<20
	for _, tc := range []struct {
		name string
		n    int
		opts []Option
		want collectives.Algo // at mid
	}{
		{"tcp-pair", 2, []Option{WithTransport("tcp")}, collectives.RecDoubling},
		{"mem-pair", 2, nil, collectives.Select(collectives.AllReduce, 2, mid)},
		{"tcp-three", 3, []Option{WithTransport("tcp")}, collectives.Select(collectives.AllReduce, 3, mid)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newLocal(t, tc.n, tc.opts...)
			for _, c := range cs {
				if got := c.algoFor(collectives.AllReduce, mid); got != tc.want {
					t.Errorf("rank %d: %d bytes: %s, want %s", c.Rank(), mid, got, tc.want)
				}
				if got, want := c.algoFor(collectives.AllReduce, big), collectives.Select(collectives.AllReduce, tc.n, big); got != want {
					t.Errorf("rank %d: %d bytes: %s, want %s", c.Rank(), big, got, want)
				}
			}
			if tc.want != collectives.RecDoubling {
				return
			}
			ctx := testCtx(t)
			bufs := make([][]float32, tc.n)
			mustAll(t, "allreduce", onAll(cs, func(c *Comm) error {
				b := make([]float32, mid/4)
				for i := range b {
					b[i] = float32(c.Rank() + i%5)
				}
				bufs[c.Rank()] = b
				return AllReduce(ctx, c, b, b, Sum)
			}))
			for r, b := range bufs {
				for i, v := range b {
					if want := float32(1 + 2*(i%5)); v != want {
						t.Fatalf("rank %d element %d: %v, want %v", r, i, v, want)
					}
				}
			}
		})
	}
}
