// Package comm is gorun's public API: communicators (Comm) and the generic
// collectives (AllReduce, Broadcast, AllGather, ReduceScatter, Reduce,
// Gather, Scatter, AllToAll, Send/Recv, Barrier, the v-collectives
// AllGatherV, GatherV, ScatterV, AllToAllV, the prefix reductions Scan and
// ExScan, AllReduceLoc/ReduceLoc on ValueIndex pairs, and a non-blocking I*
// form of each, ISend and IRecv included).
//
// A Comm is made by Init (a job started by the gorun launcher, srun,
// mpirun or torchrun), NewLocal (n ranks in one process, for tests and
// simulation), Split or Dup. Every path goes through newComm, which opens
// the providers, exchanges endpoints through a rendezvous, picks a provider
// per peer and connects; the algorithms live in package collectives, the
// executor in internal/engine.
//
// Ownership and concurrency: a Comm may be used from several goroutines;
// its operations run one at a time, in the order they were called (for the
// I* functions, the order in which they were started). Every rank must call
// the collectives in the same order: two goroutines that call collectives
// on one Comm at once make that order a race, which can differ between
// ranks: ErrMismatch, or, for two calls alike in operation, count and
// type, each one's data silently reduced with the other's. Give each
// goroutine its own communicator (Dup), as with NCCL and MPI. Buffers belong to the caller but must
// not be touched while an operation on them runs; slices passed to
// collectives are registered with the transport and stay registered (and
// pinned) in a bounded per-communicator cache until evicted or Close.
//
// Failures: an operation that fails (timeout, cancelled context, a dead or
// disagreeing peer, Abort anywhere) aborts the communicator on every rank;
// every pending and later operation returns a *RankError naming the rank at
// fault. A failure of this rank's own device (a verbs CQ overrun, a
// device that died, a port down for 2 s) fails its operations with
// ErrDeviceFailed naming this rank and the device, and its Shrink too
// (it cannot go on); its peers see ErrPeerFailed naming it.
// A Request.Wait whose own context ends first returns a *RankError
// naming this rank and the operation, wrapping the context's error; the
// operation goes on, bounded by the context it was started with and the
// communicator's timeout. A rank's failure of its own (a bad argument, a
// cancelled context, a disagreement it found) fails its peers from the
// first collective it did not complete: a peer still in an earlier one
// completes it, as this rank did. A context that has already ended when an
// operation starts fails it so, even where it would have completed without
// waiting. A collective of no elements exchanges empty messages as a
// barrier does, so that a rank whose count, root or collective differs is
// found at that call. Configuration comes from options and the GORUN_*
// variables documented in env.go.
//
// Observability (observe.go, metrics.go): with GORUN_TIMELINE or
// GORUN_METRICS_ADDR the first communicator of a process opens an observer
// (the timeline's recorder, the metrics' counters and HTTP server), which
// the communicators made from it share, each with its own timeline row,
// and which that first communicator closes. Otherwise a Comm's obs is nil.
package comm
