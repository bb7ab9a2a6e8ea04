// Package collectives holds gorun's collective algorithms, split in two
// layers, as STYLE.md asks.
//
// # Schedules (pure data)
//
// A Schedule is one rank's part of a collective: a list of Ops in program
// order. An Op sends Len elements of a buffer (Work, the rank's working
// buffer, or Input, the caller's read-only input) at Off to Peer, or
// receives Len elements from Peer into Work at Off, storing (Recv) or
// reducing (RecvReduce) them. Offsets count elements, so a schedule does not
// depend on the element type. Ops carry Deps, indices of earlier ops that
// must complete first; Finalize derives them from range overlaps (read
// after write, write after read, write after write), and a builder may add
// explicit ones with After (the barrier does, its messages being empty).
//
// Matching is FIFO per ordered pair of ranks: the i-th send from a to b is
// the i-th receive at b from a, and the lengths must agree. Everything not
// ordered by Deps or by that FIFO runs concurrently, so an algorithm that
// cuts its buffer into chunk-sized ops is pipelined for free.
//
// To add an algorithm: write a builder func(rank, size, [root,] count,
// chunk int) *Schedule that appends ops with add/addChunked/interleave and
// returns s.Finalize(); add an Algo constant and a case to Build, Algos and
// (if it should be chosen automatically) Select; add it to the schedule
// tests in sim_test.go, which simulate every rank on symbolic elements for
// every world size 1..33 with one message in flight per pair (so flow
// control deadlocks are caught) and check exactly which rank contributed to
// which position.
//
// Mark a send ToCopy when its matching receive is a Recv (the simulator
// checks it): large ToCopy sends then go straight into the receiver's
// buffer. The executor splits an op into staging-slot messages; comm caps
// the chunk at the staging window (Window) so that two ranks that each wait
// for their own send before applying the other's cannot run out of credits.
//
// # Executor
//
// The executor (engine.go, wait.go, device.go, link.go, message.go,
// failure.go) runs schedules over transport/rdma. Per peer connection
// (Link), each side has a staging area registered for remote write; a
// message is one write-with-immediate of a 32-byte header carrying the
// call's signature (and, up to smallMax bytes, the payload behind it), or
// a payload write followed by that header. Credits piggyback on headers.
// Large stores are zero copy: the receiver sends a clear-to-send with the
// address and rkey of the destination in its registered buffer, and the
// sender writes there. The Engine runs one Plan (a compiled Schedule) at a
// time on the caller's goroutine, posting sends whose deps are done and
// applying arrivals (kernels.ReduceBytes or copy) to receives whose deps
// are done. All links of a Device share one completion queue, which the
// running engine polls itself; when it has nothing to do it waits as its
// WaitPolicy says (spin, yield, then arm and sleep), and the device's
// watcher goroutine handles completions only when the CQ is armed (a
// sleeping Run, setup, an idle device). A mismatched header, a failed
// connection, a timeout or Abort fails the engine and sends abort notices
// to every peer. Package comm builds schedules (and caches them),
// registers buffers (RegCache, bounded LRU) and owns the links.
//
// Ownership and concurrency: schedules are immutable once Finalized and may
// be shared between goroutines. An Engine runs one operation at a time (the
// caller serialises). Completions are dispatched to links under their
// device's pollMu by whichever goroutine polled (a Run, or the device's
// watcher); links' counters are atomics for that reason. Device.Close
// stops the watcher; Engine.Close removes its links from dispatch before
// freeing their memory.
package collectives
