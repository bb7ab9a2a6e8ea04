// Package engine is gorun's executor: it runs the schedules of package
// collectives over transport/rdma. It is internal to the module: any
// package of gorun may import it, nothing outside can, and only package
// comm does. Imports point down: comm → internal/engine → collectives
// (the schedule data model) and transport/rdma.
//
// The executor is engine.go, wait.go, device.go, link.go, message.go and
// failure.go, with connect.go (Establish) and regcache.go. Per peer connection
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
// connection or completion queue, a timeout or Abort fails the engine
// and sends abort notices to every peer (a failed completion queue is
// this rank's own failure, ErrDeviceFailed, which its peers see as
// ErrPeerFailed naming it). Package comm builds schedules
// (and caches them), registers buffers (RegCache, bounded LRU) and owns
// the links.
//
// Ownership and concurrency: an Engine runs one operation at a time (the
// caller serialises). Completions are dispatched to links under their
// device's pollMu by whichever goroutine polled (a Run, or the device's
// watcher); links' counters are atomics for that reason. Device.Close
// stops the watcher; Engine.Close removes its links from dispatch before
// freeing their memory.
package engine
