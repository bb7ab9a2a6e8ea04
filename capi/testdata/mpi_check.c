/* mpi_check: the rest of the MPI set through include/gorun.h on each rank
 * of a job: rooted collectives, all-to-all, scans, send/recv, the
 * v-collectives, integer and value-index ops, non-blocking forms, and the
 * errors a disagreement gives. "mpi_check: rank R ok" on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "gorun.h"

#define CHECK(call) do { int rc_ = (call); if (rc_ != GORUN_OK) { \
	fprintf(stderr, "mpi_check: %s:%d: %s -> %d (%s): %s\n", __FILE__, __LINE__, #call, rc_, \
		gorun_strerror(rc_), gorun_last_error()); exit(1); } } while (0)
#define EXPECT(cond, ...) do { if (!(cond)) { fprintf(stderr, "mpi_check: rank %d: ", rank); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

int main(void) {
	gorun_comm c;
	int rank = -1, size;
	CHECK(gorun_init(&c));
	CHECK(gorun_rank(c, &rank));
	CHECK(gorun_size(c, &size));
	int root = size - 1;

	/* reduce, gather, scatter, alltoall */
	int32_t x[2] = {rank + 1, 10 * (rank + 1)}, red[2] = {0, 0};
	CHECK(gorun_reduce(c, x, red, 2, GORUN_INT32, GORUN_SUM, root));
	if (rank == root) EXPECT(red[0] == size * (size + 1) / 2 && red[1] == 10 * red[0], "reduce = %d %d", red[0], red[1]);
	int32_t *gat = calloc(2 * size, 4), *sca = malloc(8 * size), got[2];
	CHECK(gorun_gather(c, x, rank == root ? gat : NULL, 2, GORUN_INT32, root));
	for (int r = 0; rank == root && r < size; r++) EXPECT(gat[2 * r] == r + 1, "gather[%d] = %d", r, gat[2 * r]);
	for (int i = 0; i < 2 * size; i++) sca[i] = 100 + i;
	CHECK(gorun_scatter(c, rank == 0 ? sca : NULL, got, 2, GORUN_INT32, 0));
	EXPECT(got[0] == 100 + 2 * rank && got[1] == 101 + 2 * rank, "scatter = %d %d", got[0], got[1]);
	int64_t *a2a = malloc(8 * size), *a2b = malloc(8 * size);
	for (int b = 0; b < size; b++) a2a[b] = rank * 100 + b;
	CHECK(gorun_alltoall(c, a2a, a2b, 1, GORUN_INT64));
	for (int s = 0; s < size; s++) EXPECT(a2b[s] == s * 100 + rank, "alltoall[%d] = %lld", s, (long long)a2b[s]);

	/* scans, bitwise and logical ops */
	int64_t v = rank + 1, sc = 0, ex = -7;
	CHECK(gorun_scan(c, &v, &sc, 1, GORUN_INT64, GORUN_SUM));
	CHECK(gorun_exscan(c, &v, &ex, 1, GORUN_INT64, GORUN_SUM));
	EXPECT(sc == (rank + 1) * (rank + 2) / 2, "scan = %lld", (long long)sc);
	EXPECT(rank == 0 ? ex == -7 : ex == rank * (rank + 1) / 2, "exscan = %lld", (long long)ex);
	uint8_t bits[5] = {(uint8_t)(1u << rank), 0xff, (uint8_t)(1u << rank), (uint8_t)rank, (uint8_t)rank};
	CHECK(gorun_allreduce(c, bits, bits, 1, GORUN_UINT8, GORUN_BOR));
	CHECK(gorun_allreduce(c, bits + 1, bits + 1, 1, GORUN_UINT8, GORUN_BAND));
	CHECK(gorun_allreduce(c, bits + 2, bits + 2, 1, GORUN_UINT8, GORUN_BXOR));
	CHECK(gorun_allreduce(c, bits + 3, bits + 3, 1, GORUN_UINT8, GORUN_LAND));
	CHECK(gorun_allreduce(c, bits + 4, bits + 4, 1, GORUN_UINT8, GORUN_LOR));
	EXPECT(bits[0] == (1u << size) - 1 && bits[1] == 0xff && bits[2] == (1u << size) - 1 && bits[3] == 0 && bits[4] == 1,
	       "bit ops = %x %x %x %x %x", bits[0], bits[1], bits[2], bits[3], bits[4]);
	float fl = 1;
	EXPECT(gorun_allreduce(c, &fl, &fl, 1, GORUN_FLOAT32, GORUN_BAND) == GORUN_ERR_INVALID, "float band accepted");
	EXPECT(strstr(gorun_last_error(), "integer") != NULL, "float band message: %s", gorun_last_error());
	/* that error aborted the communicator: start again */
	CHECK(gorun_finalize(c));
	CHECK(gorun_init(&c));

	/* minloc / maxloc on (double, index) pairs */
	GORUN_PAIR(double) loc[2], lout[2];
	loc[0].value = rank == 1 ? -1.0 : (double)rank; loc[0].index = rank;
	loc[1].value = 5.0; loc[1].index = 10 + rank;
	CHECK(gorun_allreduce_loc(c, loc, lout, 2, GORUN_FLOAT64, GORUN_MINLOC));
	EXPECT(lout[0].value == (size > 1 ? -1.0 : 0.0) && lout[0].index == (size > 1 ? 1 : 0), "minloc = %g@%lld", lout[0].value, (long long)lout[0].index);
	EXPECT(lout[1].index == 10, "minloc tie = %lld", (long long)lout[1].index);
	CHECK(gorun_reduce_loc(c, loc, lout, 2, GORUN_FLOAT64, GORUN_MAXLOC, 0));
	if (rank == 0) EXPECT(lout[0].index == size - 1 || size == 2, "maxloc index = %lld", (long long)lout[0].index);
	GORUN_PAIR(int32_t) il = {rank % 2, rank}, ilo;
	gorun_request lq;
	CHECK(gorun_iallreduce_loc(c, &il, &ilo, 1, GORUN_INT32, GORUN_MAXLOC, &lq));
	CHECK(gorun_wait(lq));
	EXPECT(size == 1 || (ilo.value == 1 && ilo.index == 1), "iallreduce_loc = %d@%lld", ilo.value, (long long)ilo.index);
	CHECK(gorun_ireduce_loc(c, &il, &ilo, 1, GORUN_INT32, GORUN_MINLOC, 0, &lq));
	CHECK(gorun_wait(lq));
	if (rank == 0) EXPECT(ilo.value == 0 && ilo.index == 0, "ireduce_loc = %d@%lld", ilo.value, (long long)ilo.index);

	/* send and recv around a ring, with tags */
	int next = (rank + 1) % size, prev = (rank + size - 1) % size;
	if (size > 1) {
		double msg[3] = {rank, rank * 2.0, rank * 3.0}, in[3];
		if (rank % 2 == 0) {
			CHECK(gorun_send(c, msg, 3, GORUN_FLOAT64, next, 42));
			CHECK(gorun_recv(c, in, 3, GORUN_FLOAT64, prev, 42));
		} else {
			CHECK(gorun_recv(c, in, 3, GORUN_FLOAT64, prev, 42));
			CHECK(gorun_send(c, msg, 3, GORUN_FLOAT64, next, 42));
		}
		EXPECT(in[2] == prev * 3.0, "recv = %g", in[2]);
	}

	/* v-collectives: rank r contributes r+1 elements */
	size_t *counts = malloc(sizeof(size_t) * size), *displs = malloc(sizeof(size_t) * size);
	size_t total = 0;
	for (int r = 0; r < size; r++) counts[r] = r + 1, displs[r] = total, total += r + 1;
	float *vs = malloc(sizeof(float) * (rank + 1)), *vr = calloc(total, sizeof(float));
	for (int i = 0; i <= rank; i++) vs[i] = rank * 10 + i;
	CHECK(gorun_allgatherv(c, vs, rank + 1, vr, counts, NULL, GORUN_FLOAT32));
	for (int r = 0; r < size; r++)
		for (size_t i = 0; i < counts[r]; i++) EXPECT(vr[displs[r] + i] == r * 10 + (float)i, "allgatherv[%d][%zu] = %g", r, i, vr[displs[r] + i]);
	memset(vr, 0, total * sizeof(float));
	CHECK(gorun_gatherv(c, vs, rank + 1, vr, counts, displs, GORUN_FLOAT32, root));
	if (rank == root) EXPECT(vr[total - 1] == root * 10 + root, "gatherv last = %g", vr[total - 1]);
	float *all = malloc(sizeof(float) * total), *mine = malloc(sizeof(float) * (rank + 1));
	for (size_t i = 0; i < total; i++) all[i] = (float)i;
	CHECK(gorun_scatterv(c, all, counts, displs, mine, rank + 1, GORUN_FLOAT32, 0));
	for (int i = 0; i <= rank; i++) EXPECT(mine[i] == (float)(displs[rank] + i), "scatterv[%d] = %g", i, mine[i]);
	/* alltoallv: rank a sends b+1 elements (value a*1000+b) to b; b receives a... no, b+1 from each */
	size_t *sc2 = malloc(sizeof(size_t) * size), *rc2 = malloc(sizeof(size_t) * size);
	for (int b = 0; b < size; b++) sc2[b] = b + 1, rc2[b] = rank + 1;
	int32_t *as = malloc(4 * total), *ar = malloc(4 * size * (rank + 1));
	for (int b = 0, o = 0; b < size; b++)
		for (int i = 0; i <= b; i++) as[o++] = rank * 1000 + b;
	CHECK(gorun_alltoallv(c, as, sc2, NULL, ar, rc2, NULL, GORUN_INT32));
	for (int a = 0; a < size; a++)
		for (int i = 0; i <= rank; i++) EXPECT(ar[a * (rank + 1) + i] == a * 1000 + rank, "alltoallv from %d = %d", a, ar[a * (rank + 1) + i]);

	/* non-blocking forms, all in flight at once */
	gorun_request q[8];
	int32_t nr[2] = {0, 0}, ng[64], ns[2], na[64];
	int64_t nscan = 0, nex = 0;
	CHECK(gorun_ireduce(c, x, nr, 2, GORUN_INT32, GORUN_MAX, 0, &q[0]));
	CHECK(gorun_igather(c, x, ng, 2, GORUN_INT32, 0, &q[1]));
	CHECK(gorun_iscatter(c, sca, ns, 2, GORUN_INT32, 0, &q[2]));
	CHECK(gorun_ialltoall(c, sca, na, 2, GORUN_INT32, &q[3]));
	CHECK(gorun_iscan(c, &v, &nscan, 1, GORUN_INT64, GORUN_MAX, &q[4]));
	CHECK(gorun_iexscan(c, &v, &nex, 1, GORUN_INT64, GORUN_PROD, &q[5]));
	CHECK(gorun_ibarrier(c, &q[6]));
	CHECK(gorun_iallgatherv(c, vs, rank + 1, vr, counts, displs, GORUN_FLOAT32, &q[7]));
	for (int i = 0; i < 8; i++) CHECK(gorun_wait(q[i]));
	if (rank == 0) EXPECT(nr[0] == size && ng[2 * (size - 1)] == size, "ireduce/igather = %d %d", nr[0], ng[2 * (size - 1)]);
	EXPECT(ns[0] == 100 + 2 * rank && nscan == rank + 1, "iscatter/iscan = %d %lld", ns[0], (long long)nscan);
	if (rank == 2) EXPECT(nex == 2, "iexscan = %lld", (long long)nex);
	EXPECT(vr[total - 1] == (size - 1) * 10 + size - 1, "iallgatherv");
	if (size > 1) {
		float big[1000], in[1000];
		for (int i = 0; i < 1000; i++) big[i] = rank + i;
		gorun_request s1, r1;
		CHECK(gorun_isend(c, big, 1000, GORUN_FLOAT32, next, 3, &s1));
		CHECK(gorun_irecv(c, in, 1000, GORUN_FLOAT32, prev, 3, &r1));
		CHECK(gorun_wait(s1));
		CHECK(gorun_wait(r1));
		EXPECT(in[999] == prev + 999, "irecv = %g", in[999]);
	}

	/* a pair that disagrees on counts: every rank gets an error */
	if (size > 1) {
		for (int b = 0; b < size; b++) sc2[b] = 1, rc2[b] = 1;
		if (rank == 1) rc2[0] = 2;
		int rc = gorun_alltoallv(c, as, sc2, NULL, ar, rc2, NULL, GORUN_INT32);
		if (rc == GORUN_OK) rc = gorun_barrier(c);
		EXPECT(rc == GORUN_ERR_PEER, "alltoallv disagreement -> %d: %s", rc, gorun_last_error());
		printf("mpi_check: rank %d: disagreement: %s\n", rank, gorun_last_error());
	}
	gorun_finalize(c);
	printf("mpi_check: rank %d ok\n", rank);
	return 0;
}
