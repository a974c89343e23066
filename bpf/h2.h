/* HTTP/2 streams of an inbound connection (RFC 9113): ONE implementation, included by
 * sock.bpf.c and unit-tested from C++ (tests/unit/h2_streams_test.cpp) without root.
 *
 * An HTTP/2 connection carries many requests at once, one per stream, so its read/write turns
 * (conn_state.h) are not requests. sock.bpf.c walks the frame headers of every read and write
 * of such a connection (9 bytes each; payloads are skipped, never copied, except the first
 * bytes of a response's header block, for its :status) and hands each header to
 * qs_h2_on_frame, which follows the streams:
 *   a stream is in flight from the client's HEADERS (read) to the server's frame that carries
 *   END_STREAM for it (written): latency = that interval; status class from the response's
 *   first HEADERS (qs_h2_status_class). A stream the client resets is dropped (no latency), one
 *   the server resets is answered: with its HEADERS' status when it sent them, else unknown.
 * Open streams sit in QS_H2_SLOTS slots per connection, searched from a home slot indexed by
 * stream id (client stream ids are odd and increase, RFC 9113 5.1.1, so consecutive streams
 * have consecutive homes) over QS_H2_PROBE slots: a slow stream keeps its slot while the fast
 * ones after it wrap around, and a freed slot pulls the streams placed past it back toward their
 * homes (qs_h2_close_gap). A new stream that finds those slots all taken evicts the oldest,
 * counted: its end was missed, or more streams were open than slots (nginx allows 128).
 * Nothing here touches a map or a helper. */
#ifndef QSCOPE_H2_H
#define QSCOPE_H2_H

#include "hpack.h"

#define QS_H2_SLOTS 128
#define QS_H2_CONNS 1024          /* HTTP/2 connections followed per stream at once (sock.bpf.c's h2_conns) */
#define QS_H2_HEADER 9
#define QS_H2_PREFACE_LEN 24      /* "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" */
#define QS_H2_PREFACE_PEEK 16     /* its first 16 bytes are what is compared */
#define QS_H2_PEEK 16             /* bytes copied at the start of a response's header block */
#define QS_H2_MAX_STRICT 16384    /* SETTINGS_MAX_FRAME_SIZE's default: the bound when re-finding a frame */

#define QS_H2_DATA 0
#define QS_H2_HEADERS 1
#define QS_H2_PRIORITY 2
#define QS_H2_RST_STREAM 3
#define QS_H2_SETTINGS 4
#define QS_H2_PUSH_PROMISE 5
#define QS_H2_PING 6
#define QS_H2_GOAWAY 7
#define QS_H2_WINDOW_UPDATE 8
#define QS_H2_CONTINUATION 9

#define QS_H2_END_STREAM 0x1
#define QS_H2_END_HEADERS 0x4
#define QS_H2_PADDED 0x8
#define QS_H2_PRIORITY_FLAG 0x20

struct qs_h2_frame {
	__u32 len;
	__u32 sid;
	__u8 type;
	__u8 flags;
	__u8 pad[2];
};

/* One direction of the byte stream (reads: rx, writes: tx). */
struct qs_h2_dir {
	__u32 skip;       /* payload bytes of the current frame not yet walked */
	__u32 peek_sid;   /* tx: the stream whose header block begins with the next payload byte */
	__u8 have;        /* bytes of a frame header split across reads or writes, in hdr */
	__u8 sync;        /* walking on frame boundaries; 0: lost them, the next syscall re-finds one */
	__u8 peek;        /* tx: peek_sid's status is in the next payload bytes */
	__u8 peek_skip;   /* ... after this many bytes (pad length, priority fields) */
	__u8 peek_end;    /* ... and the same frame ends the stream (a response with no body) */
	__u8 walk;        /* tx: the whole header block is walked (hpack.h), not only its first bytes */
	__u8 pad[2];
	__u32 blk;        /* ... bytes of it left in the current frame */
	__u32 pad2;
	__u8 hdr[24];     /* 9 used; the rest lets a variable-length copy be bounded for the verifier */
};

struct qs_h2 {
	struct qs_h2_dir rx, tx;
	struct qs_hpack hp;            /* the responses' header blocks (tx inbound, rx outbound) */
	__u32 open;                    /* streams counted in flight (undone at close) */
	__u32 pad;
	__u32 sid[QS_H2_SLOTS];        /* 0: free */
	__u64 t[QS_H2_SLOTS];          /* the request's HEADERS read */
	__u8 status[QS_H2_SLOTS];      /* QS_STATUS_* of the response, once its HEADERS are written */
};

/* What one frame did to the streams; sock.bpf.c applies it to the port's gauges. */
struct qs_h2_event {
	__u8 opened;      /* a stream began: in flight +1 */
	__u8 answered;    /* a stream ended with a response: in flight -1, latency and status */
	__u8 dropped;     /* a stream ended without one (the client reset it): in flight -1 */
	__u8 evicted;     /* an older open stream lost its slot: in flight -1, counted as lost */
	__u8 status;      /* of the answered stream */
	__u8 server_reset;/* answered by the server's RST_STREAM */
	__u8 unseen;      /* the server ended a client stream whose start was not seen */
	__u8 trailers;    /* the answered stream ended with a second HEADERS frame: trailers, as gRPC
	                   * sends its status in */
	__u8 grpc;        /* its status is gRPC's (grpc-status read): grpc_code */
	__u8 grpc_code;
	__u8 grpc_unread; /* it is gRPC's, behind a table reference not known: status is :status's */
	__u64 latency_ns;
};

static __always_inline void qs_h2_decode(const __u8 *b, struct qs_h2_frame *f)
{
	f->len = ((__u32)b[0] << 16) | ((__u32)b[1] << 8) | b[2];
	f->type = b[3];
	f->flags = b[4];
	f->sid = (((__u32)b[5] & 0x7f) << 24) | ((__u32)b[6] << 16) | ((__u32)b[7] << 8) | b[8];
}

/* Could this header be a frame? Each known type's stream rule and fixed length (RFC 9113 6);
 * a client's streams are odd. strict (re-finding frames after a loss or at a connection met
 * mid-way): also a known type, the reserved bit clear and the default size bound, since a
 * payload byte that passes is taken as a frame. In sync, unknown types are extensions to skip. */
static __always_inline int qs_h2_plausible(const __u8 *b, int from_client, int strict)
{
	struct qs_h2_frame f;
	qs_h2_decode(b, &f);
	if (strict && ((b[5] & 0x80) || f.len > QS_H2_MAX_STRICT || f.type > QS_H2_CONTINUATION))
		return 0;
	switch (f.type) {
	case QS_H2_HEADERS:
		return f.sid != 0 && (!from_client || (f.sid & 1));
	case QS_H2_DATA: case QS_H2_CONTINUATION:
		return f.sid != 0;
	case QS_H2_PUSH_PROMISE: return f.sid != 0 && !from_client;
	case QS_H2_PRIORITY: return f.sid != 0 && f.len == 5;
	case QS_H2_RST_STREAM: return f.sid != 0 && f.len == 4;
	case QS_H2_SETTINGS: return f.sid == 0 && f.len % 6 == 0;
	case QS_H2_PING: return f.sid == 0 && f.len == 8;
	case QS_H2_GOAWAY: return f.sid == 0 && f.len >= 8;
	case QS_H2_WINDOW_UPDATE: return f.len == 4;
	default: return 1;
	}
}

/* Does b (n bytes) begin with the client connection preface? */
static __always_inline int qs_h2_is_preface(const __u8 *b, int n)
{
	const char *p = "PRI * HTTP/2.0\r\n";
	int i;
	if (n < QS_H2_PREFACE_PEEK)
		return 0;
	for (i = 0; i < QS_H2_PREFACE_PEEK; i++)
		if (b[i] != (__u8)p[i])
			return 0;
	return 1;
}

/* :status as it begins at b[i]: i is a constant at each call, so a BPF stack buffer is never
 * read at a variable offset. */
static __always_inline int qs_h2_status_at(const __u8 *b, int n, const int i)
{
	if (i >= n)
		return QS_STATUS_UNKNOWN;
	switch (b[i]) {
	case 0x88: case 0x89: case 0x8a: return QS_STATUS_2XX;   /* 200 204 206 */
	case 0x8b: return QS_STATUS_3XX;                         /* 304 */
	case 0x8c: case 0x8d: return QS_STATUS_4XX;              /* 400 404 */
	case 0x8e: return QS_STATUS_5XX;                         /* 500 */
	case 0x48: case 0x08: case 0x18: break;                  /* literal, name :status */
	default: return QS_STATUS_UNKNOWN;
	}
	if (i + 2 >= n)
		return QS_STATUS_UNKNOWN;
	if (!(b[i + 1] & 0x80) && (b[i + 1] & 0x7f) != 3)         /* plain: 3 ASCII digits */
		return QS_STATUS_UNKNOWN;
	return qs_hp_status_value(&b[i + 2], 1, b[i + 1] & 0x80);
}

/* The status class of a response from the first n bytes of its header block (RFC 7541), which
 * encoders begin with :status: an indexed field of the static table (0x88 ":status 200" ...
 * 0x8e ":status 500"), or a literal with the static name :status (index 8; with, without or
 * never indexed) whose value is 3 ASCII digits or their Huffman code, whose first symbol is
 * the class (Appendix B: '2' = 00010, '3' = 011001, '4' = 011010, '5' = 011011). A dynamic
 * table size update may come first (nginx sends one in a connection's first response). A
 * :status from the dynamic table, or not first, is unknown. */
static __always_inline int qs_h2_status_class(const __u8 *b, int n)
{
	if (n < 1)
		return QS_STATUS_UNKNOWN;
	if ((b[0] & 0xe0) != 0x20)
		return qs_h2_status_at(b, n, 0);
	/* a size update: 001xxxxx, its integer continued in bytes whose high bit is set */
	if ((b[0] & 0x1f) != 0x1f)
		return qs_h2_status_at(b, n, 1);
	if (n < 2 || !(b[1] & 0x80))
		return qs_h2_status_at(b, n, 2);
	if (n < 3 || !(b[2] & 0x80))
		return qs_h2_status_at(b, n, 3);
	if (n < 4 || !(b[3] & 0x80))
		return qs_h2_status_at(b, n, 4);
	return QS_STATUS_UNKNOWN;
}

#define QS_H2_PROBE 16     /* slots searched from a stream's home slot */

static __always_inline __u32 qs_h2_home(__u32 sid)
{
	return (sid >> 1) & (QS_H2_SLOTS - 1);
}

/* The slot holding open stream sid, or QS_H2_SLOTS. */
static __always_inline __u32 qs_h2_find(const struct qs_h2 *h, __u32 sid)
{
	__u32 i, s;
	if (!sid)
		return QS_H2_SLOTS;
	for (i = 0; i < QS_H2_PROBE; i++) {
		s = (qs_h2_home(sid) + i) & (QS_H2_SLOTS - 1);
		if (h->sid[s] == sid)
			return s;
	}
	return QS_H2_SLOTS;
}

/* A slot for new stream sid: the first free one from its home, else the oldest stream's among
 * those searched (*evicted: it loses its place). */
static __always_inline __u32 qs_h2_place(const struct qs_h2 *h, __u32 sid, int *evicted)
{
	__u32 i, s, oldest = qs_h2_home(sid);
	*evicted = 0;
	for (i = 0; i < QS_H2_PROBE; i++) {
		s = (qs_h2_home(sid) + i) & (QS_H2_SLOTS - 1);
		if (!h->sid[s])
			return s;
		if (h->t[s] < h->t[oldest & (QS_H2_SLOTS - 1)])
			oldest = s;
	}
	*evicted = 1;
	return oldest & (QS_H2_SLOTS - 1);
}

/* Slot `hole` was freed: the streams placed past it in its run move back toward their homes
 * (backward-shift deletion). Without it every wrap of the stream ids past a slow stream pushed
 * the fast ones one slot further from home, until after QS_H2_PROBE wraps the slow one was
 * evicted with a fraction of the slots in use. One step per call: the run can be all 128
 * slots, a loop the BPF verifier will not follow inline, so sock.bpf.c steps it in bpf_loop. */
struct qs_h2_gap {
	__u32 start;   /* the slot freed */
	__u32 hole;    /* the slot free now */
	__u32 i;       /* slots after start looked at */
	__u32 pad;
};

/* 1: the run ended. */
static __always_inline int qs_h2_gap_step(struct qs_h2 *h, struct qs_h2_gap *g)
{
	__u32 j, home, hole;
	if (++g->i >= QS_H2_SLOTS)
		return 1;
	j = (g->start + g->i) & (QS_H2_SLOTS - 1);
	if (!h->sid[j])
		return 1;
	home = qs_h2_home(h->sid[j]);
	hole = g->hole & (QS_H2_SLOTS - 1);
	/* j's stream may fill the hole when the hole lies cyclically in [home, j) */
	if (((j - home) & (QS_H2_SLOTS - 1)) < ((j - hole) & (QS_H2_SLOTS - 1)))
		return 0;
	h->sid[hole] = h->sid[j];
	h->t[hole] = h->t[j];
	h->status[hole] = h->status[j];
	h->sid[j] = 0;
	g->hole = j;
	return 0;
}

#if defined(__bpf__)
static __always_inline void qs_h2_close_gap(struct qs_h2 *h, __u32 hole);  /* sock.bpf.c */
#else
static inline void qs_h2_close_gap(struct qs_h2 *h, __u32 hole)
{
	struct qs_h2_gap g = {hole, hole, 0, 0};
	while (!qs_h2_gap_step(h, &g))
		;
}
#endif

/* The stream ends: fill ev from its slot and free it. A connection still learning whether it
 * is gRPC's (hpack.h) knows at its first answer: trailers, or a grpc-status, say so. */
static __always_inline void qs_h2_end(struct qs_h2 *h, __u32 slot, __u64 now, int answered,
				      struct qs_h2_event *ev)
{
	if (answered) {
		ev->answered = 1;
		ev->status = h->status[slot];
		ev->latency_ns = now > h->t[slot] ? now - h->t[slot] : 0;
		if (h->hp.mode == QS_HP_LEARN)
			h->hp.mode = ev->trailers || ev->grpc ? QS_HP_FULL : QS_HP_PEEK;
	} else {
		ev->dropped = 1;
	}
	h->sid[slot] = 0;
	if (h->open)
		h->open--;
	qs_h2_close_gap(h, slot);
}

/* A whole frame header was walked; from_client: the client sent it (a server read it, or a
 * client wrote it), else the server did. Returns what it did to the streams. For a response's
 * HEADERS, d->peek asks the walker for the first bytes of the payload (qs_h2_peeked). */
static __always_inline void qs_h2_on_frame(struct qs_h2 *h, struct qs_h2_dir *d, int from_client,
					   const struct qs_h2_frame *f, __u64 now,
					   struct qs_h2_event *ev)
{
	__u32 slot = qs_h2_find(h, f->sid);
	int open = slot < QS_H2_SLOTS, evicted;

	slot &= QS_H2_SLOTS - 1;
	if (from_client) {
		if (f->type == QS_H2_HEADERS && !open && (f->sid & 1)) {
			slot = qs_h2_place(h, f->sid, &evicted) & (QS_H2_SLOTS - 1);
			if (evicted) {
				ev->evicted = 1;
				if (h->open)
					h->open--;
			}
			h->sid[slot] = f->sid;
			h->t[slot] = now;
			h->status[slot] = QS_STATUS_UNKNOWN;
			h->open++;
			ev->opened = 1;
		} else if (f->type == QS_H2_RST_STREAM && open) {
			qs_h2_end(h, slot, now, 0, ev);
		}
		return;
	}
	if (h->hp.mode != QS_HP_PEEK && (f->type == QS_H2_HEADERS || f->type == QS_H2_PUSH_PROMISE ||
					  f->type == QS_H2_CONTINUATION) && f->len) {
		/* every block is walked whole (hpack.h), an unanswered stream's too: each can add
		 * table entries. A block padded (its end unknown), pushed or in pieces is not. */
		__u32 prio = (f->flags & QS_H2_PRIORITY_FLAG) ? 5 : 0;
		if (f->type == QS_H2_HEADERS && !(f->flags & QS_H2_PADDED) &&
		    (f->flags & QS_H2_END_HEADERS) && f->len > prio) {
			d->peek = 1;
			d->walk = 1;
			d->peek_sid = f->sid;
			d->peek_skip = prio;
			d->peek_end = f->flags & QS_H2_END_STREAM;
			d->blk = f->len - prio;
			qs_hp_begin(&h->hp);
			return;
		}
		h->hp.lost = 1;
	}
	if (!open) {
		if ((f->sid & 1) && (f->type == QS_H2_RST_STREAM ||
				     ((f->type == QS_H2_DATA || f->type == QS_H2_HEADERS) && (f->flags & QS_H2_END_STREAM))))
			ev->unseen = 1;
		return;
	}
	if (f->type == QS_H2_HEADERS && h->status[slot] == QS_STATUS_UNKNOWN && f->len) {
		/* the status comes from the payload: a frame that also ends the stream ends it
		 * once its first bytes are seen (qs_h2_peeked) */
		d->peek = 1;
		d->walk = 0;
		d->peek_sid = f->sid;
		d->peek_skip = ((f->flags & QS_H2_PADDED) ? 1 : 0) + ((f->flags & QS_H2_PRIORITY_FLAG) ? 5 : 0);
		d->peek_end = f->flags & QS_H2_END_STREAM;
		return;
	}
	if ((f->type == QS_H2_DATA || f->type == QS_H2_HEADERS) && (f->flags & QS_H2_END_STREAM)) {
		/* a HEADERS frame after the response's, whose status is known: trailers. Not walked
		 * (the connection did not look like gRPC's at its first answer, or its table is
		 * lost): a grpc-status in them is not read */
		ev->trailers = f->type == QS_H2_HEADERS && f->len && h->status[slot] != QS_STATUS_UNKNOWN;
		ev->grpc_unread = ev->trailers;
		qs_h2_end(h, slot, now, 1, ev);
	} else if (f->type == QS_H2_RST_STREAM) {
		ev->server_reset = 1;
		qs_h2_end(h, slot, now, 1, ev);
	}
}

/* A header block walked whole (d->walk) ended; cut: it ended inside a field. Its stream takes
 * the block's :status if it had none, and gRPC's class if a grpc-status was read (hpack.h's
 * qs_grpc_class); trailers whose status hides behind an entry not known are unread. */
static __always_inline void qs_h2_block_done(struct qs_h2 *h, struct qs_h2_dir *d, int cut,
					     __u64 now, struct qs_h2_event *ev)
{
	struct qs_hpack *s = &h->hp;
	__u32 slot = qs_h2_find(h, d->peek_sid);
	int first;

	d->peek = 0;
	d->walk = 0;
	if (cut)
		qs_hp_lose(s);
	if (slot >= QS_H2_SLOTS) {
		if (d->peek_end && (d->peek_sid & 1))
			ev->unseen = 1;
		return;
	}
	slot &= QS_H2_SLOTS - 1;
	first = h->status[slot] == QS_STATUS_UNKNOWN;
	if (first)
		h->status[slot] = s->status;
	if (s->grpc && s->grpc <= QS_GRPC_CODES) {
		ev->grpc = 1;
		ev->grpc_code = s->grpc - 1;
		h->status[slot] = qs_grpc_class(s->grpc - 1);
	} else if ((s->blind || cut) && d->peek_end && (!first || s->mode == QS_HP_FULL)) {
		ev->grpc_unread = 1;
	}
	if (!d->peek_end)
		return;
	ev->trailers = !first;
	qs_h2_end(h, slot, now, 1, ev);
}

/* The first n bytes of the header block d->peek asked for (after the frame's pad length and
 * priority fields, d->peek_skip, which the caller skips): the status of d->peek_sid, and its
 * end if that frame carried END_STREAM. */
static __always_inline void qs_h2_peeked(struct qs_h2 *h, struct qs_h2_dir *d, const __u8 *b, int n,
					 __u64 now, struct qs_h2_event *ev)
{
	__u32 slot = qs_h2_find(h, d->peek_sid);

	d->peek = 0;
	if (slot >= QS_H2_SLOTS)
		return;
	h->status[slot] = qs_h2_status_class(b, n);
	if (d->peek_end)
		qs_h2_end(h, slot, now, 1, ev);
}

#endif
