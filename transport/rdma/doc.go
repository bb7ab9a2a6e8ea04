// Package rdma is gorun's data path: RDMA semantics as librdmacm defines them
// (rdma_post_write, rdma_post_writev, rdma_post_send, rdma_post_recv,
// rdma_post_read), behind one API that several providers implement.
//
// A Device is a protection domain: memory registered on it (Register, Alloc)
// may be used by every connection of that device. A Conn is a reliable
// connected queue pair. Work requests are posted on a Conn and complete, in
// post order, on its send queue (GetSendComp) or receive queue (GetRecvComp);
// the wrid given at post time comes back in the completion's WRID.
//
// The rules of the man pages hold on every provider and are checked by the
// conformance suite in transport/rdma/rdmatest:
//   - nothing may be posted before the connection is established
//     (ErrNotConnected);
//   - a local buffer must lie inside a memory region of the same device with
//     the access the request needs (ErrNotRegistered, ErrAccess), unless the
//     request is FlagInline and no longer than Conn.MaxInline; an empty
//     buffer needs no region, and no provider registers an empty one
//     (ErrInvalid, as ibv_reg_mr);
//   - remote memory is named by address and rkey, and the target checks the
//     key, the bounds and the access; a violation completes the request with
//     StatusRemoteAccessError and moves the connection to an error state, in
//     which every later request completes with StatusFlushed;
//   - a send needs a receive posted on the peer; a receiver that is not ready
//     is retried Config.RNRRetry times, then the send completes with
//     StatusRNRRetryExceeded and the connection enters the error state;
//   - unsignaled requests produce no completion unless they fail;
//   - requests on one connection take effect and complete in post order, so
//     a send posted after a write is delivered after the write's data is in
//     place;
//   - an MR used by a request that has not completed cannot be deregistered
//     (ErrBusy).
//
// Providers register themselves by name, as database/sql drivers do; import
// them for their side effect:
//
//	import _ "github.com/gorun-hpc/gorun/transport/rdma/tcp"
//	dev, err := rdma.Open("tcp")
//
// Beyond librdmacm, a Conn may implement Mailbox (mailbox.go): a little
// memory that both processes of a connection map, written with plain
// stores and polled, for messages of a few bytes (shm has it; the
// collectives engine uses it when both ends do). It promises visibility in
// store order and nothing else: no queue, no completion, no rule above
// applies to it.
//
// Concurrency: Device, Listener and Conn methods are safe for concurrent use.
// Posting from several goroutines on one Conn is allowed; the order between
// them is the order in which the Post calls return. GetSendComp and
// GetRecvComp may each be called by one goroutine at a time.
package rdma
