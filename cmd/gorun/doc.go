// Command gorun starts a gorun job, the way mpirun does:
//
//	gorun -np 8 ./train --epochs 3
//	gorun -H node1:4,node2:4 -x NCCL_LIKE=1 ./examples/allreduce_perf
//	gorun --hostfile hosts -np 16 --bind-to numa /opt/bin/train
//
// It only parses flags; package launcher does the work (see
// launcher/README.md for the flags, Slurm, ssh and Kubernetes).
//
// Ownership: the launcher's owner.
package main
