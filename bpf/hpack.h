/* gRPC's status in the header blocks of HTTP/2 responses (RFC 7541, HPACK): ONE implementation,
 * included by h2.h (so by sock.bpf.c) and unit-tested from C++ (tests/unit/hpack_test.cpp).
 *
 * gRPC answers every call `:status 200` and puts its own status, `grpc-status`, in the
 * trailers. An encoder sends that field as a literal the first time (its name in plain text or
 * Huffman-coded) and, when it asked for the field to be indexed, as a one-byte reference to its
 * dynamic table afterwards: C-core (Python, C++, Ruby...) and Go do so for every call after a
 * connection's first. A reference says only "entry 62 + k", k the number of entries the encoder
 * has added since; so to read it, every header block the encoder sends on the connection is
 * walked, field by field, counting the entries it adds (literals "with incremental indexing")
 * and remembering which of them were grpc-status (or :status) and their values. Strings are
 * skipped by their length, never copied, except a name 11 bytes long or less (to compare it with
 * grpc-status) and the few bytes of those two fields' values.
 *
 * The walk is a byte-driven state machine (qs_hp_feed): a header block reaches it in pieces,
 * split across iovecs, writes and reads. Entries added before the first block walked (a
 * connection met mid-way) or before a block that could not be walked whole are not known: a
 * reference to one is `blind`, and an answer whose status lies behind one is counted as unread.
 * Nothing here touches a map or a helper. */
#ifndef QSCOPE_HPACK_H
#define QSCOPE_HPACK_H

#define QS_HP_CHUNK 64        /* header-block bytes copied and walked at once */
#define QS_HP_REMEMBER 4      /* table entries remembered (grpc-status and :status ones) */
#define QS_HP_STATIC 61       /* entries in the static table (Appendix A); the dynamic begin at 62 */
#define QS_HP_NAME_MAX 11     /* "grpc-status"; its Huffman code is 8 bytes */
#define QS_HP_VALUE_MAX 3     /* bytes kept of a grpc-status or :status value */
#define QS_HP_CAP 16          /* cap's size: a power of 2 >= both */

/* where the walk is */
#define QS_HP_FIELD 0         /* the next byte begins a field */
#define QS_HP_INT 1           /* an integer's continuation bytes */
#define QS_HP_LEN 2           /* the next byte begins a string: H bit, 7-bit length prefix */
#define QS_HP_LEN_INT 3       /* the length's continuation bytes */
#define QS_HP_STR 4           /* a string's bytes */
#define QS_HP_BAD 5           /* not HPACK: the rest of the block is not walked */

/* a field's representation (6.1-6.3) */
#define QS_HP_R_INDEXED 0
#define QS_HP_R_INSERT 1      /* literal with incremental indexing: the encoder adds an entry */
#define QS_HP_R_LITERAL 2     /* literal without or never indexed */
#define QS_HP_R_SIZE 3        /* dynamic table size update */

/* what a field's name is */
#define QS_HP_N_OTHER 0
#define QS_HP_N_STATUS 1      /* :status */
#define QS_HP_N_GRPC 2        /* grpc-status */

/* how much of a connection's header blocks is walked */
#define QS_HP_LEARN 0         /* all, until its first answered stream shows whether it is gRPC */
#define QS_HP_FULL 1          /* all: gRPC */
#define QS_HP_PEEK 2          /* the first bytes of each response's first block, for :status */

#define QS_GRPC_CODES 17      /* OK (0) ... UNAUTHENTICATED (16) */

struct qs_hpack {
	__u32 inserted;                  /* entries the encoder added to its dynamic table so far */
	__u32 forgot;                    /* the newest of them no longer remembered (0: none) */
	__u32 num;                       /* the integer being decoded */
	__u32 str;                       /* bytes left of the string being read */
	__u32 ins[QS_HP_REMEMBER];       /* remembered entries' insertion numbers (1-based; 0: free) */
	__u8 kind[QS_HP_REMEMBER];       /* QS_HP_N_GRPC or QS_HP_N_STATUS */
	__u8 val[QS_HP_REMEMBER];        /* the grpc code, or the QS_STATUS_* class */
	__u8 lost;                       /* a block was not walked whole: start over at the next */
	__u8 mode;                       /* QS_HP_LEARN, QS_HP_FULL, QS_HP_PEEK */
	__u8 state;                      /* QS_HP_FIELD ... */
	__u8 rep;                        /* the field's QS_HP_R_* */
	__u8 stage;                      /* 0: its index, 1: its name string, 2: its value string */
	__u8 name;                       /* QS_HP_N_* */
	__u8 shift;                      /* of the integer's next 7 bits */
	__u8 huff;                       /* the string is Huffman-coded */
	__u8 ncap;                       /* bytes of the string in cap */
	__u8 keep;                       /* the string is copied to cap (else skipped) */
	__u8 next;                       /* the remembered slot to reuse next */
	/* this block's findings */
	__u8 status;                     /* :status's QS_STATUS_* class, QS_STATUS_UNKNOWN if none */
	__u8 grpc;                       /* grpc-status + 1; 0: none */
	__u8 blind;                      /* a field came from a table entry not known */
	__u8 pad[2];
	__u8 cap[QS_HP_CAP];
};

/* The HTTP status class gRPC's code maps to, as grpc-gateway maps it (runtime.HTTPStatusFromCode):
 * OK 200; CANCELLED 499; INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400; NOT_FOUND 404;
 * ALREADY_EXISTS, ABORTED 409; PERMISSION_DENIED 403; RESOURCE_EXHAUSTED 429; UNAUTHENTICATED
 * 401; UNKNOWN, INTERNAL, DATA_LOSS 500; UNIMPLEMENTED 501; UNAVAILABLE 503; DEADLINE_EXCEEDED
 * 504. A code past 16 is unknown. */
static __always_inline int qs_grpc_class(__u32 code)
{
	switch (code) {
	case 0: return QS_STATUS_2XX;
	case 1: case 3: case 5: case 6: case 7: case 8: case 9: case 10: case 11: case 16:
		return QS_STATUS_4XX;
	case 2: case 4: case 12: case 13: case 14: case 15:
		return QS_STATUS_5XX;
	default: return QS_STATUS_UNKNOWN;
	}
}

/* A block begins: its findings are cleared. The table's entries are counted from the first block
 * walked (a connection met mid-way: from there), and after a block not walked whole, from the
 * next one: an entry older than that is not known. */
static __always_inline void qs_hp_begin(struct qs_hpack *s)
{
	__u32 i;
	if (s->lost) {
		s->lost = 0;
		s->inserted = 0;
		s->forgot = 0;
		for (i = 0; i < QS_HP_REMEMBER; i++)
			s->ins[i] = 0;
	}
	s->state = QS_HP_FIELD;
	s->status = QS_STATUS_UNKNOWN;
	s->grpc = 0;
	s->blind = 0;
}

/* The block could not be walked whole: what it added to the table is unknown. */
static __always_inline void qs_hp_lose(struct qs_hpack *s)
{
	s->lost = 1;
	s->state = QS_HP_BAD;
}

/* What dynamic index idx (>= 62) refers to: QS_HP_N_GRPC or _STATUS with *val, else
 * QS_HP_N_OTHER, or -1 when the table is not known well enough to say. */
static __always_inline int qs_hp_lookup(const struct qs_hpack *s, __u32 idx, __u8 *val)
{
	__u32 back = idx - QS_HP_STATIC - 1, n, i;
	if (back >= s->inserted)
		return -1;                    /* added before the blocks walked */
	n = s->inserted - back;           /* the insertion number referred to */
	for (i = 0; i < QS_HP_REMEMBER; i++)
		if (s->ins[i] == n) {
			*val = s->val[i];
			return s->kind[i];
		}
	return n <= s->forgot ? -1 : QS_HP_N_OTHER;
}

/* :status's class from the first bytes of its value: 3 ASCII digits, or their Huffman code,
 * whose first symbol is the class (Appendix B: '2' 00010, '3' 011001, '4' 011010, '5' 011011). */
static __always_inline int qs_hp_status_value(const __u8 *v, __u32 n, int huff)
{
	if (!n)
		return QS_STATUS_UNKNOWN;
	if (!huff) {
		switch (v[0]) {
		case '2': return QS_STATUS_2XX;
		case '3': return QS_STATUS_3XX;
		case '4': return QS_STATUS_4XX;
		case '5': return QS_STATUS_5XX;
		default: return QS_STATUS_UNKNOWN;
		}
	}
	if ((v[0] >> 3) == 0x02)
		return QS_STATUS_2XX;
	switch (v[0] >> 2) {
	case 0x19: return QS_STATUS_3XX;
	case 0x1a: return QS_STATUS_4XX;
	case 0x1b: return QS_STATUS_5XX;
	default: return QS_STATUS_UNKNOWN;
	}
}

/* grpc-status's value, 1 or 2 decimal digits, plain or Huffman-coded (digits '0'-'2' have
 * 5-bit codes 0-2, '3'-'9' 6-bit codes 0x19-0x1f; the last byte is padded with 1s). -1 if it is
 * not one. */
static __always_inline int qs_hp_grpc_value(const __u8 *v, __u32 n, int huff)
{
	__u32 bits, pos = 0, code = 0, digits = 0, k, d;
	if (!n || n > 2)
		return -1;
	if (!huff) {
		if (v[0] < '0' || v[0] > '9' || (n == 2 && (v[1] < '0' || v[1] > '9')))
			return -1;
		return n == 2 ? (v[0] - '0') * 10 + (v[1] - '0') : v[0] - '0';
	}
	bits = ((__u32)v[0] << 24) | ((__u32)(n == 2 ? v[1] : 0xff) << 16) | 0xffff;
	for (k = 0; k < 2; k++) {
		if (pos + 5 > n * 8)
			break;
		d = bits >> (27 - pos) & 0x1f;
		if (d <= 2) {
			pos += 5;
		} else {
			d = bits >> (26 - pos) & 0x3f;
			if (d < 0x19 || d > 0x1f || pos + 6 > n * 8)
				break;
			d -= 0x16;
			pos += 6;
		}
		code = code * 10 + d;
		digits++;
	}
	/* what is left must be padding: fewer than 8 bits, all 1s */
	k = n * 8 - pos;
	d = (1u << k) - 1;
	if (!digits || k >= 8 || ((bits >> (32 - n * 8)) & d) != d)
		return -1;
	return code;
}

/* Is the string in cap the name grpc-status? */
static __always_inline int qs_hp_is_grpc_name(const struct qs_hpack *s)
{
	static const char plain[QS_HP_NAME_MAX] = {'g', 'r', 'p', 'c', '-', 's', 't', 'a', 't', 'u', 's'};
	static const __u8 coded[8] = {0x9a, 0xca, 0xc8, 0xb2, 0x12, 0x34, 0xda, 0x8f};
	__u32 i;
	if (s->huff) {
		if (s->ncap != sizeof(coded))
			return 0;
		for (i = 0; i < sizeof(coded); i++)
			if (s->cap[i] != coded[i])
				return 0;
		return 1;
	}
	if (s->ncap != QS_HP_NAME_MAX)
		return 0;
	for (i = 0; i < QS_HP_NAME_MAX; i++)
		if (s->cap[i] != (__u8)plain[i])
			return 0;
	return 1;
}

/* Remember entry number s->inserted (just added) as `kind` with value v. */
static __always_inline void qs_hp_remember(struct qs_hpack *s, __u8 kind, __u8 v)
{
	__u32 i = s->next & (QS_HP_REMEMBER - 1);
	if (s->ins[i] > s->forgot)
		s->forgot = s->ins[i];
	s->ins[i] = s->inserted;
	s->kind[i] = kind;
	s->val[i] = v;
	s->next = (i + 1) & (QS_HP_REMEMBER - 1);
}

/* The field's value string was read (its first bytes in cap when kept). */
static __always_inline void qs_hp_value_done(struct qs_hpack *s)
{
	__u32 n = s->keep ? s->ncap : 0;
	int v = -1;
	if (s->name == QS_HP_N_GRPC) {
		v = qs_hp_grpc_value(s->cap, n, s->huff);
		if (v >= 0)
			s->grpc = v + 1;
		else
			s->blind = 1;      /* a grpc-status qscope cannot read is not none */
	} else if (s->name == QS_HP_N_STATUS) {
		v = qs_hp_status_value(s->cap, n, s->huff);
		if (s->status == QS_STATUS_UNKNOWN)
			s->status = v;
	}
	if (s->rep == QS_HP_R_INSERT) {
		s->inserted++;
		if (s->name != QS_HP_N_OTHER && v >= 0)
			qs_hp_remember(s, s->name, v);
	}
	s->state = QS_HP_FIELD;
}

/* The string being read ended: after a name, its value follows. */
static __always_inline void qs_hp_string_end(struct qs_hpack *s)
{
	if (s->stage != 1) {
		qs_hp_value_done(s);
		return;
	}
	s->name = s->keep && qs_hp_is_grpc_name(s) ? QS_HP_N_GRPC : QS_HP_N_OTHER;
	s->stage = 2;
	s->state = QS_HP_LEN;
}

/* A string's length is known: read it next (stage 1, the name; 2, the value). */
static __always_inline void qs_hp_string(struct qs_hpack *s, __u32 len)
{
	s->str = len;
	s->ncap = 0;
	if (s->stage == 1)
		s->keep = len <= QS_HP_NAME_MAX;
	else
		s->keep = s->name != QS_HP_N_OTHER && len <= QS_HP_VALUE_MAX;
	s->state = QS_HP_STR;
	if (!len)
		qs_hp_string_end(s);
}

/* The field's index (or a size update's size) is decoded. */
static __always_inline void qs_hp_index(struct qs_hpack *s, __u32 idx)
{
	__u8 val = 0;
	int k = QS_HP_N_OTHER;

	if (s->rep == QS_HP_R_SIZE) {
		s->state = QS_HP_FIELD;     /* entries evicted keep their numbers: nothing to do */
		return;
	}
	if (idx > QS_HP_STATIC) {
		k = qs_hp_lookup(s, idx, &val);
		if (k < 0) {
			s->blind = 1;
			k = QS_HP_N_OTHER;
		}
	} else if (idx >= 8 && idx <= 14) {
		k = QS_HP_N_STATUS;        /* :status, with a value 200 204 206 304 400 404 500 */
		val = idx <= 10 ? QS_STATUS_2XX : idx == 11 ? QS_STATUS_3XX
			: idx <= 13 ? QS_STATUS_4XX : QS_STATUS_5XX;
	}
	if (s->rep == QS_HP_R_INDEXED) {
		if (!idx)
			qs_hp_lose(s);
		else if (k == QS_HP_N_GRPC)
			s->grpc = val + 1;
		else if (k == QS_HP_N_STATUS && s->status == QS_STATUS_UNKNOWN)
			s->status = val;
		if (idx)
			s->state = QS_HP_FIELD;
		return;
	}
	/* a literal: its name from the table (idx), or in a string next (0) */
	s->name = k;
	s->stage = idx ? 2 : 1;
	s->state = QS_HP_LEN;
}

/* An integer of RFC 7541 5.1 continues with byte c. 1 when it is complete. */
static __always_inline int qs_hp_int_more(struct qs_hpack *s, __u8 c)
{
	if (s->shift > 21) {           /* past 2^28: no header block has such numbers */
		qs_hp_lose(s);
		return 0;
	}
	s->num += (__u32)(c & 0x7f) << s->shift;
	s->shift += 7;
	return !(c & 0x80);
}

/* One byte of a header block, outside a skipped string. */
static __always_inline void qs_hp_byte(struct qs_hpack *s, __u8 c)
{
	__u32 mask;

	switch (s->state) {
	case QS_HP_FIELD:
		if (c & 0x80) {
			s->rep = QS_HP_R_INDEXED; mask = 0x7f;
		} else if (c & 0x40) {
			s->rep = QS_HP_R_INSERT; mask = 0x3f;
		} else if (c & 0x20) {
			s->rep = QS_HP_R_SIZE; mask = 0x1f;
		} else {
			s->rep = QS_HP_R_LITERAL; mask = 0x0f;
		}
		s->num = c & mask;
		s->shift = 0;
		if (s->num == mask)
			s->state = QS_HP_INT;
		else
			qs_hp_index(s, s->num);
		return;
	case QS_HP_INT:
		if (qs_hp_int_more(s, c))
			qs_hp_index(s, s->num);
		return;
	case QS_HP_LEN:
		s->huff = c >> 7;
		s->num = c & 0x7f;
		s->shift = 0;
		if (s->num == 0x7f)
			s->state = QS_HP_LEN_INT;
		else
			qs_hp_string(s, s->num);
		return;
	case QS_HP_LEN_INT:
		if (qs_hp_int_more(s, c))
			qs_hp_string(s, s->num);
		return;
	case QS_HP_STR:
		if (s->ncap < QS_HP_CAP)
			s->cap[s->ncap & (QS_HP_CAP - 1)] = c;
		s->ncap++;
		if (!--s->str)
			qs_hp_string_end(s);
		return;
	default:
		return;
	}
}

/* sock.bpf.c steps bytes through a global function of its own (hp_byte): checked once. */
#ifndef QS_HP_BYTE
#define QS_HP_BYTE qs_hp_byte
#endif

/* Walk n bytes of a header block (n <= QS_HP_CHUNK). Strings not kept are skipped whole. */
static __always_inline void qs_hp_feed(struct qs_hpack *s, const __u8 *b, __u32 n)
{
	__u32 i = 0, k, step;

	for (step = 0; step < QS_HP_CHUNK && i < n; step++) {
		if (s->state == QS_HP_BAD)
			return;
		if (s->state == QS_HP_STR && !s->keep) {
			k = n - i < s->str ? n - i : s->str;
			s->str -= k;
			i += k;
			if (!s->str)
				qs_hp_string_end(s);
			continue;
		}
		QS_HP_BYTE(s, b[i & (QS_HP_CHUNK - 1)]);
		i++;
	}
}

/* The block ended: 0 if it ended between fields, else it was cut (and the table is lost). */
static __always_inline int qs_hp_end(struct qs_hpack *s)
{
	if (s->state == QS_HP_FIELD)
		return 0;
	qs_hp_lose(s);
	return 1;
}

#endif
