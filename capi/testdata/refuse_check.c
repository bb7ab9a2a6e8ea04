/* refuse_check: one rank passes an argument the C ABI refuses before the
 * call starts (a dtype or op number, a NULL buffer or request, a count out
 * of range) while the others pass good ones, or refuses its own
 * (gorun_refuse). Run with GORUN_TIMEOUT far beyond the test's: every
 * rank must fail within LIMIT seconds, GORUN_ERR_INVALID on the refusing
 * rank and GORUN_ERR_PEER naming it on the others, where they used to
 * wait for it until their timeout. Each case runs on a fresh communicator
 * (the refusal aborts it). "refuse_check: rank R ok" on success. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <time.h>
#define PROG "refuse_check"
#include "check.h"

#define LIMIT 30.0 /* seconds; GORUN_TIMEOUT is 10 minutes */

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* expect checks rc, this rank's result of a call where rank bad alone
 * refused its argument, want in its message, started at t0. */
static void expect(const char *what, int bad, int rc, const char *want, double t0) {
	double took = now() - t0;
	char peer[32];
	snprintf(peer, sizeof peer, "rank %d", bad);
	if (rank == bad) {
		EXPECT(rc == GORUN_ERR_INVALID && strstr(gorun_last_error(), want) && strstr(gorun_last_error(), peer),
		       "%s: the refusing rank got %d (want %d, \"%s\" and \"%s\"): %s", what, rc, GORUN_ERR_INVALID, want, peer,
		       gorun_last_error());
	} else {
		EXPECT(rc == GORUN_ERR_PEER && strstr(gorun_last_error(), peer),
		       "%s: got %d (want %d naming %s): %s", what, rc, GORUN_ERR_PEER, peer, gorun_last_error());
	}
	EXPECT(took < LIMIT, "%s: failed after %.1f s", what, took);
	printf(PROG ": rank %d: %s (%.2f s): %s\n", rank, what, took, gorun_last_error());
}

/* done frees c once every rank is through with its case: a rank that
 * closed c first would otherwise be what a slower one blames. */
static void done(gorun_comm world, gorun_comm c) {
	CHECK(gorun_barrier(world));
	CHECK(gorun_finalize(c));
}

int main(void) {
	gorun_comm world, c;
	int size, rc;
	CHECK(gorun_init(&world));
	CHECK(gorun_rank(world, &rank));
	CHECK(gorun_size(world, &size));
	EXPECT(size >= 3, "needs 3 ranks or more, has %d", size);
	float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[64];
	double t0;
	gorun_request q;

	/* A dtype number gorun lacks, on rank 1. */
	c = fresh(world);
	t0 = now();
	rc = gorun_allreduce(c, a, a, 4, rank == 1 ? (gorun_dtype)99 : GORUN_FLOAT32, GORUN_SUM);
	expect("allreduce, rank 1's dtype 99", 1, rc, "unknown dtype 99", t0);
	done(world, c);

	/* An op number gorun lacks, on rank 2. (Every case is a call whose
	 * every rank needs the refusing rank's part: in a reduce or a scan,
	 * a rank that needs none may finish first, and rightly succeed.) */
	c = fresh(world);
	t0 = now();
	rc = gorun_allreduce(c, a, b, 4, GORUN_FLOAT32, rank == 2 ? (gorun_op)42 : GORUN_MAX);
	expect("allreduce, rank 2's op 42", 2, rc, "unknown op 42", t0);
	done(world, c);

	/* A NULL buffer with a non-zero count, on rank 0, the root. */
	c = fresh(world);
	t0 = now();
	rc = gorun_broadcast(c, rank == 0 ? NULL : a, 4, GORUN_FLOAT32, 0);
	expect("broadcast, rank 0's NULL buffer", 0, rc, "NULL buffer", t0);
	done(world, c);

	/* A count no buffer holds, on rank 1. */
	c = fresh(world);
	t0 = now();
	rc = gorun_allgather(c, a, b, rank == 1 ? (size_t)-1 : 4, GORUN_FLOAT32);
	expect("allgather, rank 1's count SIZE_MAX", 1, rc, "out of range", t0);
	done(world, c);

	/* A non-blocking start without a request, on rank 2: the others'
	 * starts succeed and their waits fail. */
	c = fresh(world);
	t0 = now();
	rc = gorun_iallreduce(c, a, a, 4, GORUN_FLOAT32, GORUN_SUM, rank == 2 ? NULL : &q);
	if (rank != 2) {
		EXPECT(rc == GORUN_OK, "iallreduce start -> %d: %s", rc, gorun_last_error());
		rc = gorun_wait(q);
	}
	expect("iallreduce, rank 2's NULL request", 2, rc, "req is NULL", t0);
	done(world, c);

	/* A non-blocking start with a bad dtype, on rank 0. */
	c = fresh(world);
	t0 = now();
	rc = gorun_ireduce_scatter(c, a, b, 2, rank == 0 ? (gorun_dtype)-1 : GORUN_FLOAT32, GORUN_SUM, &q);
	if (rank != 0) {
		EXPECT(rc == GORUN_OK, "ireduce_scatter start -> %d: %s", rc, gorun_last_error());
		rc = gorun_wait(q);
	}
	expect("ireduce_scatter, rank 0's dtype -1", 0, rc, "unknown dtype -1", t0);
	done(world, c);

	/* gorun_ibarrier without a request, on rank 1. */
	c = fresh(world);
	t0 = now();
	rc = gorun_ibarrier(c, rank == 1 ? NULL : &q);
	if (rank != 1) {
		EXPECT(rc == GORUN_OK, "ibarrier start -> %d: %s", rc, gorun_last_error());
		rc = gorun_wait(q);
	}
	expect("ibarrier, rank 1's NULL request", 1, rc, "req is NULL", t0);
	done(world, c);

	/* Point to point: rank 0 sends from NULL to rank 1, which waits in its
	 * receive; rank 2, in no call then, finds the communicator aborted
	 * by its next one. */
	c = fresh(world);
	t0 = now();
	if (rank == 0) rc = gorun_send(c, NULL, 4, GORUN_FLOAT32, 1, 7);
	else if (rank == 1) rc = gorun_recv(c, b, 4, GORUN_FLOAT32, 0, 7);
	else rc = gorun_barrier(c);
	expect("send, rank 0's NULL buffer", 0, rc, "NULL buffer", t0);
	done(world, c);

	/* A binding's own refusal (gorun_refuse) on rank 2, whose call never
	 * reaches gorun, while the others allreduce. */
	c = fresh(world);
	t0 = now();
	if (rank == 2) {
		CHECK(gorun_refuse(c, "allreduce", "tensor must be on the CPU"));
		rc = GORUN_ERR_INVALID;
	} else {
		rc = gorun_allreduce(c, a, a, 4, GORUN_FLOAT32, GORUN_SUM);
	}
	expect("gorun_refuse on rank 2", 2, rc, "tensor must be on the CPU", t0);
	/* the refusal aborted the communicator on the refusing rank too */
	rc = gorun_barrier(c);
	EXPECT(rc != GORUN_OK, "barrier after gorun_refuse succeeded");
	done(world, c);
	EXPECT(gorun_refuse(c, "allreduce", "x") == GORUN_ERR_INVALID, "gorun_refuse of a finalized handle accepted");

	/* gorun_comm_create_group without out, on rank 1, while the others
	 * make a group: it fails on them too, and aborts the communicator
	 * they make it from. */
	c = fresh(world);
	int all[64];
	gorun_comm g;
	for (int i = 0; i < size; i++) all[i] = i;
	t0 = now();
	rc = gorun_comm_create_group(c, all, size, 9, rank == 1 ? NULL : &g);
	expect("comm_create_group, rank 1's NULL out", 1, rc, "out is NULL", t0);
	rc = gorun_barrier(c);
	EXPECT(rc != GORUN_OK, "barrier after the refused comm_create_group succeeded");
	done(world, c);
	CHECK(gorun_finalize(world));
	printf(PROG ": rank %d ok\n", rank);
	return 0;
}
