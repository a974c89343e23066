// SPDX-License-Identifier: GPL-2.0
/* Off-CPU time of one target process, by (thread group, syscall, resource), runqueue wait
 * per group, and a per-tick task iterator that reports every target thread's state and
 * samples stacks of long waits.
 *
 * Why sched_switch and not syscalls:sys_enter_*: enabling any syscalls:* or raw_syscalls
 * tracepoint puts every syscall of every process on the machine on the slow path (~10 ns
 * each, docs/kernel.md "Costs"). A thread that blocks passes through sched_switch anyway, and
 * its pt_regs still hold the syscall number (orig_ax) and arguments (di, si): the futex
 * address and op, or the fd. Nothing is paid on syscalls that do not block.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "hist.h"
#include "qs_sched.h"
#include "qs_loop.h"
#include "tree.h"
#include "owner.h"

char LICENSE[] SEC("license") = "GPL";

/* Configured between open and load. */
const volatile __u8 want_stacks = 1;
const volatile __u64 stack_min_ns = 1000000;
const volatile __u32 max_stacks_per_iter = 64;
/* Event-loop turns (qs_loop.h): a turn this long is a stall; one on-CPU stack is sampled
 * per turn once it has run this long. */
const volatile __u64 loop_stall_ns = 20000000;
const volatile __u64 loop_sample_min_ns = 10000000;

/* Bumped by user space at a window reset: each loop's window maximum restarts. */
__u64 loop_epoch = 0;

/* Reset by user space before each iterator run: stack captures done in this run. */
__u32 iter_captures = 0;

#define TS_BLOCKED 1u
#define TS_SEEDED  2u

/* Per-thread state. Task storage rather than a tid-keyed hash: no hashing on the
 * scheduler path, no entry to leak when a thread exits, no size to guess. */
struct tstate {
	__u64 block_start;
	__u64 wake_ns;
	__u64 runnable_since;
	__u64 res;
	__s32 syscall;
	__u32 flags;
	__u32 futex_op;
	__u32 pad;
	/* The event-loop turn going on now (0: in its poll, or never polled) and where its
	 * time goes, for the stall record (qs_loop.h). */
	__u64 turn_start;
	__u64 turn_blocked;
	__u64 turn_rq;
	__u64 turn_top_block;
	__u64 turn_top_res;
	__s32 turn_top_sys;
	__u32 turn_fd;
	__u32 turn_sampled;
	__u32 turn_tentative;   /* begun at a non-blocking poll that found nothing (loop_poll_exit) */
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct tstate);
} tstates SEC(".maps");

/* Sized from Config::max_threads by user space. Not preallocated: a wait key costs memory
 * only once it is seen. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, struct qs_wait_key);
	__type(value, struct qs_wait_val);
} waits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 256);
	__type(key, struct qs_group_key);
	__type(value, struct qs_hist);
} rq_hist SEC(".maps");

/* Wait keys (group, syscall, res) whose stack was already captured: one capture per key,
 * which is all user space keeps (a stack per wait key). Per key rather than per (tid, key):
 * 10,000 threads waiting at one gate cost one capture, not 10,000. LRU so new keys still
 * get a turn. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct qs_wait_key);
	__type(value, __u64);
} stack_seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, QS_LOST_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* Per polling thread (qs_loop.h), keyed by tid. User space removes the entries of threads
 * that exited. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct qs_loop_val);
} loops SEC(".maps");

/* Per-loop window maximum, apart from loops so the epoch check is one word: key tid,
 * value {epoch, max}. */
struct loop_wmax {
	__u64 epoch;
	__u64 max_ns;
};
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct loop_wmax);
} loop_wmax SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qs_loop_val);
} loop_scratch SEC(".maps");

/* Stalls and on-CPU samples: discrete, at most a few dozen a second per loop. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
} loop_events SEC(".maps");

static __always_inline void count_lost(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&lost, &what);
	if (c)
		(*c)++;
}

static const struct qs_wait_val zero_wait;
static const struct qs_hist zero_hist;

static __always_inline void read_group(struct task_struct *t, char group[QS_COMM_LEN])
{
	char comm[QS_COMM_LEN];
	bpf_probe_read_kernel(comm, sizeof(comm), t->comm);
	qs_group_from_comm(comm, group);
}

static __always_inline void record_wait(__u32 tgid, const char group[QS_COMM_LEN], struct tstate *s, __u64 end)
{
	struct qs_wait_key key = {};
	struct qs_wait_val *v;
	__u64 dur = end > s->block_start ? end - s->block_start : 0;

	__builtin_memcpy(key.group, group, QS_COMM_LEN);
	key.tgid = tgid;
	key.syscall = s->syscall;
	key.res = s->res;
	v = bpf_map_lookup_elem(&waits, &key);
	if (!v) {
		if (bpf_map_update_elem(&waits, &key, &zero_wait, BPF_NOEXIST) &&
		    bpf_map_lookup_elem(&waits, &key) == NULL) {
			/* Full: keep the time, lose its attribution (user space preinserts this). */
			count_lost(QS_LOST_WAITS_FULL);
			__builtin_memset(&key, 0, sizeof(key));
			key.syscall = QS_SYSCALL_OTHER;
		}
		v = bpf_map_lookup_elem(&waits, &key);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->count, 1);
	__sync_fetch_and_add(&v->total_ns, dur);
	if (dur > v->max_ns)
		v->max_ns = dur;	/* racy max: a lost update only lowers it slightly */
	__u64 slot = qs_whist_slot(dur);
	/* Hide what clang knows of slot so the bounds check below is emitted on the register
	 * that indexes (clang-14 otherwise checks a derived value the verifier cannot relate). */
	asm volatile("" : "+r"(slot));
	if (slot < QS_WHIST_SLOTS)
		__sync_fetch_and_add(&v->slots[slot], 1);
}

static __always_inline void record_runqueue(__u32 tgid, const char group[QS_COMM_LEN], __u64 wait_ns)
{
	struct qs_group_key key = {};
	struct qs_hist *h;

	__builtin_memcpy(key.group, group, QS_COMM_LEN);
	key.tgid = tgid;
	h = bpf_map_lookup_elem(&rq_hist, &key);
	if (!h) {
		if (bpf_map_update_elem(&rq_hist, &key, &zero_hist, BPF_NOEXIST) &&
		    bpf_map_lookup_elem(&rq_hist, &key) == NULL) {
			count_lost(QS_LOST_GROUPS_FULL);
			__builtin_memset(&key, 0, sizeof(key));	/* "" = overflow group */
		}
		h = bpf_map_lookup_elem(&rq_hist, &key);
		if (!h)
			return;
	}
	qs_hist_add(h, wait_ns);
}

/* A thread in a loop's turn (s->turn_start) began or ended a wait for a CPU: mirror the
 * turn's waits so far into its loop entry, where user space splits the turn going on now. The
 * look-up runs only for a loop's thread switched in the middle of a turn. since: the wait's
 * start, 0 when it ended. */
static __always_inline void loop_mirror_rq(struct task_struct *t, struct tstate *s, __u64 since)
{
	struct qs_loop_val *v;
	__u32 tid;

	if (!s->turn_start)
		return;
	tid = t->pid;
	v = bpf_map_lookup_elem(&loops, &tid);
	if (v) {
		v->turn_rq_ns = s->turn_rq;
		v->turn_rq_since = since;
	}
}

static __always_inline void switch_out(struct task_struct *prev, bool preempt,
				       unsigned int prev_state, __u64 now)
{
	struct tstate *s = bpf_task_storage_get(&tstates, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s) {
		count_lost(QS_LOST_STORAGE);
		return;
	}
	/* The kernel runs with preemption "none", but a preempted task keeps whatever state it
	 * had set and stays on the runqueue: only !preempt && state != 0 leaves the CPU to
	 * sleep. */
	if (!preempt && prev_state) {
		struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		long long nr = (long long)regs->orig_ax;
		__u64 di = regs->di, si = regs->si;

		s->block_start = now;
		s->wake_ns = 0;
		s->runnable_since = 0;
		s->syscall = (__s32)nr;
		s->res = qs_wait_res(nr, di);
		s->futex_op = qs_sys_arg0_kind(nr) == QS_ARG0_FUTEX ? (__u32)si : 0;
		s->flags = TS_BLOCKED;
	} else {
		s->runnable_since = now;
		loop_mirror_rq(prev, s, now);
	}
}

static __always_inline void switch_in(struct task_struct *next, __u64 now)
{
	struct tstate *s = bpf_task_storage_get(&tstates, next, 0, 0);
	char group[QS_COMM_LEN];

	if (!s || !((s->flags & TS_BLOCKED) || s->runnable_since))
		return;
	read_group(next, group);	/* once for both records */
	if (s->flags & TS_BLOCKED) {
		__u64 end = s->wake_ns ? s->wake_ns : now;
		record_wait(next->tgid, group, s, end);
		if (s->turn_start && end > s->block_start) {
			__u64 d = end - s->block_start;
			s->turn_blocked += d;
			if (d > s->turn_top_block) {
				s->turn_top_block = d;
				s->turn_top_sys = s->syscall;
				s->turn_top_res = s->res;
			}
		}
		s->flags = 0;
	}
	if (s->runnable_since) {
		if (now > s->runnable_since) {
			record_runqueue(next->tgid, group, now - s->runnable_since);
			if (s->turn_start)
				s->turn_rq += now - s->runnable_since;
		}
		s->runnable_since = 0;
		loop_mirror_rq(next, s, 0);
	}
}

/* This target's slot + 1 among an exporter's shared hooks (bpf/owner.h), 0 when it has none.
 * The shared sched_switch (dispatch.bpf.c) jumps here for a switch whose prev is this
 * target's, or whose next is when prev is no target's; a next of another target's is handed
 * on from here, through the same table (user space shares it before load). */
const volatile __u32 owner_slot = 0;

QS_TARGET_TABLE(switch_targets, 1);

SEC("tp_btf/sched_switch")
int BPF_PROG(qs_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	/* Filter first, with plain BTF loads and the tree bitmap (an array look-up the verifier
	 * inlines): no helper call, no hashing for a switch between unrelated tasks. */
	bool p = qs_in_tree(prev->tgid), n = qs_in_tree(next->tgid);
	__u64 now;
	__u32 next_owner;

	if (p || n) {
		now = bpf_ktime_get_ns();
		if (p)
			switch_out(prev, preempt, prev_state, now);
		if (n)
			switch_in(next, now);
	}
	/* Reached for prev (the shared program's first choice), next another target's: its turn.
	 * The program there sees prev as no member of its own and does not hand it on again. */
	if (owner_slot && qs_owner_of(prev->tgid) == owner_slot) {
		next_owner = qs_owner_of(next->tgid);
		if (next_owner && next_owner != owner_slot)
			bpf_tail_call(ctx, &switch_targets, next_owner - 1);
	}
	return 0;
}

static __always_inline int on_wakeup(struct task_struct *t)
{
	struct tstate *s;
	__u64 now;

	if (!qs_in_tree(t->tgid))
		return 0;
	/* Create: a thread blocked since before attach gets its runqueue wait measured too. */
	s = bpf_task_storage_get(&tstates, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s) {
		count_lost(QS_LOST_STORAGE);
		return 0;
	}
	now = bpf_ktime_get_ns();
	if ((s->flags & TS_BLOCKED) && !s->wake_ns)
		s->wake_ns = now;
	if (!s->runnable_since) {
		s->runnable_since = now;
		loop_mirror_rq(t, s, now);
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(qs_sched_wakeup, struct task_struct *p)
{
	return on_wakeup(p);
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(qs_sched_wakeup_new, struct task_struct *p)
{
	return on_wakeup(p);
}

/* A poll set serves several call sites: PostgreSQL waits on its latch for a lock, in
 * pg_sleep and for the client's next query, all in epoll_wait on the same fd number. Its key
 * is captured again for a wait that began after the last capture, at most once a second;
 * other keys name their site by the resource (a futex word, a socket) and keep their first. */
static __always_inline int stack_stale(const struct tstate *s, __u64 seen, __u64 now)
{
	int c = qs_sys_class(s->syscall);

	return (c == QS_SC_EPOLL || c == QS_SC_POLL) && s->block_start > seen && now - seen >= 1000000000ULL;
}

static __always_inline void capture_stack(struct task_struct *task, struct pt_regs *regs,
					  __u32 tid, struct tstate *s, const char group[QS_COMM_LEN],
					  __u64 now)
{
	struct qs_wait_key sk = {};
	struct qs_stack_event *e;
	__u64 sp;
	long ks;
	int i;

	__builtin_memcpy(sk.group, group, QS_COMM_LEN);
	sk.tgid = task->tgid;
	sk.syscall = s->syscall;
	sk.res = s->res;
	__u64 *seen = bpf_map_lookup_elem(&stack_seen, &sk);
	if (seen && !stack_stale(s, *seen, now))
		return;
	if (iter_captures >= max_stacks_per_iter)
		return;
	e = bpf_ringbuf_reserve(&stacks, sizeof(*e), 0);
	if (!e) {
		/* User space drains the ring before each run and sizes it for a full budget, so
		 * this is an anomaly: count this record, then end the run's captures, which the
		 * next run retries (stack_seen is not set), rather than count a "loss" per thread. */
		count_lost(QS_LOST_RINGBUF);
		iter_captures = max_stacks_per_iter;
		return;
	}
	iter_captures++;
	e->kind = QS_EV_STACK;
	e->tid = tid;
	e->tgid = task->tgid;
	e->syscall = s->syscall;
	e->res = s->res;
	for (i = 0; i < QS_COMM_LEN; i++)
		e->group[i] = group[i];
	ks = bpf_get_task_stack(task, e->kstack, sizeof(e->kstack), 0);
	e->kstack_len = ks > 0 ? (__u32)(ks / sizeof(__u64)) : 0;

	e->ustack.regs[QS_REG_RAX] = regs->ax;
	e->ustack.regs[QS_REG_RDX] = regs->dx;
	e->ustack.regs[QS_REG_RCX] = regs->cx;
	e->ustack.regs[QS_REG_RBX] = regs->bx;
	e->ustack.regs[QS_REG_RSI] = regs->si;
	e->ustack.regs[QS_REG_RDI] = regs->di;
	e->ustack.regs[QS_REG_RBP] = regs->bp;
	e->ustack.regs[QS_REG_RSP] = regs->sp;
	e->ustack.regs[QS_REG_R8] = regs->r8;
	e->ustack.regs[QS_REG_R9] = regs->r9;
	e->ustack.regs[QS_REG_R10] = regs->r10;
	e->ustack.regs[QS_REG_R11] = regs->r11;
	e->ustack.regs[QS_REG_R12] = regs->r12;
	e->ustack.regs[QS_REG_R13] = regs->r13;
	e->ustack.regs[QS_REG_R14] = regs->r14;
	e->ustack.regs[QS_REG_R15] = regs->r15;
	e->ustack.regs[QS_REG_RIP] = regs->ip;
	e->ustack.tid = tid;
	e->ustack.size = 0;
	sp = regs->sp;
	/* A shallow thread's stack may end less than 8 KiB above sp (the copy faults as a
	 * whole): halve until it fits. */
	if (!bpf_copy_from_user_task(e->ustack.data, QS_USTACK_BYTES, (void *)sp, task, 0))
		e->ustack.size = QS_USTACK_BYTES;
	else if (!bpf_copy_from_user_task(e->ustack.data, QS_USTACK_BYTES / 2, (void *)sp, task, 0))
		e->ustack.size = QS_USTACK_BYTES / 2;
	else if (!bpf_copy_from_user_task(e->ustack.data, QS_USTACK_BYTES / 4, (void *)sp, task, 0))
		e->ustack.size = QS_USTACK_BYTES / 4;
	else if (!bpf_copy_from_user_task(e->ustack.data, QS_USTACK_BYTES / 8, (void *)sp, task, 0))
		e->ustack.size = QS_USTACK_BYTES / 8;
	bpf_ringbuf_submit(e, 0);
	bpf_map_update_elem(&stack_seen, &sk, &now, BPF_ANY);
}

/* Runs once per collector tick over the target's threads only (the link is created with a
 * pid filter). Sleepable, because copying another task's user stack needs
 * bpf_copy_from_user_task.
 *
 * Why stacks are captured here and not in sched_switch: a capture costs ~1-2 us (8 KiB copy)
 * plus ~460 ns for a kernel stack id, against ~700 ns for the whole blocking switch. Here
 * it runs off the scheduler path, only for threads blocked at least stack_min_ns right now
 * (long waits are what explain a queue; a thread blocked for one tick is sampled in it),
 * once per wait key (group, syscall, resource) thanks to stack_seen, and at most
 * max_stacks_per_iter per tick. */
SEC("iter.s/task")
int qs_task_iter(struct bpf_iter__task *ctx)
{
	struct seq_file *seq = ctx->meta->seq;
	struct task_struct *task = ctx->task;
	struct qs_thread_rec rec = {};
	struct tstate *s;
	struct pt_regs *regs;
	__u64 now;

	if (!task)
		return 0;
	if (!qs_in_tree(task->tgid))
		return 0;
	now = bpf_ktime_get_ns();
	rec.tid = task->pid;
	rec.tgid = task->tgid;
	rec.state = task->__state | task->exit_state;
	rec.syscall = -1;
	rec.now_ns = now;
	if (task->on_cpu)
		rec.flags |= QS_TREC_ON_CPU;
	bpf_probe_read_kernel(rec.comm, sizeof(rec.comm), task->comm);
	qs_group_from_comm(rec.comm, rec.group);

	s = bpf_task_storage_get(&tstates, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (rec.state == 0 || !s) {
		if (!s)
			count_lost(QS_LOST_STORAGE);
		bpf_seq_write(seq, &rec, sizeof(rec));
		return 0;
	}

	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	rec.syscall = (__s32)regs->orig_ax;
	rec.res = qs_wait_res((long long)regs->orig_ax, regs->di);
	if (qs_sys_arg0_kind((long long)regs->orig_ax) == QS_ARG0_FUTEX)
		rec.futex_op = (__u32)regs->si;

	/* Blocked, but sched_switch never saw it go to sleep: it was blocked before attach.
	 * Seed its state so its wait is counted from now (a lower bound) when it wakes. A
	 * thread still on a CPU has set its state but not yet switched out: leave it to
	 * sched_switch. */
	if (!(s->flags & TS_BLOCKED) && !(rec.flags & QS_TREC_ON_CPU)) {
		s->block_start = now;
		s->wake_ns = 0;
		s->syscall = rec.syscall;
		s->res = rec.res;
		s->futex_op = rec.futex_op;
		s->flags = TS_BLOCKED | TS_SEEDED;
	}
	if (s->flags & TS_BLOCKED) {
		rec.flags |= QS_TREC_TRACKED;
		if (s->flags & TS_SEEDED)
			rec.flags |= QS_TREC_SEEDED;
		rec.block_start_ns = s->block_start;
		if (want_stacks && !(rec.flags & QS_TREC_ON_CPU) &&
		    ((s->flags & TS_SEEDED) || now - s->block_start >= stack_min_ns))
			capture_stack(task, regs, rec.tid, s, rec.group, now);
	}
	bpf_seq_write(seq, &rec, sizeof(rec));
	return 0;
}

/* ---- event-loop turns (qs_loop.h) ----------------------------------------------------------
 *
 * Classic per-syscall tracepoints on the poll syscalls only: the kernel dispatches
 * syscalls/sys_{enter,exit}_<name> for that syscall number alone, and the per-syscall
 * tracepoint path is already on for every task (sock.bpf.c's accept exits), so a syscall that
 * is not a poll pays nothing more. A poll of another process pays the tree check. */

static __always_inline struct qs_loop_val *loop_entry(struct task_struct *t, __u32 tid, __u32 fd, __s32 nr)
{
	struct qs_loop_val *v = bpf_map_lookup_elem(&loops, &tid);
	struct qs_loop_val *z;
	__u32 zero = 0;

	if (v)
		return v;
	/* A zeroed value from a per-CPU scratch slot: qs_loop_val is too big for the stack. */
	z = bpf_map_lookup_elem(&loop_scratch, &zero);
	if (!z)
		return NULL;
	__builtin_memset(z, 0, sizeof(*z));
	z->tid = tid;
	z->tgid = t->tgid;
	z->fd = fd;
	z->poll_syscall = nr;
	bpf_probe_read_kernel(z->comm, sizeof(z->comm), t->comm);
	if (bpf_map_update_elem(&loops, &tid, z, BPF_NOEXIST) && !bpf_map_lookup_elem(&loops, &tid)) {
		count_lost(QS_LOST_LOOPS_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&loops, &tid);
}

static __always_inline void loop_max(__u64 *max, __u64 v)
{
	int i;
	for (i = 0; i < 4; i++) {
		__u64 cur = *max;
		if (v <= cur || __sync_bool_compare_and_swap(max, cur, v))
			return;
	}
}

static __always_inline void loop_stall_record(struct task_struct *t, __u32 tid, struct tstate *s, __u64 turn,
					      __u64 now)
{
	struct qs_loop_stall *e = bpf_ringbuf_reserve(&loop_events, sizeof(*e), 0);
	if (!e) {
		count_lost(QS_LOST_LOOP_RING);
		return;
	}
	e->kind = QS_EV_LOOP_STALL;
	e->tid = tid;
	e->tgid = t->tgid;
	e->top_syscall = s->turn_top_block ? s->turn_top_sys : -1;
	e->turn_ns = turn;
	e->blocked_ns = s->turn_blocked;
	e->runqueue_ns = s->turn_rq;
	e->top_block_ns = s->turn_top_block;
	e->top_res = s->turn_top_res;
	e->end_ns = now;
	read_group(t, e->group);
	bpf_ringbuf_submit(e, 0);
}

/* A turn begun at a non-blocking poll that found nothing and ended this soon by a poll that
 * blocks was no work: libuv's look before it blocks (below). */
#define QS_LOOP_LOOK_NS 200000ULL

/* Entering a poll ends the turn that began when the same poll set last returned. A poll of
 * another set inside a turn is a nested loop: it neither ends nor starts the turn. blocking:
 * the poll may wait (a timeout other than 0). */
/* Called for the tree's threads only: the programs check it first. */
static __always_inline void loop_poll_enter(__u32 fd, __s32 nr, int blocking)
{
	struct task_struct *t;
	struct tstate *s;
	struct qs_loop_val *v;
	struct loop_wmax *w, nw = {};
	__u64 now, turn, rq, slot;
	__u32 tid;

	t = bpf_get_current_task_btf();
	s = bpf_task_storage_get(&tstates, t, 0, 0);
	if (!s || !s->turn_start || s->turn_fd != fd)
		return;
	now = bpf_ktime_get_ns();
	turn = now > s->turn_start ? now - s->turn_start : 0;
	tid = t->pid;
	v = loop_entry(t, tid, fd, nr);
	if (s->turn_tentative && blocking && turn < QS_LOOP_LOOK_NS) {
		if (v)
			v->turn_start = 0;
		s->turn_start = 0;
		return;
	}
	rq = s->turn_rq < turn ? s->turn_rq : turn;	/* of the turn, runnable */
	if (v) {
		__sync_fetch_and_add(&v->turns, 1);
		__sync_fetch_and_add(&v->busy_ns, turn);
		__sync_fetch_and_add(&v->runqueue_ns, rq);
		__sync_fetch_and_add(&v->polls, 1);
		loop_max(&v->max_ns, turn);
		slot = qs_whist_slot(turn);
		asm volatile("" : "+r"(slot));	/* see record_wait */
		if (slot < QS_WHIST_SLOTS)
			__sync_fetch_and_add(&v->slots[slot], 1);
		if (turn >= loop_stall_ns) {
			__sync_fetch_and_add(&v->stalls, 1);
			if (turn - rq < loop_stall_ns)
				__sync_fetch_and_add(&v->stalls_runqueue, 1);
		}
		v->turn_start = 0;
	}
	w = bpf_map_lookup_elem(&loop_wmax, &tid);
	if (!w) {
		nw.epoch = loop_epoch;
		bpf_map_update_elem(&loop_wmax, &tid, &nw, BPF_NOEXIST);
		w = bpf_map_lookup_elem(&loop_wmax, &tid);
	}
	if (w) {
		if (w->epoch != loop_epoch) {
			w->epoch = loop_epoch;
			w->max_ns = 0;
		}
		loop_max(&w->max_ns, turn);
	}
	if (turn >= loop_stall_ns)
		loop_stall_record(t, tid, s, turn, now);
	s->turn_start = 0;
}

/* Leaving a poll starts a turn, unless one is going on (a nested loop's poll returned).
 * tentative: the poll did not block and found nothing (see LOOP_POLL). */
/* Called for the tree's threads only, like loop_poll_enter. */
static __always_inline void loop_poll_exit(__u32 fd, __s32 nr, int tentative)
{
	struct task_struct *t;
	struct tstate *s;
	struct qs_loop_val *v;
	__u64 now;

	t = bpf_get_current_task_btf();
	s = bpf_task_storage_get(&tstates, t, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s) {
		count_lost(QS_LOST_STORAGE);
		return;
	}
	if (s->turn_start)
		return;
	now = bpf_ktime_get_ns();
	s->turn_start = now;
	s->turn_fd = fd;
	s->turn_blocked = 0;
	s->turn_rq = 0;
	s->turn_top_block = 0;
	s->turn_top_res = 0;
	s->turn_top_sys = -1;
	s->turn_sampled = 0;
	s->turn_tentative = tentative;
	v = loop_entry(t, t->pid, fd, nr);
	if (v) {
		v->turn_start = now;
		v->turn_rq_ns = 0;
		v->turn_rq_since = 0;
		v->fd = fd;
	}
}

/* A non-blocking poll that found nothing (timeout 0, no event) starts a tentative turn. libuv
 * looks once so before it blocks, to measure its idle time: the loop never left its poll, and
 * the blocking poll that follows within QS_LOOP_LOOK_NS drops the turn. Python's asyncio polls
 * so whenever callbacks are ready and then runs them: that work is a turn, and a loop running
 * 30 ms callbacks back to back read as 5% busy with one stall while it was never idle. The
 * timeout is the 4th argument of epoll_wait/epoll_pwait (r10), the 3rd of poll (dx); ppoll
 * and select pass it by pointer and are taken as blocking.
 * A poll or ppoll of one fd waits for that fd alone: a thread-per-request server's worker
 * blocking on its one socket (Java's NIO blocking reads in Tomcat's exec threads, php-fpm's
 * children), not a loop multiplexing many. Its nfds (2nd argument: si) must be 2 or more, or
 * it is no poll here: the scenario doc's platform Tomcat listed its 200 exec threads as
 * stalled event loops. epoll and select sets are taken as many.
 * Every process on the host polls through these: the tree check comes before anything else,
 * a register read included. */
#define LOOP_POLL(name, has_set, timeout_expr, many_expr)                                \
	SEC("tracepoint/syscalls/sys_exit_" #name)                                       \
	int qs_loop_exit_##name(struct trace_event_raw_sys_exit *ctx)                    \
	{                                                                                \
		struct pt_regs *regs;                                                    \
		long long timeout;                                                       \
		unsigned long long nfds;                                                 \
		if (!qs_current_in_tree())                                               \
			return 0;                                                        \
		regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());   \
		timeout = (timeout_expr);                                                \
		nfds = regs->si;                                                         \
		(void)nfds;                                                              \
		if (!(many_expr))                                                        \
			return 0;                                                        \
		loop_poll_exit(has_set ? (__u32)regs->di : QS_LOOP_FD_NONE, QS_NR_##name, \
			       ctx->ret == 0 && timeout == 0);                           \
		return 0;                                                                \
	}

LOOP_POLL(epoll_wait, 1, (int)regs->r10, 1)
LOOP_POLL(epoll_pwait, 1, (int)regs->r10, 1)
LOOP_POLL(epoll_pwait2, 1, -1, 1)
LOOP_POLL(poll, 0, (int)regs->dx, nfds >= 2)
LOOP_POLL(ppoll, 0, -1, nfds >= 2)
LOOP_POLL(select, 0, -1, 1)
LOOP_POLL(pselect6, 0, -1, 1)

/* io_uring: a loop waits for completions in io_uring_enter(fd, to_submit, min_complete,
 * flags, ...) with IORING_ENTER_GETEVENTS and min_complete above 0 (liburing's
 * io_uring_submit_and_wait, io_uring_wait_cqe when the ring is empty). One that only submits
 * is work inside a turn, not a poll, and neither ends nor starts one. The ring's fd is the
 * poll set. */
#define QS_IORING_ENTER_GETEVENTS 1

static __always_inline int uring_waits(__u64 min_complete, __u64 flags)
{
	return (flags & QS_IORING_ENTER_GETEVENTS) && (__u32)min_complete > 0;
}

/* Every poll's entry, in one program user space attaches to each sys_enter_<poll> (the section
 * names the first): the syscall's number tells them apart, and the verifier checks the turn's
 * end once instead of eight times (~30-60 ms each, on the way to the first frame). It reads no
 * argument past the second from the record: the kernel refuses to attach a program that reads
 * beyond a tracepoint's record, and poll has three. The polls' timeouts and io_uring_enter's
 * 3rd and 4th come from the user registers saved at syscall entry, as the exits read them. The
 * conditions are the exits' (above). */
SEC("tracepoint/syscalls/sys_enter_epoll_wait")
int qs_loop_enter(struct trace_event_raw_sys_enter *ctx)
{
	__s32 nr;
	__u32 fd = QS_LOOP_FD_NONE;
	__u64 a0, a1;
	int blocking = 1;
	struct pt_regs *regs;

	if (!qs_current_in_tree())
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	/* Read once, before the switch: clang would otherwise add an offset to the context pointer
	 * in one branch and load through it later ("dereference of modified ctx ptr"). */
	nr = (__s32)ctx->id;
	a0 = ctx->args[0];
	a1 = ctx->args[1];
	barrier_var(a0);
	barrier_var(a1);
	switch (nr) {
	case QS_NR_epoll_wait:
	case QS_NR_epoll_pwait:
		blocking = (int)regs->r10 != 0;
		fd = (__u32)a0;
		break;
	case QS_NR_epoll_pwait2:
		fd = (__u32)a0;
		break;
	case QS_NR_poll:
		if (a1 < 2)
			return 0;
		blocking = (int)regs->dx != 0;
		break;
	case QS_NR_ppoll:
		if (a1 < 2)
			return 0;
		break;
	case QS_NR_select:
	case QS_NR_pselect6:
		break;
	case QS_NR_io_uring_enter:
		if (!uring_waits(regs->dx, regs->r10))
			return 0;
		fd = (__u32)a0;
		break;
	default:
		return 0;
	}
	loop_poll_enter(fd, nr, blocking);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_io_uring_enter")
int qs_loop_exit_io_uring_enter(struct trace_event_raw_sys_exit *ctx)
{
	struct pt_regs *regs;

	if (!qs_current_in_tree())
		return 0;
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (uring_waits(regs->dx, regs->r10))
		loop_poll_exit((__u32)regs->di, QS_NR_io_uring_enter, 0);
	return 0;
}

/* cpu-clock sampling (one perf event per CPU, ~199 Hz): the first sample that lands in a
 * turn already loop_sample_min_ns long copies the user stack, once per turn. Everything else
 * returns after the tree check. The registers are the interrupted user context, or the
 * user registers saved at kernel entry when the sample landed in the kernel. */
#define QS_USER_TOP 0x800000000000ULL	/* x86-64: user addresses are below */

SEC("perf_event")
int qs_loop_sample(struct bpf_perf_event_data *ctx)
{
	struct task_struct *t;
	struct tstate *s;
	struct qs_loop_sample *e;
	struct pt_regs r = {};
	__u64 now, sp;

	if (!qs_current_in_tree())
		return 0;
	t = bpf_get_current_task_btf();
	s = bpf_task_storage_get(&tstates, t, 0, 0);
	if (!s || !s->turn_start || s->turn_sampled)
		return 0;
	now = bpf_ktime_get_ns();
	if (now - s->turn_start < loop_sample_min_ns)
		return 0;
	s->turn_sampled = 1;
	e = bpf_ringbuf_reserve(&loop_events, sizeof(*e), 0);
	if (!e) {
		count_lost(QS_LOST_LOOP_RING);
		return 0;
	}
	/* Interrupted in user mode: the sample's registers (read field by field: the context
	 * allows only 8-byte loads). In the kernel: the user registers saved at its entry. */
	if (ctx->regs.ip < QS_USER_TOP) {
		r.ax = ctx->regs.ax; r.dx = ctx->regs.dx; r.cx = ctx->regs.cx; r.bx = ctx->regs.bx;
		r.si = ctx->regs.si; r.di = ctx->regs.di; r.bp = ctx->regs.bp; r.sp = ctx->regs.sp;
		r.r8 = ctx->regs.r8; r.r9 = ctx->regs.r9; r.r10 = ctx->regs.r10; r.r11 = ctx->regs.r11;
		r.r12 = ctx->regs.r12; r.r13 = ctx->regs.r13; r.r14 = ctx->regs.r14; r.r15 = ctx->regs.r15;
		r.ip = ctx->regs.ip;
	} else if (bpf_probe_read_kernel(&r, sizeof(r), (void *)bpf_task_pt_regs(t))) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	e->kind = QS_EV_LOOP_SAMPLE;
	e->tid = t->pid;
	e->tgid = t->tgid;
	e->pad = 0;
	e->turn_start = s->turn_start;
	e->at_ns = now;
	e->ustack.regs[QS_REG_RAX] = r.ax;
	e->ustack.regs[QS_REG_RDX] = r.dx;
	e->ustack.regs[QS_REG_RCX] = r.cx;
	e->ustack.regs[QS_REG_RBX] = r.bx;
	e->ustack.regs[QS_REG_RSI] = r.si;
	e->ustack.regs[QS_REG_RDI] = r.di;
	e->ustack.regs[QS_REG_RBP] = r.bp;
	e->ustack.regs[QS_REG_RSP] = r.sp;
	e->ustack.regs[QS_REG_R8] = r.r8;
	e->ustack.regs[QS_REG_R9] = r.r9;
	e->ustack.regs[QS_REG_R10] = r.r10;
	e->ustack.regs[QS_REG_R11] = r.r11;
	e->ustack.regs[QS_REG_R12] = r.r12;
	e->ustack.regs[QS_REG_R13] = r.r13;
	e->ustack.regs[QS_REG_R14] = r.r14;
	e->ustack.regs[QS_REG_R15] = r.r15;
	e->ustack.regs[QS_REG_RIP] = r.ip;
	e->ustack.tid = t->pid;
	e->ustack.size = 0;
	sp = e->ustack.regs[QS_REG_RSP];
	if (!bpf_probe_read_user(e->ustack.data, QS_USTACK_BYTES, (void *)sp))
		e->ustack.size = QS_USTACK_BYTES;
	else if (!bpf_probe_read_user(e->ustack.data, QS_USTACK_BYTES / 2, (void *)sp))
		e->ustack.size = QS_USTACK_BYTES / 2;
	else if (!bpf_probe_read_user(e->ustack.data, QS_USTACK_BYTES / 8, (void *)sp))
		e->ustack.size = QS_USTACK_BYTES / 8;
	bpf_ringbuf_submit(e, 0);
	return 0;
}
