// C shims for the verbs provider (build tag "rdma"). They take scalars and
// pointers to C memory only, so no Go pointer is kept by C.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define GORUN_MAX_SGE 32
#define GORUN_INLINE_BUF 1024
#define GORUN_POLL_BATCH 32

enum { GORUN_OP_SEND, GORUN_OP_WRITE, GORUN_OP_WRITE_IMM, GORUN_OP_READ, GORUN_OP_RECV };

// One work request, filled by Go in C memory (one per queue, under its lock).
struct gorun_wr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t imm;
	int opcode;
	int flags;
	int nsge;
	struct ibv_sge sge[GORUN_MAX_SGE];
	char inline_buf[GORUN_INLINE_BUF];
};

// Posts w with the rdma_post_* inlines, or ibv_post_send for write-with-imm.
static inline int gorun_post(struct rdma_cm_id *id, struct gorun_wr *w) {
	void *ctx = (void *)(uintptr_t)w->wr_id;
	switch (w->opcode) {
	case GORUN_OP_SEND:
		return rdma_post_sendv(id, ctx, w->sge, w->nsge, w->flags);
	case GORUN_OP_WRITE:
		return rdma_post_writev(id, ctx, w->sge, w->nsge, w->flags, w->remote_addr, w->rkey);
	case GORUN_OP_READ:
		return rdma_post_readv(id, ctx, w->sge, w->nsge, w->flags, w->remote_addr, w->rkey);
	case GORUN_OP_RECV:
		return rdma_post_recvv(id, ctx, w->sge, w->nsge);
	case GORUN_OP_WRITE_IMM: {
		struct ibv_send_wr wr, *bad;
		memset(&wr, 0, sizeof wr);
		wr.wr_id = w->wr_id;
		wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
		wr.send_flags = w->flags;
		wr.sg_list = w->sge;
		wr.num_sge = w->nsge;
		wr.imm_data = htonl(w->imm);
		wr.wr.rdma.remote_addr = w->remote_addr;
		wr.wr.rdma.rkey = w->rkey;
		return rdma_seterrno(ibv_post_send(id->qp, &wr, &bad));
	}
	}
	errno = EINVAL;
	return -1;
}

// A work completion, reduced to what Go needs.
struct gorun_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t imm;
	uint32_t has_imm;
	uint32_t vendor_err;
	uint32_t qp_num;
};

// Polls up to max (at most GORUN_POLL_BATCH) completions of cq into out.
static inline int gorun_poll(struct ibv_cq *cq, struct gorun_wc *out, int max) {
	struct ibv_wc wc[GORUN_POLL_BATCH];
	if (max > GORUN_POLL_BATCH)
		max = GORUN_POLL_BATCH;
	int n = ibv_poll_cq(cq, max, wc);
	for (int i = 0; i < n; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].byte_len = wc[i].byte_len;
		out[i].has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
		out[i].imm = out[i].has_imm ? ntohl(wc[i].imm_data) : 0;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].qp_num = wc[i].qp_num;
	}
	return n;
}

// Reads one event from a (non-blocking) completion channel and acks it.
static inline int gorun_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return -1;
	ibv_ack_cq_events(cq, 1);
	return 0;
}

static inline int gorun_set_nonblock(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0)
		return -1;
	return fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

// A completion queue with its own (non-blocking) completion channel;
// token is its cq_context, which names it in asynchronous events.
static inline int gorun_create_cq(struct ibv_context *ctx, int depth, uint64_t token, struct ibv_cq **cq,
				  struct ibv_comp_channel **ch) {
	*cq = NULL;
	if (!(*ch = ibv_create_comp_channel(ctx)))
		return -1;
	if (gorun_set_nonblock((*ch)->fd) ||
	    !(*cq = ibv_create_cq(ctx, depth, (void *)(uintptr_t)token, *ch, 0))) {
		int e = errno;
		ibv_destroy_comp_channel(*ch);
		*ch = NULL;
		errno = e;
		return -1;
	}
	return 0;
}

// Destroys cq (its events must all be acked) and then its channel.
static inline int gorun_destroy_cq(struct ibv_cq *cq, struct ibv_comp_channel *ch) {
	int r = ibv_destroy_cq(cq);
	if (r == 0)
		r = ibv_destroy_comp_channel(ch);
	return r;
}

// What rdma_create_qp granted.
struct gorun_qp {
	uint32_t qp_num, max_inline, max_send_wr, max_recv_wr;
};

// token is the QP's qp_context, which names it in asynchronous events.
static inline int gorun_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *scq,
				  struct ibv_cq *rcq, int sdepth, int rdepth, int max_sge, int max_inline,
				  uint64_t token, struct gorun_qp *q) {
	struct ibv_context *ctx = id->verbs;
	memset(q, 0, sizeof *q);
	if (!ctx || pd->context != ctx || scq->context != ctx || rcq->context != ctx) {
		errno = EXDEV;
		return -1;
	}
	for (;;) {
		struct ibv_qp_init_attr a;
		memset(&a, 0, sizeof a);
		a.qp_context = (void *)(uintptr_t)token;
		a.send_cq = scq;
		a.recv_cq = rcq;
		a.qp_type = IBV_QPT_RC;
		a.cap.max_send_wr = sdepth;
		a.cap.max_recv_wr = rdepth;
		a.cap.max_send_sge = max_sge;
		a.cap.max_recv_sge = max_sge;
		a.cap.max_inline_data = max_inline;
		if (rdma_create_qp(id, pd, &a) == 0) {
			q->qp_num = id->qp->qp_num;
			q->max_inline = a.cap.max_inline_data;
			q->max_send_wr = a.cap.max_send_wr;
			q->max_recv_wr = a.cap.max_recv_wr;
			return 0;
		}
		if (max_inline == 0)
			return -1;
		max_inline /= 4; // the device may support less inline data
		if (max_inline < 16)
			max_inline = 0;
	}
}

static inline void gorun_destroy_qp(struct rdma_cm_id *id) {
	if (id->qp)
		rdma_destroy_qp(id);
}

// The minimum RNR NAK timer may be changed in RTS (IB spec, RTS->RTS).
static inline int gorun_set_min_rnr_timer(struct ibv_qp *qp, int code) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.min_rnr_timer = code;
	return ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER);
}

// A connection-manager event, copied out before it is acked.
struct gorun_cm_event {
	int event;
	int status;
	struct rdma_cm_id *id;
	int responder_resources;
	int initiator_depth;
	int priv_len;
	unsigned char priv[64]; // private data of a request, reply or reject
};

static inline int gorun_get_cm_event(struct rdma_event_channel *ch, struct gorun_cm_event *out) {
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return -1;
	out->event = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->responder_resources = ev->param.conn.responder_resources;
	out->initiator_depth = ev->param.conn.initiator_depth;
	out->priv_len = 0;
	if ((ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_ESTABLISHED ||
	     ev->event == RDMA_CM_EVENT_REJECTED) && ev->param.conn.private_data) {
		int n = ev->param.conn.private_data_len;
		if (n > (int)sizeof out->priv)
			n = sizeof out->priv;
		memcpy(out->priv, ev->param.conn.private_data, n);
		out->priv_len = n;
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static inline int gorun_resolve_addr(struct rdma_cm_id *id, const char *host, const char *port, int ms) {
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(host, port, &hints, &res))
		return -1;
	int r = rdma_resolve_addr(id, res->ai_src_addr, res->ai_dst_addr, ms);
	int e = errno;
	rdma_freeaddrinfo(res);
	errno = e;
	return r;
}

static inline int gorun_bind_addr(struct rdma_cm_id *id, const char *host, const char *port) {
	struct rdma_addrinfo hints, *res;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(host, port, &hints, &res))
		return -1;
	int r = rdma_bind_addr(id, res->ai_src_addr);
	int e = errno;
	rdma_freeaddrinfo(res);
	errno = e;
	return r;
}

static inline int gorun_connect(struct rdma_cm_id *id, int rd_atom, int rnr_retry, const void *priv, int priv_len) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = priv;
	p.private_data_len = priv_len;
	p.responder_resources = rd_atom;
	p.initiator_depth = rd_atom;
	p.retry_count = 7;
	p.rnr_retry_count = rnr_retry;
	return rdma_connect(id, &p);
}

// rdma_accept moves the QP to RTS with the connection manager's
// min_rnr_timer, code 0 (655 ms), before its reply goes out, and the
// client may send as soon as the reply arrives: the timer is set at once,
// in the same call (best effort, as for the dialing side).
static inline int gorun_accept(struct rdma_cm_id *id, int resp_res, int init_depth, int rnr_retry,
			       int rnr_timer, const void *priv, int priv_len) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = priv;
	p.private_data_len = priv_len;
	p.responder_resources = resp_res;
	p.initiator_depth = init_depth;
	p.retry_count = 7;
	p.rnr_retry_count = rnr_retry;
	int r = rdma_accept(id, &p);
	if (r == 0 && id->qp)
		gorun_set_min_rnr_timer(id->qp, rnr_timer);
	return r;
}

static inline struct ibv_context *gorun_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
static inline int gorun_id_port(struct rdma_cm_id *id) { return id->port_num; }

// An asynchronous event, copied out before it is acked: the token
// (qp_context or cq_context) of the QP or CQ it names, or its port.
struct gorun_async_event {
	int typ;
	int port;
	uint64_t token;
};

// Reads one event from the context's (non-blocking) async_fd and acks it.
static inline int gorun_get_async_event(struct ibv_context *ctx, struct gorun_async_event *out) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(ctx, &ev))
		return -1;
	out->typ = ev.event_type;
	out->port = 0;
	out->token = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		out->token = (uintptr_t)ev.element.cq->cq_context;
		break;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		out->token = (uintptr_t)ev.element.qp->qp_context;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = ev.element.port_num;
		break;
	default: // device fatal; SRQ and WQ events (none made here)
		break;
	}
	ibv_ack_async_event(&ev);
	return 0;
}
static inline struct ibv_qp *gorun_id_qp(struct rdma_cm_id *id) { return id->qp; }

// Writes "host:port" of the local or peer address of id into buf.
static inline void gorun_addr_string(struct rdma_cm_id *id, int peer, char *buf, int n) {
	struct sockaddr *sa = peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		inet_ntop(AF_INET, &s->sin_addr, host, sizeof host);
		port = ntohs(s->sin_port);
		snprintf(buf, n, "%s:%d", host, port);
	} else if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof host);
		port = ntohs(s->sin6_port);
		snprintf(buf, n, "[%s]:%d", host, port);
	} else {
		snprintf(buf, n, "?:0");
	}
}

// Device limits the provider needs.
struct gorun_dev_attr {
	int max_qp_wr, max_cqe, max_sge, max_sge_rd, max_qp_rd_atom, max_qp_init_rd_atom;
};

static inline int gorun_query_device(struct ibv_context *ctx, struct gorun_dev_attr *out) {
	struct ibv_device_attr a;
	if (ibv_query_device(ctx, &a))
		return -1;
	out->max_qp_wr = a.max_qp_wr;
	out->max_cqe = a.max_cqe;
	out->max_sge = a.max_sge;
	out->max_sge_rd = a.max_sge_rd;
	out->max_qp_rd_atom = a.max_qp_rd_atom;
	out->max_qp_init_rd_atom = a.max_qp_init_rd_atom;
	return 0;
}

static inline struct ibv_context *gorun_dev_at(struct ibv_context **list, int i) { return list[i]; }
static inline const char *gorun_dev_name(struct ibv_context *ctx) { return ibv_get_device_name(ctx->device); }
