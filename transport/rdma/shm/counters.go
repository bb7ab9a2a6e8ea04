//go:build linux

package shm

import (
	"sync/atomic"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// counts are the device's refusals (rdma.Counters), kept where they happen.
// A one-sided shm request is checked by the process that posts it, against
// the target's key table, so a refused remote access is counted on the
// initiator's device (tcp counts it on the target's).
type counts struct {
	auth, access atomic.Uint64
}

// Counters implements rdma.CounterSource.
func (d *Device) Counters() rdma.Counters {
	return rdma.Counters{AuthFailures: d.counts.auth.Load(), AccessViolations: d.counts.access.Load()}
}
