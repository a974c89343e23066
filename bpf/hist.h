/* Log-linear latency histogram shared by the BPF programs and the collector.
 *
 * Why not log2 like runqlat: a log2 slot is 100% wide, so a p50 read from it can be off by
 * a factor of two, and the tests hold latencies to 10%. Sixteen linear sub-slots per power
 * of two bound a slot's width to 1/16 of its value (6.25%), and interpolation inside the
 * slot halves that, at 5 KiB per histogram.
 *
 * Values are nanoseconds. Slots 0..15 hold 0..15 ns exactly; after that slot
 * (msb-3)*16 + next-4-bits, so msb 4 (16..31 ns) starts at slot 16. QS_HIST_SLOTS covers
 * values up to 2^43 ns (~2.4 hours); larger values land in the last slot.
 */
#ifndef QSCOPE_HIST_H
#define QSCOPE_HIST_H

#define QS_HIST_SUB_BITS 4
#define QS_HIST_SUB (1 << QS_HIST_SUB_BITS)
#define QS_HIST_SLOTS 640

struct qs_hist {
	__u64 slots[QS_HIST_SLOTS];
	__u64 count;
	__u64 sum_ns;
};

static __always_inline __u32 qs_msb64(__u64 v)
{
	/* Branchy binary search: the BPF ISA has no clz, and this stays verifier-friendly. */
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8)  { v >>= 8;  r += 8; }
	if (v >> 4)  { v >>= 4;  r += 4; }
	if (v >> 2)  { v >>= 2;  r += 2; }
	if (v >> 1)  { r += 1; }
	return r;
}

static __always_inline __u32 qs_hist_slot(__u64 v)
{
	__u32 msb, idx;
	if (v < QS_HIST_SUB)
		return (__u32)v;
	msb = qs_msb64(v);
	idx = (msb - (QS_HIST_SUB_BITS - 1)) * QS_HIST_SUB +
	      (__u32)((v >> (msb - QS_HIST_SUB_BITS)) & (QS_HIST_SUB - 1));
	if (idx >= QS_HIST_SLOTS)
		idx = QS_HIST_SLOTS - 1;
	return idx;
}

/* Lower bound (inclusive) of a slot in ns; the upper bound is the next slot's lower bound. */
static __always_inline __u64 qs_hist_slot_low(__u32 idx)
{
	__u32 msb;
	if (idx < QS_HIST_SUB)
		return idx;
	msb = idx / QS_HIST_SUB + (QS_HIST_SUB_BITS - 1);
	return ((__u64)(QS_HIST_SUB + idx % QS_HIST_SUB)) << (msb - QS_HIST_SUB_BITS);
}

#ifdef __BPF__
static __always_inline void qs_hist_add(struct qs_hist *h, __u64 v)
{
	__u64 idx = qs_hist_slot(v);
	/* Linux 6.1's verifier (Debian 12) rejects the add below as an unbounded access: clang
	 * checks a zero-extended copy of idx and indexes with the original. The empty asm makes
	 * the checked register the one used (docs/kernel.md §6). */
	asm volatile("" : "+r"(idx));
	if (idx >= QS_HIST_SLOTS)
		return;
	__sync_fetch_and_add(&h->slots[idx], 1);
	__sync_fetch_and_add(&h->count, 1);
	__sync_fetch_and_add(&h->sum_ns, v);
}
#endif

#endif
