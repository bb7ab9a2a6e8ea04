// Package shm is the same-host provider of transport/rdma: ranks in
// different processes of one machine, one-sided copies through shared
// memory. Import it for its side effect; it registers as "shm".
//
// Ownership: transport/rdma/shm (the shm provider helper).
//
// # Data path
//
// Device.Alloc carves regions from a per-device memfd arena (sparse,
// mode 0600, close-on-exec). Every peer maps the whole arena once at
// connection setup, so PostWrite and PostRead on Alloc'd memory are one
// memcpy by the initiator and the target's CPU does nothing.
// Device.Register'd Go memory (pinned) is reached with process_vm_writev
// and process_vm_readv. If cross-memory attach is not permitted (probed at
// setup; GORUN_SHM_CMA=0 forces it off) the peer copies instead, through
// the unix socket: correct, but two copies and a round trip.
//
// Sends, write-with-immediate notifications and receive-length errors
// travel in a 1 MiB shared ring per direction, in records of up to 64 KiB
// (longer sends are fragmented). A small send costs no syscall: the sender
// checks the peer's published receive count and capacity, copies into the
// ring and bumps the head; the receiver's progress goroutine copies into
// the posted receive. Waiters (the progress goroutine, a sender waiting for
// ring space or for a receive) spin for a few microseconds, yielding, then
// sleep with FUTEX_WAIT on a word in the shared segment; a producer calls
// FUTEX_WAKE only when the waiter flag is set.
//
// # Remote checks and deregistration
//
// Each side publishes its device's remotely accessible regions (rkey,
// address, length, access, arena offset) in a key table in its segment.
// The initiator finds the rkey (cached slot, else a scan), increments the
// slot's users counter, re-checks validity, key, bounds and access, copies,
// and decrements users. Deregister clears the slot's valid flag in every
// connection's table, then waits until users is zero. The guarantee: once
// Deregister returns, no peer copy touches the region, and a later request
// naming it completes with StatusRemoteAccessError; a request racing with
// Deregister either completes before Deregister returns or fails. Freed
// arena ranges are punched out and may be reused for later Allocs.
//
// # Connection setup
//
// Listen("127.0.0.1:0") (any non-path address) creates a socket, mode 0600,
// in a private 0700 directory: $XDG_RUNTIME_DIR/gorun or
// $TMPDIR/gorun-<uid>; an absolute path is used as given. The handshake
// exchanges nonces, then, when Config.Token is set, HMAC-SHA256 proofs
// (the token is never sent) and checks the peer's uid with SO_PEERCRED;
// then each side passes its segment and arena memfds with SCM_RIGHTS.
// The socket stays open: its end is how a closed or dead peer is noticed
// (outstanding work is flushed, Err reports it, the completion queues end
// with an error wrapping rdma.ErrClosed).
//
// # Concurrency
//
// Device, Listener and Conn methods are safe for concurrent use. Posts on
// one Conn are serialized: a post runs its request itself when nothing is
// queued ahead and it needs no wait, otherwise the request is queued for
// the connection's send-queue goroutine, so effects and completions follow
// post order. Each Conn runs three goroutines (send queue, ring progress,
// socket reader); Close stops them, flushes, unmaps and closes every fd.
//
// Limits: at most 4096 remotely accessible regions per device; Alloc'd
// memory at most 64 GiB at once per device; Alloc does not mbind (NUMA
// placement is left to the kernel's first-touch policy).
package shm
