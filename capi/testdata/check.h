/* check.h: what the C checks run by runCProgram (args_test.go) share.
 * Define PROG, the program's name, before including it; a failure prints
 * "PROG: rank R: ..." and exits 1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gorun.h"

static int rank = -1;

#define CHECK(call) do { int rc_ = (call); if (rc_ != GORUN_OK) { \
	fprintf(stderr, PROG ": rank %d: %s:%d: %s -> %d (%s): %s\n", rank, __FILE__, __LINE__, #call, rc_, \
		gorun_strerror(rc_), gorun_last_error()); exit(1); } } while (0)
#define EXPECT(cond, ...) do { if (!(cond)) { fprintf(stderr, PROG ": rank %d: line %d: ", rank, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

/* BAD expects call to fail with GORUN_ERR_INVALID and a message holding
 * want. A call refused on a communicator aborts it (gorun.h): make the
 * next call on another one (fresh). */
#define BAD(call, want) do { int rc_ = (call); EXPECT(rc_ == GORUN_ERR_INVALID && strstr(gorun_last_error(), want), \
	"%s -> %d (want %d, message with \"%s\"): %s", #call, rc_, GORUN_ERR_INVALID, want, gorun_last_error()); } while (0)

/* fresh is a new communicator of every rank of world, made from it with a
 * tag no earlier one used: one per refused call, cheaper than
 * gorun_finalize and gorun_init. Every rank calls it alike. */
static inline gorun_comm fresh(gorun_comm world) {
	static int tag = 1000;
	int size, all[256];
	CHECK(gorun_size(world, &size));
	for (int i = 0; i < size; i++) all[i] = i;
	gorun_comm g;
	CHECK(gorun_comm_create_group(world, all, size, tag++, &g));
	/* every rank has made it: a refusal on it cannot fail another's making */
	CHECK(gorun_barrier(g));
	return g;
}
