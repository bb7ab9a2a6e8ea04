/* mpi_coll: the MPI side of bench/compare. Times MPI_Allreduce (float32 sum,
 * in place) or MPI_Bcast (float32, root 0) over a list of sizes, or
 * MPI_Barrier alone (one line of size 0, whatever the sizes), and prints
 * one line per size, in the same columns as gorun's allreduce_perf:
 *   bytes count time_us algbw_GBps busbw_GBps wrong
 * Every iteration's result is checked: with rank r contributing (r+1)*(i%7+1)
 * the sum is exact in float32 for the sizes and rank counts used here.
 * Usage: mpi_coll allreduce|broadcast|barrier WARMUP ITERS BYTES...
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(float *b, size_t n, int rank, int it) {
	float v = (float)((rank + 1) * (it % 7 + 1));
	for (size_t i = 0; i < n; i++) b[i] = v;
}

static long check(const float *b, size_t n, int size, int it, int bcast) {
	float want = bcast ? (float)(it % 7 + 1) : (float)(size * (size + 1) / 2 * (it % 7 + 1));
	long wrong = 0;
	for (size_t i = 0; i < n; i++) wrong += b[i] != want;
	return wrong;
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc < 5) {
		if (rank == 0) fprintf(stderr, "usage: %s allreduce|broadcast|barrier WARMUP ITERS BYTES...\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	int bcast = strcmp(argv[1], "broadcast") == 0;
	int warm = atoi(argv[2]), iters = atoi(argv[3]);
	if (strcmp(argv[1], "barrier") == 0) {
		double total = 0;
		for (int it = -warm; it < iters; it++) {
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			MPI_Barrier(MPI_COMM_WORLD);
			if (it >= 0) total += MPI_Wtime() - t0;
		}
		double maxt;
		MPI_Reduce(&total, &maxt, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		if (rank == 0) printf("0 0 %.2f 0 0 0\n", maxt / iters * 1e6);
		MPI_Finalize();
		return 0;
	}
	for (int a = 4; a < argc; a++) {
		size_t bytes = strtoull(argv[a], NULL, 10);
		size_t n = bytes / sizeof(float);
		if (n == 0) n = 1;
		float *buf = aligned_alloc(4096, ((n * sizeof(float) + 4095) / 4096) * 4096);
		long wrong = 0;
		double total = 0;
		for (int it = -warm; it < iters; it++) {
			int k = it < 0 ? it + warm : it;
			fill(buf, n, bcast ? (rank == 0 ? 0 : 99) : rank, k);
			MPI_Barrier(MPI_COMM_WORLD);
			double t0 = MPI_Wtime();
			if (bcast)
				MPI_Bcast(buf, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
			else
				MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
			double dt = MPI_Wtime() - t0;
			if (it >= 0) {
				total += dt;
				wrong += check(buf, n, size, k, bcast);
			}
		}
		double maxt;
		MPI_Reduce(&total, &maxt, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
		long allwrong;
		MPI_Reduce(&wrong, &allwrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			double us = maxt / iters * 1e6;
			double algbw = (double)(n * sizeof(float)) / (us * 1e-6) / 1e9;
			double factor = bcast ? 1.0 : 2.0 * (size - 1) / size;
			printf("%zu %zu %.2f %.3f %.3f %ld\n", n * sizeof(float), n, us, algbw, algbw * factor, allwrong);
			fflush(stdout);
		}
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
