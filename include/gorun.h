/*
 * gorun.h: the C ABI of gorun, a collective communication runtime.
 *
 * Build the library:  scripts/build-capi.sh   (build/capi/libgorun.so, gorun.pc)
 * Link:               cc prog.c $(pkg-config --cflags --libs build/capi/gorun.pc)
 *
 * A process joins the job its launcher started (gorun, srun, mpirun or
 * torchrun variables; see the README) with gorun_init, which returns a
 * communicator handle. Every call returns GORUN_OK or an error code (after
 * most errors the communicator is aborted: see gorun_status); the message
 * of the calling thread's last error is gorun_last_error(). No call
 * aborts or crashes the host process: Go panics are caught and returned as
 * GORUN_ERR_INTERNAL.
 *
 * Buffers are plain host memory. They must stay valid until the call, or for
 * non-blocking calls the matching gorun_wait, returns. Counts are element
 * counts. In-place operations pass the same pointer as send and recv. A
 * buffer (or counts array) that a call reads or writes on this rank may be
 * NULL only when it holds no elements: otherwise the call returns
 * GORUN_ERR_INVALID before it starts. One the call ignores on this rank
 * (as below: recv off the root of reduce and gather, send off the root of
 * scatter) may be NULL. A count (or counts and displs) that makes a buffer
 * this rank uses larger than 2^47 bytes is GORUN_ERR_INVALID too.
 *
 * This header is written by hand and is stable: enums and signatures only
 * grow. GORUN_ABI_VERSION counts its changes.
 */
#ifndef GORUN_H
#define GORUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The version of this C ABI. It grows by one with every change to what
 * this header declares: a function added or removed, a signature, an
 * enum's values, a typedef or GORUN_PAIR's layout (not with comments).
 * gorun_abi_version() returns the version the library was built with; a
 * binding (python/gorun) refuses a library whose version differs from
 * the one it was written for, rather than call it with the wrong
 * arguments.
 */
#define GORUN_ABI_VERSION 1

typedef int64_t gorun_comm;    /* communicator handle, > 0 */
typedef int64_t gorun_request; /* non-blocking operation handle, > 0 */

typedef enum {
	GORUN_INT8 = 0,
	GORUN_INT16 = 1,
	GORUN_INT32 = 2,
	GORUN_INT64 = 3,
	GORUN_UINT8 = 4,
	GORUN_UINT16 = 5,
	GORUN_UINT32 = 6,
	GORUN_UINT64 = 7,
	GORUN_FLOAT32 = 8,
	GORUN_FLOAT64 = 9,
	GORUN_FLOAT16 = 10,  /* IEEE half; each rank reduces in float32, partial results travel as half */
	GORUN_BFLOAT16 = 11, /* bfloat16; likewise, partial results travel as bfloat16 */
} gorun_dtype;

typedef enum {
	GORUN_SUM = 0,
	GORUN_PROD = 1,
	GORUN_MIN = 2,
	GORUN_MAX = 3,
	GORUN_AVG = 4,
	/* Integer dtypes only: bitwise and, or, xor; logical and, or (non-zero
	 * is true, the result is 0 or 1). A float dtype is GORUN_ERR_INVALID. */
	GORUN_BAND = 5,
	GORUN_BOR = 6,
	GORUN_BXOR = 7,
	GORUN_LAND = 8,
	GORUN_LOR = 9,
	/* gorun_allreduce_loc and gorun_reduce_loc only. */
	GORUN_MINLOC = 10,
	GORUN_MAXLOC = 11,
} gorun_op;

/*
 * After an error from an operation (or from gorun_wait or gorun_test of a
 * non-blocking one), even GORUN_ERR_INVALID for a root out of range or an
 * op the dtype lacks, the communicator is aborted: every later operation
 * on it fails with that first error. gorun_finalize it, and gorun_init
 * again to go on. That holds for arguments this rank checks alone before
 * the call starts (a dtype or op number; a NULL request or buffer; a
 * count out of range) as for any other: the call fails on every rank at
 * once, GORUN_ERR_INVALID here and GORUN_ERR_PEER naming this rank on the
 * others, rather than leaving them to wait for this rank until
 * GORUN_TIMEOUT. A peer still in an earlier call this rank completed
 * finishes it. What is refused without a communicator to abort stays on
 * this rank: a bad communicator or request handle, gorun_init's NULL
 * output, and the local calls (gorun_rank and the other queries,
 * gorun_test's NULL done, gorun_trace_span), which no other rank waits
 * for; and gorun_shrink's and gorun_grow's NULL out, which leaves comm as
 * it was.
 */
typedef enum {
	GORUN_OK = 0,
	GORUN_ERR_INVALID = 1,   /* bad argument: handle, dtype, op, count, root */
	GORUN_ERR_PEER = 2,      /* a peer rank failed or disagreed; the message names it */
	GORUN_ERR_TIMEOUT = 3,   /* the operation did not finish within GORUN_TIMEOUT */
	GORUN_ERR_CLOSED = 4,    /* the communicator was finalized or aborted */
	GORUN_ERR_INIT = 5,      /* the job could not be joined */
	GORUN_ERR_INTERNAL = 6,  /* anything else: this rank's own device failed, a caught Go panic */
	/* gorun_init of a rank gorun restarted (--max-restarts) that found none
	 * of the job's other ranks left to admit it: they finished (or died)
	 * first. The job's work ended without this rank; exit 0 if that is done. */
	GORUN_ERR_JOB_GONE = 7,
	/* gorun_shrink or gorun_grow with GORUN_QUORUM=majority, on a rank
	 * whose new world keeps no majority of the ranks of the last whole one
	 * (half of them, without its rank 0): the job is cut in two and the
	 * other side goes on. Exit; gorun --max-restarts restarts the rank
	 * into it. */
	GORUN_ERR_NO_QUORUM = 8,
} gorun_status;

/* The library's GORUN_ABI_VERSION. Needs no gorun_init. */
int gorun_abi_version(void);

/* Join the job described by the environment; *comm receives the handle. */
int gorun_init(gorun_comm *comm);
/* 1 when a launcher (gorun, srun, mpirun, torchrun) started this process,
 * else 0, in which case gorun_init joins a job of this rank alone. Both read
 * the environment the process started with: a variable the program sets
 * itself (setenv, Python's os.environ) is not seen. */
int gorun_launched(void);
/* Leave the job and free the handle. */
int gorun_finalize(gorun_comm comm);
/* Make every rank's pending and later operations fail with reason. */
int gorun_abort(gorun_comm comm, const char *reason);

/*
 * Elastic jobs (gorun --elastic, --max-restarts; README "Elastic jobs").
 * gorun_shrink: every surviving rank calls it after an operation failed
 * with GORUN_ERR_PEER; *out receives a communicator of the survivors,
 * renumbered. gorun_grow: every rank calls it at a point they agree on
 * (gorun_joiners > 0 on some rank: agree with an allreduce of max); *out
 * receives a communicator of every live rank, in the order of the ranks
 * they were started with, and a restarted rank's gorun_init returns then.
 * Both close comm and free its handle, even when they fail.
 */
int gorun_shrink(gorun_comm comm, gorun_comm *out);
int gorun_grow(gorun_comm comm, gorun_comm *out);
/* Ranks waiting to join through gorun_grow, in this rank's view. */
int gorun_joiners(gorun_comm comm, int *joiners);

/*
 * A communicator of some of comm's ranks, as MPI_Comm_create_group: the n
 * ranks of comm listed in ranks (ranks[i] becomes rank i of *out) call it,
 * with the same ranks and tag; comm's other ranks do not, and may go on
 * with other work on comm meanwhile (torch's new_group calls only a
 * group's members). The members exchange endpoints by messages of comm
 * tagged tag, which match in order with comm's own gorun_send and
 * gorun_recv between them, whatever their tags: two members must have no
 * message between them started and not yet received when they call it
 * (the tag makes such a message an error, GORUN_ERR_PEER, not a wrong
 * match); give each group a tag of its own. comm stays open; free
 * *out with gorun_finalize. ranks NULL, n < 1, n larger than comm's size,
 * out NULL, a rank out of range or listed twice, or a list without the
 * caller, are GORUN_ERR_INVALID that aborts comm (and fails the call on
 * the other members, naming this rank); members that disagree on ranks
 * or tag get GORUN_ERR_PEER (or GORUN_ERR_TIMEOUT where one waits for a
 * rank that does not list it).
 */
int gorun_comm_create_group(gorun_comm comm, const int *ranks, int n, int tag, gorun_comm *out);

int gorun_rank(gorun_comm comm, int *rank);
int gorun_size(gorun_comm comm, int *size);
int gorun_local_rank(gorun_comm comm, int *local_rank);
int gorun_local_size(gorun_comm comm, int *local_size);

int gorun_barrier(gorun_comm comm);
int gorun_allreduce(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op);
int gorun_broadcast(gorun_comm comm, void *buf, size_t count, gorun_dtype dtype, int root);
/* recv holds size * send_count elements. */
int gorun_allgather(gorun_comm comm, const void *send, void *recv, size_t send_count, gorun_dtype dtype);
/* send holds size * recv_count elements. */
int gorun_reduce_scatter(gorun_comm comm, const void *send, void *recv, size_t recv_count, gorun_dtype dtype, gorun_op op);

/* Non-blocking variants: *req receives a handle for gorun_wait/gorun_test. */
int gorun_iallreduce(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, gorun_request *req);
int gorun_ibroadcast(gorun_comm comm, void *buf, size_t count, gorun_dtype dtype, int root, gorun_request *req);
int gorun_iallgather(gorun_comm comm, const void *send, void *recv, size_t send_count, gorun_dtype dtype, gorun_request *req);
int gorun_ireduce_scatter(gorun_comm comm, const void *send, void *recv, size_t recv_count, gorun_dtype dtype, gorun_op op, gorun_request *req);
/* Rooted collectives: recv (reduce, gather) matters at root only, as send
 * (scatter) does. gather's recv and scatter's send hold size * count. */
int gorun_reduce(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, int root);
int gorun_gather(gorun_comm comm, const void *send, void *recv, size_t send_count, gorun_dtype dtype, int root);
int gorun_scatter(gorun_comm comm, const void *send, void *recv, size_t recv_count, gorun_dtype dtype, int root);
/* send and recv hold size blocks of count elements; block b goes to rank b. */
int gorun_alltoall(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype);
/* recv on rank r = send of ranks 0..r reduced (scan), 0..r-1 (exscan;
 * rank 0's recv is untouched, but it must be given). GORUN_AVG divides by
 * the number of ranks reduced: r + 1 (scan), r (exscan). */
int gorun_scan(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op);
int gorun_exscan(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op);

/* Point to point. Messages between two ranks match in order, collectives
 * included; the receive must name the sender's tag and count. */
int gorun_send(gorun_comm comm, const void *buf, size_t count, gorun_dtype dtype, int dst, int tag);
int gorun_recv(gorun_comm comm, void *buf, size_t count, gorun_dtype dtype, int src, int tag);

/* The v-collectives: counts and displs are arrays of size entries, in
 * elements; displs NULL means packed. Counts a pair must agree on are
 * checked first: a disagreement is GORUN_ERR_PEER on every rank.
 * allgatherv: every rank's counts are the same; rank r's send_count =
 * counts[r]. gatherv: counts, displs, recv matter at root. scatterv:
 * send, counts, displs matter at root. alltoallv: rank a's
 * send_counts[b] equals rank b's recv_counts[a]. */
int gorun_allgatherv(gorun_comm comm, const void *send, size_t send_count, void *recv,
                     const size_t *counts, const size_t *displs, gorun_dtype dtype);
int gorun_gatherv(gorun_comm comm, const void *send, size_t send_count, void *recv,
                  const size_t *counts, const size_t *displs, gorun_dtype dtype, int root);
int gorun_scatterv(gorun_comm comm, const void *send, const size_t *counts, const size_t *displs,
                   void *recv, size_t recv_count, gorun_dtype dtype, int root);
int gorun_alltoallv(gorun_comm comm, const void *send, const size_t *send_counts, const size_t *send_displs,
                    void *recv, const size_t *recv_counts, const size_t *recv_displs, gorun_dtype dtype);

/* Value-index pairs for GORUN_MINLOC and GORUN_MAXLOC: an array of
 * struct { T value; int64_t index; } (16 bytes each; 12 on 32-bit
 * platforms for a T of 4 bytes or fewer) where dtype names T. Of equal
 * values the smaller index wins. reduce_loc's recv matters at
 * root only. */
#define GORUN_PAIR(T) struct { T value; int64_t index; }
int gorun_allreduce_loc(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op);
int gorun_reduce_loc(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, int root);

/* Non-blocking forms of the above. Requests take their place in the
 * communicator's order when started and run in that order. Started isends
 * and irecvs run together, as one group, when a wait or test needs one of
 * them, a blocking send or recv joins them, or another operation starts:
 * two ranks may each isend the other messages of any size before irecv.
 * Start every message of an exchange before waiting on one. */
int gorun_ibarrier(gorun_comm comm, gorun_request *req);
int gorun_iallreduce_loc(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, gorun_request *req);
int gorun_ireduce_loc(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, int root, gorun_request *req);
int gorun_ireduce(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, int root, gorun_request *req);
int gorun_igather(gorun_comm comm, const void *send, void *recv, size_t send_count, gorun_dtype dtype, int root, gorun_request *req);
int gorun_iscatter(gorun_comm comm, const void *send, void *recv, size_t recv_count, gorun_dtype dtype, int root, gorun_request *req);
int gorun_ialltoall(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_request *req);
int gorun_iscan(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, gorun_request *req);
int gorun_iexscan(gorun_comm comm, const void *send, void *recv, size_t count, gorun_dtype dtype, gorun_op op, gorun_request *req);
int gorun_isend(gorun_comm comm, const void *buf, size_t count, gorun_dtype dtype, int dst, int tag, gorun_request *req);
int gorun_irecv(gorun_comm comm, void *buf, size_t count, gorun_dtype dtype, int src, int tag, gorun_request *req);
int gorun_iallgatherv(gorun_comm comm, const void *send, size_t send_count, void *recv,
                      const size_t *counts, const size_t *displs, gorun_dtype dtype, gorun_request *req);
int gorun_igatherv(gorun_comm comm, const void *send, size_t send_count, void *recv,
                   const size_t *counts, const size_t *displs, gorun_dtype dtype, int root, gorun_request *req);
int gorun_iscatterv(gorun_comm comm, const void *send, const size_t *counts, const size_t *displs,
                    void *recv, size_t recv_count, gorun_dtype dtype, int root, gorun_request *req);
int gorun_ialltoallv(gorun_comm comm, const void *send, const size_t *send_counts, const size_t *send_displs,
                     void *recv, const size_t *recv_counts, const size_t *recv_displs, gorun_dtype dtype,
                     gorun_request *req);

/* Wait for req and free it; returns the operation's status. */
int gorun_wait(gorun_request req);
/* *done = 1 when req finished (then req is freed and its status returned), 0 otherwise. */
int gorun_test(gorun_request req, int *done);

/* The timeline (GORUN_TIMELINE): a caller's own calls as spans on a row of
 * their own (the torch backend's "torch" row). gorun_tracing is 1 when comm
 * records a timeline, else 0 (check it once and skip the rest); a span runs
 * from start, a gorun_trace_now reading, to the gorun_trace_span call. */
int gorun_tracing(gorun_comm comm);
int64_t gorun_trace_now(void);
int gorun_trace_span(gorun_comm comm, const char *lane, const char *name, int64_t arg, int64_t start);

/* For a binding over this ABI that checks a call's arguments itself and
 * refuses them before calling gorun: the call op (a name, for messages)
 * fails on every rank of comm, GORUN_ERR_PEER naming this rank on the
 * others, as when gorun refuses an argument itself, and comm is aborted
 * (see gorun_status). why says what was refused; gorun_last_error() then
 * holds the message naming this rank. GORUN_OK, or GORUN_ERR_INVALID for
 * a bad handle. */
int gorun_refuse(gorun_comm comm, const char *op, const char *why);

/* A static description of a status code. */
const char *gorun_strerror(int status);
/* The message of the calling thread's last failed call ("" if none). Valid
 * until the thread's next gorun call. */
const char *gorun_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* GORUN_H */
