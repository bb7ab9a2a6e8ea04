/* abi_check: exercises every call of include/gorun.h on each rank of a job
 * and checks the results. Exit status 0 and "abi_check: rank R ok" on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "gorun.h"

#define CHECK(call) do { int rc_ = (call); if (rc_ != GORUN_OK) { \
	fprintf(stderr, "abi_check: %s:%d: %s -> %d (%s): %s\n", __FILE__, __LINE__, #call, rc_, \
		gorun_strerror(rc_), gorun_last_error()); exit(1); } } while (0)
#define EXPECT(cond, ...) do { if (!(cond)) { fprintf(stderr, "abi_check: " __VA_ARGS__); \
	fprintf(stderr, "\n"); exit(1); } } while (0)

int main(void) {
	/* the library's version is the header's it was compiled against */
	EXPECT(gorun_abi_version() == GORUN_ABI_VERSION, "gorun_abi_version() = %d, gorun.h's GORUN_ABI_VERSION = %d",
	       gorun_abi_version(), GORUN_ABI_VERSION);
	gorun_comm c;
	CHECK(gorun_init(&c));
	int rank, size, lr, ls;
	CHECK(gorun_rank(c, &rank));
	CHECK(gorun_size(c, &size));
	CHECK(gorun_local_rank(c, &lr));
	CHECK(gorun_local_size(c, &ls));
	EXPECT(rank >= 0 && rank < size && lr >= 0 && lr < ls, "bad rank %d size %d local %d/%d", rank, size, lr, ls);

	/* allreduce float32 sum, in place and out of place */
	enum { N = 1000 };
	float f[N], g[N];
	for (int i = 0; i < N; i++) f[i] = (float)(rank + 1) * (float)(i % 10);
	CHECK(gorun_allreduce(c, f, g, N, GORUN_FLOAT32, GORUN_SUM));
	CHECK(gorun_allreduce(c, f, f, N, GORUN_FLOAT32, GORUN_SUM));
	for (int i = 0; i < N; i++) {
		float want = (float)(size * (size + 1) / 2) * (float)(i % 10);
		EXPECT(f[i] == want && g[i] == want, "allreduce[%d] = %g/%g, want %g", i, f[i], g[i], want);
	}
	/* int32 max */
	int32_t m[3] = {rank, -rank, 7};
	CHECK(gorun_allreduce(c, m, m, 3, GORUN_INT32, GORUN_MAX));
	EXPECT(m[0] == size - 1 && m[1] == 0 && m[2] == 7, "max = %d %d %d", m[0], m[1], m[2]);
	/* float64 avg */
	double d = rank;
	CHECK(gorun_allreduce(c, &d, &d, 1, GORUN_FLOAT64, GORUN_AVG));
	EXPECT(d == (size - 1) / 2.0, "avg = %g", d);

	/* broadcast from the last rank */
	int64_t b[4];
	for (int i = 0; i < 4; i++) b[i] = rank == size - 1 ? 100 + i : -1;
	CHECK(gorun_broadcast(c, b, 4, GORUN_INT64, size - 1));
	for (int i = 0; i < 4; i++) EXPECT(b[i] == 100 + i, "broadcast[%d] = %lld", i, (long long)b[i]);

	/* allgather and reduce-scatter */
	uint16_t mine[2] = {(uint16_t)rank, (uint16_t)(rank * 2)};
	uint16_t *all = calloc(2 * size, sizeof *all);
	CHECK(gorun_allgather(c, mine, all, 2, GORUN_UINT16));
	for (int r = 0; r < size; r++) EXPECT(all[2 * r] == r && all[2 * r + 1] == 2 * r, "allgather[%d] wrong", r);
	float *rs = malloc(sizeof(float) * 3 * size), out[3];
	for (int i = 0; i < 3 * size; i++) rs[i] = (float)i;
	CHECK(gorun_reduce_scatter(c, rs, out, 3, GORUN_FLOAT32, GORUN_SUM));
	for (int i = 0; i < 3; i++) EXPECT(out[i] == (float)(size * (3 * rank + i)), "reduce_scatter[%d] = %g", i, out[i]);

	/* non-blocking: two in flight, one waited, one tested to completion */
	float a1[64], a2[64];
	for (int i = 0; i < 64; i++) a1[i] = a2[i] = 1;
	gorun_request r1, r2;
	CHECK(gorun_iallreduce(c, a1, a1, 64, GORUN_FLOAT32, GORUN_SUM, &r1));
	CHECK(gorun_iallreduce(c, a2, a2, 64, GORUN_FLOAT32, GORUN_SUM, &r2));
	CHECK(gorun_wait(r1));
	int done = 0;
	while (!done) CHECK(gorun_test(r2, &done));
	EXPECT(a1[63] == size && a2[0] == size, "iallreduce = %g %g", a1[63], a2[0]);
	uint8_t ib[3] = {0};
	if (rank == 0) ib[0] = 1, ib[1] = 2, ib[2] = 3;
	gorun_request r3;
	CHECK(gorun_ibroadcast(c, ib, 3, GORUN_UINT8, 0, &r3));
	CHECK(gorun_wait(r3));
	EXPECT(ib[2] == 3, "ibroadcast");

	/* errors are codes and messages, never crashes */
	EXPECT(gorun_allreduce(c, f, f, N, (gorun_dtype)99, GORUN_SUM) == GORUN_ERR_INVALID, "bad dtype accepted");
	EXPECT(strlen(gorun_last_error()) > 0, "no message for a bad dtype");
	EXPECT(gorun_allreduce(c, f, f, N, GORUN_FLOAT32, (gorun_op)42) == GORUN_ERR_INVALID, "bad op accepted");
	EXPECT(gorun_allreduce(12345, f, f, N, GORUN_FLOAT32, GORUN_SUM) == GORUN_ERR_INVALID, "bad handle accepted");
	EXPECT(gorun_allreduce(c, NULL, NULL, 5, GORUN_FLOAT32, GORUN_SUM) == GORUN_ERR_INVALID, "NULL buffer accepted");
	EXPECT(gorun_wait(777) == GORUN_ERR_INVALID, "bad request accepted");
	EXPECT(gorun_rank(c, NULL) == GORUN_ERR_INVALID, "NULL out accepted");
	EXPECT(strcmp(gorun_strerror(GORUN_ERR_TIMEOUT), "timed out") == 0, "strerror");
	/* the bad dtype aborted the communicator on every rank: start again */
	EXPECT(gorun_barrier(c) != GORUN_OK, "barrier after a refused call succeeded");
	CHECK(gorun_finalize(c));
	CHECK(gorun_init(&c));

	CHECK(gorun_barrier(c));
	CHECK(gorun_finalize(c));
	EXPECT(gorun_barrier(c) == GORUN_ERR_INVALID, "finalized handle accepted");
	printf("abi_check: rank %d ok\n", rank);
	return 0;
}
