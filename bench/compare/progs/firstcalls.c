/* firstcalls: bench/firstcalls's loop for an MPI library. It times each
 * of a job's first 8-byte allreduces, one by one, after MPI_Init and a
 * pause, and prints each rank's times in microseconds, in order.
 *
 *   mpicc -O2 -o /tmp/firstcalls_mpi bench/compare/progs/firstcalls.c
 *   mpirun -np 2 /tmp/firstcalls_mpi [calls [pause_ms]]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, calls = argc > 1 ? atoi(argv[1]) : 20;
	long pause_ms = argc > 2 ? atol(argv[2]) : 2000;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	struct timespec pause = {pause_ms / 1000, (pause_ms % 1000) * 1000000};
	nanosleep(&pause, NULL);
	double v = 0, r;
	printf("rank %d us:", rank);
	for (int i = 0; i < calls; i++) {
		double start = now_us();
		MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
		printf(" %.0f", now_us() - start);
	}
	printf("\n");
	MPI_Finalize();
	return 0;
}
