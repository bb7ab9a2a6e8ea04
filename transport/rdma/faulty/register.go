package faulty

import (
	"log"
	"sync"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Linking this package in (import _ ".../transport/rdma/faulty") makes
// comm honour GORUN_FAULT (gorun --fault); without it, a GORUN_FAULT
// that is set is an error, never silently ignored.
func init() { rdma.RegisterWrapper("faulty", wrapSpec) }

// wrapSpec wraps dev in the rules of spec that apply to rank; a malformed
// spec closes dev and is an error.
func wrapSpec(dev rdma.Device, spec string, rank int) (rdma.Device, error) {
	plan, err := ParsePlan(spec, rank)
	if err != nil {
		dev.Close()
		return nil, err
	}
	if len(plan.Rules) > 0 {
		// Printed so that the log of an injected failure is never mistaken
		// for a real one: once per rank and spec in a process, not once
		// per device (a rank opens one per provider, and more in a Shrink).
		if _, told := announced.LoadOrStore(announcement{rank, spec}, true); !told {
			log.Printf("gorun rank %d: GORUN_FAULT active: %v", rank, plan.Rules)
		}
	}
	return Wrap(dev, plan), nil
}

// announced holds the rank and spec pairs wrapSpec has logged.
var announced sync.Map

type announcement struct {
	rank int
	spec string
}
