/* Calls per inbound request (fan-out and retries): ONE implementation, included by
 * sock.bpf.c and unit-tested from C++ (tests/unit/req_ctx_test.cpp) without root.
 *
 * A thread that reads a new request owns it until it writes that request's response; the
 * calls it starts to downstream peers in between are that request's calls. That is the
 * thread-per-request model (Tomcat's platform workers, gunicorn, php-fpm, Go's blocking
 * handlers on one M only by luck). It is wrong wherever one thread carries several requests
 * at once (event loops, virtual threads on carriers, async clients), and those are detected
 * rather than assumed away:
 *   - a thread that begins a request while another of its requests is open, or answers a
 *     request it did not begin, marks what it holds as `overlap`: those requests are not
 *     attributed (user space counts them and says fan-out is unknown when they are many);
 *   - sock.bpf.c counts calls started by a thread with no open request, and calls whose
 *     reply is read by another thread than sent them (a virtual thread resumed elsewhere).
 * Pure functions over a plain struct; nothing here touches a map or a helper.
 */
#ifndef QSCOPE_REQ_CTX_H
#define QSCOPE_REQ_CTX_H

#include "conn_state.h"

#define QS_REQ_PEERS 4       /* distinct peers followed per request; more are counted as lost */

struct qs_req_peer {
	__u16 idx;           /* peer index + 1; 0 = slot unused */
	__u16 calls;
	__u16 retries;       /* calls that followed a failed call to this peer */
	__u8 last_failed;    /* the last call to this peer failed */
	__u8 pad;
};

struct qs_req_ctx {
	__u64 conn;          /* the inbound connection (socket address) of the open request; 0 = none */
	__u8 overlap;        /* this thread worked on another request during this one's life */
	__u8 pad[7];
	struct qs_req_peer peers[QS_REQ_PEERS];
};

#define QS_REQ_CALL_OUTSIDE 1   /* no open request on the thread */
#define QS_REQ_CALL_FULL 2      /* a fifth distinct peer in one request */

/* The thread began reading a new request on `conn`. */
static __always_inline void qs_req_begin(struct qs_req_ctx *x, __u64 conn)
{
	__u8 overlap = x->conn != 0 && x->conn != conn;
	__builtin_memset(x, 0, sizeof(*x));
	x->conn = conn;
	x->overlap = overlap;
}

static __always_inline struct qs_req_peer *qs_req_slot(struct qs_req_ctx *x, __u16 idx, int add)
{
	int i;
	for (i = 0; i < QS_REQ_PEERS; i++) {
		struct qs_req_peer *p = &x->peers[i];
		if (p->idx == idx + 1)
			return p;
		if (!p->idx) {
			if (!add)
				return 0;
			p->idx = idx + 1;
			return p;
		}
	}
	return 0;
}

/* The thread started a call to peer `idx`: 0 when counted in its request, else why not. */
static __always_inline int qs_req_call(struct qs_req_ctx *x, __u16 idx)
{
	struct qs_req_peer *p;
	if (!x || !x->conn)
		return QS_REQ_CALL_OUTSIDE;
	p = qs_req_slot(x, idx, 1);
	if (!p)
		return QS_REQ_CALL_FULL;
	if (p->calls < 0xffff)
		p->calls++;
	if (p->last_failed && p->retries < 0xffff)
		p->retries++;
	p->last_failed = 0;
	return 0;
}

/* The last call to peer `idx` of the thread's request failed (reset, refused, abandoned,
 * or a 5xx/429 reply): the next call to that peer in the same request is a retry. */
static __always_inline void qs_req_call_failed(struct qs_req_ctx *x, __u16 idx)
{
	struct qs_req_peer *p;
	if (!x || !x->conn)
		return;
	p = qs_req_slot(x, idx, 0);
	if (p)
		p->last_failed = 1;
}

/* The thread wrote the response of the request on `conn`. 1 when that request's calls are
 * its own (begun and answered here, nothing else in between): the caller then adds its
 * slots to the aggregates. The thread's request is closed either way when it was this one;
 * a response for another connection marks the thread's open request as overlapped. */
static __always_inline int qs_req_end(struct qs_req_ctx *x, __u64 conn)
{
	int mine;
	if (!x->conn)
		return 0;
	if (x->conn != conn) {
		x->overlap = 1;
		return 0;
	}
	mine = !x->overlap;
	x->conn = 0;
	return mine;
}

/* A downstream reply's status line: did the call fail (5xx, or 429 Too Many Requests, which
 * callers retry)? Only its 12 bytes are looked at (qs_http_status_code, conn_state.h). */
static __always_inline int qs_reply_failed(const unsigned char *b, int n)
{
	int code = qs_http_status_code(b, n);
	return (code >= 500 && code <= 599) || code == 429;
}

#endif
