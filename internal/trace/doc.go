// Package trace records what a rank does, for the timeline, the job
// report and the live metrics (gorun --timeline, --report, --metrics).
//
// A Recorder keeps a fixed-size ring of events (one per collective, ddp
// bucket, user span or instant) and a goroutine that flushes them, as
// lines of JSON, to the rank's file (FILE.RANK) whenever the ring is half
// full, every FlushEvery, at a failed operation and at Close: a rank that
// is killed or exits without closing leaves all but its last second.
// There is no SIGTERM handler: a library must not change how the process
// answers signals. When the writer falls behind (a slow disk) the ring
// drops its oldest unwritten events and the file says how many, at the
// place they were lost: memory stays bounded and the job goes on.
//
// Times are nanoseconds of CLOCK_MONOTONIC (Now), the clock the launcher
// also uses; each file ends with this rank's measured offset to the
// launcher's clock (jobctl's clock sync), which Merge applies, and a flush
// that finds a new measurement writes it too, for a rank killed before
// its last line.
//
// A communicator's lane says, at its first operation, which communicator
// it is (SetComm: the rank's rank in it, its size, an ID its members
// share), so that the report compares each collective's arrivals among
// its own members. A rank restarted by gorun --max-restarts writes
// FILE.RANK.restartN (RestartPath), leaving its first incarnation's file;
// a process that makes the rank's first communicator again (comm.Init
// after Close) writes FILE.RANK.initN (SessionPath), leaving the first's.
//
// Files: ReadFile parses a rank's file (a last line cut by a kill is left
// out; a file without a header is ErrEmpty); ReadRanks reads a job's,
// skipping the ranks that left nothing, each rank with its restarted
// incarnations (RankFile.Restarts) and, folded into each as more lanes,
// its process's later sessions (FILE.RANK.initN of the same pid); Merge
// writes several as one Chrome Trace Event Format JSON (Perfetto,
// chrome://tracing), one process per rank, a restarted rank's
// incarnations in one process; Summarize computes the job report; SVG
// draws a Gantt chart.
//
// Concurrency: Recorder methods are safe for concurrent use; a nil
// *Recorder records nothing. The flusher goroutine owns the file; Close
// stops it and waits for it.
package trace
