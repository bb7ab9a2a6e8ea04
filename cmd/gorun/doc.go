// Command gorun starts a gorun job, the way mpirun does:
//
//	gorun -np 8 ./train --epochs 3
//	gorun -H node1:4,node2:4 -x NCCL_LIKE=1 ./examples/allreduce_perf
//	gorun --hostfile hosts -np 16 --bind-to numa /opt/bin/train
//
// It only parses flags; package launcher does the work (see
// launcher/README.md for the flags, Slurm, ssh and Kubernetes). Two
// subcommands talk to what a job left or a running job:
//
//	gorun trace tl.json -o tl.svg            # draw a merged timeline (trace.go)
//	gorun --add-ranks 2 --job gorun-…         # start ranks in a job run with --max-np (addranks.go)
//
// Ownership at run time: main's goroutine parses the flags, routes the
// signals gorun handles onto Config.Signals and calls launcher.Run, which
// owns the job's processes, built program and job-control server until it
// returns; main only maps its error to the exit status.
package main
