package comm

import (
	"fmt"

	"github.com/gorun-hpc/gorun/collectives"
)

// WithTuning makes the communicator's selection table the cost model's
// with t's constants (collectives.Tuning: a fit on this machine, as
// collectives' TestCostPoints writes it with GORUN_COST_OUT) instead of
// cost.go's (GORUN_COST_FILE). A nil t is cost.go's. Every rank must use
// the same: Init fails otherwise, naming a rank that differs.
func WithTuning(t *collectives.Tuning) Option {
	return func(c *config) error { c.tuning = t; return nil }
}

// sameTuning fails Init where a rank of eps uses another cost tuning than
// this one: their tables could choose different algorithms for the same
// call, which would fail every collective that runs them.
func sameTuning(eps []*endpoint, me *endpoint) error {
	for r, ep := range eps {
		if ep.tuning != me.tuning {
			return &RankError{Rank: r, Op: "init", Err: fmt.Errorf("%w: rank %d's cost tuning (GORUN_COST_FILE, WithTuning) is %s, this rank's %s: every rank must use the same",
				ErrInvalid, r, tuningName(ep.tuning), tuningName(me.tuning))}
		}
	}
	return nil
}

// tuningName names a tuning by its sum.
func tuningName(sum uint64) string {
	if sum == 0 {
		return "cost.go's (none set)"
	}
	return fmt.Sprintf("tuning %016x", sum)
}
