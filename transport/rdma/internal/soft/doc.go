// Package soft holds what the software providers (mem, tcp, shm) share: the
// protection domain's key table, the post-time checks of local buffers, the
// completion queue, and memory outside the Go heap. Hardware providers
// (verbs) get these from the NIC instead.
package soft
