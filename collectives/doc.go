// Package collectives holds gorun's collective algorithms as schedules, pure
// data, apart from the executor that runs them (internal/engine), as
// STYLE.md asks.
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
// every world size 1..64, 127, 128, 255, 256, 1,000, 1,024 and 4,096
// (worldSizes; the race detector and -short take a sample; at 1,000 ranks
// and more some counts and chunks, and 4,096 for the schedules with ops in
// proportion to the size, only with GORUN_SIM_LARGE=1) with one message in
// flight per pair (so flow control deadlocks are caught) and check exactly
// which rank contributed to which position.
//
// Mark a send ToCopy when its matching receive is a Recv (the simulator
// checks it): large ToCopy sends then go straight into the receiver's
// buffer. The executor (internal/engine) splits an op into staging-slot
// messages; comm caps the chunk at the staging window (engine.Window) so
// that two ranks that each wait for their own send before applying the
// other's cannot run out of credits.
//
// # Executor
//
// The executor lives in internal/engine: Engine, Plan, Call, Link, Device,
// RegCache, Establish and the executor's errors. Being internal, any
// package of this module may import it and nothing outside can; only
// package comm does. It imports this package for the schedule data model
// (Schedule, Op, Kind, Buf, Collective).
//
// Ownership and concurrency: schedules are immutable once Finalized and may
// be shared between goroutines.
package collectives
