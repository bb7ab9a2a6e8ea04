package comm

// GORUN_FAULT injects faults into this rank's data path, for the
// reliability tests and for rehearsing failures in real jobs:
//
//	GORUN_FAULT  rules separated by ';', each [rank=R:]ACTION[:OP[:N[:WHERE[:DELAY]]]]
//	             (see faulty.ParsePlan): e.g. "rank=2:kill:write:40" SIGKILLs
//	             rank 2 at its 40th write; unset or empty: no faults
//
// rank=R names the job rank (GORUN_RANK) in a process the launcher started,
// so that a rule follows the process into every communicator it makes
// (Split, or a NewLocal world after a failure); in a process without
// GORUN_RANK it names the communicator rank (NewLocal worlds in tests).
// Rules are counted per device (one per provider a communicator opens),
// over all its connections, including the posts of connection setup.
// This file is owned by the reliability maintainer.

import (
	"log"
	"strconv"
	"strings"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/transport/rdma"
	"github.com/gorun-hpc/gorun/transport/rdma/faulty"
)

// envFault is the variable withFault reads.
const envFault = jobenv.Fault

// withFault wraps dev in the GORUN_FAULT rules that apply to rank, or
// returns it unchanged when there are none. A malformed spec closes dev and
// is an error: a fault the user asked for must not silently not happen.
func withFault(dev rdma.Device, rank int) (rdma.Device, error) {
	spec := osGetenv(envFault)
	if spec == "" {
		return dev, nil
	}
	if job, err := strconv.Atoi(strings.TrimSpace(osGetenv(jobenv.Rank))); err == nil && job >= 0 {
		rank = job
	}
	plan, err := faulty.ParsePlan(spec, rank)
	if err != nil {
		dev.Close()
		return nil, envErr(envFault, spec, err.Error())
	}
	if len(plan.Rules) > 0 {
		faultNotice(rank, plan)
	}
	return faulty.Wrap(dev, plan), nil
}

// faultNotice is printed once per device so that a log of an injected
// failure is never mistaken for a real one.
var faultNotice = func(rank int, plan *faulty.Plan) {
	log.Printf("gorun rank %d: GORUN_FAULT active: %v", rank, plan.Rules)
}
