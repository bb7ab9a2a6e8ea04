// Package launcher starts and supervises the ranks of a gorun job, as
// mpirun does: it places ranks on hosts (-H, hostfiles, or srun inside a
// Slurm allocation), starts them directly, through ssh or through another
// launch agent, hands each rank the environment contract (GORUN_RANK,
// GORUN_SEEDS, GORUN_CONTROL, ...), tags and serializes their output,
// forwards signals, tears the job down when a rank fails, and runs the
// job control server (internal/jobctl) behind the live start-up view and
// the stall report. See README.md in this directory for the user's side.
//
// Ownership at run time: each Run owns what it makes for its job (the
// program it built, removed on return; the job-control server; the
// timeline's files; the rank processes, stopped and reaped before it
// returns). Concurrency: Run may be called concurrently for independent jobs; one
// goroutine per job supervises its processes, and output is written to
// Config.Stdout and Config.Stderr one whole line per Write, under one lock.
// Config.Signals is read by one goroutine at a time: a watcher until the
// ranks start (a stopping signal cancels the build or the --nnodes
// check-in, startsignal.go), the supervisor after.
package launcher
