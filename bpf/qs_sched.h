/* Types shared by bpf/sched.bpf.c and collector/probes/sched/sched_source.cpp.
 *
 * Named qs_sched.h, not sched.h: bpf/ is on the C++ include path, and a bpf/sched.h would
 * shadow libc's <sched.h> (pthread.h includes it), breaking every C++ file.
 *
 * Fixed-width types only; the C++ side static_asserts the sizes. Kernel-only structs (the
 * per-thread state) stay in the .bpf.c.
 */
#ifndef QSCOPE_QS_SCHED_H
#define QSCOPE_QS_SCHED_H

#include "hist.h"
#include "syscalls.h"
#include "ustack.h"

#define QS_COMM_LEN 16
#define QS_KSTACK_DEPTH 32

/* Syscall "numbers" the program invents: never collide with real ones (>= 0) or -1. */
#define QS_SYSCALL_OTHER (-2)	/* the overflow bucket of a full waits map */

/* glibc 2.36's condvar waiters sleep on __g_signals[0] or [1] (+0x28/+0x2c of the 8-byte
 * aligned pthread_cond_t): the two words differ only in bit 2, so clearing the low three
 * bits makes them one gate. A mutex or semaphore word is 4 bytes; two unrelated ones
 * sharing an 8-byte word is rare enough to accept. */
#define QS_FUTEX_RES_MASK (~7ULL)

/* The resource key of a wait from the syscall and its first argument: the fd, or the
 * futex word (masked, see above). */
static __always_inline __u64 qs_wait_res(long long nr, __u64 di)
{
	switch (qs_sys_arg0_kind(nr)) {
	case QS_ARG0_FD:
		return di & 0xffffffffULL;
	case QS_ARG0_FUTEX:
		return di & QS_FUTEX_RES_MASK;
	default:
		return 0;
	}
}

/* Thread group from comm: trailing digits stripped, then the separators they hung from,
 * never the whole name. Must equal collector/model/thread_group.cpp thread_group_name() (unit-tested);
 * the kernel computes it so waits aggregate per group, not per thread, in the map. */
static __always_inline void qs_group_from_comm(const char comm[QS_COMM_LEN], char group[QS_COMM_LEN])
{
	int len = 0, end, i;
	for (i = 0; i < QS_COMM_LEN; i++) {
		if (comm[i] == 0)
			break;
		len = i + 1;
	}
	end = len;
	for (i = 0; i < QS_COMM_LEN; i++) {
		if (end > 0 && comm[(end - 1) & (QS_COMM_LEN - 1)] >= '0' &&
		    comm[(end - 1) & (QS_COMM_LEN - 1)] <= '9')
			end--;
		else
			break;
	}
	if (end < len) {
		for (i = 0; i < QS_COMM_LEN; i++) {
			char c;
			if (end <= 0)
				break;
			c = comm[(end - 1) & (QS_COMM_LEN - 1)];
			if (c == '-' || c == '_' || c == '#' || c == ' ' || c == '.')
				end--;
			else
				break;
		}
	}
	if (end == 0)
		end = len;
	for (i = 0; i < QS_COMM_LEN; i++)
		group[i] = i < end ? comm[i] : 0;
}

/* Compact log-linear wait histogram: four sub-slots per power of two of microseconds
 * (slot width <= 25% of its value, ~12% after interpolation), 544 bytes per wait key
 * instead of the 5 KiB of qs_hist. Waits are keyed per (group, syscall, resource) and can
 * number in the thousands (a JVM parks each thread on its own futex), so size matters more
 * here than for the few per-group runqueue histograms. Values below 1 us share slot 0. */
#define QS_WHIST_SHIFT 10
#define QS_WHIST_SUB_BITS 2
#define QS_WHIST_SUB (1 << QS_WHIST_SUB_BITS)
#define QS_WHIST_SLOTS 136

/* 64-bit throughout: a (__u32) cast lets clang-14 bounds-check one zero-extended copy and
 * index with another, which the verifier rejects. */
static __always_inline __u64 qs_whist_slot(__u64 ns)
{
	__u64 v = ns >> QS_WHIST_SHIFT;
	__u64 msb, idx;
	if (v < QS_WHIST_SUB)
		return v;
	msb = qs_msb64(v);
	idx = (msb - (QS_WHIST_SUB_BITS - 1)) * QS_WHIST_SUB +
	      ((v >> (msb - QS_WHIST_SUB_BITS)) & (QS_WHIST_SUB - 1));
	if (idx >= QS_WHIST_SLOTS)
		idx = QS_WHIST_SLOTS - 1;
	return idx;
}

/* Lower bound in ns of a slot; the upper bound is the next slot's lower bound. */
static __always_inline __u64 qs_whist_slot_low(__u32 idx)
{
	__u32 msb;
	if (idx < QS_WHIST_SUB)
		return (__u64)idx << QS_WHIST_SHIFT;
	msb = idx / QS_WHIST_SUB + (QS_WHIST_SUB_BITS - 1);
	return ((__u64)(QS_WHIST_SUB + idx % QS_WHIST_SUB) << (msb - QS_WHIST_SUB_BITS))
	       << QS_WHIST_SHIFT;
}

/* Off-CPU time aggregated in the kernel, cumulative since attach. */
struct qs_wait_key {
	char group[QS_COMM_LEN];
	__s32 syscall;
	__u32 tgid;		/* the process: an fd is only meaningful within its process */
	__u64 res;		/* fd, futex word & QS_FUTEX_RES_MASK, or 0 */
};

struct qs_wait_val {
	__u64 count;		/* completed waits */
	__u64 total_ns;		/* their off-CPU time, until wakeup */
	__u64 max_ns;
	__u32 slots[QS_WHIST_SLOTS];
};

/* Runqueue wait per thread group: key is the group name, value a struct qs_hist. */
struct qs_group_key {
	char group[QS_COMM_LEN];
	__u32 tgid;		/* a tree's processes have roles; user space labels by both */
};

/* One record per target thread, written by the task iterator at every collector tick:
 * the live view. Same kernel fields /proc/PID/task/TID/{stat,syscall} read (__state,
 * pt_regs->orig_ax), without 2 x 10,000 file reads per tick. */
#define QS_TREC_ON_CPU   1u	/* currently running on a CPU */
#define QS_TREC_SEEDED   2u	/* blocked since before the probes saw it: start is a lower bound */
#define QS_TREC_TRACKED  4u	/* the sched program knows when this wait started */

struct qs_thread_rec {
	__u32 tid;
	__u32 state;		/* task->__state | exit_state; 0 = runnable or running */
	__s32 syscall;		/* pt_regs orig_ax when blocked, else -1 */
	__u32 flags;		/* QS_TREC_* */
	__u64 res;		/* resource key of the current wait (as qs_wait_key.res) */
	__u64 block_start_ns;	/* CLOCK_MONOTONIC; 0 when not blocked */
	__u64 now_ns;
	__u32 futex_op;		/* si of a futex wait */
	__u32 tgid;
	char comm[QS_COMM_LEN];
	char group[QS_COMM_LEN];
};

/* Ring buffer records: the first field is the kind. */
enum qs_sched_event_kind { QS_EV_STACK = 1 };

/* A blocked thread's stacks, captured by the task iterator (not on the scheduler path): the
 * kernel stack and a copy of the user stack for DWARF unwinding in user space. */
struct qs_stack_event {
	__u32 kind;		/* QS_EV_STACK */
	__u32 tid;
	__s32 syscall;
	__u32 kstack_len;	/* valid entries in kstack */
	__u64 res;
	__u32 tgid;
	__u32 pad;
	char group[QS_COMM_LEN];
	__u64 kstack[QS_KSTACK_DEPTH];
	struct qs_ustack ustack;
};

/* Per-CPU lost-event counters: every drop is counted and reported. */
enum qs_sched_lost {
	QS_LOST_WAITS_FULL = 0,	/* waits map full: time went to the overflow bucket */
	QS_LOST_GROUPS_FULL,	/* runqueue map full: histogram went to the overflow group */
	QS_LOST_RINGBUF,	/* stack record dropped: ring buffer full */
	QS_LOST_STORAGE,	/* per-thread state unavailable (allocation failed, or nested: see sched_source) */
	QS_LOST_LOOPS_FULL,	/* loops map full: a polling thread's turns not counted */
	QS_LOST_LOOP_RING,	/* loop stall or sample record dropped: ring buffer full */
	QS_LOST_MAX
};

#endif
