// SPDX-License-Identifier: GPL-2.0
/* The sock probe family: accept queue, connector queue, in flight (server side) and
 * downstream peers (client side) of one target process. See docs/kernel.md for how each hook
 * was verified on the development kernel, and conn_state.h for the per-connection machine.
 *
 * Cost: every program that runs in the target's own threads filters on the target's process
 * tree first (tree.h: one inlined array look-up and a bit test).
 * Programs that run in softirq (sk_data_ready, inet_sock_set_state for accepted children,
 * kfree_skb) cannot; they filter on a cheap field first (state, reason) and then do one hash
 * lookup.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "core_fixes.bpf.h"
#include "sock.h"
#include "syscalls.h"
#include "tree.h"
#include "port_owner.h"
#include "req_ctx.h"
struct qs_hpack;
__noinline int hp_byte(struct qs_hpack *s, __u32 c);
#define QS_HP_BYTE hp_byte
#include "h2.h"

char LICENSE[] SEC("license") = "GPL";

/* Aggregates (see sock.h): mmapped by the skeleton, read in place by the collector. */
struct qs_port_stats port_stats[QS_MAX_PORTS];
struct qs_hist port_hists[QS_MAX_PORTS * QS_PORT_HISTS];
struct qs_peer_stats peer_stats[QS_MAX_PEERS];
struct qs_hist peer_hists[QS_MAX_PEERS * QS_PEER_HISTS];
__u64 next_port_idx = 0;   /* allocator shared with user space (atomic adds on both sides) */
__u64 next_peer_idx = 0;
__u64 lost_conn_full = 0;  /* connections not tracked: conns map full */
__u64 lost_port_full = 0;  /* listening ports beyond QS_MAX_PORTS */
__u64 conns_h2 = 0;        /* inbound connections seen answering in HTTP/2 frames (qs_note_protocol) */
__u64 conns_tls = 0;       /* inbound connections seen answering in TLS records */
__u64 fan_attributed = 0;  /* requests answered whose calls were all counted (bpf/req_ctx.h) */
__u64 fan_unattributed = 0;/* requests answered whose life crossed threads or overlapped another */
__u64 fan_slots_full = 0;  /* calls to a fifth distinct peer in one request: not counted */

/* ---- HTTP/2 connections (the walk is further down) ---- */
/* Per inbound HTTP/2 connection: the walk's place in each direction and the open streams.
 * Preallocated (~1.8 KiB each): connections beyond it are followed in turns, and said so. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QS_H2_CONNS);
	__type(key, __u64);
	__type(value, struct qs_h2);
} h2_conns SEC(".maps");

/* bpf_loop (5.17) walks the frames: user space clears this where the kernel lacks it, and the
 * verifier then drops the walk as dead code. */
const volatile __u32 h2_streams = 1;

static const struct qs_h2 h2_zero;

/* The frame walk is ~90% of what the verifier checks in the reads' and the writes' programs
 * (~150,000 of ~165,000 instructions each, ~80 ms apiece). So each of those hooks runs a light
 * program without it, which jumps (a tail call) to its twin with the walk once user space has
 * put the twin in its slot here; with the slot empty the jump falls through. top loads the
 * twins after its first frame, the other commands before they attach. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} recv_walk SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} send_walk SEC(".maps");

/* 1 while the twins are loading (user space clears it if they fail): a light program then
 * leaves an HTTP/2 connection unmarked, so that it joins the walk at a later response, as a
 * connection met mid-way does. 0: the walk is not coming (no bpf_loop, or its load failed), and
 * HTTP/2 connections are counted per connection, as when h2_conns is full. */
__u32 h2_walk_coming = 0;
__u64 h2_unwalked = 0;      /* HTTP/2 responses and replies taken as turns while the walk loaded */

/* A light program (walk 0) while the walk's twins are loading. */
static __always_inline int walk_pending(const int walk)
{
	return !walk && h2_streams && *(volatile __u32 *)&h2_walk_coming;
}

__u64 h2_followed = 0;      /* inbound HTTP/2 connections whose streams are followed */
__u64 h2_table_full = 0;    /* HTTP/2 connections followed in turns instead: h2_conns full */
__u64 h2_lost_sync = 0;     /* frame boundaries lost (qs_h2_plausible failed, bytes past the walk) */
__u64 h2_evicted = 0;       /* open streams whose slot a newer stream took (their end was missed) */
__u64 h2_client_resets = 0; /* streams the client reset before an answer */
__u64 h2_server_resets = 0; /* streams the server answered with RST_STREAM */
__u64 h2_joined = 0;        /* of h2_followed, met mid-way (no preface seen) */
__u64 h2_unseen = 0;        /* streams answered whose HEADERS were not seen (before attach, lost sync) */
__u64 h2_calls_unseen = 0;  /* outbound: calls answered whose HEADERS were not seen (open at a join) */
__u64 h2_trailers = 0;      /* inbound streams answered with trailers (gRPC's status is in them) */
__u64 h2_call_trailers = 0; /* outbound calls answered with trailers */
/* gRPC's statuses read (hpack.h) of inbound streams, by code; and the answers whose status was not
 * read (behind an HPACK table entry not known, or in trailers not walked): [0] inbound streams,
 * [1] outbound calls (whose read statuses count as failed calls or not, per peer) */
__u64 h2_grpc_codes[QS_GRPC_CODES] = {};
__u64 h2_grpc_unread[2] = {};


/* The connection table: struct sock * -> state. Sized from Config before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct qs_conn);
} conns SEC(".maps");

/* Listening port (host order) -> port index. Filled by user space (listeners found via
 * /proc/PID/fd + sock_diag) and by listen() in the target. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QS_MAX_PORTS * 2);
	__type(key, __u32);
	__type(value, __u32);
} port_idx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QS_MAX_PEERS * 8);
	__type(key, struct qs_peer_key);
	__type(value, __u32);
} peer_idx SEC(".maps");

/* First ACK-stage overflow drop per client (address, port): the true start of its accept
 * wait. LRU: entries of clients that gave up are evicted, never leaked. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct qs_client_key);
	__type(value, __u64);
} overflow_first SEC(".maps");

/* qs_served per tid (sock.h); LRU: threads that stopped serving age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct qs_served);
} served SEC(".maps");

/* The current thread serves inbound connection c: count a change of server. */
static __always_inline void note_server(struct qs_conn *c)
{
	__u64 pt = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pt;
	struct qs_served *v, nv = {};

	if (c->server_tid == tid)
		return;
	c->server_tid = tid;
	v = bpf_map_lookup_elem(&served, &tid);
	if (v) {
		__sync_fetch_and_add(&v->adopted, 1);
		return;
	}
	nv.adopted = 1;
	nv.tgid = (__u32)(pt >> 32);
	bpf_map_update_elem(&served, &tid, &nv, BPF_NOEXIST);
}

static __always_inline int is_target(void)
{
	return qs_current_in_tree();
}

/* max = max(max, v) without losing a concurrent larger value. */
static __always_inline void atomic_max(__s64 *max, __s64 v)
{
	int i;
	for (i = 0; i < 4; i++) {
		__s64 cur = *max;
		if (v <= cur)
			return;
		if (__sync_val_compare_and_swap(max, cur, v) == cur)
			return;
	}
}

static __always_inline void gauge_add(__s64 *g, __s64 *max, __s32 d)
{
	__s64 now;
	if (!d)
		return;
	now = __sync_fetch_and_add(g, (__s64)d) + d;
	if (d > 0 && max)
		atomic_max(max, now);
}

static __always_inline struct qs_port_stats *port_at(__u32 idx)
{
	if (idx >= QS_MAX_PORTS)
		return 0;
	return &port_stats[idx];
}

static __always_inline struct qs_peer_stats *peer_at(__u32 idx);

/* Connection c's first response (inbound) or the peer's first bytes (outbound) began with
 * `wire` (QS_WIRE_*): counted once in its listener's or peer's protocol mix. */
static __always_inline void note_wire(struct qs_conn *c, __u32 wire)
{
	__u32 idx = c->idx;
	if (c->wire || wire >= QS_WIRES)
		return;
	c->wire = (__u8)(wire + 1);
	if (c->dir == QS_DIR_IN) {
		struct qs_port_stats *p = port_at(idx);
		if (p)
			__sync_fetch_and_add(&p->wire[wire], 1);
	} else {
		struct qs_peer_stats *p = peer_at(idx);
		if (p)
			__sync_fetch_and_add(&p->wire[wire], 1);
	}
}

/* The wire a response's first bytes show, from response_status()'s class. */
static __always_inline __u32 wire_of(int status)
{
	if (status == QS_STATUS_H2)
		return QS_WIRE_H2;
	if (status == QS_STATUS_TLS)
		return QS_WIRE_TLS;
	return status >= QS_STATUS_2XX && status <= QS_STATUS_5XX ? QS_WIRE_HTTP1 : QS_WIRE_OTHER;
}

static __always_inline struct qs_hist *port_hist(__u32 idx, __u32 kind)
{
	__u32 i = idx * QS_PORT_HISTS + kind;
	if (idx >= QS_MAX_PORTS || kind >= QS_PORT_HISTS || i >= QS_MAX_PORTS * QS_PORT_HISTS)
		return 0;
	return &port_hists[i];
}

static __always_inline struct qs_peer_stats *peer_at(__u32 idx)
{
	if (idx >= QS_MAX_PEERS)
		return 0;
	return &peer_stats[idx];
}

static __always_inline struct qs_hist *peer_hist(__u32 idx, __u32 kind)
{
	__u32 i = idx * QS_PEER_HISTS + kind;
	if (idx >= QS_MAX_PEERS || kind >= QS_PEER_HISTS || i >= QS_MAX_PEERS * QS_PEER_HISTS)
		return 0;
	return &peer_hists[i];
}

static __always_inline void hist_add(struct qs_hist *h, __u64 v)
{
	if (h)
		qs_hist_add(h, v);
}

/* A response of port p (index idx) written `latency_ns` after its request began. */
static __always_inline void port_response(struct qs_port_stats *p, __u32 idx, int status,
					  __u64 latency_ns)
{
	if (status < 0 || status >= QS_STATUS_CLASSES)
		status = QS_STATUS_UNKNOWN;
	__sync_fetch_and_add(&p->status[status & 7], 1);
	hist_add(port_hist(idx, QS_PH_LATENCY + status), latency_ns);
}

/* Apply a transition's effects to the shared aggregates. status: class of a completed request. */
static __always_inline void apply(const struct qs_conn *c, const struct qs_effects *e, int status)
{
	if (c->dir == QS_DIR_IN) {
		struct qs_port_stats *p = port_at(c->idx);
		if (!p)
			return;
		gauge_add(&p->in_flight, &p->in_flight_max, e->d_in_flight);
		gauge_add(&p->waiting_unread, &p->waiting_unread_max, e->d_unread);
		gauge_add(&p->connections, 0, e->d_conns);
		if (e->accepted)
			__sync_fetch_and_add(&p->accepted, 1);
		if (e->dropped)
			__sync_fetch_and_add(&p->dropped, 1);
		if (e->record_accept_wait)
			hist_add(port_hist(c->idx, QS_PH_ACCEPT_WAIT), e->accept_wait_ns);
		if (e->record_latency)
			port_response(p, c->idx, status, e->latency_ns);
	} else {
		struct qs_peer_stats *p = peer_at(c->idx);
		if (!p)
			return;
		gauge_add(&p->busy, &p->busy_max, e->d_busy);
		gauge_add(&p->connections, 0, e->d_conns);
		if (e->record_call) {
			__sync_fetch_and_add(&p->calls, 1);
			hist_add(peer_hist(c->idx, QS_PEER_H_CALL), e->call_ns);
		}
		if (e->connect_ok) {
			__sync_fetch_and_add(&p->connects, 1);
			hist_add(peer_hist(c->idx, QS_PEER_H_CONNECT), e->connect_ns);
		}
		if (e->connect_fail)
			__sync_fetch_and_add(&p->connect_failures, 1);
	}
}

/* apply, as a global function for the read path: verified once there rather than at every
 * path to each of its call sites (qs_recv: 257k instructions processed -> 166k), for a call
 * per read. Elsewhere it stays inline: a write, a state change or an arrival runs it specialized
 * to its call site's known direction, and their verification is small anyway. It only reads
 * *e, so the caller's view of its own stack stays true. */
__noinline int apply_read(const struct qs_conn *c, const struct qs_effects *e)
{
	if (c && e)
		apply(c, e, 0);
	return 0;
}

/* ---- calls per inbound request (bpf/req_ctx.h) ------------------------------------------ */

/* The request each thread serves, per tid. LRU: threads that stopped serving age out. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct qs_req_ctx);
} req_ctx SEC(".maps");

/* Followed only once the target has a downstream peer: a server that never calls out pays
 * no map operation per request for it. (Outbound paths need no check: a tracked outbound
 * connection has a peer.) */
static __always_inline int fan_out_on(void)
{
	return next_peer_idx != 0;
}

/* The current thread began reading a new request on inbound connection `conn`. */
static __always_inline void req_begin(__u64 conn)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct qs_req_ctx *x, nx = {};
	if (!fan_out_on())
		return;
	x = bpf_map_lookup_elem(&req_ctx, &tid);
	if (x) {
		qs_req_begin(x, conn);
		return;
	}
	nx.conn = conn;
	bpf_map_update_elem(&req_ctx, &tid, &nx, BPF_ANY);
}

/* The current thread wrote the response of the request on `conn`; `counted`: it is a
 * completion of the window (its start was seen), with status class `status`. */
static __always_inline void req_end(__u64 conn, int counted, int status)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct qs_req_ctx *x;
	int i, mine;
	if (!fan_out_on())
		return;
	x = bpf_map_lookup_elem(&req_ctx, &tid);
	mine = x ? qs_req_end(x, conn) : 0;
	if (!counted)
		return;
	if (!mine) {
		__sync_fetch_and_add(&fan_unattributed, 1);
		return;
	}
	__sync_fetch_and_add(&fan_attributed, 1);
	for (i = 0; i < QS_REQ_PEERS; i++) {
		struct qs_req_peer *rp = &x->peers[i];
		struct qs_peer_stats *p;
		if (!rp->idx)
			break;
		p = peer_at(rp->idx - 1);
		if (!p)
			continue;
		__sync_fetch_and_add(&p->fan_requests, 1);
		__sync_fetch_and_add(&p->fan_calls, rp->calls);
		__sync_fetch_and_add(&p->fan_retries, rp->retries);
		hist_add(peer_hist(rp->idx - 1, QS_PEER_H_FANOUT), rp->calls);
		if (status == QS_STATUS_5XX) {
			__sync_fetch_and_add(&p->fail_requests, 1);
			__sync_fetch_and_add(&p->fail_calls, rp->calls);
			__sync_fetch_and_add(&p->fail_retries, rp->retries);
		}
	}
}

/* Thread `tid` started a call (or a connect attempt that failed) to outbound connection c's peer. */
static __always_inline void call_start(struct qs_conn *c, __u32 tid)
{
	struct qs_peer_stats *p = peer_at(c->idx);
	struct qs_req_ctx *x = bpf_map_lookup_elem(&req_ctx, &tid);
	int r;
	if (!p)
		return;
	r = qs_req_call(x, c->idx);
	if (r == QS_REQ_CALL_FULL)
		__sync_fetch_and_add(&fan_slots_full, 1);
	else if (r == QS_REQ_CALL_OUTSIDE)
		__sync_fetch_and_add(&p->calls_outside, 1);
	else
		__sync_fetch_and_add(&p->calls_in_request, 1);
}

/* The call in progress on outbound connection c failed; c->server_tid is the caller. */
static __always_inline void call_failed(struct qs_conn *c)
{
	struct qs_peer_stats *p = peer_at(c->idx);
	__u32 tid = c->server_tid;
	if (!p || !tid || (c->flags & QS_F_CALL_FAILED))
		return;
	c->flags |= QS_F_CALL_FAILED;
	__sync_fetch_and_add(&p->failed_calls, 1);
	qs_req_call_failed(bpf_map_lookup_elem(&req_ctx, &tid), c->idx);
}

/* This target's slot + 1 among an exporter's shared hooks (bpf/owner.h), 0 when it has none.
 * The shared softirq hooks (dispatch.bpf.c) jump to this target's program for an event on a
 * socket of its ports (bpf/port_owner.h), and each program here hands the event on to the next
 * target's through the same tables (user space shares them before load). */
const volatile __u32 owner_slot = 0;

QS_TARGET_TABLE(data_ready_targets, 1);
QS_TARGET_TABLE(set_state_targets, 1);
QS_TARGET_TABLE(kfree_skb_targets, 1);
QS_TARGET_TABLE(rst_in_targets, 1);
QS_TARGET_TABLE(rst_out_targets, 1);
/* sock_def_readable's, before 6.6: the arrivals' other ways in. */
QS_TARGET_TABLE(data_ready_fentry_targets, 1);
QS_TARGET_TABLE(data_ready_kprobe_targets, 1);

/* The next targets' turn at an event of a shared hook: those after this one in `owners`. */
#define hand_on(ctx, table, owners)                                     \
	do {                                                            \
		if (owner_slot)                                         \
			qs_hand_on(ctx, &(table), owners, owner_slot);  \
	} while (0)

/* One bit per local port, set when the port is registered (before its port_idx entry): the
 * softirq programs see every socket on the machine and cannot filter on the tgid, so for the
 * sockets of other processes this plain load is all they cost, not a hash lookup. */
__u64 port_bits[65536 / 64] = {};

static __always_inline int port_maybe_target(__u16 port)
{
	return (port_bits[(port >> 6) & 1023] >> (port & 63)) & 1;
}

/* The remote ports of the target's peers, set as peer_index meets them: an arrival on another
 * process's socket is dropped without a look-up unless it comes from such a port. */
__u64 peer_port_bits[65536 / 64] = {};

static __always_inline int port_maybe_peer(__u16 port)
{
	return (peer_port_bits[(port >> 6) & 1023] >> (port & 63)) & 1;
}

static __always_inline int lookup_port(__u16 port, __u32 *idx)
{
	__u32 key = port;
	__u32 *v;
	if (!port_maybe_target(port))
		return 0;
	v = bpf_map_lookup_elem(&port_idx, &key);
	if (!v)
		return 0;
	*idx = *v;
	return 1;
}

/* BPF_CORE_READ_INTO copies sizeof(*dst): into a byte array it must get a 4-byte lvalue. */
static __always_inline void read_daddr4(__u8 *dst, const struct sock *sk)
{
	__be32 a = BPF_CORE_READ(sk, __sk_common.skc_daddr);
	__builtin_memcpy(dst, &a, sizeof(a));
}

static __always_inline void fill_peer_key(struct qs_peer_key *k, const struct sock *sk)
{
	__builtin_memset(k, 0, sizeof(*k));
	k->family = sk->__sk_common.skc_family;
	k->port = bpf_ntohs(sk->__sk_common.skc_dport);
	if (k->family == AF_INET6)
		BPF_CORE_READ_INTO(&k->addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	else
		read_daddr4(k->addr, sk);
}

/* Peer key -> index, allocating one on first sight; past the cap, "other". */
static __always_inline __u32 peer_index(const struct qs_peer_key *k)
{
	__u32 *v = bpf_map_lookup_elem(&peer_idx, k);
	__u32 idx;
	__u64 n;
	struct qs_peer_stats *p;
	int claimed = 0;
	if (v)
		return *v;
	__sync_fetch_and_or(&peer_port_bits[(k->port >> 6) & 1023], 1ULL << (k->port & 63));
	if (owner_slot)
		qs_owners_add(&qs_peer_owners, k->port, owner_slot - 1);
	n = __sync_fetch_and_add(&next_peer_idx, 1);
	idx = n >= QS_PEER_OTHER ? QS_PEER_OTHER : (__u32)n;
	p = peer_at(idx);
	if (p && !p->used) {
		p->key = *k;
		p->used = 1;
		claimed = 1;
	}
	if (bpf_map_update_elem(&peer_idx, k, &idx, BPF_NOEXIST)) {
		/* Lost a race with another CPU for the same key: use its index, and give back the
		 * slot claimed for nothing, which would otherwise show as a second, empty entry of
		 * the same peer (seen in CI: two threads' first refused connects at once). */
		if (claimed && p)
			p->used = 0;
		v = bpf_map_lookup_elem(&peer_idx, k);
		if (v)
			return *v;
		/* The index map is full: the peer folds into "other" (not lost). */
		return QS_PEER_OTHER;
	}
	return idx;
}

static __always_inline __u32 sk_unread(struct sock *sk)
{
	struct tcp_sock *tp;
	/* A Unix socket has no sequence numbers: its receive queue holds the unread skbs (a
	 * partly read one stays queued), so "any queued" is "bytes unread". */
	if (sk->__sk_common.skc_family == AF_UNIX)
		return sk->sk_receive_queue.qlen;
	tp = bpf_skc_to_tcp_sock(sk);
	if (!tp)
		return 0;
	return qs_unread_bytes(tp->rcv_nxt, tp->copied_seq, sk->__sk_common.skc_flags);
}

/* The socket's owner has shut its sending side (shutdown(SHUT_WR), SEND_SHUTDOWN). Read as a
 * bitfield: kernels have declared sk_shutdown inside one, and the probed read fits a u8 too. */
static __always_inline int sk_send_shut(struct sock *sk)
{
	return (BPF_CORE_READ_BITFIELD_PROBED(sk, sk_shutdown) & 2 /* SEND_SHUTDOWN */) != 0;
}

/* The same from a kprobe's sk (bpf_skc_to_tcp_sock is not offered to kprobes): only called
 * for sockets found in conns, which are TCP. */
static __always_inline __u32 sk_unread_probe(struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	return qs_unread_bytes(BPF_CORE_READ(tp, rcv_nxt), BPF_CORE_READ(tp, copied_seq),
			       BPF_CORE_READ(sk, __sk_common.skc_flags));
}

/* Accepted children the full table could not take at their handshake (already counted in
 * lost_conn_full): their accept() must not count them a second time as connections queued
 * before the attach. An entry matters only while its socket waits in an accept queue
 * (bounded by the backlogs); LRU evicts the rest, and an eviction can only over-count. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} conns_lost SEC(".maps");

/* An inbound connection closed in the middle of a request, when its close was not inside the
 * target's own write (qs_set_state): a client that gave up, or the reset a response's write
 * provoked processed on another CPU before that write's probe ran. In the second case the write
 * returns its bytes to a server that counts the response, after the entry is gone: this record
 * lets that write count it (late_write_counted). Written only at such closes; an entry a write
 * never takes ages out (LRU), and it is only looked at by a write on a socket in TCP_CLOSE. */
struct qs_closed_request {
	__u64 t_req;     /* when the request began */
	__u64 t_close;
	__u32 idx;       /* its port */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct qs_closed_request);
} closed_requests SEC(".maps");

static __always_inline void conn_insert(__u64 key, const struct qs_conn *c)
{
	long err = bpf_map_update_elem(&conns, &key, c, BPF_ANY);
	if (err) {
		__u8 one = 1;
		__sync_fetch_and_add(&lost_conn_full, 1);
		if (c->dir == QS_DIR_IN)
			bpf_map_update_elem(&conns_lost, &key, &one, BPF_ANY);
	}
}

/* Insert unless present; 1 when inserted. A full map is counted, an existing entry is not. */
static __always_inline int conn_insert_new(__u64 key, const struct qs_conn *c)
{
	long err = bpf_map_update_elem(&conns, &key, c, BPF_NOEXIST);
	if (err == -17 /* EEXIST */)
		return 0;
	if (err) {
		__sync_fetch_and_add(&lost_conn_full, 1);
		return 0;
	}
	return 1;
}

int response_status(void);
static __always_inline int in_send_syscall(void);

/* ---- TLS plaintext (--tls): uprobes on the target's libssl --------------------------------
 * A TLS connection's socket writes carry records, so its status line is read where the
 * plaintext is still in the clear: at SSL_write/SSL_write_ex's entry, on the thread that then
 * writes the record (OpenSSL writes through its socket BIO inside SSL_write; nginx calls it
 * synchronously). The entry leaves the plaintext's class in the thread's task storage, and the
 * thread's next socket write consumes it, whatever that write is, so a class never outlives the
 * SSL_write that made it. A record written with nothing pending was written outside SSL_write
 * (handshake, session tickets, alerts): no response. Where the library buffers the record for
 * a later write (a memory BIO, as Node.js uses) or the thread that writes is another, the class
 * would land on the wrong write: only OpenSSL's socket BIO path is claimed (docs/kernel.md). */
const volatile __u32 tls_plaintext = 0;   /* set by user space with --tls */
__u64 conns_tls_plain = 0;  /* TLS connections whose plaintext was classified through libssl */
__u64 conns_tls_h2 = 0;     /* of them, answering in HTTP/2 frames (h2 over TLS, ALPN h2) */

/* One SSL_read or SSL_write in progress on a thread, for its return probe (HTTP/2 inside TLS). */
struct qs_tls_call {
	__u64 ssl;     /* the SSL* */
	__u64 buf;     /* its plaintext buffer (a user address) */
	__u64 done;    /* the _ex forms: where the library stores the byte count (size_t *), else 0 */
	__u64 key;     /* the socket a syscall inside the call moved bytes on (0: none, the library's
	                * buffer answered) */
};

struct qs_tls_pending {
	__u8 armed;    /* an SSL_write ran on this thread since its last socket write */
	__u8 status;   /* its plaintext's class (qs_response_class) */
	__u8 in_read;  /* inside SSL_read(_ex): rd is current */
	__u8 in_write; /* inside SSL_write(_ex): wr is current */
	__u32 pad;
	struct qs_tls_call rd, wr;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct qs_tls_pending);
} tls_pending SEC(".maps");

/* tgids whose libssl user space has probed (QS_TLS_* bits): only there does "a record with
 * nothing pending" mean a control record (a process forked since the last tick runs unprobed
 * until then). The plaintext walk's probes (SSL_read, the returns) cost three more uprobe traps
 * per request, so user space adds them only to a process this side has marked QS_TLS_SAW_H2. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} tls_hooked SEC(".maps");

/* SSL* -> the socket under it, learnt from any call that reached the socket: an SSL_read that
 * the library answers from its buffer has no syscall to name it. */
struct qs_tls_ssl {
	__u64 ssl;
	__u32 tgid;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, QS_H2_CONNS * 4);
	__type(key, struct qs_tls_ssl);
	__type(value, __u64);
} tls_ssl_sock SEC(".maps");

__u64 h2_tls_followed = 0;  /* of h2_followed, HTTP/2 inside TLS (plaintext walked, --tls) */

/* This process's QS_TLS_* bits (0: not probed). */
static __always_inline __u32 tls_bits(void)
{
	__u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32), *v;
	if (!tls_plaintext)
		return 0;
	v = bpf_map_lookup_elem(&tls_hooked, &tgid);
	return v ? *v : 0;
}

/* This thread's SSL call, for its return probe; 0 where the plaintext is not walked. */
static __always_inline struct qs_tls_pending *tls_self(int create)
{
	if (!tls_plaintext)
		return 0;
	return bpf_task_storage_get(&tls_pending, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

/* A socket read or write (rx) on `key` inside this thread's SSL call names the call's socket. */
static __always_inline void tls_saw_socket(__u64 key, __u32 rx)
{
	struct qs_tls_pending *p = tls_self(0);
	if (!p)
		return;
	if (rx && p->in_read && !p->rd.key)
		p->rd.key = key;
	if (!rx && p->in_write && !p->wr.key)
		p->wr.key = key;
}

static __always_inline void tls_call_enter(struct qs_tls_pending *p, __u32 rx, const void *ssl, const void *buf,
					   const void *done)
{
	struct qs_tls_call *call = rx ? &p->rd : &p->wr;
	call->ssl = (__u64)ssl;
	call->buf = (__u64)buf;
	call->done = (__u64)done;
	call->key = 0;
	if (rx)
		p->in_read = 1;
	else
		p->in_write = 1;
}

static __always_inline void ssl_write_enter(const void *ssl, const void *buf, __u64 num, const void *written)
{
	struct qs_tls_pending *p;
	unsigned char b[12];
	int status = QS_STATUS_UNKNOWN;

	if (!is_target())
		return;
	p = bpf_task_storage_get(&tls_pending, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!p)
		return;
	/* Only the status line's 12 bytes, or an HTTP/2 frame header's 9, are ever copied. */
	if (num >= sizeof(b)) {
		if (!bpf_probe_read_user(b, sizeof(b), buf))
			status = qs_response_class(b, sizeof(b));
	} else if (num >= QS_H2_FRAME_HEADER) {
		if (!bpf_probe_read_user(b, QS_H2_FRAME_HEADER, buf))
			status = qs_response_class(b, QS_H2_FRAME_HEADER);
	}
	p->status = (__u8)status;
	p->armed = 1;
	tls_call_enter(p, 0, ssl, buf, written);
}

static __always_inline void ssl_read_enter(const void *ssl, const void *buf, const void *readbytes)
{
	struct qs_tls_pending *p;
	if (is_target() && (p = tls_self(1)))
		tls_call_enter(p, 1, ssl, buf, readbytes);
}

SEC("uprobe")
int BPF_KPROBE(qs_ssl_write, void *ssl, const void *buf, int num)
{
	ssl_write_enter(ssl, buf, num > 0 ? (__u64)num : 0, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(qs_ssl_write_ex, void *ssl, const void *buf, __u64 num, __u64 *written)
{
	ssl_write_enter(ssl, buf, num, written);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(qs_ssl_read, void *ssl, void *buf, int num)
{
	ssl_read_enter(ssl, buf, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(qs_ssl_read_ex, void *ssl, void *buf, __u64 num, __u64 *readbytes)
{
	ssl_read_enter(ssl, buf, readbytes);
	return 0;
}

/* Connection c's plaintext was seen through libssl (h2: it is HTTP/2 frames): counted once. */
static __always_inline void tls_plain_seen(struct qs_conn *c, int h2)
{
	if (!(c->flags & QS_F_TLS_PLAIN)) {
		c->flags |= QS_F_TLS_PLAIN;
		__sync_fetch_and_add(&conns_tls_plain, 1);
	}
	if (h2 && !(c->flags & QS_F_TLS_H2)) {
		c->flags |= QS_F_TLS_H2;
		__sync_fetch_and_add(&conns_tls_h2, 1);
	}
}

/* What this thread's SSL_write left for its next socket write (armed 0: nothing), consumed. A
 * write of `ret` > 0 bytes on `key` also names the SSL_write's socket for its return probe. */
static __always_inline struct qs_tls_pending tls_take(__u64 key, int ret)
{
	struct qs_tls_pending none = {}, *p, got;

	if (!tls_plaintext)
		return none;
	p = bpf_task_storage_get(&tls_pending, bpf_get_current_task_btf(), 0, 0);
	if (!p)
		return none;
	if (ret > 0 && p->in_write && !p->wr.key)
		p->wr.key = key;
	if (!p->armed)
		return none;
	got = *p;
	p->armed = 0;
	return got;
}

/* A response's first write carried a TLS record (QS_STATUS_TLS): its class from the
 * plaintext, or no response at all for a control record (qs_tls_write_status). */
static __always_inline int tls_response(struct qs_conn *c, const struct qs_tls_pending *t, struct qs_effects *e)
{
	__u32 tgid = (__u32)(bpf_get_current_pid_tgid() >> 32), *bits;
	int hooked = tls_plaintext && (bits = bpf_map_lookup_elem(&tls_hooked, &tgid));
	int s = qs_tls_write_status(QS_STATUS_TLS, hooked, t->armed, t->status);

	if (s == QS_TLS_CONTROL) {
		e->record_latency = 0;   /* the turn ends (in flight -1), but it was no request */
		return QS_STATUS_UNKNOWN;
	}
	if (s == QS_STATUS_TLS)
		return s;
	tls_plain_seen(c, s == QS_STATUS_H2);
	if (s == QS_STATUS_H2 && hooked && !(*bits & QS_TLS_SAW_H2))
		*bits |= QS_TLS_SAW_H2;   /* user space adds the walk's probes at its next tick */
	return s;
}

/* ---- Unix-domain sockets (stream, seqpacket) ----------------------------------------------
 * No state-change tracepoint covers them, so:
 *  - a connection is born at sk_data_ready on the listener (unix_stream_connect queues the
 *    server's new socket as an skb on the listener and wakes it, in the connecting thread):
 *    the connecting socket is the syscall's fd, its unix peer the server side
 *    (unix_connecting);
 *  - a listener is known by its struct unix_address, which every socket it accepts shares;
 *  - close is found by absence: each tick qs_unix_scan marks the tracked sockets still in the
 *    target's fd tables and qs_unix_sweep closes the rest (qs_on_close, as a TCP close).
 * Sockets that never went through a listener (socketpair(), an unnamed peer) are never
 * tracked: they are a process's internal signalling, not requests or downstream calls. */
#define QS_SOCK_STREAM 1
#define QS_SOCK_SEQPACKET 5
#define QS_UNIX_EMBRYO_NS (60ULL * 1000000000ULL) /* queued unaccepted this long: forgotten */

struct qs_unix_name unix_port_names[QS_MAX_PORTS];
struct qs_unix_name unix_peer_names[QS_MAX_PEERS];
__u64 unix_gc_gen = 0;                    /* raised by user space before each qs_unix_scan */

/* struct unix_address * of a target listener -> port index. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, QS_MAX_PORTS * 2);
	__type(key, __u64);
	__type(value, __u32);
} unix_listen SEC(".maps");

/* Tracked Unix sockets -> the last unix_gc_gen that saw them alive. Sized as conns. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u64);
} unix_live SEC(".maps");

/* The bound name of a Unix address (sun_path bytes), its length; 0 when unbound. */
static __always_inline __u32 unix_addr_name(const struct unix_address *a, __u8 *path)
{
	int len;
	__u32 n;
	if (!a)
		return 0;
	len = BPF_CORE_READ(a, len) - (int)sizeof(__u16) /* sun_family */;
	if (len <= 0)
		return 0;
	/* Masked, then clamped, in an unsigned register the verifier can bound. */
	n = (__u32)len & 127;
	barrier_var(n);
	if (n > QS_UNIX_PATH)
		n = QS_UNIX_PATH;
	if (bpf_probe_read_kernel(path, n,
				  (const void *)a + bpf_core_field_offset(struct unix_address, name) + sizeof(__u16)))
		return 0;
	return n;
}

/* FNV-1a of a name: the peer key, so a server restarted on the same path stays one peer. */
static __always_inline __u64 unix_name_hash(const __u8 *p, __u32 len)
{
	__u64 h = 0xcbf29ce484222325ULL;
	int i;
	for (i = 0; i < QS_UNIX_PATH; i++) {
		if (i >= len)
			break;
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

/* Peer index of a Unix listener's address; QS_MAX_PEERS for an unnamed one (not a peer). */
static __always_inline __u32 unix_peer_index(const struct unix_address *a)
{
	struct qs_peer_key k = {};
	struct qs_unix_name n = {};
	__u64 h;
	__u32 idx;

	n.len = unix_addr_name(a, n.path);
	if (!n.len)
		return QS_MAX_PEERS;
	k.family = AF_UNIX;
	h = unix_name_hash(n.path, n.len);
	__builtin_memcpy(k.addr, &h, sizeof(h));
	idx = peer_index(&k);
	if (idx < QS_PEER_OTHER && !unix_peer_names[idx].len)
		unix_peer_names[idx] = n;
	return idx;
}

static __always_inline void unix_register_listener(const struct sock *sk, __u64 ino)
{
	__u64 key = (__u64)BPF_CORE_READ((struct unix_sock *)sk, addr);
	__u32 idx;
	__u64 n;

	if (!key || bpf_map_lookup_elem(&unix_listen, &key))
		return;
	n = __sync_fetch_and_add(&next_port_idx, 1);
	if (n >= QS_MAX_PORTS) {
		__sync_fetch_and_add(&lost_port_full, 1);
		idx = QS_MAX_PORTS;   /* remembered, so it is counted once */
		bpf_map_update_elem(&unix_listen, &key, &idx, BPF_NOEXIST);
		return;
	}
	idx = (__u32)n & (QS_MAX_PORTS - 1);
	unix_port_names[idx].ino = ino;
	unix_port_names[idx].len = unix_addr_name((const struct unix_address *)key, unix_port_names[idx].path);
	port_stats[idx].port = QS_PORT_UNIX;
	bpf_map_update_elem(&unix_listen, &key, &idx, BPF_NOEXIST);
}

/* A tracked entry still under this pointer belongs to a socket freed since (the sweep has not
 * run yet): close it before the new socket takes the key. */
static __always_inline void conn_close_stale(__u64 key)
{
	struct qs_conn *c = bpf_map_lookup_elem(&conns, &key);
	struct qs_effects e = {};
	if (!c)
		return;
	qs_on_close(c, 0, &e);
	apply(c, &e, 0);
	bpf_map_delete_elem(&conns, &key);
}

static __always_inline void unix_live_mark(__u64 key)
{
	__u64 gen = unix_gc_gen;
	bpf_map_update_elem(&unix_live, &key, &gen, BPF_ANY);
}

static __always_inline void unix_track(__u64 key, struct qs_conn *c)
{
	c->flags |= QS_F_UNIX;
	conn_close_stale(key);
	conn_insert(key, c);
	unix_live_mark(key);
}

/* The target's socket `client` is connected to the Unix listener at `addr`: a new outbound
 * connection to that peer, counted but not timed (no handshake). */
static __always_inline void unix_connect_out(__u64 client, const struct unix_address *addr, __u64 now)
{
	struct qs_effects e = {};
	struct qs_conn nc;
	struct qs_peer_stats *p;
	__u32 pidx = unix_peer_index(addr);

	if (pidx >= QS_MAX_PEERS)
		return;
	qs_conn_init_outbound(&nc, now, (__u16)pidx);
	qs_on_established(&nc, now, &e);
	e.connect_ok = 0;
	apply(&nc, &e, 0);
	p = peer_at(pidx);
	if (p)
		__sync_fetch_and_add(&p->connects, 1);
	unix_track(client, &nc);
}

static __always_inline struct sock *sock_of_fd(struct task_struct *t, int fd);

/* The Unix socket the current connect(2) names by its fd, with its unix peer in *peer (the
 * listener's new server-side socket, which shares the listener's address), or 0 when this is
 * no connect syscall (an io_uring connect) or the socket is no connected Unix one. */
static __always_inline struct sock *unix_connecting(struct sock **peer)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	struct sock *client;

	if (!regs || BPF_CORE_READ(regs, orig_ax) != QS_NR_connect)
		return 0;
	client = sock_of_fd(t, (int)BPF_CORE_READ(regs, di));
	if (!client || BPF_CORE_READ(client, __sk_common.skc_family) != AF_UNIX)
		return 0;
	*peer = BPF_CORE_READ((struct unix_sock *)client, peer);
	return *peer ? client : 0;
}

/* sk_data_ready on a Unix listener: a connect() just queued its server-side socket. */
static __always_inline void on_unix_connect(struct sock *lsk)
{
	struct unix_sock *ls = bpf_skc_to_unix_sock(lsk);
	struct qs_conn nc;
	struct sk_buff *skb;
	struct sock *child, *client;
	__u32 *idxp;
	__u64 akey, now;
	int mine;

	if (!ls)
		return;
	akey = (__u64)ls->addr;
	idxp = bpf_map_lookup_elem(&unix_listen, &akey);
	if (idxp && *idxp >= QS_MAX_PORTS)
		idxp = 0;   /* a listener past the cap: counted in lost_port_full */
	mine = is_target();
	if (!idxp && !mine)
		return;
	/* unix_stream_connect makes the client's peer the new server-side socket before it queues
	 * that socket and wakes the listener, in the connecting thread, so the syscall's own fd
	 * names the pair. The listener's queue tail does not: a second connect may queue its
	 * socket between this one's queueing and its wakeup, and the tail would then be the
	 * second's, seen twice (counted twice, closed once), while this connection went unseen;
	 * and an accept() loop that was not asleep may have emptied the queue already. */
	client = unix_connecting(&child);
	if (client && BPF_CORE_READ((struct unix_sock *)child, addr) != ls->addr)
		client = 0;   /* not a connect to this listener */
	if (!client) {
		/* Not a connect syscall: the newest queued socket, the best guess there is. */
		if (!lsk->sk_receive_queue.qlen)
			return;
		skb = lsk->sk_receive_queue.prev;
		child = skb ? skb->sk : 0;
		/* child is a walked (untrusted) pointer: read, not cast by a helper */
		client = child ? BPF_CORE_READ((struct unix_sock *)child, peer) : 0;
	}
	if (!child)
		return;
	now = bpf_ktime_get_ns();
	/* The listener's accept() may have taken the new socket already (an accept loop that was
	 * not asleep), between its queueing and this wakeup: the accept tracked it then. */
	if (idxp && !BPF_CORE_READ(child, sk_socket)) {
		struct qs_port_stats *p = port_at(*idxp);
		if (p)
			atomic_max(&p->accept_queue_max, (__s64)lsk->sk_ack_backlog);
		qs_conn_init_inbound(&nc, now, (__u16)*idxp);
		unix_track((__u64)child, &nc);
	}
	if (mine && client)
		unix_connect_out((__u64)client, ls->addr, now);
}

/* accept() returned a Unix socket queued before the attach (or while the listener was not yet
 * registered): tracked from now, without a wait. */
static __always_inline void unix_accept_untracked(struct sock *sk)
{
	__u64 akey = (__u64)BPF_CORE_READ((struct unix_sock *)sk, addr);
	__u64 key = (__u64)sk;
	struct qs_effects e = {};
	struct qs_conn nc;
	__u32 *idxp = bpf_map_lookup_elem(&unix_listen, &akey);

	if (!idxp)
		return;
	qs_conn_seed(&nc, QS_DIR_IN, (__u16)*idxp, bpf_ktime_get_ns(),
		     BPF_CORE_READ(sk, sk_receive_queue.qlen), 0, &e);
	e.accepted = 1;
	nc.flags |= QS_F_UNIX;
	if (!conn_insert_new(key, &nc))
		return;
	apply(&nc, &e, 0);
	unix_live_mark(key);
}

/* ---- handshakes, connects, closes, listens ----------------------------------------------- */

static __always_inline void on_listen(const struct sock *sk)
{
	__u32 port = sk->__sk_common.skc_num, idx;
	__u64 n;
	struct qs_port_stats *p;
	if (lookup_port(port, &idx))
		return;
	n = __sync_fetch_and_add(&next_port_idx, 1);
	idx = n >= QS_MAX_PORTS ? QS_MAX_PORTS : (__u32)n;
	p = port_at(idx);
	if (!p) {
		__sync_fetch_and_add(&lost_port_full, 1);
		return;
	}
	p->port = port;
	__sync_fetch_and_or(&port_bits[(port >> 6) & 1023], 1ULL << (port & 63));
	if (owner_slot)
		qs_owners_add(&qs_listen_owners, port, owner_slot - 1);
	bpf_map_update_elem(&port_idx, &port, &idx, BPF_NOEXIST);
}

static __always_inline void h2_forget(__u64 key, int c_out, struct qs_effects *e);

static __always_inline int on_set_state(const struct sock *sk, const int oldstate, const int newstate)
{
	__u64 key = (__u64)sk, now;
	struct qs_conn *c, nc;
	struct qs_effects e = {};
	__u32 idx;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;

	if (newstate == QS_TCP_ESTABLISHED && oldstate == QS_TCP_SYN_RECV) {
		/* An accepted child (softirq): is its listener one of the target's? */
		struct qs_client_key ck = {};
		__u64 *first;
		if (!lookup_port(sk->__sk_common.skc_num, &idx))
			return 0;
		now = bpf_ktime_get_ns();
		ck.family = sk->__sk_common.skc_family;
		ck.port = sk->__sk_common.skc_dport;
		if (ck.family == AF_INET6)
			BPF_CORE_READ_INTO(&ck.addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
		else
			read_daddr4(ck.addr, sk);
		first = bpf_map_lookup_elem(&overflow_first, &ck);
		if (first) {
			/* The client finished its handshake at the first dropped ACK. */
			if (*first < now)
				now = *first;
			bpf_map_delete_elem(&overflow_first, &ck);
		}
		qs_conn_init_inbound(&nc, now, idx);
		conn_insert(key, &nc);
		return 0;
	}

	if (newstate == QS_TCP_SYN_SENT) {
		struct qs_peer_key pk;
		if (!is_target())
			return 0;
		fill_peer_key(&pk, sk);
		qs_conn_init_outbound(&nc, bpf_ktime_get_ns(), peer_index(&pk));
		nc.server_tid = (__u32)bpf_get_current_pid_tgid();
		conn_insert(key, &nc);
		return 0;
	}

	if (newstate == QS_TCP_ESTABLISHED && oldstate == QS_TCP_SYN_SENT) {
		c = bpf_map_lookup_elem(&conns, &key);
		if (!c)
			return 0;
		qs_on_established(c, bpf_ktime_get_ns(), &e);
		apply(c, &e, 0);
		return 0;
	}

	if (newstate == QS_TCP_CLOSE) {
		int status = 0;
		c = bpf_map_lookup_elem(&conns, &key);
		if (!c)
			return 0;
		/* On loopback a response written to a peer that has gone resets the socket inside
		 * the write itself (the RST is processed before sendmsg returns), so the entry would
		 * be gone when sock_send_length fires: the close then IS the response's write. */
		if (c->dir == QS_DIR_IN && c->state == QS_ST_REQUEST) {
			if (is_target() && in_send_syscall()) {
				int counted = qs_on_write(c, bpf_ktime_get_ns(), 1, &e);
				if (counted)
					status = response_status();
				req_end(key, counted, status);
			} else if (c->proto == QS_PROTO_TURNS && !(c->flags & QS_F_START_UNKNOWN) &&
				   !(c->aflags & QS_A_CLOSED)) {
				struct qs_closed_request r = { .t_req = c->t_req, .t_close = bpf_ktime_get_ns(),
							       .idx = c->idx };
				bpf_map_update_elem(&closed_requests, &key, &r, BPF_ANY);
			}
		}
		/* A refused connect is a failed call of the request that made it (the caller's
		 * tid was kept at SYN_SENT): the next connect to that peer is a retry. */
		if (c->dir == QS_DIR_OUT && c->state == QS_ST_CONNECTING) {
			call_start(c, c->server_tid);
			call_failed(c);
		}
		if (c->proto != QS_PROTO_TURNS)
			h2_forget(key, c->dir == QS_DIR_OUT, &e);
		qs_on_close(c, c->dir == QS_DIR_IN && c->wire == 1 + QS_WIRE_HTTP1, &e);
		apply(c, &e, status);
		bpf_map_delete_elem(&conns, &key);
		return 0;
	}

	if (newstate == QS_TCP_LISTEN && is_target())
		on_listen(sk);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(qs_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	on_set_state(sk, oldstate, newstate);
	hand_on(ctx, set_state_targets, qs_set_state_owners(sk));
	return 0;
}

/* ---- the app's reads and writes (current is the target thread) --------------------------- */

/* Each hook below has one body and several entry points (docs/kernel.md "Older kernels"):
 * tp_btf where the kernel has the tracepoint, else fentry/fexit on the kernel function the
 * tracepoint sits in, else kprobe/kretprobe on it. User space picks one per hook before load
 * (collector/probes/sock/attach_plan.h) and switches the others off. `probe` is a constant:
 * 1 when sk came from a kprobe's registers (a plain scalar the verifier will not let us
 * dereference), so the body reads through BPF_CORE_READ instead. */
#define QS_BTF 0
#define QS_PROBE 1

/* The first bytes the current read got: copied once, whichever checks look at them. */
struct io_head {
	unsigned char b[12];
	__u32 n;       /* bytes copied: 12, 9 (an HTTP/2 frame header) or 5 (a TLS record header) */
	__u32 tried;   /* the copy was attempted (n: 0 when there was nothing to copy) */
};

static __always_inline __u32 io_head(struct io_head *h, int ret);
static __always_inline void reply_read(struct qs_conn *c, struct io_head *h, int ret, const int walk);
static __always_inline void h2_walk_syscall(__u64 key, struct qs_conn *c, int ret, __u32 rx);
static __always_inline void h2_walk_or_lose(__u64 key, struct qs_conn *c, int ret, __u32 rx, const int walk);
static __always_inline int h2_follow(__u64 key, struct qs_conn *c, int preface, struct qs_effects *e);
int io_is_h2_preface(void);
int io_is_request_line(void);
static __always_inline void peer_speaks_h2(struct qs_conn *c, int followed);
static __always_inline int h2_follow_tls(__u64 key, struct qs_conn *c, int preface, struct qs_effects *e);

/* A read of the target's (its callers checked is_target). walk: the HTTP/2 frame walk's twin
 * (recv_walk); 0 leaves HTTP/2 connections in turns. */
static __always_inline void on_recv(struct sock *sk, int ret, int flags, const int probe, const int walk)
{
	__u64 key = (__u64)sk;
	struct qs_conn *c;
	struct qs_effects e = {};
	struct io_head head = {};
	__u8 was;

	if (ret <= 0)
		return;
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return;
	if (c->dir == QS_DIR_IN)
		note_server(c);
	if (c->flags & QS_F_TLS)
		tls_saw_socket(key, 1);
	/* A new connection's first read: HTTP/2's preface makes its streams the requests. */
	if (walk && c->dir == QS_DIR_IN && h2_streams && !c->t_req && c->proto == QS_PROTO_TURNS &&
	    !(c->flags & (QS_F_SEEDED | QS_F_UNIX | QS_F_TLS)) && !(flags & QS_MSG_PEEK) &&
	    io_is_h2_preface() && h2_follow(key, c, 1, &e))
		note_wire(c, QS_WIRE_H2);
	/* The peer's first bytes seen on an outbound connection: its protocol (12 bytes copied once). */
	if (c->dir == QS_DIR_OUT && !c->wire && !(flags & QS_MSG_PEEK))
		note_wire(c, wire_of(io_head(&head, ret) ? qs_response_class(head.b, (int)head.n) : QS_STATUS_UNKNOWN));
	/* An outbound connection met mid-way (its preface went out before the attach): a call's
	 * reply that begins with an HTTP/2 frame joins it, and from here on its streams are the
	 * calls. (With no room in h2_conns, reply_read names the peer instead.) */
	if (walk && c->dir == QS_DIR_OUT && h2_streams && c->proto == QS_PROTO_TURNS && c->state == QS_ST_BUSY &&
	    !(c->flags & (QS_F_H2 | QS_F_UNIX)) && !(flags & QS_MSG_PEEK) &&
	    io_head(&head, ret) >= QS_H2_HEADER && qs_h2_plausible(head.b, 0, 1))
		h2_follow(key, c, 0, &e);
	was = c->state;
	/* On a Unix connection the bytes a read leaves are the rest of the request being read:
	 * php-fpm leaves FastCGI's empty STDIN record queued until its script ends, which would
	 * read as a request unread in the connector behind every one in flight. A request
	 * that arrives later sets it again (qs_data_ready). */
	qs_on_read(c, bpf_ktime_get_ns(), ret, flags,
		   c->dir == QS_DIR_IN && !(c->flags & QS_F_UNIX)
			   ? (probe ? sk_unread_probe(sk) : sk_unread(sk)) : 0,
		   c->dir == QS_DIR_IN && sk_send_shut(sk), &e);
	/* Drained after the shutdown: a dropped request when the bytes begin a request line, on
	 * a connection not known to speak anything but HTTP/1.x (nothing answered yet, or
	 * status lines). Looked at only here: a lingering close's reads are rare. */
	if (e.drained && (!c->wire || c->wire == 1 + QS_WIRE_HTTP1) && !(flags & QS_MSG_PEEK) &&
	    io_is_request_line())
		e.dropped = 1;
	if (c->proto == QS_PROTO_H2 && !(flags & QS_MSG_PEEK))
		h2_walk_or_lose(key, c, ret, 1, walk);
	else if (c->dir == QS_DIR_IN && was != QS_ST_REQUEST && c->state == QS_ST_REQUEST)
		req_begin(key);
	else if (c->dir == QS_DIR_OUT && e.d_busy < 0)
		reply_read(c, &head, ret, walk);
	apply_read(c, &e);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(qs_recv, struct sock *sk, int ret, int flags)
{
	if (ret <= 0 || !is_target())
		return 0;
	bpf_tail_call(ctx, &recv_walk, 0);
	on_recv(sk, ret, flags, QS_BTF, 0);
	return 0;
}

/* qs_recv's twin with the walk (recv_walk): never attached. */
SEC("tp_btf/sock_recv_length")
int BPF_PROG(qs_recv_walk, struct sock *sk, int ret, int flags)
{
	on_recv(sk, ret, flags, QS_BTF, 1);
	return 0;
}

/* Before Linux 6.3: tcp_recvmsg, which every read of a TCP socket reaches (read, readv,
 * recvfrom, recvmsg, recvmmsg) through the protocol's function pointer, so it is never inlined
 * into its callers, as sock_recvmsg can be. Linux 5.19 dropped its `nonblock` argument:
 * (sk, msg, len, flags, addr_len) since, (sk, msg, len, nonblock, flags, addr_len) before;
 * user space counts the arguments in the kernel's BTF and sets tcp_recvmsg_nargs, and the
 * verifier drops the branch for the other shape (a constant of frozen rodata). */
const volatile __u32 tcp_recvmsg_nargs = 5;

/* Unix-domain sockets are followed only where reads and writes are seen for every family
 * (the sock_recv_length/sock_send_length tracepoints): the tcp_recvmsg/tcp_sendmsg fallbacks
 * never see a Unix read, so a Unix connection tracked there would look idle forever. User
 * space clears it on those kernels and says so. */
const volatile __u32 follow_unix = 1;

static __always_inline void recv_fexit(unsigned long long *ctx, const int walk)
{
	if (tcp_recvmsg_nargs == 6)
		on_recv((struct sock *)ctx[0], (int)ctx[6], (int)ctx[4], QS_BTF, walk);
	else
		on_recv((struct sock *)ctx[0], (int)ctx[5], (int)ctx[3], QS_BTF, walk);
}

SEC("fexit/tcp_recvmsg")
int qs_recv_fexit(unsigned long long *ctx)
{
	if (!is_target())
		return 0;
	bpf_tail_call(ctx, &recv_walk, 0);
	recv_fexit(ctx, 0);
	return 0;
}

SEC("fexit/tcp_recvmsg")
int qs_recv_fexit_walk(unsigned long long *ctx)
{
	recv_fexit(ctx, 1);
	return 0;
}

/* kprobe + kretprobe: the entry keeps the socket and flags per thread for the return. */
struct qs_io_args {
	__u64 sk;
	__s32 flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct qs_io_args);
} io_args SEC(".maps");

/* Entries whose return never came: the kernel keeps a fixed number of return slots per
 * kretprobe (maxactive: 4096 as qscope asks, engine/bpf_util.h attach_link, or the default of
 * 10 on two CPUs), each held by a thread inside the function, blocked in a read included; a
 * call that finds none is returned from unseen. Told by the thread's next entry, which finds
 * the last one's arguments still here (no thread is in tcp_recvmsg or tcp_sendmsg twice at
 * once). */
__u64 kretprobe_missed = 0;

static __always_inline void io_enter(__u64 sk, int flags)
{
	__u64 tid = bpf_get_current_pid_tgid();
	struct qs_io_args a = {};
	if (!is_target())
		return;
	a.sk = sk;
	a.flags = flags;
	if (bpf_map_lookup_elem(&io_args, &tid))
		__sync_fetch_and_add(&kretprobe_missed, 1);
	bpf_map_update_elem(&io_args, &tid, &a, BPF_ANY);
}

/* The entry's arguments, taken (its callers checked is_target). */
static __always_inline int io_exit(struct qs_io_args *out)
{
	__u64 tid = bpf_get_current_pid_tgid();
	struct qs_io_args *a;
	a = bpf_map_lookup_elem(&io_args, &tid);
	if (!a)
		return 0;
	*out = *a;
	bpf_map_delete_elem(&io_args, &tid);
	return 1;
}

SEC("kprobe/tcp_recvmsg")
int BPF_KPROBE(qs_recv_kprobe, struct sock *sk)
{
	/* Both registers loaded at fixed offsets: a select between them would make clang compute
	 * the ctx offset, which the verifier rejects ("dereference of modified ctx ptr"). */
	int flags4 = (int)PT_REGS_PARM4(ctx), flags5 = (int)PT_REGS_PARM5(ctx);

	barrier_var(flags4);
	barrier_var(flags5);
	io_enter((__u64)sk, tcp_recvmsg_nargs == 6 ? flags5 : flags4);
	return 0;
}

static __always_inline void recv_kretprobe(int ret, const int walk)
{
	struct qs_io_args a;
	if (io_exit(&a))
		on_recv((struct sock *)a.sk, ret, a.flags, QS_PROBE, walk);
}

SEC("kretprobe/tcp_recvmsg")
int BPF_KRETPROBE(qs_recv_kretprobe, int ret)
{
	if (!is_target())
		return 0;
	bpf_tail_call(ctx, &recv_walk, 0);
	recv_kretprobe(ret, 0);
	return 0;
}

SEC("kretprobe/tcp_recvmsg")
int BPF_KRETPROBE(qs_recv_kretprobe_walk, int ret)
{
	recv_kretprobe(ret, 1);
	return 0;
}

/* The user buffers of the socket syscall the current thread is in: the buffer of write/read
 * and sendto/recvfrom; the iovecs of writev/readv, of the (first) message of
 * sendmsg/recvmsg/sendmmsg. base/len: the first buffer; rest/nrest: the iovecs after it (none
 * for a single buffer). At sock_send_length and sock_recv_length (and the fallbacks' exits) the
 * thread is inside that syscall, so its registers give them. 0 when there is no user buffer
 * here (sendfile, splice, io_uring). */
static __always_inline int syscall_buffers(const void **base, __u64 *len, const struct iovec **rest,
					   __u64 *nrest)
{
	struct task_struct *t = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(t);
	long nr;
	unsigned long si, dx;
	struct iovec iov;
	const struct iovec *iovp;
	__u64 niov;

	if (!regs)
		return 0;
	/* All three registers read up front: otherwise clang merges the dx load with the iovec
	 * length load below and the verifier rejects one instruction on two pointer types. */
	nr = regs->orig_ax;
	si = regs->si;
	dx = regs->dx;
	barrier_var(dx);
	*rest = 0;
	*nrest = 0;
	if (nr == QS_NR_write || nr == QS_NR_sendto || nr == QS_NR_read || nr == QS_NR_recvfrom) {
		*base = (const void *)si;
		*len = dx;
		return 1;
	}
	if (nr != QS_NR_writev && nr != QS_NR_sendmsg && nr != QS_NR_sendmmsg && nr != QS_NR_readv &&
	    nr != QS_NR_recvmsg)
		return 0;
	iovp = (const struct iovec *)si;
	niov = dx;
	if (nr != QS_NR_writev && nr != QS_NR_readv) {
		/* struct mmsghdr begins with its struct msghdr */
		struct user_msghdr mh;
		if (bpf_probe_read_user(&mh, sizeof(mh), (const void *)si))
			return 0;
		iovp = (const struct iovec *)mh.msg_iov;
		niov = mh.msg_iovlen;
	}
	if (!niov || bpf_probe_read_user(&iov, sizeof(iov), iovp))
		return 0;
	*base = iov.iov_base;
	*len = iov.iov_len;
	*rest = iovp + 1;
	*nrest = niov - 1;
	return 1;
}

/* The first user buffer of the socket syscall the current thread is in (syscall_buffers). */
static __always_inline int syscall_buffer(const void **base, __u64 *len)
{
	const struct iovec *rest;
	__u64 nrest;
	return syscall_buffers(base, len, &rest, &nrest);
}

/* ---- HTTP/2 streams (bpf/h2.h) ------------------------------------------------------------ */

#define QS_H2_STEPS 2048     /* walk steps per syscall: a frame takes 1-2, a buffer change 1 */

/* The walk's place in one syscall's bytes. Scalars only: h2_step, a global function, takes it. */
struct h2_walk {
	__u64 iovp;     /* the next iovec of the syscall (a user address) */
	__u64 niov;     /* iovecs left after the current buffer */
	__u64 p;        /* position in the current buffer (a user address) */
	__u64 rem;      /* bytes left in the current buffer */
	__u64 left;     /* bytes the syscall moved that are not walked yet */
	__u64 now;
	__u32 idx;      /* the connection's port (inbound) or peer (outbound) index */
	__u32 rx;       /* the syscall reads */
	__u32 client;   /* the target is the connection's client (outbound) */
	__u32 lost;
};

/* bpf_loop's context: the walk and the connection's streams. */
struct h2_loop {
	struct h2_walk w;
	struct qs_h2 *h;
};

/* qs_h2_close_gap for BPF: bpf_loop steps a global function, each step checked once. */
__noinline int h2_gap_step(struct qs_h2 *h, struct qs_h2_gap *g)
{
	if (!h || !g)
		return 1;
	return qs_h2_gap_step(h, g);
}

struct h2_gap_loop {
	struct qs_h2_gap g;
	struct qs_h2 *h;
};

static long h2_gap_cb(__u64 i, struct h2_gap_loop *l)
{
	return h2_gap_step(l->h, &l->g) ? 1 : 0;
}

static __always_inline void qs_h2_close_gap(struct qs_h2 *h, __u32 hole)
{
	struct h2_gap_loop l = {};
	l.g.start = hole;
	l.g.hole = hole;
	l.h = h;
	bpf_loop(QS_H2_SLOTS, h2_gap_cb, &l, 0);
}

/* A frame's effect on port `idx`'s gauges. A global function: the verifier checks it once,
 * not at every step of the walk that calls it. */
__noinline int h2_record(__u32 idx, __s32 d_in_flight, __u32 answered, __u64 latency_ns, __u32 status)
{
	struct qs_port_stats *p;
	__u32 i;

	/* Nothing is known of the arguments here: the bounds are spelt out as masks, which the
	 * verifier keeps through the index arithmetic. */
	if (idx >= QS_MAX_PORTS)
		return 0;
	idx &= QS_MAX_PORTS - 1;
	p = &port_stats[idx];
	if (d_in_flight)
		gauge_add(&p->in_flight, &p->in_flight_max, d_in_flight);
	if (answered) {
		if (status >= QS_STATUS_CLASSES)
			status = QS_STATUS_UNKNOWN;
		barrier_var(status);   /* clang would drop the check below as already known */
		if (status >= QS_STATUS_CLASSES)
			return 0;
		__sync_fetch_and_add(&p->status[status], 1);
		i = idx * QS_PORT_HISTS + QS_PH_LATENCY + status;
		if (i < QS_MAX_PORTS * QS_PORT_HISTS) {
			i &= 255;
			if (i < QS_MAX_PORTS * QS_PORT_HISTS)
				qs_hist_add(&port_hists[i], latency_ns);
		}
	}
	return 0;
}

/* An answer's gRPC status, read or not (client: a call's, else a request's). */
__noinline int h2_record_grpc(__u32 client, __u32 read, __u32 code)
{
	if (!read) {
		__sync_fetch_and_add(&h2_grpc_unread[client ? 1 : 0], 1);
		return 0;
	}
	barrier_var(code);   /* one register for the bound and the offset */
	if (!client && code < QS_GRPC_CODES)
		__sync_fetch_and_add(&h2_grpc_codes[code], 1);
	return 0;
}

/* A frame's effect on peer `idx` of an outbound HTTP/2 connection: its streams are calls;
 * failed: answered 5xx, or gRPC's RESOURCE_EXHAUSTED (HTTP/1.x's 429). */
__noinline int h2_record_peer(__u32 idx, __s32 d_busy, __u32 answered, __u64 latency_ns, __u32 failed)
{
	struct qs_peer_stats *p;
	__u32 i;

	if (idx >= QS_MAX_PEERS)
		return 0;
	idx &= QS_MAX_PEERS - 1;
	p = &peer_stats[idx];
	if (d_busy)
		gauge_add(&p->busy, &p->busy_max, d_busy);
	if (answered) {
		__sync_fetch_and_add(&p->calls, 1);
		if (failed)
			__sync_fetch_and_add(&p->failed_calls, 1);
		i = idx * QS_PEER_HISTS + QS_PEER_H_CALL;
		barrier_var(i);
		if (i < QS_MAX_PEERS * QS_PEER_HISTS)
			qs_hist_add(&peer_hists[i], latency_ns);
	}
	return 0;
}

static __always_inline void h2_apply(__u32 idx, __u32 client, const struct qs_h2_event *ev)
{
	__s32 d = (__s32)ev->opened - ev->answered - ev->dropped - ev->evicted;
	if (ev->grpc || ev->grpc_unread)
		h2_record_grpc(client, ev->grpc, ev->grpc_code);
	if (client) {
		if (ev->evicted)
			__sync_fetch_and_add(&h2_evicted, 1);
		if (ev->unseen)
			__sync_fetch_and_add(&h2_calls_unseen, 1);
		if (ev->trailers)
			__sync_fetch_and_add(&h2_call_trailers, 1);
		if (d || ev->answered)
			h2_record_peer(idx, d, ev->answered, ev->latency_ns,
				       ev->status == QS_STATUS_5XX || (ev->grpc && ev->grpc_code == 8));
		return;
	}
	if (ev->evicted)
		__sync_fetch_and_add(&h2_evicted, 1);
	if (ev->dropped)
		__sync_fetch_and_add(&h2_client_resets, 1);
	if (ev->server_reset)
		__sync_fetch_and_add(&h2_server_resets, 1);
	if (ev->unseen)
		__sync_fetch_and_add(&h2_unseen, 1);
	if (ev->trailers)
		__sync_fetch_and_add(&h2_trailers, 1);
	if (d || ev->answered)
		h2_record(idx, d, ev->answered, ev->latency_ns, ev->status);
}

static __always_inline void h2_advance(struct h2_walk *w, __u64 n)
{
	w->p += n;
	w->rem -= n;
	w->left -= n;
}

/* One byte of a header block (hpack.h's qs_hp_feed): a global function, so that the walk's loop
 * over a chunk is checked once per step, not once per state of the machine. */
__noinline int hp_byte(struct qs_hpack *s, __u32 c)
{
	if (!s)
		return 0;
	qs_hp_byte(s, c);
	return 0;
}

struct hp_chunk {
	__u8 b[QS_HP_CHUNK];
};

/* Where a chunk is copied: not on the stack, which the frame walk's five nested calls (the
 * program, bpf_loop's callback, h2_step, hp_feed, hp_byte) must share within 512 bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hp_chunk);
} hp_chunks SEC(".maps");

/* A chunk of a header block walked: a global function too, checked once with nothing known of
 * the state it walks from, not at every state of the frame walk that calls it. */
__noinline int hp_feed(struct qs_hpack *s, const struct hp_chunk *c, __u32 n)
{
	if (!s || !c || n > QS_HP_CHUNK)
		return 0;
	qs_hp_feed(s, c->b, n);
	return 0;
}

/* A step of a header block walked whole: its priority fields skipped, or its next bytes (up to
 * QS_HP_CHUNK, in the current buffer) copied and walked; at its end, the stream's status. */
static __always_inline long h2_walk_block(struct h2_walk *w, struct qs_h2 *h, struct qs_h2_dir *d, __u64 n)
{
	struct qs_h2_event ev = {};
	struct hp_chunk *c;
	__u32 zero = 0;
	__u64 m;

	if (n > d->skip)
		n = d->skip;
	if (d->peek_skip) {
		m = n < d->peek_skip ? n : d->peek_skip;
		d->peek_skip -= m;
		d->skip -= m;
		h2_advance(w, m);
		return 0;
	}
	m = n < d->blk ? n : d->blk;
	if (m > QS_HP_CHUNK)
		m = QS_HP_CHUNK;
	barrier_var(m);
	c = bpf_map_lookup_elem(&hp_chunks, &zero);
	if (!c || !m || m > QS_HP_CHUNK || bpf_probe_read_user(c->b, m, (const void *)w->p)) {
		w->lost = 1;
		return 1;
	}
	hp_feed(&h->hp, c, m);
	d->blk -= m;
	d->skip -= m;
	h2_advance(w, m);
	if (!d->blk) {
		qs_h2_block_done(h, d, qs_hp_end(&h->hp), w->now, &ev);
		h2_apply(w->idx, w->client, &ev);
	}
	return 0;
}

/* One step of the walk: the next buffer, a run of payload skipped, or (part of) a frame header.
 * 1 ends the walk. A global function: the verifier checks it once, with no knowledge of the
 * values it is given, instead of following bpf_loop's steps until their states converge. */
__noinline long h2_step(struct h2_walk *w, struct qs_h2 *h)
{
	struct qs_h2_dir *d;
	struct qs_h2_frame f;
	struct qs_h2_event ev = {};
	__u64 n, k;    /* 64-bit like n: a u32 copy is checked in a register other than the one passed */
	__u32 have;

	if (!w || !h || !w->left)
		return 1;
	d = w->rx ? &h->rx : &h->tx;
	if (!w->rem) {
		struct iovec iov;
		if (!w->niov || bpf_probe_read_user(&iov, sizeof(iov), (const void *)w->iovp)) {
			w->lost = 1;
			return 1;
		}
		w->iovp += sizeof(iov);
		w->niov--;
		w->p = (__u64)iov.iov_base;
		w->rem = iov.iov_len;
		return 0;
	}
	n = w->rem < w->left ? w->rem : w->left;
	if (d->skip && d->walk)
		return h2_walk_block(w, h, d, n);
	if (d->skip) {
		if (d->peek) {
			/* the header block's first bytes, past the pad length and priority fields */
			__u8 b[QS_H2_PEEK] = {};
			__u64 off = d->peek_skip, m = 0;
			if (off < n) {
				m = n - off < QS_H2_PEEK ? n - off : QS_H2_PEEK;
				barrier_var(m);
				if (m > QS_H2_PEEK || off > 8 || bpf_probe_read_user(b, m, (const void *)(w->p + off)))
					m = 0;
			}
			qs_h2_peeked(h, d, b, m, w->now, &ev);
		}
		if (n > d->skip)
			n = d->skip;
		d->skip -= n;
		h2_advance(w, n);
		if (ev.answered)
			h2_apply(w->idx, w->client, &ev);
		return 0;
	}
	have = d->have;
	if (have >= QS_H2_HEADER) {
		w->lost = 1;
		return 1;
	}
	k = QS_H2_HEADER - have;
	if (k > n)
		k = n;
	barrier_var(k);   /* else clang drops the bound below as known, and older verifiers need it */
	if (k > QS_H2_HEADER || bpf_probe_read_user(&d->hdr[have], k, (const void *)w->p)) {
		w->lost = 1;
		return 1;
	}
	h2_advance(w, k);
	have += k;
	d->have = have;
	if (have < QS_H2_HEADER)
		return 0;     /* the header continues in the next buffer or syscall */
	d->have = 0;
	if (!qs_h2_plausible(d->hdr, w->rx ^ w->client, 0)) {
		w->lost = 1;
		return 1;
	}
	qs_h2_decode(d->hdr, &f);
	qs_h2_on_frame(h, d, w->rx ^ w->client, &f, w->now, &ev);
	h2_apply(w->idx, w->client, &ev);
	d->skip = f.len;
	return 0;
}

static long h2_step_cb(__u64 i, struct h2_loop *l)
{
	return h2_step(&l->w, l->h) ? 1 : 0;
}

static __always_inline void h2_walk(struct qs_conn *c, struct qs_h2 *h, const void *base, __u64 len,
				    const struct iovec *rest, __u64 nrest, __u64 total, __u32 rx);

/* Direction d lost its frame boundaries (counted once until found again). Header blocks may
 * pass unseen meanwhile: the responses' table is not known any more. */
static __always_inline void h2_lose(struct qs_conn *c, struct qs_h2 *h, __u32 rx)
{
	struct qs_h2_dir *d = rx ? &h->rx : &h->tx;
	if (d->sync)
		__sync_fetch_and_add(&h2_lost_sync, 1);
	d->sync = 0;
	if (!(rx ^ (c->dir == QS_DIR_OUT))) {       /* the responses' direction */
		if (d->walk)
			qs_hp_lose(&h->hp);
		h->hp.lost = 1;
	}
}

/* The current syscall moved `ret` bytes of HTTP/2 connection c (rx: read). Walk their frame
 * headers. */
static __always_inline void h2_walk_syscall(__u64 key, struct qs_conn *c, int ret, __u32 rx)
{
	struct qs_h2 *h;
	struct qs_h2_dir *d;
	const void *base = 0;
	const struct iovec *rest = 0;
	__u64 len = 0, nrest = 0;

	if (!h2_streams)
		return;
	h = bpf_map_lookup_elem(&h2_conns, &key);
	if (!h)
		return;
	d = rx ? &h->rx : &h->tx;
	if (!syscall_buffers(&base, &len, &rest, &nrest) || !base) {
		/* no buffer (sendfile): payload bytes only, or the boundary is lost */
		if (d->sync && !d->have && d->skip >= (__u32)ret && !d->peek) {
			d->skip -= ret;
			return;
		}
		h2_lose(c, h, rx);
		return;
	}
	h2_walk(c, h, base, len, rest, nrest, (__u64)ret, rx);
}

/* h2_walk_syscall, from a program with the walk. One without it (the two hooks' twins go into
 * their slots one after the other, so a connection followed by one may move bytes through the
 * other's light program) loses that direction's frame boundaries: it re-finds one, counted. */
static __always_inline void h2_walk_or_lose(__u64 key, struct qs_conn *c, int ret, __u32 rx, const int walk)
{
	struct qs_h2 *h;

	if (walk) {
		h2_walk_syscall(key, c, ret, rx);
		return;
	}
	if (h2_streams && (h = bpf_map_lookup_elem(&h2_conns, &key)))
		h2_lose(c, h, rx);
}

/* Walk the frame headers in `total` bytes of connection c: `len` at base, then the iovecs at
 * rest. A direction that lost its frame boundaries re-finds one where such bytes begin with 9
 * that pass the strict check. */
static __always_inline void h2_walk(struct qs_conn *c, struct qs_h2 *h, const void *base, __u64 len,
				    const struct iovec *rest, __u64 nrest, __u64 total, __u32 rx)
{
	struct h2_loop l = {};
	struct qs_h2_dir *d = rx ? &h->rx : &h->tx;

	l.h = h;
	if (!d->sync) {
		__u8 b[QS_H2_HEADER];
		if (len < QS_H2_HEADER || total < QS_H2_HEADER || bpf_probe_read_user(b, sizeof(b), base) ||
		    !qs_h2_plausible(b, rx ^ (c->dir == QS_DIR_OUT), 1))
			return;
		d->sync = 1;
		d->have = 0;
		d->skip = 0;
		d->peek = 0;
		d->walk = 0;
	}
	l.w.iovp = (__u64)rest;
	l.w.niov = nrest;
	l.w.p = (__u64)base;
	l.w.rem = len;
	l.w.left = total;
	l.w.now = bpf_ktime_get_ns();
	l.w.idx = c->idx;
	l.w.rx = rx;
	l.w.client = c->dir == QS_DIR_OUT;
	bpf_loop(QS_H2_STEPS, h2_step_cb, &l, 0);
	if (l.w.lost || l.w.left)
		h2_lose(c, h, rx);
}

/* Outbound connection c speaks HTTP/2: counted per peer (h2_followed says how many of them have
 * their streams followed; the rest are counted per connection, and user space says so). */
static __always_inline void peer_speaks_h2(struct qs_conn *c, int followed)
{
	struct qs_peer_stats *p;
	__u32 idx = c->idx;
	if (c->flags & QS_F_H2)
		return;
	c->flags |= QS_F_H2;
	barrier_var(idx);   /* one register for the bound and the offset (else clang splits them) */
	p = peer_at(idx);
	if (!p)
		return;
	__sync_fetch_and_add(&p->h2_conns, 1);
	if (followed)
		__sync_fetch_and_add(&p->h2_followed, 1);
}

/* Follow connection c's streams from here on. Inbound: preface, the current read begins with
 * the client's connection preface (the whole connection is seen), else its first response write
 * showed HTTP/2 frames (a connection met mid-way: its reads re-find a frame boundary).
 * Outbound: preface, the current write is the client preface, else the current read is a
 * call's reply that begins with a frame (a connection met mid-way). */
static __always_inline int h2_follow(__u64 key, struct qs_conn *c, int preface, struct qs_effects *e)
{
	struct qs_h2 *h;
	__u8 bit;

	if (!h2_streams)
		return 0;
	/* From a zeroed global: the value is too big for the stack. BPF_ANY: a socket's address
	 * reused before its close was seen leaves nothing behind. */
	if (bpf_map_update_elem(&h2_conns, &key, &h2_zero, BPF_ANY) ||
	    !(h = bpf_map_lookup_elem(&h2_conns, &key))) {
		__sync_fetch_and_add(&h2_table_full, 1);
		return 0;
	}
	qs_conn_to_h2(c, e);
	if (c->dir == QS_DIR_OUT) {
		/* preface: it is in this write, and the server's first bytes are a SETTINGS frame.
		 * Else this read is a reply that begins with a frame, and the target's next write
		 * that begins with one finds the requests' boundary; the calls open now end unseen. */
		h->tx.sync = preface;
		h->tx.skip = preface ? QS_H2_PREFACE_LEN : 0;
		h->rx.sync = 1;
		peer_speaks_h2(c, 1);
		return 1;
	}
	h->rx.sync = preface;
	h->rx.skip = preface ? QS_H2_PREFACE_LEN : 0;
	h->tx.sync = 1;
	bit = qs_note_protocol(c, QS_STATUS_H2);
	if (bit == QS_F_H2)
		__sync_fetch_and_add(&conns_h2, 1);
	__sync_fetch_and_add(&h2_followed, 1);
	if (!preface)
		__sync_fetch_and_add(&h2_joined, 1);
	return 1;
}

/* Copy the first bytes of the current read (ret of them), once: 12, or 9 (an HTTP/2 frame
 * header), or 5 (a TLS record header: OpenSSL reads those alone), as many as its first buffer
 * holds. Returns how many (0: none). */
static __always_inline __u32 io_head(struct io_head *h, int ret)
{
	const void *base = 0;
	__u64 len = 0, n;
	if (h->tried)
		return h->n;
	h->tried = 1;
	if (!syscall_buffer(&base, &len) || !base)
		return 0;
	n = len < (__u64)ret ? len : (__u64)ret;
	n = n >= sizeof(h->b) ? sizeof(h->b) : n >= QS_H2_FRAME_HEADER ? QS_H2_FRAME_HEADER : n >= 5 ? 5 : 0;
	barrier_var(n);
	if (!n || n > sizeof(h->b) || bpf_probe_read_user(h->b, n, base))
		return 0;
	h->n = n;
	return n;
}

/* Does the current read or write begin with the HTTP/2 client preface (a connection's first)?
 * Global, as apply_read: no arguments, nothing of the caller's written. */
__noinline int io_is_h2_preface(void)
{
	__u8 b[QS_H2_PREFACE_PEEK];
	const void *base = 0;
	__u64 len = 0;
	if (!syscall_buffer(&base, &len) || !base || len < sizeof(b) || bpf_probe_read_user(b, sizeof(b), base))
		return 0;
	return qs_h2_is_preface(b, sizeof(b));
}

/* Does the current read begin an HTTP/1.x request line (qs_http_request_line)? Global, as
 * io_is_h2_preface: its 12 bytes sit in its own frame, not in the read program's, whose
 * call chain to the HTTP/2 walk 6.1 holds to 512 bytes of stack together. */
__noinline int io_is_request_line(void)
{
	unsigned char b[12];
	const void *base = 0;
	__u64 len = 0, n;
	if (!syscall_buffer(&base, &len) || !base)
		return 0;
	n = len < sizeof(b) ? len : sizeof(b);
	barrier_var(n);
	if (n < 5 || n > sizeof(b) || bpf_probe_read_user(b, n, base))
		return 0;
	return qs_http_request_line(b, (int)n);
}

/* h2_follow for HTTP/2 inside TLS (inbound, --tls): the connection is counted as TLS with its
 * plaintext seen, and its socket's bytes (records) are no longer walked nor taken as turns. */
static __always_inline int h2_follow_tls(__u64 key, struct qs_conn *c, int preface, struct qs_effects *e)
{
	if (!h2_follow(key, c, preface, e))
		return 0;
	c->proto = QS_PROTO_H2_TLS;
	note_wire(c, QS_WIRE_TLS);
	if (qs_note_protocol(c, QS_STATUS_TLS) == QS_F_TLS)
		__sync_fetch_and_add(&conns_tls, 1);
	tls_plain_seen(c, 1);
	__sync_fetch_and_add(&h2_tls_followed, 1);
	return 1;
}

/* SSL_read (rx) or SSL_write handed over `n` bytes of plaintext at buf on inbound connection
 * `key`: a connection that begins with the client preface is followed per stream, and a
 * followed one has the bytes' frame headers walked. */
static __always_inline void h2_tls_plain(__u64 key, struct qs_conn *c, __u64 buf, __u64 n, __u32 rx)
{
	struct qs_effects e = {};
	struct qs_h2 *h;

	if (c->proto == QS_PROTO_TURNS) {
		__u8 b[QS_H2_PREFACE_PEEK];
		/* only a connection's first plaintext can be the preface: one answered already is not */
		if (!rx || (c->flags & (QS_F_UNIX | QS_F_TLS_PLAIN)) || n < sizeof(b) ||
		    bpf_probe_read_user(b, sizeof(b), (const void *)buf) ||
		    !qs_h2_is_preface(b, sizeof(b)) || !h2_follow_tls(key, c, 1, &e))
			return;
		req_end(key, 0, 0);   /* the read that began this turn began no request */
		apply(c, &e, 0);
	}
	if (c->proto != QS_PROTO_H2_TLS || !(h = bpf_map_lookup_elem(&h2_conns, &key)))
		return;
	h2_walk(c, h, (const void *)buf, n, 0, 0, n, rx);
}

/* The return of SSL_read (rx) or SSL_write: `ret` is the byte count, or for the _ex forms (ex)
 * 1 on success with the count at the pointer the entry kept. */
static __always_inline void tls_call_exit(__u32 rx, long ret, int ex)
{
	struct qs_tls_pending *p;
	struct qs_tls_call call;
	struct qs_tls_ssl k = {};
	struct qs_conn *c;
	__u64 n = 0, *known;

	if (!h2_streams || !(p = tls_self(0)) || !(rx ? p->in_read : p->in_write))
		return;
	call = rx ? p->rd : p->wr;
	if (rx)
		p->in_read = 0;
	else
		p->in_write = 0;
	if (ex) {
		if (ret != 1 || !call.done || bpf_probe_read_user(&n, sizeof(n), (const void *)call.done))
			return;
	} else if (ret > 0) {
		n = (__u64)ret;
	}
	if (!n || !call.buf)
		return;
	k.ssl = call.ssl;
	k.tgid = (__u32)(bpf_get_current_pid_tgid() >> 32);
	known = bpf_map_lookup_elem(&tls_ssl_sock, &k);
	if (call.key) {
		if (!known || *known != call.key)
			bpf_map_update_elem(&tls_ssl_sock, &k, &call.key, BPF_ANY);
	} else if (known) {
		call.key = *known;
	} else {
		return;
	}
	c = bpf_map_lookup_elem(&conns, &call.key);
	if (c && c->dir == QS_DIR_IN)
		h2_tls_plain(call.key, c, call.buf, n, rx);
}

/* One uretprobe per call: rx (SSL_read*), ex (the _ex form). */
#define QS_SSL_RETURN(name, rx, ex)                 \
	SEC("uretprobe")                            \
	int BPF_KRETPROBE(name, int ret)            \
	{                                           \
		tls_call_exit(rx, ret, ex);         \
		return 0;                           \
	}

QS_SSL_RETURN(qs_ssl_read_ret, 1, 0)
QS_SSL_RETURN(qs_ssl_read_ex_ret, 1, 1)
QS_SSL_RETURN(qs_ssl_write_ret, 0, 0)
QS_SSL_RETURN(qs_ssl_write_ex_ret, 0, 1)

/* Connection `key` closes: its open streams leave in flight with it. */
static __always_inline void h2_forget(__u64 key, int c_out, struct qs_effects *e)
{
	struct qs_h2 *h = bpf_map_lookup_elem(&h2_conns, &key);
	if (!h)
		return;
	if (c_out)
		e->d_busy -= (__s32)h->open;
	else
		e->d_in_flight -= (__s32)h->open;
	bpf_map_delete_elem(&h2_conns, &key);
}

/* The first bytes of a write whose first buffer is shorter than a status line. */
struct qs_status_pieces {
	unsigned char b[32];   /* 12 used; room for a masked offset plus a masked length */
};

/* Not the stack: the pieces land at an offset known only at run time, which a map value
 * takes on every supported kernel, and response_status's frame stays as small as it was. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qs_status_pieces);
} status_pieces SEC(".maps");

#define QS_STATUS_LINE 12      /* "HTTP/1.1 200": what qs_http_status_code reads */
#define QS_STATUS_PIECES 4     /* iovecs gathered: Varnish needs 3 ("HTTP/1.1", " ", "200") */

/* The class of a response whose status line is written in pieces, one iovec each (Varnish's
 * writev: "HTTP/1.1", " ", "200", " ", "OK", ...): the first 12 bytes gathered from the first
 * buffer (base, len) and the iovecs after it. */
static __always_inline int status_of_pieces(const void *base, __u64 len, const struct iovec *rest,
					    __u64 nrest)
{
	__u32 zero = 0;
	struct qs_status_pieces *s = bpf_map_lookup_elem(&status_pieces, &zero);
	struct iovec iov = { .iov_base = (void *)base, .iov_len = len };
	__u64 off = 0, n;
	int i;

	if (!s)
		return QS_STATUS_UNKNOWN;
	for (i = 0; i < QS_STATUS_PIECES; i++) {
		n = iov.iov_len < QS_STATUS_LINE - off ? iov.iov_len : QS_STATUS_LINE - off;
		if (bpf_probe_read_user(s->b + (off & 15), n & 15, iov.iov_base))
			return QS_STATUS_UNKNOWN;
		off += n & 15;
		if (off >= QS_STATUS_LINE || !nrest)
			break;
		if (bpf_probe_read_user(&iov, sizeof(iov), rest))
			return QS_STATUS_UNKNOWN;
		rest++;
		nrest--;
	}
	if (off >= QS_STATUS_LINE)
		return qs_response_class(s->b, QS_STATUS_LINE);
	return off >= QS_H2_FRAME_HEADER ? qs_response_class(s->b, QS_H2_FRAME_HEADER) : QS_STATUS_UNKNOWN;
}

/* Status class of the response whose first bytes this write carries, or QS_STATUS_H2 / _TLS
 * (qs_response_class). Only the 12 bytes of the status line are copied, 9 when the write is
 * an HTTP/2 frame header alone; a first iovec shorter than that is joined by the next ones
 * (status_of_pieces). Global, as apply_read: verified once per program. */
__noinline int response_status(void)
{
	unsigned char buf[12];
	const void *base = 0;
	const struct iovec *rest;
	__u64 len = 0, nrest;
	__u32 n;

	if (!syscall_buffers(&base, &len, &rest, &nrest) || !base)
		return QS_STATUS_UNKNOWN;
	if (len < sizeof(buf) && nrest)
		return status_of_pieces(base, len, rest, nrest);
	if (len < QS_H2_FRAME_HEADER)
		return QS_STATUS_UNKNOWN;
	n = len < sizeof(buf) ? QS_H2_FRAME_HEADER : sizeof(buf);
	if (bpf_probe_read_user(buf, n, base))
		return QS_STATUS_UNKNOWN;
	return qs_response_class(buf, n);
}

/* The current thread read the first `ret` bytes of a reply on outbound connection c: the call
 * ended. A reply read by another thread than sent the request means the caller moved (a
 * virtual thread resumed on another carrier, an async client's I/O thread): per-thread
 * attribution does not hold there, and user space says so. A status line of 5xx or 429 fails
 * the call (the read's first 12 bytes, io_head's one copy, are all that is read). */
static __always_inline void reply_read(struct qs_conn *c, struct io_head *h, int ret, const int walk)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct qs_peer_stats *p = peer_at(c->idx);

	if (!p || !c->server_tid)
		return;
	if (c->server_tid != tid)
		__sync_fetch_and_add(&p->calls_moved, 1);
	if (io_head(h, ret) < sizeof(h->b))
		return;
	if (qs_reply_failed(h->b, sizeof(h->b)))
		call_failed(c);
	else if (!(c->flags & QS_F_H2) && qs_is_h2_frame(h->b, sizeof(h->b))) {
		if (walk_pending(walk))
			__sync_fetch_and_add(&h2_unwalked, 1);   /* unmarked: it joins the walk */
		else
			peer_speaks_h2(c, 0);   /* met mid-way: its preface went out before the attach */
	}
}

static __always_inline int in_send_syscall(void)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	long nr;
	if (!regs)
		return 0;
	nr = regs->orig_ax;
	return qs_sys_class(nr) == QS_SC_SEND;
}

/* A write that found no entry for its socket: if the socket is closed and its close ended a
 * request mid-way (closed_requests), the write is that request's response. */
static __always_inline int late_write_counted(__u64 key)
{
	struct qs_closed_request *r = bpf_map_lookup_elem(&closed_requests, &key);
	struct qs_port_stats *p;
	__u64 now = bpf_ktime_get_ns(), t_req, t_close;
	__u32 idx;
	int status;

	if (!r)
		return 0;
	t_req = r->t_req;
	t_close = r->t_close;
	idx = r->idx;
	/* A second's margin for a write that raced its own reset; anything older is another
	 * socket's story (the entry's socket freed and its memory reused). The delete decides
	 * which write counts it, if two get here. */
	if (bpf_map_delete_elem(&closed_requests, &key) || qs_age(now, t_close) > 1000000000ULL)
		return 0;
	p = port_at(idx);
	if (!p)
		return 0;
	status = response_status();
	port_response(p, idx, status, qs_age(now, t_req));
	req_end(key, 1, status);
	return 1;
}

/* A write of the target's (its callers checked is_target). walk: as on_recv's. */
static __always_inline void on_send(struct sock *sk, int ret, const int walk)
{
	__u64 key = (__u64)sk;
	struct qs_conn *c;
	struct qs_effects e = {};
	int status = 0;
	struct qs_tls_pending tls;
	__u8 was;

	tls = tls_take(key, ret);   /* consumed by this write, whatever it is (see tls_pending) */
	if (ret <= 0)
		return;
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c) {
		if (BPF_CORE_READ(sk, __sk_common.skc_state) == QS_TCP_CLOSE)
			late_write_counted(key);
		return;
	}
	if (c->dir == QS_DIR_IN)
		note_server(c);
	was = c->state;
	/* A new outbound connection's first write: the HTTP/2 client preface makes its streams the
	 * calls (or, with no room to follow them, the peer is named). */
	if (c->dir == QS_DIR_OUT && !c->t_req && c->proto == QS_PROTO_TURNS &&
	    !(c->flags & (QS_F_H2 | QS_F_UNIX)) && !walk_pending(walk) && io_is_h2_preface() &&
	    !(walk && h2_follow(key, c, 1, &e)))
		peer_speaks_h2(c, 0);
	if (c->proto != QS_PROTO_TURNS) {
		if (c->proto == QS_PROTO_H2)
			h2_walk_or_lose(key, c, ret, 0, walk);   /* inside TLS, SSL_write's return walks */
		apply(c, &e, 0);
		return;
	}
	if (qs_on_write(c, bpf_ktime_get_ns(), ret, &e)) {
		__u8 proto;
		status = response_status();
		note_wire(c, wire_of(status));
		/* A response that is no status line qscope reads (101 Switching Protocols to a
		 * WebSocket, 100 Continue, a status line split over several writes) ends what is
		 * known of the connection's HTTP/1.x: the bytes its client sends later are not taken
		 * for requests when a close drops them (qs_on_close's http1). Its mix stays as first
		 * counted. */
		if (status == QS_STATUS_UNKNOWN && c->wire == 1 + QS_WIRE_HTTP1)
			c->wire = 1 + QS_WIRE_OTHER;
		/* HTTP/2 met mid-way (its preface was before the attach): the turn just ended was no
		 * request, and from this write on its streams are. */
		if (walk && status == QS_STATUS_H2 && !(c->flags & QS_F_H2) && h2_follow(key, c, 0, &e)) {
			e.record_latency = 0;
			req_end(key, 0, 0);
			apply(c, &e, 0);
			h2_walk_syscall(key, c, ret, 0);
			return;
		}
		/* While the walk loads, HTTP/2 is left unmarked: a later response joins it. */
		if (status == QS_STATUS_H2 && walk_pending(walk)) {
			__sync_fetch_and_add(&h2_unwalked, 1);
			proto = 0;
		} else {
			proto = qs_note_protocol(c, status);
		}
		if (proto == QS_F_H2)
			__sync_fetch_and_add(&conns_h2, 1);
		else if (proto == QS_F_TLS)
			__sync_fetch_and_add(&conns_tls, 1);
		if (status == QS_STATUS_TLS) {
			status = tls_response(c, &tls, &e);
			/* HTTP/2 inside TLS met mid-way (its preface was before the attach or before the
			 * walk's probes): from here on its streams are the requests, walked in the
			 * plaintext at SSL_write's and SSL_read's returns. */
			if (status == QS_STATUS_H2 && (tls_bits() & QS_TLS_WALKED) && h2_follow_tls(key, c, 0, &e)) {
				e.record_latency = 0;
				req_end(key, 0, 0);
				apply(c, &e, 0);
				return;
			}
		}
	}
	if (c->dir == QS_DIR_IN && was == QS_ST_REQUEST && c->state == QS_ST_RESPONSE)
		req_end(key, e.record_latency, status);
	else if (c->dir == QS_DIR_OUT && e.d_busy > 0) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		c->server_tid = tid;
		c->flags &= ~QS_F_CALL_FAILED;
		call_start(c, tid);
	}
	apply(c, &e, status);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(qs_send, struct sock *sk, int ret, int flags)
{
	if (!is_target())
		return 0;
	bpf_tail_call(ctx, &send_walk, 0);
	on_send(sk, ret, 0);
	return 0;
}

/* qs_send's twin with the walk (send_walk): never attached. */
SEC("tp_btf/sock_send_length")
int BPF_PROG(qs_send_walk, struct sock *sk, int ret, int flags)
{
	on_send(sk, ret, 1);
	return 0;
}

/* Before Linux 6.3: tcp_sendmsg, which every write to a TCP socket reaches (write, writev,
 * sendto, sendmsg, sendmmsg) through the protocol's function pointer. sock_sendmsg is not a
 * way in: Debian 12's 6.1 inlines it into sock_write_iter (a kprobe on it saw 0 calls for
 * 2,580 socket writes, tcp_sendmsg all of them; docs/kernel.md). */
SEC("fexit/tcp_sendmsg")
int BPF_PROG(qs_send_fexit, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	if (!is_target())
		return 0;
	bpf_tail_call(ctx, &send_walk, 0);
	on_send(sk, ret, 0);
	return 0;
}

SEC("fexit/tcp_sendmsg")
int BPF_PROG(qs_send_fexit_walk, struct sock *sk, struct msghdr *msg, size_t size, int ret)
{
	on_send(sk, ret, 1);
	return 0;
}

SEC("kprobe/tcp_sendmsg")
int BPF_KPROBE(qs_send_kprobe, struct sock *sk)
{
	io_enter((__u64)sk, 0);
	return 0;
}

static __always_inline void send_kretprobe(int ret, const int walk)
{
	struct qs_io_args a;
	if (io_exit(&a))
		on_send((struct sock *)a.sk, ret, walk);
}

SEC("kretprobe/tcp_sendmsg")
int BPF_KRETPROBE(qs_send_kretprobe, int ret)
{
	if (!is_target())
		return 0;
	bpf_tail_call(ctx, &send_walk, 0);
	send_kretprobe(ret, 0);
	return 0;
}

SEC("kretprobe/tcp_sendmsg")
int BPF_KRETPROBE(qs_send_kretprobe_walk, int ret)
{
	send_kretprobe(ret, 1);
	return 0;
}

/* Without the 6.3 tracepoints, fentry/fexit or kprobes (kprobes compiled out; fentry refused,
 * as on this development kernel): the exits of the syscalls themselves, on fds that are
 * tracked sockets. The syscall's own registers give the fd (and recvfrom/recvmsg's flags),
 * resolved to its socket as the accept path does (sock_of_fd). Not seen this way: recvmmsg
 * and sendmmsg (their return is a message count), splice, and io_uring (no syscall per
 * operation); user space names them in warnings. */
#define QS_IO_RECV 0
#define QS_IO_SEND 1

static __always_inline struct sock *sock_of_fd(struct task_struct *t, int fd);

static __always_inline void on_sys_io(long ret, const int send)
{
	struct task_struct *t;
	struct pt_regs *regs;
	struct sock *sk;
	long nr;
	int flags = 0;

	if (!is_target() || ret <= 0)
		return;
	t = bpf_get_current_task_btf();
	regs = (struct pt_regs *)bpf_task_pt_regs(t);
	if (!regs)
		return;
	sk = sock_of_fd(t, (int)BPF_CORE_READ(regs, di));
	if (!sk)
		return;
	/* The walk inline: these kernels are rare, and their programs are loaded at the start. */
	if (send) {
		on_send(sk, (int)ret, 1);
		return;
	}
	/* x86-64 syscall arguments: di, si, dx, r10, r8, r9. */
	nr = BPF_CORE_READ(regs, orig_ax);
	if (nr == QS_NR_recvfrom)
		flags = (int)BPF_CORE_READ(regs, r10);
	else if (nr == QS_NR_recvmsg)
		flags = (int)BPF_CORE_READ(regs, dx);
	on_recv(sk, (int)ret, flags, QS_PROBE, 1);
}

#define QS_SYS_IO_EXIT(name, send)                                       \
	SEC("tracepoint/syscalls/sys_exit_" #name)                       \
	int qs_sys_exit_##name(struct trace_event_raw_sys_exit *ctx)     \
	{                                                                \
		on_sys_io(ctx->ret, send);                               \
		return 0;                                                \
	}

QS_SYS_IO_EXIT(read, QS_IO_RECV)
QS_SYS_IO_EXIT(readv, QS_IO_RECV)
QS_SYS_IO_EXIT(recvfrom, QS_IO_RECV)
QS_SYS_IO_EXIT(recvmsg, QS_IO_RECV)
QS_SYS_IO_EXIT(write, QS_IO_SEND)
QS_SYS_IO_EXIT(writev, QS_IO_SEND)
QS_SYS_IO_EXIT(sendto, QS_IO_SEND)
QS_SYS_IO_EXIT(sendmsg, QS_IO_SEND)
QS_SYS_IO_EXIT(sendfile64, QS_IO_SEND)   /* sendfile(2): its tracepoint is sendfile64 */

/* ---- arrivals (softirq: current is not the target) ---------------------------------------- */

static __always_inline void on_data_ready(struct sock *sk, const int probe)
{
	__u64 key = (__u64)sk;
	struct qs_conn *c;
	struct qs_effects e = {};

	if (QS_SK(probe, sk, __sk_common.skc_family) == AF_UNIX) {
		/* Unix sockets are followed through BTF-typed hooks only (tp_btf, fentry): the
		 * kprobe fallback leaves them out, and user space says so. */
		if (probe || !follow_unix)
			return;
		/* Process context (the sender's or connecter's thread), any process. */
		if (QS_SK(probe, sk, __sk_common.skc_state) == QS_TCP_LISTEN) {
			on_unix_connect(sk);
			return;
		}
		c = bpf_map_lookup_elem(&conns, &key);
		if (!c)
			return;
		qs_on_arrival(c, bpf_ktime_get_ns(), sk->sk_receive_queue.qlen, &e);
		apply(c, &e, 0);
		return;
	}
	if (QS_SK(probe, sk, __sk_common.skc_state) == QS_TCP_LISTEN) {
		/* A child joined a listener's accept queue: exact peak depth. */
		__u32 idx;
		struct qs_port_stats *p;
		if (QS_SK(probe, sk, sk_protocol) != IPPROTO_TCP ||
		    !lookup_port(QS_SK(probe, sk, __sk_common.skc_num), &idx))
			return;
		p = port_at(idx);
		if (p)
			atomic_max(&p->accept_queue_max, (__s64)QS_SK(probe, sk, sk_ack_backlog));
		return;
	}
	/* Inbound connections count arrivals (their local port is a target listener's); on an
	 * outbound one (its remote port a peer's) an arrival is a call's reply. */
	if (!port_maybe_target(QS_SK(probe, sk, __sk_common.skc_num)) &&
	    !port_maybe_peer(bpf_ntohs(QS_SK(probe, sk, __sk_common.skc_dport))))
		return;
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return;
	qs_on_arrival(c, bpf_ktime_get_ns(), probe ? sk_unread_probe(sk) : sk_unread(sk), &e);
	apply(c, &e, 0);
}

SEC("tp_btf/sk_data_ready")
int BPF_PROG(qs_data_ready, const struct sock *csk)
{
	on_data_ready((struct sock *)csk, QS_BTF);
	hand_on(ctx, data_ready_targets, qs_sock_owners(csk, 0));
	return 0;
}

/* Before Linux 6.6: sock_def_readable is the sk_data_ready callback of every TCP socket that
 * no one replaced (kTLS, sockmap and in-kernel users do), listeners included. */
SEC("fentry/sock_def_readable")
int BPF_PROG(qs_data_ready_fentry, struct sock *sk)
{
	on_data_ready(sk, QS_BTF);
	hand_on(ctx, data_ready_fentry_targets, qs_sock_owners(sk, 0));
	return 0;
}

SEC("kprobe/sock_def_readable")
int BPF_KPROBE(qs_data_ready_kprobe, struct sock *sk)
{
	on_data_ready(sk, QS_PROBE);
	hand_on(ctx, data_ready_kprobe_targets, qs_sock_owners(sk, 1));
	return 0;
}

/* Arrivals scoped to the target's cgroup (docs/kernel.md "Scoped to the target's cgroup"):
 * attached to that cgroup only, so other processes' packets run no qscope code. It sees a TCP
 * segment as the kernel takes it in (tcp_filter), just before sk_data_ready would see it queued:
 * the same facts, told from the segment. Unix sockets have no packets: user space keeps the
 * tracepoint for a target that listens on one. Always lets the packet through (returns 1). */
SEC("cgroup_skb/ingress")
int qs_arrival_skb(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct bpf_sock *bsk = skb->sk;
	const struct tcphdr *th;
	struct tcphdr copy;
	struct tcp_sock *tp;
	struct sock *sk;
	struct qs_conn *c;
	struct qs_effects e = {};
	__u32 ihl = sizeof(struct ipv6hdr), doff, seq, len, rcv, idx;
	__u8 flags;
	__u64 key;

	if (!bsk)
		return 1;
	bsk = bpf_sk_fullsock(bsk);
	if (!bsk || bsk->protocol != IPPROTO_TCP || !port_maybe_target(bsk->src_port))
		return 1;
	/* skb->data is the network header here, and TCP has pulled its own header into the
	 * linear area before this hook: read in place, copied only if it ever is not. IPv6
	 * extension headers before TCP are not followed (that segment is not seen: an arrival the
	 * next one marks). */
	if (skb->protocol == bpf_htons(QS_ETH_P_IP)) {
		const struct iphdr *ip = data;
		if ((void *)(ip + 1) > end)
			return 1;
		ihl = ip->ihl * 4;
	} else if (skb->protocol == bpf_htons(QS_ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = data;
		if ((void *)(ip6 + 1) > end || ip6->nexthdr != IPPROTO_TCP)
			return 1;
	} else {
		return 1;
	}
	th = data + ihl;
	if ((void *)(th + 1) > end) {
		if (bpf_skb_load_bytes(skb, ihl, &copy, sizeof(copy)))
			return 1;
		th = &copy;
	}
	flags = ((const __u8 *)th)[13];
	if (bsk->state == QS_TCP_LISTEN) {
		/* The handshake's last ACK (ACK, no SYN/RST) is about to put a child in the accept
		 * queue, unless it is full (sk_acceptq_is_full): the depth it makes. */
		struct qs_port_stats *p;
		__u32 backlog;
		if ((flags & 0x16) != 0x10 || !(tp = bpf_skc_to_tcp_sock(bsk)))
			return 1;
		sk = (struct sock *)tp;
		backlog = sk->sk_ack_backlog;
		if (backlog > sk->sk_max_ack_backlog || !lookup_port(bsk->src_port, &idx))
			return 1;
		p = port_at(idx);
		if (p)
			atomic_max(&p->accept_queue_max, (__s64)backlog + 1);
		return 1;
	}
	/* New bytes the app can read: the segment covers rcv_nxt (an out-of-order one waits for
	 * the segment that fills the hole, as sk_data_ready does; a retransmission of bytes
	 * already taken in is not an arrival). A bare ACK ends here, before any lookup. */
	doff = th->doff * 4;
	if (skb->len <= ihl + doff)
		return 1;
	len = skb->len - ihl - doff;
	tp = bpf_skc_to_tcp_sock(bsk);
	if (!tp)
		return 1;
	seq = bpf_ntohl(th->seq);
	rcv = tp->rcv_nxt;
	if ((__s32)(seq - rcv) > 0 || (__s32)(seq + len - rcv) <= 0)
		return 1;
	key = (__u64)tp;
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return 1;
	qs_on_arrival(c, bpf_ktime_get_ns(), seq + len - tp->copied_seq, &e);
	apply(c, &e, 0);
	return 1;
}

/* ---- accept ------------------------------------------------------------------------------- */

/* fd of a task -> its file when that is a socket's (and the socket in *so), or 0. The task is
 * a BTF pointer, so its files, fd table and bound load directly (no helper call each); the
 * slot is read with bpf_probe_read_kernel (the table is a pointer to pointers, which BTF
 * access does not follow), and the file must be a socket's: socket->file points back at it. */
static __always_inline struct file *sock_file_of_fd(struct task_struct *t, int fd, struct socket **so)
{
	struct fdtable *fdt = t->files->fdt;
	struct file **fds;
	struct file *f = 0;

	if (fd < 0 || (unsigned int)fd >= fdt->max_fds)
		return 0;
	fds = fdt->fd;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	*so = BPF_CORE_READ(f, private_data);
	if (!*so || BPF_CORE_READ(*so, file) != f)
		return 0;
	return f;
}

/* fd of a task -> struct sock *, or 0. */
static __always_inline struct sock *sock_of_fd(struct task_struct *t, int fd)
{
	struct socket *so;

	if (!sock_file_of_fd(t, fd, &so))
		return 0;
	return BPF_CORE_READ(so, sk);
}

static __always_inline void on_accept_ret(long ret)
{
	struct sock *sk;
	__u64 key;
	struct qs_conn *c, nc;
	struct qs_effects e = {};
	__u32 idx;

	if (ret < 0)
		return;
	sk = sock_of_fd(bpf_get_current_task_btf(), (int)ret);
	if (!sk)
		return;
	key = (__u64)sk;
	c = bpf_map_lookup_elem(&conns, &key);
	if (c) {
		qs_on_accept(c, bpf_ktime_get_ns(), &e);
		apply(c, &e, 0);
		/* In an fd table from now on, though this tick's scan may have passed it already. */
		if (c->flags & QS_F_UNIX)
			unix_live_mark(key);
		return;
	}
	if (BPF_CORE_READ(sk, __sk_common.skc_family) == AF_UNIX) {
		if (follow_unix)
			unix_accept_untracked(sk);
		return;
	}
	/* Queued before attach (no handshake seen): track it from now, without a wait. A child
	 * reset between accept() and this exit has already passed its close: never track it. */
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP ||
	    !lookup_port(BPF_CORE_READ(sk, __sk_common.skc_num), &idx))
		return;
	{
		__u8 st = BPF_CORE_READ(sk, __sk_common.skc_state);
		if (st != QS_TCP_ESTABLISHED && st != QS_TCP_CLOSE_WAIT)
			return;
	}
	{
		struct tcp_sock *tp = (struct tcp_sock *)sk;
		__u32 unread = qs_unread_bytes(BPF_CORE_READ(tp, rcv_nxt), BPF_CORE_READ(tp, copied_seq),
					       BPF_CORE_READ(sk, __sk_common.skc_flags));
		qs_conn_seed(&nc, QS_DIR_IN, idx, bpf_ktime_get_ns(), unread, 0, &e);
		e.accepted = 1;
	}
	if (bpf_map_lookup_elem(&conns_lost, &key)) {
		/* Its handshake was seen, and lost (counted then): a slot freed since takes it. */
		bpf_map_delete_elem(&conns_lost, &key);
		if (bpf_map_update_elem(&conns, &key, &nc, BPF_NOEXIST) == 0)
			apply(&nc, &e, 0);
		return;
	}
	if (!conn_insert_new(key, &nc))
		return;
	apply(&nc, &e, 0);
}

SEC("tracepoint/syscalls/sys_exit_accept4")
int qs_accept4_exit(struct trace_event_raw_sys_exit *ctx)
{
	if (!is_target())
		return 0;
	on_accept_ret(ctx->ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept")
int qs_accept_exit(struct trace_event_raw_sys_exit *ctx)
{
	if (!is_target())
		return 0;
	on_accept_ret(ctx->ret);
	return 0;
}

/* ---- listen overflows (ACK stage) and resets --------------------------------------------- */

/* The code of the QS_RCV_TEXTS functions (sock.h), [start, end) each, from /proc/kallsyms: user
 * space writes them once the first tick is out (the file's read is not worth the first frame),
 * each start before its end. Zero until then, where the addresses are hidden, and for a
 * function the kernel inlined: nothing matches. */
__u64 tcp_rcv_text[2 * QS_RCV_TEXTS];
/* Set by user space once tcp_rcv_text is written (or known hidden). Until then a listener's
 * drops are kept by location in early_drops, for user space to tell apart when it knows the
 * ranges: counted as overflows meanwhile, a server that drops a segment per accepted
 * connection (PgBouncer does) would show overflows for the first ticks of every attach. */
__u32 tcp_rcv_text_settled;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);  /* distinct drop sites on listeners are a handful */
	__type(key, struct qs_early_drop_key);
	__type(value, __u64);     /* segments */
} early_drops SEC(".maps");

/* A drop that added to the listener's sk_drops and is no overflow: one by tcp_v4_rcv/tcp_v6_rcv
 * itself, where every drop of a segment whose socket is a listener (or a request socket's
 * listener) goes through sk_drops_skbadd, except a bad checksum; or by tcp_rcv_state_process's
 * discard (tcp_drop_reason), which a listener meets for a reset or a segment without SYN or
 * ACK aimed at it (4,350 resets at a listener once read as 4,350 overflows). Drops in
 * tcp_v4_do_rcv (a SYN cookie's ACK refused, a stray ACK answered with a reset) add nothing. */
static __always_inline int tcp_rcv_counted_drop(void *location, int reason)
{
	__u64 at = (__u64)location;
	int i, in = 0;

	for (i = 0; i < QS_RCV_TEXTS; i++)
		if (at >= tcp_rcv_text[2 * i] && at < tcp_rcv_text[2 * i + 1])
			in = 1;
	return in && reason != qs_reason_tcp_csum();
}

/* What sk_drops_skbadd adds for a dropped skb: its segments, one at least. */
static __always_inline __u64 skb_segments(struct sk_buff *skb)
{
	struct skb_shared_info *sh = (void *)(skb->head + skb->end);
	__u16 segs = BPF_CORE_READ(sh, gso_segs);

	return segs ? segs : 1;
}

static __always_inline int on_kfree_skb(struct sk_buff *skb, void *location, enum skb_drop_reason reason,
					struct sock *rx_sk)
{
	struct qs_client_key ck = {};
	struct qs_port_stats *p;
	unsigned char *head;
	__u16 nh, th;
	__u8 ver = 0;
	__u64 now;
	__u32 idx;
	int overflow = (int)reason == qs_reason_listen_overflow();
	int early = 0;

	if (!rx_sk)
		return 0;
	if (!overflow && !tcp_rcv_counted_drop(location, (int)reason)) {
		if ((int)reason == qs_reason_tcp_csum())
			return 0;
		/* User space writes the ranges, then settles: settled, they are in (maybe only now). */
		if (*(volatile __u32 *)&tcp_rcv_text_settled) {
			if (!tcp_rcv_counted_drop(location, (int)reason))
				return 0;
		} else {
			early = 1;
		}
	}
	/* A connection's own drops (its port is the listener's) are not the listener's sk_drops. */
	if (rx_sk->__sk_common.skc_state != QS_TCP_LISTEN || !lookup_port(rx_sk->__sk_common.skc_num, &idx))
		return 0;
	if (early) {
		struct qs_early_drop_key k = {.location = (__u64)location, .port_idx = idx};
		__u64 zero = 0, *segs;

		bpf_map_update_elem(&early_drops, &k, &zero, BPF_NOEXIST);
		segs = bpf_map_lookup_elem(&early_drops, &k);
		if (segs)
			__sync_fetch_and_add(segs, skb_segments(skb));
		return 0;
	}
	p = port_at(idx);
	if (p)
		__sync_fetch_and_add(&p->rcv_drops, skb_segments(skb));
	if (!overflow)
		return 0;

	head = skb->head;
	nh = skb->network_header;
	th = skb->transport_header;
	if (bpf_probe_read_kernel(&ver, 1, head + nh))
		return 0;
	ver >>= 4;
	if (ver == 4) {
		ck.family = AF_INET;
		bpf_probe_read_kernel(&ck.addr[0], 4, head + nh + 12);
	} else if (ver == 6) {
		ck.family = AF_INET6;
		bpf_probe_read_kernel(&ck.addr, 16, head + nh + 8);
	} else {
		return 0;
	}
	bpf_probe_read_kernel(&ck.port, 2, head + th);
	now = bpf_ktime_get_ns();
	/* Only the first drop per client: later ones are its retransmitted ACKs. */
	bpf_map_update_elem(&overflow_first, &ck, &now, BPF_NOEXIST);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(qs_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason,
	     struct sock *rx_sk)
{
	on_kfree_skb(skb, location, reason, rx_sk);
	hand_on(ctx, kfree_skb_targets, qs_drop_owners(rx_sk));
	return 0;
}

static __always_inline void on_reset(const struct sock *sk)
{
	__u64 key = (__u64)sk;
	struct qs_conn *c;
	struct qs_peer_stats *p;
	if (!sk)
		return;
	c = bpf_map_lookup_elem(&conns, &key);
	/* A RST answering a SYN is a refused connect, counted as a connect failure instead. */
	if (!c || c->dir != QS_DIR_OUT || c->state == QS_ST_CONNECTING)
		return;
	p = peer_at(c->idx);
	if (p)
		__sync_fetch_and_add(&p->resets, 1);
	if (c->state == QS_ST_BUSY)
		call_failed(c);
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(qs_rst_in, struct sock *sk)
{
	on_reset(sk);
	hand_on(ctx, rst_in_targets, qs_sock_owners(sk, 0));
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(qs_rst_out, const struct sock *sk, const struct sk_buff *skb)
{
	on_reset(sk);
	hand_on(ctx, rst_out_targets, qs_sock_owners(sk, 0));
	return 0;
}

/* ---- connections that predate the attach ------------------------------------------------- */

/* libbpf fills this from /proc/config.gz or /boot/config-*; 0 when neither is readable, and
 * then seeded starts stay at the attach (a lower bound, their completions not counted). */
extern int CONFIG_HZ __kconfig __weak;

/* The true start of a call/request found in progress at attach, on the bpf_ktime_get_ns()
 * clock: `stamp` is the socket's last data sent (lsndtime: an outbound call started when its
 * request went out) or received (icsk_ack.lrcvtime: an inbound request arrived), in 32-bit
 * jiffies. Resolution is one jiffy (4 ms at HZ=250). 0 (unknown) without HZ or for an age
 * that cannot be right (older than the clock). */
static __always_inline __u64 seed_start(__u64 now, __u32 stamp)
{
	__u64 hz = CONFIG_HZ > 0 ? (__u64)CONFIG_HZ : 0;
	__u64 age_ns;

	if (!hz)
		return 0;
	age_ns = (__u64)(__u32)((__u32)bpf_jiffies64() - stamp) * (1000000000ULL / hz);
	return age_ns < now ? now - age_ns : 0;
}

static __always_inline __u32 last_data_sent(struct sock *sk)
{
	return BPF_CORE_READ((struct tcp_sock *)sk, lsndtime);
}

static __always_inline __u32 last_data_recv(struct sock *sk)
{
	return BPF_CORE_READ((struct inet_connection_sock *)sk, icsk_ack.lrcvtime);
}

/* A connected Unix socket found in the target's fd table at attach (listeners are registered
 * by qs_unix_scan, run first). Bound (it shares its listener's address): accepted from a
 * target listener, inbound. Unbound with a named peer: a client of that listener, outbound;
 * busy when bytes wait on either side (a request not yet read, a reply not yet read), else
 * idle until its next write (or a thread blocked reading it, qs_seed_busy). Unbound with an
 * unnamed peer: a socketpair, not tracked. In flight for an inbound one cannot be told (no
 * sequence numbers): it starts at its next read. */
static __always_inline void seed_unix(struct sock *sk)
{
	struct unix_sock *us = (struct unix_sock *)sk;
	const struct unix_address *addr;
	struct qs_effects e = {};
	struct qs_conn nc;
	__u64 key = (__u64)sk;
	__u32 unread, idx;
	__u16 type = BPF_CORE_READ(sk, sk_type);

	if ((type != QS_SOCK_STREAM && type != QS_SOCK_SEQPACKET) ||
	    BPF_CORE_READ(sk, __sk_common.skc_state) != QS_TCP_ESTABLISHED)
		return;
	addr = BPF_CORE_READ(us, addr);
	unread = BPF_CORE_READ(sk, sk_receive_queue.qlen);
	if (addr) {
		__u64 akey = (__u64)addr;
		__u32 *idxp = bpf_map_lookup_elem(&unix_listen, &akey);
		if (!idxp)
			return;
		qs_conn_seed(&nc, QS_DIR_IN, (__u16)*idxp, bpf_ktime_get_ns(), unread, 0, &e);
	} else {
		struct sock *peer = BPF_CORE_READ(us, peer);
		const struct unix_address *paddr;
		if (!peer)
			return;
		paddr = BPF_CORE_READ((struct unix_sock *)peer, addr);
		if (!paddr)
			return;   /* socketpair() or an unnamed peer: internal signalling */
		idx = unix_peer_index(paddr);
		if (idx >= QS_MAX_PEERS)
			return;
		qs_conn_seed(&nc, QS_DIR_OUT, (__u16)idx, bpf_ktime_get_ns(), 0,
			     unread > 0 || BPF_CORE_READ(peer, sk_receive_queue.qlen) > 0, &e);
	}
	nc.flags |= QS_F_UNIX;
	if (!conn_insert_new(key, &nc))
		return;
	apply(&nc, &e, 0);
	unix_live_mark(key);
}

SEC("iter/task_file")
int qs_seed(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct socket *so;
	struct sock *sk;
	struct qs_conn nc;
	struct qs_effects e = {};
	struct tcp_sock *tp;
	__u64 key;
	__u32 idx, unread, rcv_nxt, snd_una, snd_nxt, snd_wl1;
	__u8 state;

	if (!task || !file || !qs_in_tree(task->tgid))
		return 0;
	so = bpf_sock_from_file(file);
	if (!so)
		return 0;
	sk = BPF_CORE_READ(so, sk);
	if (sk && BPF_CORE_READ(sk, __sk_common.skc_family) == AF_UNIX) {
		if (follow_unix)
			seed_unix(sk);
		return 0;
	}
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP || BPF_CORE_READ(sk, sk_type) != 1 /* SOCK_STREAM */)
		return 0;
	state = BPF_CORE_READ(sk, __sk_common.skc_state);
	if (state != QS_TCP_ESTABLISHED && state != QS_TCP_CLOSE_WAIT)
		return 0;
	key = (__u64)sk;
	tp = (struct tcp_sock *)sk;   /* TCP and stream checked above */
	rcv_nxt = BPF_CORE_READ(tp, rcv_nxt);
	unread = qs_unread_bytes(rcv_nxt, BPF_CORE_READ(tp, copied_seq), BPF_CORE_READ(sk, __sk_common.skc_flags));
	snd_una = BPF_CORE_READ(tp, snd_una);
	snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	snd_wl1 = BPF_CORE_READ(tp, snd_wl1);
	if (lookup_port(BPF_CORE_READ(sk, __sk_common.skc_num), &idx)) {
		qs_conn_seed(&nc, QS_DIR_IN, idx, bpf_ktime_get_ns(), unread,
			     qs_seed_is_in_flight(unread, snd_una, snd_nxt, snd_wl1, rcv_nxt), &e);
	} else {
		struct qs_peer_key pk = {};
		pk.family = BPF_CORE_READ(sk, __sk_common.skc_family);
		pk.port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
		if (pk.family == AF_INET6)
			BPF_CORE_READ_INTO(&pk.addr, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
		else
			read_daddr4(pk.addr, sk);
		qs_conn_seed(&nc, QS_DIR_OUT, peer_index(&pk), bpf_ktime_get_ns(), 0,
			     qs_seed_is_busy(unread, snd_una, snd_nxt, snd_wl1, rcv_nxt), &e);
	}
	/* The state machine stamps seeded work with the attach; the socket knows better. */
	if (nc.state == QS_ST_REQUEST)
		qs_conn_backdate(&nc, seed_start(nc.t_req, last_data_recv(sk)));
	else if (nc.state == QS_ST_BUSY)
		qs_conn_backdate(&nc, seed_start(nc.t_req, last_data_sent(sk)));
	/* NOEXIST: a connection the live hooks already track keeps its state and gauges. */
	if (!conn_insert_new(key, &nc))
		return 0;
	apply(&nc, &e, 0);
	return 0;
}

/* After qs_seed: threads of the target blocked reading an outbound connection at attach are
 * calls in progress (see qs_seed_blocked_read). */
SEC("iter/task")
int qs_seed_busy(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct pt_regs *regs;
	struct qs_conn *c;
	struct qs_effects e = {};
	struct sock *sk;
	__u64 key;
	long nr;

	if (!task || !qs_in_tree(task->tgid) || task->__state == 0 /* TASK_RUNNING */)
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!regs)
		return 0;
	nr = regs->orig_ax;
	if (qs_sys_class(nr) != QS_SC_RECV)
		return 0;
	sk = sock_of_fd(task, (int)regs->di);
	if (!sk)
		return 0;
	key = (__u64)sk;
	c = bpf_map_lookup_elem(&conns, &key);
	if (!c)
		return 0;
	qs_seed_blocked_read(c, bpf_ktime_get_ns(), &e);
	if (e.d_busy > 0 && !(c->flags & QS_F_UNIX))   /* lsndtime is TCP's */
		qs_conn_backdate(c, seed_start(c->t_req, last_data_sent(sk)));
	apply(c, &e, 0);
	return 0;
}

/* ---- Unix-domain sockets: closes ---------------------------------------------------------- */

/* A connect() of the target's to a Unix listener, while arrivals are scoped to its cgroup and
 * sk_data_ready is not attached (collector/probes/sock/scope.h): the outbound connection
 * on_unix_connect would have started, from the connecting socket's side. Attached only then. */
SEC("tracepoint/syscalls/sys_exit_connect")
int qs_unix_connect_exit(struct trace_event_raw_sys_exit *ctx)
{
	struct sock *sk, *peer;
	__u16 type;

	if (ctx->ret != 0 || !follow_unix || !is_target())
		return 0;
	sk = unix_connecting(&peer);
	if (!sk)
		return 0;
	type = BPF_CORE_READ(sk, sk_type);
	if (type != QS_SOCK_STREAM && type != QS_SOCK_SEQPACKET)
		return 0;
	unix_connect_out((__u64)sk, BPF_CORE_READ((struct unix_sock *)peer, addr), bpf_ktime_get_ns());
	return 0;
}

/* close(fd) in the target, of the last reference to a tracked socket's file. A Unix
 * connection ends now rather than at the next sweep (which still catches exits, dup'd fds and
 * files another thread held at the close); an outbound call still waiting for its reply was
 * given up. */
SEC("tracepoint/syscalls/sys_enter_close")
int qs_close_enter(struct trace_event_raw_sys_enter *ctx)
{
	struct file *f;
	struct socket *so;
	struct sock *sk;
	struct qs_conn *c;
	__u64 key;

	if (!is_target())
		return 0;
	f = sock_file_of_fd(bpf_get_current_task_btf(), (int)ctx->args[0], &so);
	if (!f)
		return 0;
	sk = BPF_CORE_READ(so, sk);
	key = (__u64)sk;
	c = sk ? bpf_map_lookup_elem(&conns, &key) : 0;
	if (!c || !qs_file_last_ref(f))
		return 0;
	/* Closing a connection whose call has no reply yet gives the call up (a read timeout,
	 * a cancelled request): it failed, and the next call to that peer is a retry. */
	if (c->dir == QS_DIR_OUT && c->state == QS_ST_BUSY)
		call_failed(c);
	if (!(c->flags & QS_F_UNIX))
		return 0;
	conn_close_stale(key);
	bpf_map_delete_elem(&unix_live, &key);
	return 0;
}

/* ---- Unix-domain sockets: listeners and closes, each tick -------------------------------- */

/* The target's fd tables: register Unix listeners, and mark every tracked Unix socket still
 * held as alive in this generation. */
SEC("iter/task_file")
int qs_unix_scan(struct bpf_iter__task_file *ctx)
{
	struct task_struct *task = ctx->task;
	struct file *file = ctx->file;
	struct socket *so;
	struct sock *sk;
	__u64 key, *gen;

	if (!task || !file || !qs_in_tree(task->tgid))
		return 0;
	so = bpf_sock_from_file(file);
	if (!so)
		return 0;
	sk = BPF_CORE_READ(so, sk);
	if (!follow_unix || !sk || BPF_CORE_READ(sk, __sk_common.skc_family) != AF_UNIX)
		return 0;
	if (BPF_CORE_READ(sk, __sk_common.skc_state) == QS_TCP_LISTEN) {
		unix_register_listener(sk, BPF_CORE_READ(file, f_inode, i_ino));
		return 0;
	}
	key = (__u64)sk;
	gen = bpf_map_lookup_elem(&unix_live, &key);
	if (gen)
		*gen = unix_gc_gen;
	return 0;
}

/* After qs_unix_scan: a tracked Unix socket no fd table holds any more was closed (or its
 * process exited). One still waiting in a listener's queue is in no fd table yet: kept, up
 * to QS_UNIX_EMBRYO_NS. */
SEC("iter/bpf_map_elem")
int qs_unix_sweep(struct bpf_iter__bpf_map_elem *ctx)
{
	__u64 *k = ctx->key, *v = ctx->value, key;
	struct qs_conn *c;

	if (!k || !v || *v >= unix_gc_gen)
		return 0;
	key = *k;
	c = bpf_map_lookup_elem(&conns, &key);
	if (c && (c->flags & QS_F_UNIX)) {
		if (c->dir == QS_DIR_IN && !(c->aflags & (QS_A_ACCEPTED | QS_A_CLOSED)) &&
		    qs_age(bpf_ktime_get_ns(), c->t_start) < QS_UNIX_EMBRYO_NS)
			return 0;
		conn_close_stale(key);
	}
	bpf_map_delete_elem(&unix_live, &key);
	return 0;
}
