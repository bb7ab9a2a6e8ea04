// Package shm is the same-host provider of transport/rdma: ranks in
// different processes of one machine, one-sided copies through shared
// memory. Import it for its side effect; it registers as "shm".
//
// Ownership: transport/rdma/shm (the shm provider helper).
//
// # Data path
//
// Device.Alloc carves regions from a per-device memfd arena (sparse,
// mode 0600, close-on-exec; a freed range is punched out). Every peer maps
// the whole arena at connection setup (once per process: its connections
// to the device share the mapping), so PostWrite and PostRead on
// Alloc'd memory are one memcpy by the initiator; the target's CPU does
// nothing. Device.Register'd Go memory (pinned) is reached with
// process_vm_writev and process_vm_readv. Cross-memory attach is probed at
// setup (it fails under Yama ptrace_scope 2 or 3, for another uid, or under
// a seccomp filter; GORUN_SHM_CMA=0 turns it off): without it, writes and
// reads of registered Go memory go through the peer, which checks and
// copies on its socket goroutine: correct, but two copies and a round
// trip. Alloc'd memory never needs the fallback.
//
// Sends, write-with-immediate notifications, receive-length errors and
// error notices travel in a 1 MiB shared ring per direction. Each record
// begins with a stamp (its ring position plus one) that the producer
// stores last, having zeroed the next record's stamp word first: the
// receiver polls the stamp at its own position, so a small message costs
// it one cache miss (the record), not two (the producer's head, then the
// record). The head is still published, for sleepers. A send costs
// no syscall: the sender reads the peer's published receive count (and,
// with it, a lower bound of the capacity of the receives outstanding;
// receiver not ready: it waits on the peer's receive doorbell, RNRTimer at
// a time, RNRRetry times). A send of at most 1008 bytes that the bound
// covers is one record with a 16-byte header and the payload (an 8-byte
// message and a 32-byte header share one cache line with it); otherwise,
// if the receive is one buffer of Alloc'd memory, the sender copies
// straight into it and puts a small record in the ring, else it copies the
// payload into the ring in records of up to 64 KiB (the receiver copies
// out while the sender copies in).
// A receiver fences its buffers (a flag plus an in-flight counter in its
// segment, as for the key table) before a flush releases them.
//
// # Waiting
//
// Every wait is a bounded spin (4 µs, yielding with runtime.Gosched), then
// a sleep on the waiting process's eventfd for the connection, in Go's
// netpoller; each side hands the other its eventfd at setup. A waiter
// sets a flag in shared memory before its last check; a producer takes
// the flag (swaps it to zero) and writes to the waiter's eventfd only when
// it was set, so a busy connection makes no syscalls, and a woken sleeper
// that has not run yet costs later messages nothing. The producer
// publishes with a plain release store, not a locked exchange, where both
// processes are registered for membarrier: the barrier the flag protocol
// needs is then the sleeper's, a membarrier(GLOBAL_EXPEDITED) call that
// the sleepers of a process share (fence.go). A sleeper in the
// netpoller gives its P up at once (a futex wait held it until Go's sysmon
// took it back: bell.go). GetRecvComp drains the peer's ring itself and
// sleeps on its doorbell, so a message costs at most one wake-up; while it
// does, the progress goroutine stays off the doorbell, and it takes over
// when nobody polls, so the ring always drains. After a wait that slept, the receive
// poller's next spin is longer (25µs, yielding the CPU with sched_yield):
// a wake-up across vCPUs costs more than the short spin, and without it a
// ping-pong that once fell asleep would pay a wake-up per message for ever.
//
// # Mailboxes
//
// Each segment also holds a 64 KiB mailbox (rdma.Mailbox) that the peer
// writes with plain stores: Conn.Mailbox returns this side's (in, in its
// own segment, so that the poller reads local memory, as Open MPI's
// fast boxes lie with their receiver) and the peer's (out). The provider
// only maps them; their protocol is the caller's (internal/engine's
// mailbox.go). SleepFence is the doorbells' barrier (fence.go).
// GORUN_SHM_MAILBOX=0 withholds them.
//
// # Shared completion queues
//
// Device.CreateCQ returns a CQ that knows the connections whose receive
// queue is bound to it (a copy-on-write list). CQ.Poll looks at each
// one's ring with two atomic loads and drains it on the caller's goroutine
// if it has records (TryLock of the connection's progMu: a ring somebody
// else is draining is skipped, that one completes what it finds); a
// connection that closes leaves the list and waits until no Poll can see
// it (a grace period, as in user-space RCU) before it unmaps the ring. It
// hands the receive completions it finds straight to the
// caller when nothing is queued ahead of them and the CQ is not armed;
// otherwise completions go through the CQ's queue (a soft.CQ). Send
// completions are pushed by whoever executes the request: the poster,
// inline, or the send-queue goroutine. A connection's progress goroutine
// sleeps on the peer's data doorbell only while the CQ is armed; the rest
// of the time it is parked on a channel that Arm fills, so while the
// caller spins in Poll the peer makes no wake-up write. After Arm every
// completion goes through the queue, whose next push sends the Notify
// token (the lost-wake-up argument is at cq.Arm). One goroutine per
// connection rather than one per CQ waiting on every doorbell: it reuses
// the connection's lifetime (its segments and eventfds stay open while it
// runs). A bound queue's
// outstanding work is flushed into the shared CQ when the connection fails,
// closes or loses its peer; the CQ itself is never shut by a connection.
// GetSendComp and GetRecvComp on a bound queue are rdma.WaitComp on it.

// # Remote checks and deregistration
//
// Each side publishes its device's remotely accessible regions (rkey,
// address, length, access, arena offset) in a key table in its segment.
// The initiator finds the rkey (cached slot, else a scan), increments the
// slot's users counter, checks validity, key, bounds and access, copies,
// and decrements users. Deregister clears the slot's valid flag in every
// connection's table, then waits until users is zero (or the peer is
// gone). Guarantee: once Deregister returns, no peer copy touches the
// region, and a later request naming it completes with
// StatusRemoteAccessError; a request racing with Deregister either
// finished before Deregister returned or fails. Closing a connection
// revokes its whole key table the same way (and fences its receives), so
// that a peer that runs late, or resumes after a freeze with writes still
// queued, cannot reach the ranges its old keys named once they hold other
// regions. A peer stopped (SIGSTOP, a debugger) in the middle of a copy
// into Alloc'd memory will finish that copy when it resumes: the waits
// give up on it after a second, and the region's range, when freed, stays
// out of the allocator until that peer's process has exited
// (quarantine.go). These checks keep correct
// peers correct; they are not a sandbox: an authenticated peer process has
// the arena mapped (and, with CMA, ptrace-level access), so the trust
// boundary is the uid and Config.Token.
//
// # Connection setup
//
// Listen("127.0.0.1:0") (any address but an absolute path or "@name",
// which are used as given) creates a socket in Linux's abstract namespace,
// "@gorun-shm-PID-RANDOM": no file, so nothing is left behind when the
// process dies, however it dies. (An absolute path gets a socket file, mode
// 0600, removed by Close.) Both ends check the peer's uid with SO_PEERCRED
// first, token or not, since an abstract socket has no permissions. The
// handshake exchanges nonces, then, when Config.Token is set, HMAC-SHA256
// proofs bound to the role and both nonces (the token is never sent); then each side passes its segment
// and arena memfds with SCM_RIGHTS. The socket stays open: its end is how
// a closed or dead peer is noticed (queued work is flushed, Err says which
// pid went away, and the completion queues end with an error wrapping
// rdma.ErrClosed).
//
// # Concurrency
//
// Device, Listener, Conn and CQ methods are safe for concurrent use. Posts
// on one Conn are serialized: a post runs its request itself when nothing
// is queued ahead and it needs no wait, otherwise the request is queued
// for the connection's send-queue goroutine, so effects and completions
// follow post order. Each Conn runs three goroutines (send queue, ring
// progress, socket reader); Close stops them, unbinds the connection from
// its CQ, flushes, unmaps and closes every fd. The peer's ring is drained
// by whoever holds progMu (the progress goroutine, a Poll, a GetRecvComp
// poller, the socket reader after the peer's end); the segments are
// unmapped only under progMu, after the state is closed. Lock order:
// Device.mu before a Conn's; progMu before rqMu; rqMu before a CQ's.
//
// Limits: at most 4096 remotely accessible regions per device; at most
// 64 GiB Alloc'd at once per device. Alloc places its pages on
// Config.NUMANode when PlaceNUMA is set (mbind, preferred) or, by default, on the allocating
// thread's node, by faulting them in at Alloc time; mlock is best effort.
package shm
