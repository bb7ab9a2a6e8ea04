// Package verbs is the "verbs" provider of transport/rdma: real RDMA through
// rdma-core. Connections are managed with librdmacm (rdma_getaddrinfo, an
// event channel per listener and per connection, listen/accept/connect,
// disconnect on both sides); each connection is one RC queue pair whose
// requests are posted with the rdma_post_* inlines (and ibv_post_send for
// write-with-immediate). Its send and receive queues complete into the CQs
// named in rdma.QPInit (ibv_cqs made by Device.CreateCQ, shared by many
// connections) or, when none is named, into private CQs of their own.
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
// Every queue (the send or receive side of a connection) is bound to a CQ,
// an ibv_cq with its own completion channel: a private one, read with
// GetSendComp/GetRecvComp, or a shared one (rdma.CQ). A request's wr_id
// is the queue's binding index in its CQ and the request's sequence
// number in the queue; the queue keeps a slot per outstanding request
// (the caller's wrid and the MRs it holds, released on completion, so
// Deregister reports ErrBusy only while a request is outstanding).
// Unsignaled requests produce no completion, but the provider signals
// every SendQueueDepth/4-th of them internally so the send queue drains;
// the completion of a request also completes the earlier unsignaled ones,
// and internal completions are never delivered. So a polled completion
// (ibv_poll_cq in batches into C memory, no allocation, no further cgo
// call) is demultiplexed by wr_id (checked against its qp_num) to its
// queue, which turns it into the WC the caller asked for, if any.
//
// CQ.Poll hands out provider-made completions (flushes) first, then polls
// the device. CQ.Arm is ibv_req_notify_cq; each CQ has a waker goroutine
// that sleeps on the completion channel's descriptor (non-blocking) in the
// Go netpoller, reads and acks the event when the device raises one (only
// after an arm) and sends the token on Notify; a provider-made completion
// after an arm sends it too. GetSendComp/GetRecvComp on a private CQ poll
// for a short while (yielding), then arm, poll once more and sleep on the
// same channel together with their context; on a shared CQ they are
// rdma.WaitComp. Waiting allocates nothing.
//
// A shared CQ holds depth CQEs (default: the queues of four connections,
// at most the device's max_cqe); a post fails with ErrQueueFull rather
// than let the completions polled but not yet handed out, plus the CQEs
// that may still come, exceed that, so neither the provider's list of
// polled completions grows without bound nor the ibv_cq overruns (a
// private CQ likewise, with the depth of its queue). The CQEs that may
// still come are one for each request outstanding on its queues, and one for
// each request the provider flushed while the device held it (the device
// may complete it yet), until the device does or the QP is destroyed and
// the CQ drained of it. Closing a connection flushes its outstanding
// requests into its CQs, destroys the QP, drains the CQ of the QP's last
// completions, and only then gives back their room and unbinds. CQ.Close
// before its connections are closed stops Poll and wakes sleepers at once;
// the ibv_cq itself is destroyed with the last connection bound to it
// (ibv_destroy_cq refuses while QPs use it).
//
// # Mapping of the contract onto verbs
//
//   - Post-time checks (ErrNotRegistered, ErrAccess, ErrInvalid) are made by
//     the provider as the software providers make them; the NIC would only
//     report them as completions. A scatter-gather list may have the
//     device's max_sge entries, a read's the device's max_sge_rd (iWARP
//     devices: one).
//   - Config.RNRRetry and RNRTimer become rnr_retry_count and min_rnr_timer,
//     keeping retries × timer: up to 6 retries as given, more folded into 6
//     longer waits (at most 6 × 491 ms), beyond that or for -1 "forever"
//     (rnr_retry_count 7). min_rnr_timer is set on the connected QP (RTS):
//     right after rdma_accept on the accepting side, whose QP is in RTS
//     before the client can send, and at ESTABLISHED on the dialing side.
//   - Error completions map onto rdma.Status; a receive with
//     IBV_WC_LOC_QP_OP_ERR is reported as StatusLocalLengthError (that is how
//     rxe reports a receive too small). The first error is kept in Conn.Err
//     with the ibv_wc_status and vendor_err.
//   - In the error state every request completes flushed, in its CQ
//     (shared or not), in post order. Devices flush by themselves; rxe
//     before Linux 6.3 drops posted receives silently, so a timer per queue
//     flushes what is still outstanding 100 ms (flushGrace) after the
//     connection failed, or after the device's last flush. Posts in the
//     error state are not given to the device and flush the same way (at
//     once when nothing is outstanding before them). Close flushes
//     everything outstanding; GetSendComp/GetRecvComp on a private CQ
//     return those, then ErrClosed.
//   - The device's asynchronous events (ibv_get_async_event, async.go)
//     are read by one goroutine per ibv_context, through the netpoller on
//     a dup of its async_fd, each acked at once. A QP event
//     (IBV_EVENT_QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR) fails its
//     connection: Conn.Err names the event, the QP is moved to the error
//     state (rdma_disconnect: the peer hears of it) and flushes as above,
//     and once nothing is outstanding GetSendComp/GetRecvComp on a private
//     CQ return that error instead of waiting for their context. A CQ
//     overrun (IBV_EVENT_CQ_ERR) fails the connections bound to the CQ
//     and flushes their requests at once (the lost CQEs never come); a
//     waiter on a shared CQ then gets those and the error, and CQ.Err
//     reports it. IBV_EVENT_PORT_ERR fails the connections on the port
//     if it is not back (IBV_EVENT_PORT_ACTIVE) within 2 s, so that a
//     link flap fails nothing the QPs' retries carry across (NCCL leaves
//     port events to them); IBV_EVENT_DEVICE_FATAL fails every
//     connection and shared CQ of the device, and ends the Dials and
//     Accepts in progress with it (a Dial or Accept in progress also
//     ends, with ErrClosed, when the device closes). Other events are
//     ignored. The errors wrap ErrAsyncEvent.
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
// Ownership and concurrency follow transport/rdma: Device, Listener, Conn
// and CQ methods are safe for concurrent use. A CQ's mutex guards the CQ
// and the state of every queue bound to it: posts on a queue and polls of
// its CQ hold it (a post's order is the order in which the Post calls
// return), so the connections of one shared CQ post one at a time.
// GetSendComp and GetRecvComp on a private CQ may each be called by one
// goroutine at a time. The Device's mutex guards its sets of connections,
// listeners, shared CQs and MRs; registration (ibv_reg_mr, which pins the
// pages: long for a large buffer) and CreateCQ's ibv_create_cq run
// outside it, counted, and Close waits for those in progress before it
// frees the protection domain (a CQ made while Close ran is destroyed by
// its CreateCQ, which fails with ErrClosed). A
// Conn owns its cm_id, QP, event channel and private CQs; the Device owns
// the protection domain, the shared CQs (Close closes them after the
// connections) and every MR registered through it or its Conns.
// Goroutines: one event loop per Conn (rdma_cm events), one waker per CQ,
// a flush timer per queue while its connection is in error, and one
// asynchronous event reader per ibv_context, shared by the Devices opened
// on it (the first starts it, the last Close stops it and waits for it);
// QPs and CQs are found from an event by the token in their qp_context
// and cq_context, registered while they exist (asyncs, under its mutex).
package verbs
