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
 * want, before it starts: the communicator stays usable. */
#define BAD(call, want) do { int rc_ = (call); EXPECT(rc_ == GORUN_ERR_INVALID && strstr(gorun_last_error(), want), \
	"%s -> %d (want %d, message with \"%s\"): %s", #call, rc_, GORUN_ERR_INVALID, want, gorun_last_error()); } while (0)
