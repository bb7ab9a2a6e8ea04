/* args_check: what the calls of include/gorun.h say about their own bad
 * arguments, on each rank of a job (every rank makes the same bad call, so
 * none waits for another). "args_check: rank R ok" on success. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include "gorun.h"

static int rank = -1, size;

#define CHECK(call) do { int rc_ = (call); if (rc_ != GORUN_OK) { \
	fprintf(stderr, "args_check: rank %d: %s:%d: %s -> %d (%s): %s\n", rank, __FILE__, __LINE__, #call, rc_, \
		gorun_strerror(rc_), gorun_last_error()); exit(1); } } while (0)
#define EXPECT(cond, ...) do { if (!(cond)) { fprintf(stderr, "args_check: rank %d: line %d: ", rank, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

/* renew replaces a communicator an error aborted. */
static void renew(gorun_comm *c) {
	CHECK(gorun_finalize(*c));
	CHECK(gorun_init(c));
}

int main(void) {
	gorun_comm c;
	CHECK(gorun_init(&c));
	CHECK(gorun_rank(c, &rank));
	CHECK(gorun_size(c, &size));
	int rc, done;
	gorun_request q;
	float a[4] = {1, 2, 3, 4};

	/* A non-blocking call's own bad argument is GORUN_ERR_INVALID from
	 * gorun_wait and gorun_test, as from the blocking call, not a peer's
	 * failure; it aborts the communicator. */
	rc = gorun_broadcast(c, a, 4, GORUN_FLOAT32, size);
	EXPECT(rc == GORUN_ERR_INVALID, "broadcast root=size -> %d: %s", rc, gorun_last_error());
	renew(&c);
	CHECK(gorun_ibroadcast(c, a, 4, GORUN_FLOAT32, size, &q));
	rc = gorun_wait(q);
	EXPECT(rc == GORUN_ERR_INVALID, "ibroadcast root=size: wait -> %d: %s", rc, gorun_last_error());
	renew(&c);
	CHECK(gorun_ireduce(c, a, a, 4, GORUN_FLOAT32, GORUN_SUM, -1, &q));
	do rc = gorun_test(q, &done); while (rc == GORUN_OK && !done);
	EXPECT(rc == GORUN_ERR_INVALID, "ireduce root=-1: test -> %d: %s", rc, gorun_last_error());
	renew(&c);

	float x = 1;
	CHECK(gorun_allreduce(c, &x, &x, 1, GORUN_FLOAT32, GORUN_SUM));
	EXPECT(x == size, "allreduce = %g", x);
	CHECK(gorun_finalize(c));
	printf("args_check: rank %d ok\n", rank);
	return 0;
}
