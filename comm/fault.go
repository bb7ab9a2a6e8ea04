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

//
// The injection itself lives in transport/rdma/faulty, which registers
// itself as the "faulty" device wrapper; only binaries that import it (the
// reliability tests, examples/train) carry it. In any other binary a set
// GORUN_FAULT fails Init with an error saying so.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gorun-hpc/gorun/internal/jobenv"
	"github.com/gorun-hpc/gorun/transport/rdma"
)

// envFault is the variable withFault reads.
const envFault = jobenv.Fault

// withFault wraps dev in the GORUN_FAULT rules that apply to rank, or
// returns it unchanged when there are none. A malformed spec, or a spec in
// a binary without fault injection, closes dev and is an error: a fault
// the user asked for must not silently not happen.
func withFault(dev rdma.Device, rank int) (rdma.Device, error) {
	spec := osGetenv(envFault)
	if spec == "" {
		return dev, nil
	}
	wrap := rdma.LookupWrapper("faulty")
	if wrap == nil {
		dev.Close()
		return nil, envErr(envFault, spec, fmt.Sprintf("this program has no fault injection linked in (import _ %q)",
			"github.com/gorun-hpc/gorun/transport/rdma/faulty"))
	}
	if job, err := strconv.Atoi(strings.TrimSpace(osGetenv(jobenv.Rank))); err == nil && job >= 0 {
		rank = job
	}
	d, err := wrap(dev, spec, rank)
	if err != nil {
		return nil, envErr(envFault, spec, err.Error())
	}
	return d, nil
}
