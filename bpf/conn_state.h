/* Per-connection state machine of the sock probe family: ONE implementation, included by
 * sock.bpf.c and unit-tested from C++ (tests/unit/sock_state_test.cpp) without root.
 *
 * Pure functions over a plain struct: each event (app read, app write, data arrival, accept,
 * handshake, close) updates the connection and reports what changed in a struct
 * qs_effects; the BPF side applies the effects to the shared per-port / per-peer gauges and
 * histograms. Nothing here touches a map or a helper.
 *
 * Inbound (accepted from a target listener):
 *   IDLE --read--> REQUEST --write--> RESPONSE --read--> REQUEST ...  (keep-alive)
 *   A request is in flight from its first byte read to the first byte of its response
 *   written. Latency is recorded at the FIRST response write, not the last: the last write
 *   before the next read is only known when that read comes (or never, on close), which would
 *   need a second timestamp per connection and a deferred record; the first write is what a
 *   client waits for ("time to first byte") and is exact for the small responses this tool is
 *   meant for. Pipelined requests read in one go count as one request (a documented limit).
 * Outbound (connected by a target thread):
 *   CONNECTING --established--> IDLE --write--> BUSY --read--> IDLE ...
 *   A call is busy from its first request byte written to its first reply byte read.
 *
 * The connector queue ("bytes arrived, nobody read them") is tracked with one word of atomic
 * bits, because arrivals run in softirq on any CPU while the app reads on another: a
 * connection contributes 1 to waiting_unread exactly while its COUNTED bit is set, and every
 * +1/-1 comes from the compare-and-swap that flipped that bit, so the gauge cannot drift.
 */
#ifndef QSCOPE_CONN_STATE_H
#define QSCOPE_CONN_STATE_H

#define QS_DIR_IN  1
#define QS_DIR_OUT 2

#define QS_ST_IDLE       0
#define QS_ST_REQUEST    1   /* inbound: request being read / processed */
#define QS_ST_RESPONSE   2   /* inbound: response started */
#define QS_ST_CONNECTING 3   /* outbound: SYN_SENT */
#define QS_ST_BUSY       4   /* outbound: request written, reply not yet read */

/* qs_conn.flags (plain: written only by the thread that owns the transition) */
#define QS_F_SEEDED 1        /* existed before attach */
#define QS_F_START_UNKNOWN 2 /* request/call already in progress at attach: start unknown */
#define QS_F_H2 4            /* speaks HTTP/2: inbound, a response began with a frame (qs_note_protocol);
                              * outbound, the client preface was written or a reply began with a frame */
#define QS_F_TLS 8           /* inbound: a response began with a TLS record */
#define QS_F_UNIX 16         /* a Unix-domain connection: no TCP fields; its close is found by sock.bpf.c */
#define QS_F_CALL_FAILED 32  /* outbound: the current call's failure is counted (once: a reset follows an abandon) */
#define QS_F_TLS_PLAIN 64    /* inbound TLS: a response's plaintext was classified through libssl (--tls) */
#define QS_F_TLS_H2 128      /* inbound TLS: that plaintext was HTTP/2 frames (h2 over TLS) */

/* qs_conn.aflags (atomic: arrivals race with reads) */
#define QS_A_UNREAD   1      /* receive queue holds bytes the app has not read: inbound, a request's;
                              * outbound (busy), the reply's, which has come */
#define QS_A_ACCEPTED 2      /* the app owns it (accept returned it, or it read from it) */
#define QS_A_COUNTED  4      /* counted in waiting_unread: UNREAD && ACCEPTED */
#define QS_A_CLOSED   8      /* closed: no bit is set again (an accept racing the close) */
#define QS_A_RACED    (~(__u64)0)  /* qs_aflags_update lost every compare-and-swap */

/* qs_conn.proto */
#define QS_PROTO_TURNS 0     /* a request is a read/write turn (HTTP/1.x, most database protocols) */
#define QS_PROTO_H2 1        /* HTTP/2: requests (inbound) or calls (outbound) are streams, followed by
                              * sock.bpf.c (h2.h) in the socket's bytes */
#define QS_PROTO_H2_TLS 2    /* HTTP/2 inside TLS (inbound, --tls): streams followed in the plaintext
                              * libssl's SSL_read/SSL_write hand over, not in the socket's records */

#define QS_MSG_PEEK 2        /* MSG_PEEK: reading without consuming starts nothing */

/* Status classes, the index of per-class counters and histograms. */
#define QS_STATUS_2XX 0
#define QS_STATUS_3XX 1
#define QS_STATUS_4XX 2
#define QS_STATUS_5XX 3
#define QS_STATUS_UNKNOWN 4
#define QS_STATUS_CLASSES 5
/* Not classes (apply() counts them as unknown): what a response began with instead of a
 * status line, when it can be recognised. Such connections are still followed in read/write
 * turns, which for HTTP/2 are not requests: user space names them in `partial`. */
#define QS_STATUS_H2 5       /* an HTTP/2 frame: cleartext h2c */
#define QS_STATUS_TLS 6      /* a TLS record: neither the status nor HTTP/2 can be seen inside */
#define QS_H2_FRAME_HEADER 9 /* nginx writes a frame's 9-byte header as an iovec of its own */

struct qs_conn {
	__u64 t_start;   /* inbound: handshake done (accept wait starts); outbound: SYN_SENT */
	__u64 t_req;     /* inbound: first request byte read; outbound: first request byte written */
	__u64 t_unread;  /* inbound: request bytes waiting unread since */
	__u64 aflags;    /* QS_A_*; 64-bit because BPF atomics on 32-bit words need -mcpu=v3 */
	__u16 idx;       /* port index (inbound) or peer index (outbound) */
	__u8 dir;        /* QS_DIR_* */
	__u8 state;      /* QS_ST_* */
	__u8 flags;      /* QS_F_* */
	__u8 proto;      /* QS_PROTO_*: how requests are told apart on it */
	__u8 wire;       /* inbound: 1 + QS_WIRE_* once counted in its listener's mix, else 0; an
	                  * HTTP/1.x one becomes OTHER at a response that is no status line read */
	__u8 pad;
	__u32 server_tid; /* inbound: the thread that last read or wrote it (event-loop detection);
	                   * outbound: the thread that started its current call or connect */
	__u32 pad2;
};

struct qs_effects {
	__s32 d_in_flight;
	__s32 d_unread;
	__s32 d_busy;
	__s32 d_conns;
	__u64 latency_ns;     /* valid when record_latency */
	__u64 call_ns;        /* valid when record_call */
	__u64 accept_wait_ns; /* valid when record_accept_wait */
	__u64 connect_ns;     /* valid when connect_ok */
	__u8 record_latency;
	__u8 record_call;
	__u8 record_accept_wait;
	__u8 accepted;        /* count an accept (with or without a wait) */
	__u8 connect_ok;
	__u8 connect_fail;
	__u8 dropped;         /* an HTTP/1.x request dropped unanswered: left unread at the close
	                       * (qs_on_close), or drained, and its bytes a request (sock.bpf.c) */
	__u8 drained;         /* read after the app shut its sending side: never answered (qs_on_read) */
};

static __always_inline __u64 qs_age(__u64 now, __u64 since)
{
	return now > since ? now - since : 0;
}

/* Set/clear aflags bits and keep COUNTED == (UNREAD && ACCEPTED), reporting the gauge
 * change. Returns the flags before the change (QS_A_RACED if every attempt lost a race,
 * which leaves the gauge consistent with the bits, just not updated this time). */
static __always_inline __u64 qs_aflags_update(struct qs_conn *c, __u64 set, __u64 clear,
					      struct qs_effects *e)
{
	int i;
	for (i = 0; i < 4; i++) {
		__u64 old = c->aflags;
		__u64 nw = (old | set) & ~clear;
		if (old & QS_A_CLOSED)
			return QS_A_RACED;   /* its gauges are already undone: change nothing */
		int want = (nw & QS_A_UNREAD) && (nw & QS_A_ACCEPTED);
		nw = want ? (nw | QS_A_COUNTED) : (nw & ~(__u64)QS_A_COUNTED);
		if (nw == old)
			return old;
		if (__sync_val_compare_and_swap(&c->aflags, old, nw) == old) {
			e->d_unread += ((nw & QS_A_COUNTED) ? 1 : 0) - ((old & QS_A_COUNTED) ? 1 : 0);
			return old;
		}
	}
	return QS_A_RACED;
}

static __always_inline void qs_conn_init_inbound(struct qs_conn *c, __u64 t_established, __u16 idx)
{
	__builtin_memset(c, 0, sizeof(*c));
	c->dir = QS_DIR_IN;
	c->state = QS_ST_IDLE;
	c->idx = idx;
	c->t_start = t_established;
}

static __always_inline void qs_conn_init_outbound(struct qs_conn *c, __u64 now, __u16 idx)
{
	__builtin_memset(c, 0, sizeof(*c));
	c->dir = QS_DIR_OUT;
	c->state = QS_ST_CONNECTING;
	c->idx = idx;
	c->t_start = now;
}

/* Is a connection found at attach mid-request (inbound) or mid-call (outbound)? Decided from
 * sequence numbers, exact where jiffies timestamps (lrcvtime/lsndtime, 4 ms at HZ=250) are
 * not: snd_wl1 is the sequence number of the last peer segment that went through tcp_ack's
 * window update. A peer's pure ACK sets it to rcv_nxt; a data segment leaves it below
 * rcv_nxt (its start, or an older value when the fast path skipped tcp_ack). So
 * snd_wl1 == rcv_nxt means "the peer's last word was an ACK of ours".
 * Inbound in flight: request consumed (no unread), everything we sent is acked (a response
 * written and unacked means the request was answered), and the peer's last segment carried
 * data (the request) rather than an ACK of a response. */
static __always_inline int qs_seed_is_in_flight(__u32 unread, __u32 snd_una, __u32 snd_nxt,
					     __u32 snd_wl1, __u32 rcv_nxt)
{
	return unread == 0 && snd_una == snd_nxt && (__s32)(rcv_nxt - snd_wl1) > 0;
}

/* Outbound busy: a reply waits unread, or our request is unacked, or the peer's last word was
 * a pure ACK of our request (a silent partner). An idle pool connection's last peer segment
 * is the reply data (or the SYN-ACK of a never-used one): snd_wl1 below rcv_nxt. */
static __always_inline int qs_seed_is_busy(__u32 unread, __u32 snd_una, __u32 snd_nxt,
					__u32 snd_wl1, __u32 rcv_nxt)
{
	return unread > 0 || snd_una != snd_nxt || snd_wl1 == rcv_nxt;
}

/* A connection that existed before attach, found in the target's fd table (or returned by
 * accept with no handshake seen). Inbound: owned by the app; unread_bytes > 0 puts it in the
 * connector queue now; `in_progress` (qs_seed_is_in_flight) makes it in flight. Outbound:
 * established; `in_progress` (qs_seed_is_busy) makes it busy. Either way the start was not
 * seen: it is the attach (a lower bound, QS_F_START_UNKNOWN: the completion is then neither a
 * latency nor a completion of this window) until sock.bpf.c back-dates it to the socket's last
 * data time (qs_conn_backdate). Idle otherwise: its first read (inbound) or write (outbound)
 * starts one. */
static __always_inline void qs_conn_seed(struct qs_conn *c, __u8 dir, __u16 idx, __u64 now,
					 __u32 unread_bytes, int in_progress, struct qs_effects *e)
{
	__builtin_memset(c, 0, sizeof(*c));
	c->dir = dir;
	c->idx = idx;
	c->state = QS_ST_IDLE;
	c->flags = QS_F_SEEDED;
	e->d_conns += 1;
	if (dir == QS_DIR_IN) {
		c->t_unread = now;
		qs_aflags_update(c, QS_A_ACCEPTED | (unread_bytes ? QS_A_UNREAD : 0), 0, e);
		if (in_progress && !unread_bytes) {
			c->state = QS_ST_REQUEST;
			c->t_req = now;
			c->flags |= QS_F_START_UNKNOWN;
			e->d_in_flight += 1;
		}
	} else if (in_progress) {
		c->state = QS_ST_BUSY;
		c->t_req = now;
		c->flags |= QS_F_START_UNKNOWN;
		e->d_busy += 1;
	}
}

/* At attach, a target thread is blocked reading this connection: for an outbound one that is
 * a call in progress (the request went out before the attach; a silent partner holding a
 * worker is exactly this). Busy from `now`, a lower bound of its age. */
static __always_inline void qs_seed_blocked_read(struct qs_conn *c, __u64 now, struct qs_effects *e)
{
	if (c->dir != QS_DIR_OUT || c->state != QS_ST_IDLE)
		return;
	c->state = QS_ST_BUSY;
	c->t_req = now;
	c->flags |= QS_F_START_UNKNOWN;
	e->d_busy += 1;
}

/* The socket says when seeded work really began (lsndtime for a call, icsk_ack.lrcvtime for a
 * request; one jiffy of resolution): from here on it is an ordinary request or call whose
 * completion counts, with a latency exact to the jiffy. Without it, a spike attached mid-way
 * would miss every completion of what was in flight at the attach, which in a queue is most
 * of the window's failures (the requests that time out are the old ones). */
static __always_inline void qs_conn_backdate(struct qs_conn *c, __u64 t_req)
{
	if (!(c->flags & QS_F_START_UNKNOWN) || !t_req)
		return;
	c->t_req = t_req;
	c->flags &= ~QS_F_START_UNKNOWN;
}

/* accept()/accept4() returned this connection to the app. */
static __always_inline void qs_on_accept(struct qs_conn *c, __u64 now, struct qs_effects *e)
{
	__u64 old;
	if (c->dir != QS_DIR_IN)
		return;
	old = qs_aflags_update(c, QS_A_ACCEPTED, 0, e);
	if (old == QS_A_RACED || (old & QS_A_ACCEPTED))
		return;
	e->accepted = 1;
	e->d_conns += 1;
	if (c->t_start && !(c->flags & QS_F_SEEDED)) {
		e->record_accept_wait = 1;
		e->accept_wait_ns = qs_age(now, c->t_start);
	}
}

/* Bytes arrived (softirq). unread_bytes: receive queue now (rcv_nxt - copied_seq, no FIN).
 * On a call in progress they are its reply: the peer has answered, and the request waits on
 * the caller now (a proxy's loop in a long turn), not on the peer. An outbound connection is
 * never ACCEPTED, so the flag counts in no unread gauge. */
static __always_inline void qs_on_arrival(struct qs_conn *c, __u64 now, __u32 unread_bytes,
					  struct qs_effects *e)
{
	__u64 old;
	if (unread_bytes == 0 || (c->aflags & QS_A_UNREAD))
		return;
	if (c->dir == QS_DIR_OUT) {
		if (c->state == QS_ST_BUSY && c->proto == QS_PROTO_TURNS)
			qs_aflags_update(c, QS_A_UNREAD, 0, e);
		return;
	}
	if (c->dir != QS_DIR_IN)
		return;
	old = qs_aflags_update(c, QS_A_UNREAD, 0, e);
	if (old != QS_A_RACED && !(old & QS_A_UNREAD))
		c->t_unread = now;
}

/* The app read `ret` bytes (sock_recv_length); unread_after: bytes still queued after it.
 * send_shut: the app had already shut its sending side, so nothing it reads now is answered:
 * e->drained, and the caller looks at the bytes (a copy of the user's buffer, made only then)
 * to tell a dropped request from the rest of a body or a goodbye. */
static __always_inline void qs_on_read(struct qs_conn *c, __u64 now, int ret, int flags,
				       __u32 unread_after, int send_shut, struct qs_effects *e)
{
	if (ret <= 0 || (flags & QS_MSG_PEEK) || (c->aflags & QS_A_CLOSED))
		return;
	if (c->dir == QS_DIR_OUT) {
		if (c->aflags & QS_A_UNREAD)
			qs_aflags_update(c, 0, QS_A_UNREAD, e);	/* the reply is being read */
		if (c->proto != QS_PROTO_TURNS)
			return;      /* its streams are its calls (h2.h) */
		if (c->state == QS_ST_BUSY) {
			c->state = QS_ST_IDLE;
			e->d_busy -= 1;
			/* A call found in progress at attach has no known start: its duration would
			 * only be a lower bound, so it is not put in the histogram. */
			if (!(c->flags & QS_F_START_UNKNOWN)) {
				e->record_call = 1;
				e->call_ns = qs_age(now, c->t_req);
			}
			c->flags &= ~QS_F_START_UNKNOWN;
		}
		return;
	}
	/* Reading proves ownership even when accept was not seen (io_uring, pre-attach). */
	if (!(c->aflags & QS_A_ACCEPTED)) {
		__u64 old = qs_aflags_update(c, QS_A_ACCEPTED, 0, e);
		if (old != QS_A_RACED && !(old & QS_A_ACCEPTED)) {
			e->accepted = 1;
			e->d_conns += 1;
		}
	}
	if (!unread_after)
		qs_aflags_update(c, 0, QS_A_UNREAD, e);
	if (c->proto != QS_PROTO_TURNS)
		return;      /* its streams are its requests (h2.h) */
	/* A lingering close: the server shut its side and drains what the client sent meanwhile
	 * (Apache's event MPM closes keep-alive connections when every worker is busy, and reads
	 * the request already on its way). Read, never answered: no request in flight, but a
	 * request dropped when its bytes are one (the caller's to tell: the rest of a body a
	 * server answered early, a TLS alert or a protocol's goodbye drained there is none). */
	if (send_shut && c->state != QS_ST_REQUEST) {
		e->drained = 1;
		return;
	}
	if (c->state != QS_ST_REQUEST) {
		c->state = QS_ST_REQUEST;
		c->t_req = now;
		e->d_in_flight += 1;
	}
}

/* The app wrote `ret` bytes (sock_send_length). Returns 1 when this write is the first of a
 * response: the caller then classifies its status line. */
static __always_inline int qs_on_write(struct qs_conn *c, __u64 now, int ret, struct qs_effects *e)
{
	if (ret <= 0 || (c->aflags & QS_A_CLOSED))
		return 0;
	if (c->dir == QS_DIR_OUT) {
		if (c->state == QS_ST_IDLE && c->proto == QS_PROTO_TURNS) {
			c->state = QS_ST_BUSY;
			c->t_req = now;
			e->d_busy += 1;
		}
		return 0;
	}
	if (c->state != QS_ST_REQUEST || c->proto != QS_PROTO_TURNS)
		return 0;
	c->state = QS_ST_RESPONSE;
	e->d_in_flight -= 1;
	if (c->flags & QS_F_START_UNKNOWN) {
		/* begun before the attach: neither a latency nor a completion of this window */
		c->flags &= ~QS_F_START_UNKNOWN;
		return 0;
	}
	e->record_latency = 1;
	e->latency_ns = qs_age(now, c->t_req);
	return 1;
}

/* Outbound SYN_SENT -> ESTABLISHED. */
static __always_inline void qs_on_established(struct qs_conn *c, __u64 now, struct qs_effects *e)
{
	if (c->dir != QS_DIR_OUT || c->state != QS_ST_CONNECTING)
		return;
	c->state = QS_ST_IDLE;
	e->connect_ok = 1;
	e->connect_ns = qs_age(now, c->t_start);
	e->d_conns += 1;
}

/* -> TCP_CLOSE: undo every gauge this connection holds. The entry is deleted after.
 * http1: the connection answered in HTTP/1.x, so bytes its client sent after an answer are
 * its next request: left unread at the close, that request is dropped. */
static __always_inline void qs_on_close(struct qs_conn *c, int http1, struct qs_effects *e)
{
	__u64 old;
	if (c->dir == QS_DIR_OUT) {
		if (c->state == QS_ST_CONNECTING) {
			e->connect_fail = 1;
		} else {
			e->d_conns -= 1;
			if (c->state == QS_ST_BUSY)
				e->d_busy -= 1;
		}
		c->state = QS_ST_IDLE;
		return;
	}
	if (c->state == QS_ST_REQUEST)
		e->d_in_flight -= 1;
	/* The connection count is undone from the same compare-and-swap that closes the flags:
	 * an accept() (process context) racing a reset (softirq) either set ACCEPTED first, and
	 * this sees it, or finds CLOSED and counts nothing. A plain read here left +1 behind. */
	old = qs_aflags_update(c, QS_A_CLOSED, QS_A_UNREAD | QS_A_ACCEPTED, e);
	if (old != QS_A_RACED && (old & QS_A_ACCEPTED))
		e->d_conns -= 1;
	if (http1 && old != QS_A_RACED && (old & QS_A_UNREAD) && c->state != QS_ST_REQUEST)
		e->dropped = 1;
	c->state = QS_ST_IDLE;
}

/* Connection c turns out to speak HTTP/2 and its streams will be followed (h2.h): the
 * read/write turn it may be in is no request (no call), and leaves in flight (busy) uncounted. */
static __always_inline void qs_conn_to_h2(struct qs_conn *c, struct qs_effects *e)
{
	if (c->state == QS_ST_REQUEST)
		e->d_in_flight -= 1;
	if (c->state == QS_ST_BUSY)
		e->d_busy -= 1;
	c->state = QS_ST_IDLE;
	c->flags &= ~QS_F_START_UNKNOWN;
	c->proto = QS_PROTO_H2;
}

/* "HTTP/1.x NNN" at the start of b: NNN, else 0. Only these 12 bytes are ever looked at. */
static __always_inline int qs_http_status_code(const unsigned char *b, int n)
{
	if (n < 12)
		return 0;
	if (b[0] != 'H' || b[1] != 'T' || b[2] != 'T' || b[3] != 'P' || b[4] != '/' ||
	    b[5] != '1' || b[6] != '.' || b[8] != ' ')
		return 0;
	if (b[9] < '0' || b[9] > '9' || b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9')
		return 0;
	return (b[9] - '0') * 100 + (b[10] - '0') * 10 + (b[11] - '0');
}

/* Do b's n bytes begin an HTTP/1.x request line, a method and a space? A method is 3 to 10
 * upper-case letters (RFC 9110's, WebDAV's PROPFIND). Only these bytes are looked at. */
static __always_inline int qs_http_request_line(const unsigned char *b, int n)
{
	int i;
	for (i = 0; i < 11 && i < n; i++) {
		if (b[i] == ' ')
			return i >= 3;
		if (b[i] < 'A' || b[i] > 'Z')
			return 0;
	}
	return 0;
}

/* The status line at the start of a response -> QS_STATUS_*; anything else (HTTP/2 frames,
 * TLS records, a short first write) is unknown. */
static __always_inline int qs_http_status_class(const unsigned char *b, int n)
{
	switch ((__u32)qs_http_status_code(b, n) / 100) {  /* unsigned: BPF has no signed division */
	case 2: return QS_STATUS_2XX;
	case 3: return QS_STATUS_3XX;
	case 4: return QS_STATUS_4XX;
	case 5: return QS_STATUS_5XX;
	default: return QS_STATUS_UNKNOWN;
	}
}

/* Does b start with an HTTP/2 frame header a server sends (RFC 9113 4.1, 6)? Every field is
 * checked: length within the default SETTINGS_MAX_FRAME_SIZE (16384), a known type with that
 * type's fixed length and stream rule, reserved bit clear. A status line ('H') or a TLS
 * record (0x14-0x17) fails on the first byte already. */
static __always_inline int qs_is_h2_frame(const unsigned char *b, int n)
{
	__u32 len, stream;
	if (n < QS_H2_FRAME_HEADER || (b[5] & 0x80))
		return 0;
	len = ((__u32)b[0] << 16) | ((__u32)b[1] << 8) | b[2];
	stream = ((__u32)b[5] << 24) | ((__u32)b[6] << 16) | ((__u32)b[7] << 8) | b[8];
	if (len > 16384)
		return 0;
	switch (b[3]) {
	case 0: /* DATA */ case 1: /* HEADERS */ case 5: /* PUSH_PROMISE */ case 9: /* CONTINUATION */
		return stream != 0;
	case 2: /* PRIORITY */ return stream != 0 && len == 5;
	case 3: /* RST_STREAM */ return stream != 0 && len == 4;
	case 4: /* SETTINGS */ return stream == 0 && len % 6 == 0;
	case 6: /* PING */ return stream == 0 && len == 8;
	case 7: /* GOAWAY */ return stream == 0 && len >= 8;
	case 8: /* WINDOW_UPDATE */ return len == 4;
	default: return 0;
	}
}

/* A TLS record header (RFC 8446 5.1): content type 20-23, legacy version 3.x, length within
 * a record's bound. */
static __always_inline int qs_is_tls_record(const unsigned char *b, int n)
{
	__u32 len;
	if (n < 5 || b[0] < 20 || b[0] > 23 || b[1] != 3 || b[2] > 4)
		return 0;
	len = ((__u32)b[3] << 8) | b[4];
	return len > 0 && len <= 16384 + 2048;
}

/* The first n bytes of a response: its status class, or QS_STATUS_H2 / QS_STATUS_TLS. */
static __always_inline int qs_response_class(const unsigned char *b, int n)
{
	if (qs_is_h2_frame(b, n))
		return QS_STATUS_H2;
	if (qs_is_tls_record(b, n))
		return QS_STATUS_TLS;
	return qs_http_status_class(b, n);
}

/* --tls: the class of a response whose first write carried a TLS record (record ==
 * QS_STATUS_TLS). hooked: the writing process's libssl is probed; armed: an SSL_write ran on
 * this thread since its last socket write, and plain is its plaintext's class. A record
 * written with nothing pending came from outside SSL_write (handshake, session ticket,
 * alert): QS_TLS_CONTROL, no response. Unprobed, the record stays QS_STATUS_TLS (unknown). */
#define QS_TLS_CONTROL (-1)
static __always_inline int qs_tls_write_status(int record, int hooked, int armed, int plain)
{
	if (record != QS_STATUS_TLS || !hooked)
		return record;
	if (!armed)
		return QS_TLS_CONTROL;
	return plain == QS_STATUS_TLS ? QS_STATUS_UNKNOWN : plain;
}

/* A response of this connection began with `status`: the QS_F_H2 / QS_F_TLS bit it sets for
 * the first time (the caller counts the connection once), else 0. */
static __always_inline __u8 qs_note_protocol(struct qs_conn *c, int status)
{
	__u8 bit = status == QS_STATUS_H2 ? QS_F_H2 : status == QS_STATUS_TLS ? QS_F_TLS : 0;
	if (!bit || (c->flags & bit))
		return 0;
	c->flags |= bit;
	return bit;
}

#endif
