/* group_check: gorun_comm_create_group through include/gorun.h on each
 * rank of a job of 4 or more ranks. The even ranks make a group listing
 * them from the highest down, while the odd ranks make one of their own
 * with another tag, and each group runs collectives checked against the
 * world ranks of its members; then the world communicator goes on.
 * "group_check: rank R ok" on success. */
#include <stdint.h>
#define PROG "group_check"
#include "check.h"

int main(void) {
	gorun_comm c, g = 0;
	int size;
	CHECK(gorun_init(&c));
	CHECK(gorun_rank(c, &rank));
	CHECK(gorun_size(c, &size));
	EXPECT(size >= 4, "needs 4 ranks or more, has %d", size);

	/* Arguments this rank checks alone are refused, on any rank, and
	 * abort the communicator the call was made on: each is made on a
	 * fresh one of every rank, p. A bad handle names none, and leaves c
	 * usable. */
	int all[64], one = rank;
	gorun_comm p;
	for (int i = 0; i < size; i++) all[i] = i;
#define REFUSED(call, want) do { p = fresh(c); BAD(call, want); \
	EXPECT(gorun_barrier(p) != GORUN_OK, "%s did not abort the communicator", #call); CHECK(gorun_finalize(p)); } while (0)
	REFUSED(gorun_comm_create_group(p, NULL, 2, 1, &g), "ranks is NULL");
	REFUSED(gorun_comm_create_group(p, &one, 0, 1, &g), "n must be at least 1");
	REFUSED(gorun_comm_create_group(p, &one, -3, 1, &g), "n must be at least 1");
	REFUSED(gorun_comm_create_group(p, &one, 1, 1, NULL), "out is NULL");
	REFUSED(gorun_comm_create_group(p, all, size + 1, 1, &g), "more than the communicator's");
	BAD(gorun_comm_create_group(0, &one, 1, 1, &g), "no communicator with handle");
	EXPECT(g == 0, "a refused call wrote *out = %lld", (long long)g);
	CHECK(gorun_barrier(c));

	/* The members of this rank's group, in group-rank order: the even
	 * ranks from the highest down, or the odd ones likewise. */
	int members[64], n = 0, me = -1;
	for (int r = size - 1; r >= 0; r--) {
		if (r % 2 != rank % 2) continue;
		if (r == rank) me = n;
		members[n++] = r;
	}
	CHECK(gorun_comm_create_group(c, members, n, rank % 2 ? 200 : 100, &g));
	int grank, gsize;
	CHECK(gorun_rank(g, &grank));
	CHECK(gorun_size(g, &gsize));
	EXPECT(grank == me && gsize == n, "group rank %d of %d, want %d of %d", grank, gsize, me, n);

	/* allreduce: the sum of the members' world ranks + 1 */
	int64_t x[2] = {rank + 1, -(rank + 1)}, want = 0;
	for (int i = 0; i < n; i++) want += members[i] + 1;
	CHECK(gorun_allreduce(g, x, x, 2, GORUN_INT64, GORUN_SUM));
	EXPECT(x[0] == want && x[1] == -want, "allreduce = %lld %lld, want %lld", (long long)x[0], (long long)x[1], (long long)want);
	/* broadcast from group rank n-1, the group's lowest world rank */
	int32_t b = rank == members[n - 1] ? 1000 + rank : -1;
	CHECK(gorun_broadcast(g, &b, 1, GORUN_INT32, n - 1));
	EXPECT(b == 1000 + members[n - 1], "broadcast = %d, want %d", b, 1000 + members[n - 1]);
	/* allgather: world ranks, in group-rank order */
	int32_t mine = rank, got[64];
	CHECK(gorun_allgather(g, &mine, got, 1, GORUN_INT32));
	for (int i = 0; i < n; i++) EXPECT(got[i] == members[i], "allgather[%d] = %d, want %d", i, got[i], members[i]);
	CHECK(gorun_finalize(g));

	/* The world communicator is unchanged and usable after its groups. */
	int check;
	CHECK(gorun_size(c, &check));
	EXPECT(check == size, "world size %d after the groups", check);
	float y = 1;
	CHECK(gorun_allreduce(c, &y, &y, 1, GORUN_FLOAT32, GORUN_SUM));
	EXPECT(y == size, "world allreduce = %g", y);
	CHECK(gorun_finalize(c));
	printf("group_check: rank %d ok\n", rank);
	return 0;
}
