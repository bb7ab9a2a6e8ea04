// Package tcp is the "tcp" provider of transport/rdma: software RDMA over a
// TCP stream, so any two hosts can run gorun without RDMA hardware.
//
// Each Conn is one TCP socket carrying framed requests (write, write with
// immediate, send, read request) from initiator to target and responses
// (cumulative ACK, NAK, read response) back; both ends play both roles.
// The target validates the rkey, bounds and access of every request against
// its device's soft.PD before a byte of payload is read, then reads the
// payload straight from the socket into the registered region; an invalid
// request's payload is drained into a scratch buffer and the connection
// enters the error state on both ends. Requests are served one at a time in
// stream order, which gives the contract's ordering: a send posted after a
// write is delivered after the write's data is in place. A send that finds
// no posted receive holds the stream while it waits (RNRRetry × RNRTimer).
//
// With Config.Checksum (GORUN_CHECKSUM=1) every frame carries a CRC32C of
// its header and of its payload (checksum.go). The receiver checks the
// header before using any field and the payload before acknowledging the
// request or completing a receive or a read; a mismatch fails the request
// and moves both ends to the error state, so damaged bytes that already
// reached a region are never reported as delivered. Both ends must agree
// on the option: the handshake refuses a mismatch.
//
// The device counts refused work (rdma.CounterSource): handshakes it
// refused, requests it refused for access, checksum mismatches it found
// and malformed streams it read.
//
// A handshake precedes all frames: protocol version, and when
// Config.Token is set a mutual HMAC-SHA256 challenge-response (see
// handshake.go); a peer that fails it never reaches registered memory. A
// listener runs each handshake in its own goroutine (at most 64 at once,
// 10 s each), so a silent or hostile client holds neither Accept nor other
// clients.
//
// Ownership and concurrency: a Conn owns its socket and three goroutines —
// the writer (the only one that writes to the socket: requests in post
// order, responses as the reader queues them, gathered with one writev), the
// reader (the only one that reads: serves requests, completes the send
// queue on ACKs), and a reaper that flushes the queues once both have
// exited. The reader never waits for the writer, so two ends writing large
// messages at each other cannot deadlock; read responses are therefore
// copied out of the region when the read is served. While the reader holds
// the stream in a receiver-not-ready wait it polls the socket for the peer
// hanging up (POLLRDHUP), so even an endless wait ends with the peer. Post* and Reg* are safe
// for concurrent use; GetSendComp and GetRecvComp each by one goroutine at a
// time. The device owns its protection domain and closes its listeners,
// connections and regions on Close.
//
// This package is owned by the tcp provider's maintainers; other packages
// use it only through rdma.Open("tcp").
package tcp
