package comm

// The providers, registered for their side effect. verbs registers itself
// only in builds with cgo and the "rdma" tag.
import (
	_ "github.com/gorun-hpc/gorun/transport/rdma/mem"
	_ "github.com/gorun-hpc/gorun/transport/rdma/shm"
	_ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
	_ "github.com/gorun-hpc/gorun/transport/rdma/verbs"
)
