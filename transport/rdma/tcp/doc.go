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
// A conn made by Listen reads nothing until AcceptQP binds it to its
// completion queues; what its peer sends meanwhile waits in the socket.
//
// Every frame header carries a CRC32C of itself, always (checksum.go): the
// receiver checks it before using any field, so a damaged op, rkey,
// address or length fails the connection at once. With Config.Checksum
// (GORUN_CHECKSUM=1) the header also carries a CRC32C of the payload,
// which the receiver checks before acknowledging the
// request or completing a receive or a read; a mismatch fails the request
// and moves both ends to the error state, so damaged bytes that already
// reached a region are never reported as delivered. Both ends must agree
// on the option: the handshake refuses a mismatch.
//
// Liveness: keepalive (liveness_linux.go; no TCP_USER_TIMEOUT) and a
// heartbeat (heartbeat.go) that pings an idle connection every 200 ms and
// fails one whose peer's kernel has acknowledged nothing for 1 s (never
// on loopback), reading TCP_INFO on a timer: nothing on the per-message
// path.
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
// Progress: the caller drives it. A Post* writes its frame (header and
// payload gathered in one writev, straight from the registered region) to
// the socket on the caller's goroutine, without waiting; only when the
// socket is full does the rest go to the conn's writer goroutine, which
// waits in the netpoller for room, drains what is queued and goes idle.
// CQ.Poll, GetSendComp and GetRecvComp read what has arrived on every
// conn bound to the queue, without waiting, and serve it on the caller's
// goroutine: the parser (reader.go) keeps its state between calls, so a
// frame or a large payload may arrive over many polls, and payloads go
// from the socket straight into their regions. The responses a read pass
// produces (ACK, NAK, read response) are written the same way at its end.
// A conn's watcher goroutine sleeps in the netpoller until its socket is
// readable and then does the same work, so a conn nobody polls still
// serves its peer's requests, answers them, sees the peer hang up, and
// wakes an armed CQ with the completions it pushes. A send that finds no
// posted receive holds the stream (receiver not ready); a posted receive,
// the RNR timer (which also looks for the peer hanging up, POLLRDHUP) or
// any later poll resumes it.
//
// Ownership and concurrency: a Conn owns its socket, its parser and two
// goroutines (watcher, writer). Two tokens say who may touch the socket:
// the read token (progress.go, only ever tried: a party that finds it
// taken asks the holder for one more pass instead of waiting, so bytes
// never sit unread while someone wanted them read) guards the parser and
// the read side; the write token (c.writing, under c.mu) guards the
// writev in progress, and passes to the writer goroutine with a full
// socket, from which a poller takes it back while that goroutine waits
// for room (writer.go: with one P per rank it would run late). c.mu guards the queues and the state; completions are pushed
// under it, so each conn's completions reach its CQ in post order. The
// reader never waits for the writer, so two ends writing large messages
// at each other cannot deadlock; read responses are therefore copied out
// of the region when the read is served. When a conn fails or is closed,
// the holder of each token stops its side for good, and the second to
// stop flushes both queues into their CQs (a shared CQ is never shut) and
// unbinds the conn. The socket is closed from a goroutine of its own,
// since a close waits for every use of the descriptor to end. A CQ holds
// the list of its conns (copy on write, read without a lock by Poll); a
// CQ shared by two conns or more also holds an epoll instance watching
// their sockets (readySet, Linux), so that a Poll reads only the sockets
// that have bytes, plus any conn in a receiver-not-ready wait or failing.
// Post* and Reg* are safe for concurrent use; GetSendComp and GetRecvComp
// each by one goroutine at a time. The device owns its protection domain
// and closes its listeners, connections and regions on Close.
//
// Bandwidth (issue 11; measured 2026-11-24 on a 2-CPU VM over loopback,
// interleaved under chrt -f 50 with the machine loaded by other jobs):
// the kernel's copies are the cost. In a 2-rank 16 MiB allreduce a rank
// spends about 70% of its CPU samples in writev and read, 18% in memmove
// (mostly the benchmark's own input copy) and 2% in the reduction; this
// provider already gathers a batch of frames into one writev from the
// registered regions and reads payloads straight into place, so what is
// left to cut is messages, not copies. What was tried:
//   - larger messages: comm stages 1 MiB slots on a tcp job (stagingFor),
//     1.2× faster at 1 MiB and 1.25× at 16 MiB than 128 KiB slots: kept;
//   - SO_SNDBUF/SO_RCVBUF of 2 or 4 MiB: no better than autotuning;
//   - vmsplice + splice sends (no copy from the user pages): 0.3-0.9× a
//     plain writev in a stand-alone exchange, since loopback's receiver
//     copies anyway and the pipe adds work: dropped;
//   - GOMAXPROCS 2, so the writer goroutine runs beside the caller: no
//     better;
//   - several sockets per peer: in a stand-alone exchange two sockets
//     moved 1 MiB each way 1.25× faster than one (median of 4; spread
//     0.95-1.6×) and 16 MiB 1.09× faster. Not built in: striping must
//     keep the stream's order (a send after a write lands after its data)
//     across sockets, which needs per-request sequencing at the target.
//
// Other packages use it only through rdma.Open("tcp").
package tcp
