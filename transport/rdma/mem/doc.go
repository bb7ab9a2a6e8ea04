// Package mem is the in-process RDMA provider: every device, listener and
// connection lives in one Go process, so tests and simulations can run
// hundreds of ranks without sockets. Import it for its side effect:
//
//	import _ "github.com/gorun-hpc/gorun/transport/rdma/mem"
//	dev, err := rdma.Open("mem")
//
// It keeps the semantics and the checks of the real providers (see
// transport/rdma): post-time checks of local buffers, remote key, bounds and
// access checks against the peer device's protection domain, receiver-not-
// ready retries, the error state with flushed completions, post order.
//
// Addresses: Listen accepts any address ("127.0.0.1:0" included) and binds
// a fresh name "mem:N" in a process-wide namespace; an address of the form
// "mem:NAME" asks for that name. Dial takes the listener's Addr().String()
// and returns a connected Conn; the listener's Accept returns its peer.
//
// Execution: each connection has a send queue executed in post order. A
// post that finds the queue empty and nobody executing it runs its request
// on the posting goroutine (the copy into the peer and the completions
// happen before the Post call returns); requests posted while one runs, and
// a send that finds no receive posted on the peer (which must wait, and a
// post must not), queue for an engine goroutine, started by the first such
// hand-off and parked between bursts (so posting does not allocate). The
// engine keeps the queue until it is empty, then gives it back to the
// posters. It ends when the connection is closed or its peer closes, so a
// closed connection owns no goroutine. Either way a posted buffer must not
// be touched until its completion (or, for unsignaled requests, a later
// completion) is seen.
//
// Completion queues: a connection's queues are private (Dial, Accept) or
// bound to a CQ of the same device (DialQP, AcceptQP with CreateCQ's
// queue), into which whoever completes a request — the poster running it
// inline, the engine, the peer's poster or engine delivering a receive, a
// Close flushing — pushes the completion directly: Poll only takes what is
// there, on the caller's goroutine, and has no progress to drive. A
// connection bound to a CQ flushes into it when it closes or its peer does
// and never shuts it; GetSendComp and GetRecvComp on a bound queue return
// the CQ's next completion (rdma.WaitComp).
//
// Ownership and concurrency: as for rdma.Conn. Post calls may come from any
// goroutine (their order is the order in which they take the conn's lock);
// GetSendComp and GetRecvComp each from one goroutine at a time.
// Closing a connection flushes its outstanding work (StatusFlushed), and
// makes the peer's queues flush and its completion calls return an error
// once drained (private queues).
package mem
