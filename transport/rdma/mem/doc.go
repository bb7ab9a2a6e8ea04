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
// Execution: each connection has a send queue executed in post order by an
// engine goroutine, started by the first post and parked between bursts
// (so posting does not allocate); it ends when the connection is closed
// or its peer closes, so a closed connection owns no goroutine and one
// that never posted never had one.
// Copies into the peer happen on that goroutine, after the Post call
// returned; a posted buffer must not be touched until its completion (or,
// for unsignaled requests, a later completion) is seen.
//
// Ownership and concurrency: as for rdma.Conn. Post calls may come from any
// goroutine; GetSendComp and GetRecvComp each from one goroutine at a time.
// Closing a connection flushes its outstanding work (StatusFlushed), and
// makes the peer's queues flush and its completion calls return an error
// once drained.
package mem
