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
// Completion waits (the InWait point, op "wait") are counted in two places,
// on the same rule counters: each GetSendComp or GetRecvComp call, before it
// waits; and each completion that Poll hands out from a shared CQ made by
// the wrapped device's CreateCQ (see cq.go for the exact rules: an empty
// Poll is not a wait, Cut there closes every conn bound to the CQ). A CQ
// made by the provider underneath bypasses the plan. Conns made with
// DialQP and AcceptQP take either kind of CQ.
//
// Ownership: the plan's counters belong to the wrapped device; a wrapped
// CQ knows the wrapped conns bound to it, until they close.
//
// Concurrency: a wrapped Conn or CQ is as safe as the one it wraps; rule
// counters are atomic. Delay, Freeze and Hook run on the goroutine that
// posted, waited or polled.
package faulty
