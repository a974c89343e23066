/* Event-loop turns: types shared by bpf/sched.bpf.c (the poll hooks) and
 * collector/probes/sched/loops.cpp. Fixed-width types only; the C++ side static_asserts the
 * sizes.
 *
 * A turn is the time from leaving the loop's poll (epoll_wait, epoll_pwait, poll, ppoll, select; not io_uring_enter, whose ring fd also carries submissions inside a turn)
 * to entering it again: the event-loop delay Node's monitorEventLoopDelay reports. Every
 * thread of the target that waits in a poll gets one entry, aggregated in the kernel; user
 * space decides which of them are loops (they also serve many inbound connections, which the
 * sock family sees).
 */
#ifndef QSCOPE_QS_LOOP_H
#define QSCOPE_QS_LOOP_H

#include "qs_sched.h"

/* The poll set a turn belongs to. A thread running a nested loop inside a turn (Node's
 * child_process.execSync runs a private uv loop on the main thread) polls another fd; those
 * polls neither end nor start the outer turn. poll/select have no set: one pseudo-fd. */
#define QS_LOOP_FD_NONE 0xffffffffu

/* Ring record kinds: the first field is the kind (after qs_sched_event_kind's values). */
enum qs_loop_event_kind { QS_EV_LOOP_STALL = 16, QS_EV_LOOP_SAMPLE = 17 };

/* "Syscall" of a stack sampled while the thread ran on a CPU (not blocked). */
#define QS_SYSCALL_ON_CPU (-3)

/* Per polling thread, cumulative since attach. */
struct qs_loop_val {
	__u64 turns;		/* completed turns */
	__u64 busy_ns;		/* their total length */
	__u64 max_ns;		/* longest completed turn; user space rebases it at a window reset */
	__u64 stalls;		/* completed turns >= stall_ns */
	__u64 turn_start;	/* CLOCK_MONOTONIC start of the turn going on now; 0 = in its poll */
	__u64 polls;		/* poll entries on the loop's set (a turn ends at each but the first) */
	__u64 stalls_runqueue;	/* of the stalls, turns whose time outside the run queue was < stall_ns:
				 * waiting for a CPU made them stalls, not the loop's own work */
	__u64 runqueue_ns;	/* of busy_ns, the time runnable, waiting for a CPU */
	/* The turn going on now (valid while turn_start): its waits for a CPU that ended, and
	 * the start of one going on (0: none). User space splits a long turn in progress with
	 * them, as the stall record splits one that ended. */
	__u64 turn_rq_ns;
	__u64 turn_rq_since;
	__u32 tid;
	__u32 tgid;
	__u32 fd;		/* the poll set (QS_LOOP_FD_NONE for poll/select) */
	__s32 poll_syscall;	/* which poll it waits in */
	char comm[QS_COMM_LEN];
	__u32 slots[QS_WHIST_SLOTS];	/* turn lengths, qs_whist_slot() */
};

/* A turn >= stall_ns that ended: where its time went. Blocked time and the longest block
 * come from sched_switch inside the turn; the rest is on a CPU or waiting for one. */
struct qs_loop_stall {
	__u32 kind;		/* QS_EV_LOOP_STALL */
	__u32 tid;
	__u32 tgid;
	__s32 top_syscall;	/* the longest block of the turn; -1 when it never blocked */
	__u64 turn_ns;
	__u64 blocked_ns;	/* off CPU, asleep */
	__u64 runqueue_ns;	/* runnable, waiting for a CPU */
	__u64 top_block_ns;
	__u64 top_res;		/* the longest block's resource (qs_wait_res) */
	__u64 end_ns;
	char group[QS_COMM_LEN];
};

/* A stack sampled on a CPU in the middle of a long turn (perf cpu-clock sampling): the
 * on-CPU stack of a CPU-bound stall. */
struct qs_loop_sample {
	__u32 kind;		/* QS_EV_LOOP_SAMPLE */
	__u32 tid;
	__u32 tgid;
	__u32 pad;
	__u64 turn_start;	/* the turn it was taken in */
	__u64 at_ns;
	struct qs_ustack ustack;
};

#endif
