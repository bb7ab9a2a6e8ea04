package mem

import (
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// counts are the device's refusals (rdma.Counters). A refused remote
// access is counted on the target's device, whose memory it named, as tcp
// counts it. Nothing is refused at connection time: mem never leaves the
// process, and by the transport contract only providers that cross a
// process boundary authenticate, so AuthFailures stays 0.
type counts struct {
	access atomic.Uint64
}

// Counters implements rdma.CounterSource.
func (d *device) Counters() rdma.Counters {
	return rdma.Counters{AccessViolations: d.counts.access.Load()}
}
