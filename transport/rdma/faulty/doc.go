// Package faulty injects faults into gorun's data path, for the reliability
// tests and for end-to-end runs (gorun --fault, GORUN_FAULT).
//
// Wrap puts a Plan around any provider's Device: every Conn it dials or
// accepts counts its posts and completion waits, and a Rule fires an Action
// at the Nth matching one — delay it, drop it (the request silently never
// reaches the peer), cut the connection, or kill or freeze (SIGSTOP) this
// process before the post, after it (the transfer in flight), or while
// waiting for a completion. Proxy is a TCP man-in-the-middle for faults on
// the wire: delay, corrupt a byte, stall (a partition that keeps the socket
// open) or cut.
//
// Concurrency: a wrapped Conn is as safe as the one it wraps; rule counters
// are atomic.
package faulty
