// Package verbs is the "verbs" provider of transport/rdma: real RDMA through
// rdma-core. Connections are managed with librdmacm (rdma_getaddrinfo, an
// event channel per listener and per connection, listen/accept/connect,
// disconnect on both sides); each connection is one RC queue pair whose
// requests are posted with the rdma_post_* inlines (and ibv_post_send for
// write-with-immediate) and whose completions are polled from two CQs, one
// for the send queue and one for the receive queue.
//
// # Build tag
//
// The provider needs cgo, the rdma-core headers and libraries
// (libibverbs-dev, librdmacm-dev) and a kernel with RDMA. Go build
// constraints cannot detect headers, so the cgo code is behind the "rdma"
// build tag:
//
//	go build -tags rdma ./...          # links librdmacm and libibverbs
//
// Without the tag (or without cgo, or off Linux) the package compiles to
// stubs: nothing is registered with transport/rdma, Open returns
// rdma.ErrNotSupported and Supported reports false. Devices, the pure-Go
// sysfs discovery, works in every build, so callers can decide whether verbs
// is worth trying (a device with an active port exists) before opening it.
//
// # Memory
//
// Alloc returns mmap'd memory outside the Go heap (soft.Mmap: locked, not
// inherited by children). Register accepts Go memory and pins it with
// runtime.Pinner for the life of the registration: Go never moves heap
// objects, a pinned object's span is neither freed nor scavenged, and
// ibv_reg_mr pins the physical pages, so the NIC may keep the address.
// Inline payloads are copied into C memory before the post, so they need no
// registration and no pinning.
//
// # Completions
//
// A waiter polls its CQ for a short while (yielding between polls), then
// arms it with ibv_req_notify_cq, polls once more and sleeps. Each CQ has a
// waker goroutine that sleeps on the completion channel's descriptor
// (non-blocking) in the Go netpoller, so no OS thread is held while waiting;
// when it is readable the waker calls ibv_get_cq_event and
// ibv_ack_cq_events and wakes the waiter through a channel, on which the
// waiter selects together with its context: waiting allocates nothing.
// Unsignaled requests produce no completion, but the provider signals every
// SendQueueDepth/4-th of them internally so the send queue drains; those
// internal completions are never delivered. A completion's wr_id is the
// request's sequence number, which maps back to the caller's wrid and the
// MRs the request holds (released on completion, so Deregister reports
// ErrBusy only while a request is outstanding).
//
// # Mapping of the contract onto verbs
//
//   - Post-time checks (ErrNotRegistered, ErrAccess, ErrInvalid) are made by
//     the provider as the software providers make them; the NIC would only
//     report them as completions.
//   - Config.RNRRetry and RNRTimer become rnr_retry_count and min_rnr_timer,
//     keeping retries × timer: up to 6 retries as given, more folded into 6
//     longer waits (at most 6 × 491 ms), beyond that or for -1 "forever"
//     (rnr_retry_count 7). min_rnr_timer is set on the connected QP (RTS).
//   - Error completions map onto rdma.Status; a receive with
//     IBV_WC_LOC_QP_OP_ERR is reported as StatusLocalLengthError (that is how
//     rxe reports a receive too small). The first error is kept in Conn.Err
//     with the ibv_wc_status and vendor_err.
//   - In the error state every request completes flushed. Devices flush by
//     themselves; rxe before Linux 6.3 drops posted receives silently, so a
//     request outstanding 100 ms after the connection failed (flushGrace) is
//     flushed by the provider. Posts after the peer disconnected are not
//     given to the device and flush the same way. Close flushes everything
//     outstanding; GetSendComp/GetRecvComp return those, then ErrClosed.
//   - Config.Token authenticates connections through rdma_cm private data,
//     challenge-response (auth.go); peers without gorun (rdma_client,
//     rdma_server) interoperate only without a token.
//   - Alloc places memory on the device's NUMA node (sysfs) or
//     Config.NUMANode. There is no registration cache here: collectives'
//     RegCache sits above every provider.
//   - GORUN_VERBS_DEVICE picks the device; by default the first with an
//     active port.
//   - A loopback address ("127.0.0.1:0") stands for the device's own IPv4
//     address (its first RoCE GID): rdma_cm cannot resolve loopback on RoCE.
//
// # Testing
//
// The host has no RDMA; scripts/rxe-vm/test.sh builds the tests with
// -tags rdma, boots a qemu VM with the kernel's soft-RoCE driver (rdma_rxe on
// the VM's NIC) and runs them there: the conformance suite
// (transport/rdma/rdmatest, peers in-process and in a child process),
// focused tests, interop with rdmacm-utils' rdma_server/rdma_client,
// collectives of package comm over verbs, a selection of comm's own tests
// with GORUN_TRANSPORT=verbs, and with -bench a bandwidth comparison with
// perftest's ib_write_bw. Elsewhere those tests skip (RXE_VM_IP unset).
//
// Ownership and concurrency follow transport/rdma: Device, Listener and Conn
// methods are safe for concurrent use; posts on one Conn are serialised by a
// mutex (their order is the order in which the Post calls return);
// GetSendComp and GetRecvComp may each be called by one goroutine at a time.
// A Conn owns its cm_id, QP, CQs and event channels; the Device owns the
// protection domain and every MR registered through it or its Conns.
package verbs
