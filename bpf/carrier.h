/* Carrier threads: the OS threads that run a user-space scheduler's tasks (JVM virtual
 * threads first). Shared by carrier.bpf.c and collector/probes/jvm/jvm_source.cpp.
 *
 * A carrier is "stalled" when it blocks in the kernel while a task is mounted on it: a
 * pinned park, a blocking native call, a class-initializer wait. Blocking with nothing
 * mounted is the scheduler's idle wait. For the JVM, "mounted" is read from the carrier's
 * JavaThread (offsets from the exported gHotSpotVMStructs table) at the moment it blocks,
 * when the carrier is `current` and its memory can be read with bpf_probe_read_user. For
 * other runtimes ("generic"), every blocking syscall except the idle waits (futex, epoll)
 * counts as mounted. */
#ifndef QSCOPE_CARRIER_H
#define QSCOPE_CARRIER_H

#include "ustack.h"

/* How carrier.bpf.c decides "mounted" when a carrier blocks (rodata mount_mode). */
enum qs_mount_mode {
	QS_MOUNT_GENERIC = 0,	 /* blocked in anything but futex/epoll waits */
	QS_MOUNT_CONT_ENTRY = 1, /* *(u64 *)(jt + off_a) != 0: JavaThread::_cont_entry (JDK 21+) */
	QS_MOUNT_OOPHANDLES = 2, /* **(jt + off_a) != **(jt + off_b): _vthread vs _threadObj */
	QS_MOUNT_GO = 3,	 /* Go's Ms: blocked in anything but qs_sys_go_idle (futex, epoll, sleep) */
};

enum qs_carrier_run_state {
	QS_CS_UNKNOWN = 0,	/* not seen switching since registration: user space asks /proc */
	QS_CS_RUNNING = 1,
	QS_CS_RUNNABLE = 2,	/* preempted or woken, waiting for a CPU */
	QS_CS_IDLE = 3,		/* blocked with nothing mounted */
	QS_CS_STALLED = 4,	/* blocked with a task mounted */
	QS_CS_NSTATES = 5,
};

/* One per carrier tid. User space inserts it (jt, state UNKNOWN) when it finds a carrier and
 * deletes it when the thread exits; the BPF side updates everything else in place. */
struct qs_carrier {
	__u64 jt;		/* JavaThread* in the target, 0 for generic carriers */
	__u64 since_ns;		/* when `state` began */
	__u64 state_ns[QS_CS_NSTATES];	/* cumulative time per state since registration */
	__u64 block_start_ns;	/* start of the current block, 0 if unknown (blocked at attach) */
	__u64 stalls;		/* stall episodes >= threshold on this carrier */
	__u32 state;		/* enum qs_carrier_run_state */
	__u32 mounted;		/* mounted at the last block */
	__s32 syscall;		/* orig_ax at the last block, -1 if none */
	__u32 futex_op;		/* op of a futex block */
};

/* Ring-buffer records; the first field is the kind. */
enum qs_carrier_rec_kind {
	QS_CARRIER_REC_STALL = 1,	/* struct qs_carrier_stall, no stack */
	QS_CARRIER_REC_STALL_STACK = 2,	/* struct qs_carrier_stall_stack */
	QS_CARRIER_REC_PINNED = 3,	/* struct qs_carrier_pinned: the JVM reported a pinned park */
};

struct qs_carrier_stall {
	__u32 kind;
	__u32 tid;
	__u64 start_ns;		/* bpf_ktime_get_ns() when the carrier blocked */
	__u64 duration_ns;	/* block → switch-in */
	__s32 syscall;
	__u32 futex_op;
};

/* The stall plus the user stack copied when the carrier blocked (mounted blocks only). One
 * slot per carrier in the `stack_slots` map, pre-inserted by user space, so the 8 KiB copy
 * never sits on the BPF stack. */
struct qs_carrier_stall_stack {
	struct qs_carrier_stall hdr;
	struct qs_ustack stack;
};

struct qs_carrier_pinned {
	__u32 kind;
	__u32 tid;
	__u64 at_ns;
};

/* Indexes of the `counters` array map (cumulative since load). */
enum qs_carrier_counter {
	QS_CC_STALLS = 0,	/* mounted blocks >= stall_threshold_ns: the JFR-comparable count */
	QS_CC_MOUNTED_BLOCKS,	/* every mounted block, any duration (the histogram's count) */
	QS_CC_RB_DROPS,		/* ring buffer full: a stall record lost (counts stay exact) */
	QS_CC_READ_FAILS,	/* JavaThread field unreadable at block time (treated as idle) */
	QS_CC_PINNED_EVENTS,	/* JVM_VirtualThreadPinnedEvent calls (JDK 24+) */
	QS_CC_NCOUNTERS,
};

#endif
