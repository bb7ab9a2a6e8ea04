//go:build !linux

package shm

import (
	"fmt"

	"github.com/gorun-hpc/gorun/transport/rdma"
)

// Off Linux the provider is registered but cannot open: it is built on
// memfd, eventfd, SCM_CREDENTIALS and process_vm_writev. comm's auto
// transport then uses tcp between ranks of one host.
func init() {
	info := rdma.ProviderInfo{Name: "shm", Reach: rdma.ReachHost, Preference: 20}
	rdma.RegisterProviderInfo(info, func(rdma.Config) (rdma.Device, error) {
		return nil, &rdma.OpError{Op: "open", Provider: "shm", Err: fmt.Errorf("%w: shm needs Linux", rdma.ErrNotSupported)}
	})
}
