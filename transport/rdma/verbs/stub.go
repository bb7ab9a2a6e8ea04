//go:build !(linux && cgo && rdma)

package verbs

import "github.com/gorun-hpc/gorun/transport/rdma"

// Supported reports whether this build contains the cgo provider (build tag
// "rdma" with cgo on Linux). It does not say whether a device exists; see
// Devices.
const Supported = false

// Open opens the verbs device. This build has no verbs support: it returns
// rdma.ErrNotSupported, and "verbs" is not registered with transport/rdma.
func Open(cfg rdma.Config) (rdma.Device, error) {
	return nil, rdma.NewOpError("verbs", "open", rdma.ErrNotSupported)
}

// Name is the provider's registered name, in every build: a launcher
// built without verbs accepts it for ranks that may have it.
const Name = "verbs"
