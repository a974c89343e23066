/* Which of an exporter's targets a process belongs to, for the hooks its targets share
 * (bpf/dispatch.bpf.c). Shared by dispatch.bpf.c (the reader), tree.bpf.c (forks and exits of
 * a member) and collector/engine/shared_hooks.cpp (the seeding and the clearing).
 *
 * One byte per tgid, 8 to a 64-bit word of an array map: 0 for no target, else the target's
 * slot + 1. A byte, not a bitmask of targets: a hook handed on with a tail call reaches one
 * program only, so a process can have one owner; a target whose process another already owns
 * takes no slot and attaches its own programs (user space decides, at the attach). pid_max
 * bytes: 4 MiB at 2^22, 32 KiB at the default 32,768. Words change with compare-and-swap: the
 * 7 neighbours of a byte may belong to other targets, whose forks run concurrently.
 */
#ifndef QSCOPE_OWNER_H
#define QSCOPE_OWNER_H

#include "syscalls.h"

/* Slots an exporter can give: one byte holds slot + 1, and the targets of one exporter are few. */
#define QS_OWNER_SLOTS 64

/* The polls' exits share one hook program; a target has one exit program per poll syscall
 * (sched.bpf.c qs_loop_exit_<name>), so a slot has this many entries in the exits' table, at
 * qs_poll_index(). -1: no poll. */
#define QS_OWNER_POLLS 8

static inline int qs_poll_index(long nr)
{
	switch (nr) {
	case QS_NR_epoll_wait: return 0;
	case QS_NR_epoll_pwait: return 1;
	case QS_NR_epoll_pwait2: return 2;
	case QS_NR_poll: return 3;
	case QS_NR_ppoll: return 4;
	case QS_NR_select: return 5;
	case QS_NR_pselect6: return 6;
	case QS_NR_io_uring_enter: return 7;
	default: return -1;
	}
}

#ifdef __BPF__
/* A hook's table of the targets' programs (a tail call lands in the entry of the event's
 * owner): QS_OWNER_SLOTS entries, or that many per slot. */
#define QS_TARGET_TABLE(name, per_slot)                                 \
	struct {                                                        \
		__uint(type, BPF_MAP_TYPE_PROG_ARRAY);                  \
		__uint(max_entries, QS_OWNER_SLOTS * (per_slot));       \
		__type(key, __u32);                                     \
		__type(value, __u32);                                   \
	} name SEC(".maps")

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);   /* user space seeds it with atomic compare-and-swap */
	__uint(max_entries, 1);       /* words; set before load (tree.bpf.c's copy: 1 when unshared) */
	__type(key, __u32);
	__type(value, __u64);
} qs_owner SEC(".maps");

/* slot + 1, or 0. */
static __always_inline __u32 qs_owner_of(__u32 tgid)
{
	__u32 w = tgid >> 3;
	__u64 *v = bpf_map_lookup_elem(&qs_owner, &w);

	return v ? (__u32)((*v >> ((tgid & 7) * 8)) & 0xff) : 0;
}

/* Sets tgid's byte from `from` to `to` (each slot + 1 or 0); 0 when another owner holds it, or
 * after a few lost races (a fork's mark is made again by user space from the fork's record). */
static __always_inline int qs_owner_swap(__u32 tgid, __u32 from, __u32 to)
{
	__u32 w = tgid >> 3, shift = (tgid & 7) * 8;
	__u64 *v = bpf_map_lookup_elem(&qs_owner, &w);
	int i;

	if (!v)
		return 0;
	for (i = 0; i < 4; i++) {
		__u64 cur = *v, byte = (cur >> shift) & 0xff;
		__u64 next = (cur & ~(0xffULL << shift)) | ((__u64)to << shift);

		if (byte != from)
			return byte == to;
		if (__sync_val_compare_and_swap(v, cur, next) == cur)
			return 1;
	}
	return 0;
}
#endif

#endif
