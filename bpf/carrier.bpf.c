// Carrier-thread states and stalls (see carrier.h). Per-event cost: every sched_switch and
// sched_wakeup on the machine runs the tgid test first and leaves; only the target's
// carriers (a hash lookup) do more, and only a mounted block reads user memory.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "hist.h"
#include "syscalls.h"
#include "carrier.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 targ_tgid = 0;
const volatile __u64 stall_threshold_ns = 20000000ULL;	/* JFR's jdk.VirtualThreadPinned default */
const volatile __u32 mount_mode = QS_MOUNT_GENERIC;
const volatile __u64 mount_off_a = 0;
const volatile __u64 mount_off_b = 0;
const volatile __u32 want_stacks = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);	/* resized by user space */
	__type(key, __u32);
	__type(value, struct qs_carrier);
} carriers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);	/* resized by user space; carriers beyond get no stack */
	__type(key, __u32);
	__type(value, struct qs_carrier_stall_stack);
} stack_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct qs_hist);
} stall_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, QS_CC_NCOUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		__sync_fetch_and_add(v, 1);
}

/* Only valid while the carrier is `current` (its mm is the one bpf_probe_read_user sees). */
static __always_inline int read_mounted(__u64 jt, __s32 nr)
{
	if (mount_mode == QS_MOUNT_GENERIC)
		return !qs_sys_carrier_idle(nr);
	if (mount_mode == QS_MOUNT_GO)
		return !qs_sys_go_idle(nr);
	if (!jt)
		return 0;
	if (mount_mode == QS_MOUNT_CONT_ENTRY) {
		__u64 entry = 0;
		if (bpf_probe_read_user(&entry, sizeof(entry), (void *)(jt + mount_off_a))) {
			count(QS_CC_READ_FAILS);
			return 0;
		}
		return entry != 0;
	}
	/* OopHandles: each is an oop* into OopStorage; mounted when they name different oops. */
	__u64 pa = 0, pb = 0, a = 0, b = 0;
	if (bpf_probe_read_user(&pa, sizeof(pa), (void *)(jt + mount_off_a)) ||
	    bpf_probe_read_user(&pb, sizeof(pb), (void *)(jt + mount_off_b)) || !pa || !pb ||
	    bpf_probe_read_user(&a, sizeof(a), (void *)pa) || bpf_probe_read_user(&b, sizeof(b), (void *)pb)) {
		count(QS_CC_READ_FAILS);
		return 0;
	}
	return a != b;
}

static __always_inline void set_state(struct qs_carrier *c, __u32 st, __u64 now)
{
	__u32 old = c->state;
	if (c->since_ns && old < QS_CS_NSTATES && now > c->since_ns)
		c->state_ns[old] += now - c->since_ns;
	c->state = st;
	c->since_ns = now;
}

static __always_inline void copy_stack(__u32 tid, struct pt_regs *regs)
{
	struct qs_carrier_stall_stack *slot = bpf_map_lookup_elem(&stack_slots, &tid);
	if (!slot)
		return;
	struct qs_ustack *s = &slot->stack;
	s->regs[QS_REG_RAX] = regs->ax;
	s->regs[QS_REG_RDX] = regs->dx;
	s->regs[QS_REG_RCX] = regs->cx;
	s->regs[QS_REG_RBX] = regs->bx;
	s->regs[QS_REG_RSI] = regs->si;
	s->regs[QS_REG_RDI] = regs->di;
	s->regs[QS_REG_RBP] = regs->bp;
	s->regs[QS_REG_RSP] = regs->sp;
	s->regs[QS_REG_R8] = regs->r8;
	s->regs[QS_REG_R9] = regs->r9;
	s->regs[QS_REG_R10] = regs->r10;
	s->regs[QS_REG_R11] = regs->r11;
	s->regs[QS_REG_R12] = regs->r12;
	s->regs[QS_REG_R13] = regs->r13;
	s->regs[QS_REG_R14] = regs->r14;
	s->regs[QS_REG_R15] = regs->r15;
	s->regs[QS_REG_RIP] = regs->ip;
	s->tid = tid;
	/* The copy fails as a whole if it runs off the top of the thread's stack mapping:
	 * retry smaller. */
	void *sp = (void *)regs->sp;
	if (!bpf_probe_read_user(s->data, QS_USTACK_BYTES, sp))
		s->size = QS_USTACK_BYTES;
	else if (!bpf_probe_read_user(s->data, QS_USTACK_BYTES / 4, sp))
		s->size = QS_USTACK_BYTES / 4;
	else if (!bpf_probe_read_user(s->data, 512, sp))
		s->size = 512;
	else
		s->size = 0;
	slot->hdr.start_ns = 0;	/* marks the stack as belonging to the current block */
}

static __always_inline void on_block(struct task_struct *prev, struct qs_carrier *c, __u32 tid, __u64 now)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
	__s32 nr = -1;
	__u32 op = 0;
	if (regs) {
		nr = (__s32)regs->orig_ax;
		if (nr == QS_NR_futex)	/* futex(2)'s op; futex2 calls have none */
			op = (__u32)regs->si;
	}
	int mounted = read_mounted(c->jt, nr);
	c->syscall = nr;
	c->futex_op = op;
	c->mounted = mounted;
	c->block_start_ns = now;
	set_state(c, mounted ? QS_CS_STALLED : QS_CS_IDLE, now);
	if (mounted && want_stacks && regs)
		copy_stack(tid, regs);
}

static __always_inline void end_block(struct qs_carrier *c, __u32 tid, __u64 now)
{
	if (!c->mounted || !c->block_start_ns || now <= c->block_start_ns)
		return;
	__u64 dur = now - c->block_start_ns;
	__u32 zero = 0;
	struct qs_hist *h = bpf_map_lookup_elem(&stall_hist, &zero);
	if (h)
		qs_hist_add(h, dur);
	count(QS_CC_MOUNTED_BLOCKS);
	if (dur < stall_threshold_ns)
		return;
	count(QS_CC_STALLS);
	c->stalls++;

	if (want_stacks) {
		struct qs_carrier_stall_stack *slot = bpf_map_lookup_elem(&stack_slots, &tid);
		if (slot && slot->stack.tid == tid) {
			slot->hdr.kind = QS_CARRIER_REC_STALL_STACK;
			slot->hdr.tid = tid;
			slot->hdr.start_ns = c->block_start_ns;
			slot->hdr.duration_ns = dur;
			slot->hdr.syscall = c->syscall;
			slot->hdr.futex_op = c->futex_op;
			if (!bpf_ringbuf_output(&events, slot, sizeof(*slot), 0))
				return;
			/* No room for 8 KiB: fall through to the small record. */
		}
	}
	struct qs_carrier_stall *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count(QS_CC_RB_DROPS);
		return;
	}
	r->kind = QS_CARRIER_REC_STALL;
	r->tid = tid;
	r->start_ns = c->block_start_ns;
	r->duration_ns = dur;
	r->syscall = c->syscall;
	r->futex_op = c->futex_op;
	bpf_ringbuf_submit(r, 0);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(carrier_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u32 ptgid = prev->tgid, ntgid = next->tgid;
	if (ptgid != targ_tgid && ntgid != targ_tgid)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (ptgid == targ_tgid) {
		__u32 tid = prev->pid;
		struct qs_carrier *c = bpf_map_lookup_elem(&carriers, &tid);
		if (c) {
			if (prev_state != 0)
				on_block(prev, c, tid, now);
			else
				set_state(c, QS_CS_RUNNABLE, now);
		}
	}
	if (ntgid == targ_tgid) {
		__u32 tid = next->pid;
		struct qs_carrier *c = bpf_map_lookup_elem(&carriers, &tid);
		if (c) {
			end_block(c, tid, now);
			c->block_start_ns = 0;
			set_state(c, QS_CS_RUNNING, now);
		}
	}
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(carrier_wakeup, struct task_struct *p)
{
	if (p->tgid != targ_tgid)
		return 0;
	__u32 tid = p->pid;
	struct qs_carrier *c = bpf_map_lookup_elem(&carriers, &tid);
	/* The block ends at switch-in (as JFR's event ends when the park returns); the state
	 * turns runnable now, so time waiting for a CPU is not counted as idle or stalled. */
	if (c && (c->state == QS_CS_IDLE || c->state == QS_CS_STALLED))
		set_state(c, QS_CS_RUNNABLE, bpf_ktime_get_ns());
	return 0;
}

/* JDK 24+: java.lang.VirtualThread calls JVM_VirtualThreadPinnedEvent after every pinned
 * park (JFR on or off). Attached per PID by user space, which labels the stall it follows. */
SEC("uprobe")
int carrier_pinned(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != targ_tgid)
		return 0;
	count(QS_CC_PINNED_EVENTS);
	struct qs_carrier_pinned *r = bpf_ringbuf_reserve(&events, sizeof(*r), 0);
	if (!r) {
		count(QS_CC_RB_DROPS);
		return 0;
	}
	r->kind = QS_CARRIER_REC_PINNED;
	r->tid = (__u32)id;
	r->at_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(r, 0);
	return 0;
}
