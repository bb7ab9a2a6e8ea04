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
