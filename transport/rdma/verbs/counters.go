//go:build linux && cgo && rdma

package verbs

import (
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// counts are the device's refusals (rdma.Counters). The NIC checks a
// one-sided request against the target's keys in hardware, and only the
// initiator sees the outcome (IBV_WC_REM_ACCESS_ERR), so a refused remote
// access is counted on the initiator's device (as shm does; tcp counts it
// on the target's). A handshake is counted by each end that refused the
// other: the listener for a wrong proof, the dialer for a server whose
// proof is wrong or that accepted without authenticating.
type counts struct {
	auth, access atomic.Uint64
}

// Counters implements rdma.CounterSource.
func (d *device) Counters() rdma.Counters {
	return rdma.Counters{AuthFailures: d.counts.auth.Load(), AccessViolations: d.counts.access.Load()}
}
