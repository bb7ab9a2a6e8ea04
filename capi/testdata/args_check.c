/* args_check: what the calls of include/gorun.h say about their own bad
 * arguments, on each rank of a job (every rank makes the same bad call,
 * but in the first case, which shows a peer's side; refuse_check has one
 * rank's against the others' good ones). Every refusal aborts its
 * communicator, so each runs on a fresh one. "args_check: rank R ok" on
 * success. */
#include <stdint.h>
#define PROG "args_check"
#include "check.h"

static int size;
static gorun_comm world;

#define NULLBUF "NULL buffer with a non-zero count"

/* renew replaces a communicator an error aborted. */
static void renew(gorun_comm *c) {
	CHECK(gorun_finalize(*c));
	*c = fresh(world);
}

/* REFUSED is BAD, then renew: the refusal aborted c. */
#define REFUSED(call, want) do { BAD(call, want); renew(&c); } while (0)

int main(void) {
	gorun_comm c;
	CHECK(gorun_init(&world));
	CHECK(gorun_rank(world, &rank));
	CHECK(gorun_size(world, &size));
	c = fresh(world);
	int rc, done;
	gorun_request q;
	float a[4] = {1, 2, 3, 4};

	/* Rank 0 alone passes a bad root: its call is INVALID, the others'
	 * fail naming rank 0 (PEER), and the communicator is aborted: later
	 * calls fail with that error, INVALID on rank 0 (its own, "root ...
	 * out of range"), PEER naming rank 0 on the others. (Had every rank
	 * passed it, a rank's first error could be another's notice.) */
	rc = gorun_broadcast(c, a, 4, GORUN_FLOAT32, rank == 0 ? size : 0);
	int own = rank == 0 ? GORUN_ERR_INVALID : GORUN_ERR_PEER;
	const char *why = rank == 0 ? "root" : "rank 0";
	EXPECT(rc == own && strstr(gorun_last_error(), why), "broadcast, rank 0's root=size -> %d (want %d): %s", rc, own, gorun_last_error());
	rc = gorun_allreduce(c, a, a, 4, GORUN_FLOAT32, GORUN_SUM);
	EXPECT(rc == own && strstr(gorun_last_error(), why), "allreduce after -> %d (want %d): %s", rc, own, gorun_last_error());
	rc = gorun_barrier(c);
	EXPECT(rc == own && strstr(gorun_last_error(), why), "barrier after -> %d (want %d): %s", rc, own, gorun_last_error());
	renew(&c);
	/* A non-blocking call's own bad argument is GORUN_ERR_INVALID from
	 * gorun_wait and gorun_test, as from the blocking call, not a peer's
	 * failure; it aborts the communicator. */
	CHECK(gorun_ibroadcast(c, a, 4, GORUN_FLOAT32, size, &q));
	rc = gorun_wait(q);
	EXPECT(rc == GORUN_ERR_INVALID, "ibroadcast root=size: wait -> %d: %s", rc, gorun_last_error());
	renew(&c);
	CHECK(gorun_ireduce(c, a, a, 4, GORUN_FLOAT32, GORUN_SUM, -1, &q));
	do rc = gorun_test(q, &done); while (rc == GORUN_OK && !done);
	EXPECT(rc == GORUN_ERR_INVALID, "ireduce root=-1: test -> %d: %s", rc, gorun_last_error());
	renew(&c);

	/* A NULL buffer with a non-zero count, which the call reads or writes
	 * on this rank, is refused by every entry point. Where the rule
	 * differs by rank (root-only buffers), each rank passes a NULL that
	 * its own rank uses. */
	float b[16] = {0};
	size_t cnt[16], none[16] = {0};
	for (int i = 0; i < size; i++) cnt[i] = 1;
	GORUN_PAIR(float) p[4] = {{1, 0}}, pr[4];
	int root = rank == 0; /* rank 0 is the root and passes a NULL recv; the others a NULL send */
	REFUSED(gorun_allreduce(c, NULL, b, 4, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	REFUSED(gorun_allreduce(c, a, NULL, 4, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	REFUSED(gorun_broadcast(c, NULL, 4, GORUN_FLOAT32, 0), NULLBUF);
	REFUSED(gorun_allgather(c, NULL, b, 4, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_allgather(c, a, NULL, 4, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_reduce_scatter(c, NULL, b, 2, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	REFUSED(gorun_reduce_scatter(c, b, NULL, 2, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	REFUSED(gorun_reduce(c, root ? a : NULL, root ? NULL : b, 4, GORUN_FLOAT32, GORUN_SUM, 0), NULLBUF);
	REFUSED(gorun_gather(c, root ? a : NULL, root ? NULL : b, 4, GORUN_FLOAT32, 0), NULLBUF);
	REFUSED(gorun_scatter(c, root ? NULL : b, root ? a : NULL, 4, GORUN_FLOAT32, 0), NULLBUF);
	REFUSED(gorun_alltoall(c, NULL, NULL, 4, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_alltoall(c, b, NULL, 4, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_scan(c, NULL, NULL, 4, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	REFUSED(gorun_scan(c, a, NULL, 4, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	REFUSED(gorun_exscan(c, root ? a : NULL, root ? NULL : b, 4, GORUN_FLOAT32, GORUN_SUM), NULLBUF);
	if (rank < 2) {
		if (rank == 0) REFUSED(gorun_send(c, NULL, 4, GORUN_FLOAT32, 1, 5), NULLBUF);
		else REFUSED(gorun_recv(c, NULL, 4, GORUN_FLOAT32, 0, 5), NULLBUF);
	}
	REFUSED(gorun_allgatherv(c, NULL, 1, b, cnt, NULL, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_allgatherv(c, a, 1, NULL, cnt, NULL, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_allgatherv(c, a, 1, b, NULL, NULL, GORUN_FLOAT32), "counts is NULL");
	REFUSED(gorun_gatherv(c, root ? a : NULL, 1, root ? NULL : b, cnt, NULL, GORUN_FLOAT32, 0), NULLBUF);
	if (root) REFUSED(gorun_gatherv(c, a, 1, b, NULL, NULL, GORUN_FLOAT32, 0), "counts is NULL");
	else REFUSED(gorun_gatherv(c, NULL, 1, NULL, NULL, NULL, GORUN_FLOAT32, 0), NULLBUF);
	REFUSED(gorun_scatterv(c, root ? NULL : b, cnt, NULL, root ? a : NULL, 1, GORUN_FLOAT32, 0), NULLBUF);
	REFUSED(gorun_alltoallv(c, NULL, cnt, NULL, b, cnt, NULL, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_alltoallv(c, a, cnt, NULL, NULL, cnt, NULL, GORUN_FLOAT32), NULLBUF);
	REFUSED(gorun_alltoallv(c, a, cnt, NULL, b, NULL, NULL, GORUN_FLOAT32), "recv_counts is NULL");
	REFUSED(gorun_allreduce_loc(c, NULL, pr, 4, GORUN_FLOAT32, GORUN_MAXLOC), NULLBUF);
	REFUSED(gorun_allreduce_loc(c, p, NULL, 4, GORUN_FLOAT32, GORUN_MAXLOC), NULLBUF);
	REFUSED(gorun_reduce_loc(c, root ? p : NULL, root ? NULL : pr, 4, GORUN_FLOAT32, GORUN_MAXLOC, 0), NULLBUF);
	/* the non-blocking forms, which share the check */
	REFUSED(gorun_iallreduce(c, NULL, b, 4, GORUN_FLOAT32, GORUN_SUM, &q), NULLBUF);
	REFUSED(gorun_ibroadcast(c, NULL, 4, GORUN_FLOAT32, 0, &q), NULLBUF);
	REFUSED(gorun_iallgather(c, a, NULL, 4, GORUN_FLOAT32, &q), NULLBUF);
	REFUSED(gorun_ireduce_scatter(c, NULL, b, 2, GORUN_FLOAT32, GORUN_SUM, &q), NULLBUF);
	REFUSED(gorun_ireduce(c, root ? a : NULL, root ? NULL : b, 4, GORUN_FLOAT32, GORUN_SUM, 0, &q), NULLBUF);
	REFUSED(gorun_igather(c, root ? a : NULL, root ? NULL : b, 4, GORUN_FLOAT32, 0, &q), NULLBUF);
	REFUSED(gorun_iscatter(c, root ? NULL : b, root ? a : NULL, 4, GORUN_FLOAT32, 0, &q), NULLBUF);
	REFUSED(gorun_ialltoall(c, NULL, b, 4, GORUN_FLOAT32, &q), NULLBUF);
	REFUSED(gorun_iscan(c, a, NULL, 4, GORUN_FLOAT32, GORUN_SUM, &q), NULLBUF);
	REFUSED(gorun_iexscan(c, NULL, b, 4, GORUN_FLOAT32, GORUN_SUM, &q), NULLBUF);
	if (rank < 2) {
		if (rank == 0) REFUSED(gorun_isend(c, NULL, 4, GORUN_FLOAT32, 1, 5, &q), NULLBUF);
		else REFUSED(gorun_irecv(c, NULL, 4, GORUN_FLOAT32, 0, 5, &q), NULLBUF);
	}
	REFUSED(gorun_iallgatherv(c, NULL, 1, b, cnt, NULL, GORUN_FLOAT32, &q), NULLBUF);
	REFUSED(gorun_igatherv(c, root ? a : NULL, 1, root ? NULL : b, cnt, NULL, GORUN_FLOAT32, 0, &q), NULLBUF);
	REFUSED(gorun_iscatterv(c, root ? NULL : b, cnt, NULL, root ? a : NULL, 1, GORUN_FLOAT32, 0, &q), NULLBUF);
	REFUSED(gorun_ialltoallv(c, NULL, cnt, NULL, b, cnt, NULL, GORUN_FLOAT32, &q), NULLBUF);
	REFUSED(gorun_iallreduce_loc(c, p, NULL, 4, GORUN_FLOAT32, GORUN_MAXLOC, &q), NULLBUF);
	REFUSED(gorun_ireduce_loc(c, root ? p : NULL, root ? NULL : pr, 4, GORUN_FLOAT32, GORUN_MAXLOC, 0, &q), NULLBUF);

	/* A fresh communicator works after them. */
	if (rank < 2) {
		float m[4] = {9, 9, 9, 9};
		if (rank == 0) CHECK(gorun_send(c, a, 4, GORUN_FLOAT32, 1, 5));
		else CHECK(gorun_recv(c, m, 4, GORUN_FLOAT32, 0, 5));
		EXPECT(rank == 0 || (m[0] == 1 && m[3] == 4), "recv = %g %g", m[0], m[3]);
	}

	/* NULL where the call ignores the buffer on this rank, or for 0
	 * elements, is accepted. */
	float red[4] = {0};
	CHECK(gorun_reduce(c, a, root ? red : NULL, 4, GORUN_FLOAT32, GORUN_SUM, 0));
	EXPECT(!root || red[3] == 4 * size, "reduce = %g", red[3]);
	CHECK(gorun_gather(c, a, root ? b : NULL, 1, GORUN_FLOAT32, 0));
	CHECK(gorun_scatter(c, root ? b : NULL, red, 1, GORUN_FLOAT32, 0));
	CHECK(gorun_reduce_loc(c, p, root ? pr : NULL, 1, GORUN_FLOAT32, GORUN_MAXLOC, 0));
	memset(b, 0, sizeof b);
	CHECK(gorun_gatherv(c, a, 1, root ? b : NULL, root ? cnt : NULL, NULL, GORUN_FLOAT32, 0));
	EXPECT(!root || b[size - 1] == 1, "gatherv = %g", b[size - 1]);
	CHECK(gorun_scatterv(c, root ? b : NULL, root ? cnt : NULL, NULL, red, 1, GORUN_FLOAT32, 0));
	CHECK(gorun_allreduce(c, NULL, NULL, 0, GORUN_FLOAT32, GORUN_SUM));
	CHECK(gorun_alltoall(c, NULL, NULL, 0, GORUN_FLOAT32));
	CHECK(gorun_allgatherv(c, NULL, 0, NULL, none, NULL, GORUN_FLOAT32));

	/* A count too large for a buffer of this process (over 2^47 bytes, or
	 * a product that overflows) is refused naming it, before the call
	 * starts; it was GORUN_ERR_INTERNAL from a caught panic, or a crash. */
	const size_t huge = (size_t)-1, big = (size_t)1 << 62;
	char want[128];
#define HUGE "count 18446744073709551615 out of range"
	REFUSED(gorun_allreduce(c, a, b, huge, GORUN_FLOAT32, GORUN_SUM), HUGE);
	REFUSED(gorun_allreduce(c, a, b, (size_t)1 << 46, GORUN_FLOAT32, GORUN_SUM), "count 70368744177664 out of range");
	REFUSED(gorun_broadcast(c, a, huge, GORUN_FLOAT32, 0), HUGE);
	REFUSED(gorun_allgather(c, a, b, big, GORUN_FLOAT32), "count 4611686018427387904 out of range");
	/* send fits (2^46 bytes); recv, size times that, does not */
	snprintf(want, sizeof want, "count %zu out of range: recv", ((size_t)1 << 47) / 4 / size + 1);
	REFUSED(gorun_allgather(c, a, b, ((size_t)1 << 47) / 4 / size + 1, GORUN_FLOAT32), want);
	REFUSED(gorun_reduce_scatter(c, a, b, big, GORUN_FLOAT32, GORUN_SUM), "count 4611686018427387904 out of range: send");
	REFUSED(gorun_reduce(c, a, b, huge, GORUN_FLOAT32, GORUN_SUM, 0), HUGE);
	REFUSED(gorun_gather(c, a, b, huge, GORUN_FLOAT32, 0), HUGE);
	REFUSED(gorun_scatter(c, a, b, huge, GORUN_FLOAT32, 0), HUGE);
	REFUSED(gorun_alltoall(c, a, b, big, GORUN_FLOAT32), "count 4611686018427387904 out of range");
	REFUSED(gorun_scan(c, a, b, huge, GORUN_FLOAT32, GORUN_SUM), HUGE);
	REFUSED(gorun_exscan(c, a, b, huge, GORUN_FLOAT32, GORUN_SUM), HUGE);
	if (rank < 2) {
		if (rank == 0) REFUSED(gorun_send(c, a, huge, GORUN_FLOAT32, 1, 5), HUGE);
		else REFUSED(gorun_recv(c, b, huge, GORUN_FLOAT32, 0, 5), HUGE);
	}
	/* a pair is 16 bytes: 2^43 + 1 of them are too many, though as many
	 * floats would fit */
	REFUSED(gorun_allreduce_loc(c, p, pr, ((size_t)1 << 43) + 1, GORUN_FLOAT32, GORUN_MAXLOC), "count 8796093022209 out of range");
	REFUSED(gorun_reduce_loc(c, p, pr, huge, GORUN_FLOAT32, GORUN_MAXLOC, 0), HUGE);
	size_t hc[16], hd[16] = {0};
	for (int i = 0; i < size; i++) hc[i] = 1;
	hc[size - 1] = huge;
	REFUSED(gorun_allgatherv(c, a, huge, b, cnt, NULL, GORUN_FLOAT32), HUGE);
	snprintf(want, sizeof want, "counts[%d] = 18446744073709551615 out of range", size - 1);
	REFUSED(gorun_allgatherv(c, a, 1, b, hc, NULL, GORUN_FLOAT32), want);
	hd[size - 1] = big;
	snprintf(want, sizeof want, "recv_displs[%d] = 4611686018427387904 with recv_counts[%d] = 1 out of range", size - 1, size - 1);
	REFUSED(gorun_alltoallv(c, a, cnt, NULL, b, cnt, hd, GORUN_FLOAT32), want);
	REFUSED(gorun_gatherv(c, a, huge, b, cnt, NULL, GORUN_FLOAT32, 0), HUGE);
	REFUSED(gorun_scatterv(c, a, cnt, NULL, b, huge, GORUN_FLOAT32, 0), HUGE);
	REFUSED(gorun_iallgather(c, a, b, big, GORUN_FLOAT32, &q), "count 4611686018427387904 out of range");
	REFUSED(gorun_ireduce(c, a, b, huge, GORUN_FLOAT32, GORUN_SUM, 0, &q), HUGE);
	REFUSED(gorun_ialltoallv(c, a, hc, NULL, b, cnt, NULL, GORUN_FLOAT32, &q), "send_counts[");

	float x = 1;
	CHECK(gorun_allreduce(c, &x, &x, 1, GORUN_FLOAT32, GORUN_SUM));
	EXPECT(x == size, "allreduce = %g", x);
	CHECK(gorun_finalize(c));
	CHECK(gorun_finalize(world));
	printf("args_check: rank %d ok\n", rank);
	return 0;
}
