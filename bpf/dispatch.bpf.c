// SPDX-License-Identifier: GPL-2.0
/* The hooks an exporter's targets share (docs/design.md, "One exporter, several targets").
 *
 * Each target of `qscope export --target ...` loads its own objects. Attached each, a global
 * hook would run once per target for every event on the host, each run but one a reject. Here
 * the busiest hooks whose event names its process (the reads and writes of every socket on
 * the host) are attached once: the program looks the current process's owner up (a byte,
 * bpf/owner.h) and jumps (a tail call) to that target's own program, which user space put in
 * the owner's slot. An event of no target's process costs one inlined array look-up; with the
 * slot empty the jump falls through and nothing runs. The target's program runs as if it were
 * attached itself: its own maps, its own filter (which passes).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "owner.h"

char LICENSE[] SEC("license") = "GPL";

/* One table per hook: a tail call from a BTF tracepoint must land in a program of the same
 * tracepoint. Indexed by slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} recv_targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} send_targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} wakeup_targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} wakeup_new_targets SEC(".maps");

/* The sock family's syscall tracepoints of every process (a target's own programs filter on
 * the current process too): accept's and accept4's exits, close's entry. */
#define QS_SYSCALL_TABLE(name)                              \
	struct {                                            \
		__uint(type, BPF_MAP_TYPE_PROG_ARRAY);      \
		__uint(max_entries, QS_OWNER_SLOTS);        \
		__type(key, __u32);                         \
		__type(value, __u32);                       \
	} name##_targets SEC(".maps");

QS_SYSCALL_TABLE(accept4)
QS_SYSCALL_TABLE(accept)
QS_SYSCALL_TABLE(close)

/* A switch names two tasks: the program of prev's owner runs first (or next's, when prev has
 * none), and it hands the event on to next's owner when that is another target (sched.bpf.c,
 * which shares this table). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} switch_targets SEC(".maps");

/* Every poll's entry: a target's one entry program (qs_loop_enter), by slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} poll_enter_targets SEC(".maps");

/* Every poll's exit: a target's exit program of that poll, at slot * QS_OWNER_POLLS + the
 * poll's index (qs_poll_index). */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, QS_OWNER_SLOTS * QS_OWNER_POLLS);
	__type(key, __u32);
	__type(value, __u32);
} poll_exit_targets SEC(".maps");

static __always_inline __u32 current_owner(void)
{
	return qs_owner_of((__u32)(bpf_get_current_pid_tgid() >> 32));
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(qs_all_recv, struct sock *sk, int ret, int flags)
{
	__u32 o;

	if (ret <= 0)   /* qs_recv's own first test: no look-up for an empty or failed read */
		return 0;
	o = current_owner();
	if (o)
		bpf_tail_call(ctx, &recv_targets, o - 1);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(qs_all_send, struct sock *sk, int ret, int flags)
{
	__u32 o = current_owner();

	if (o)
		bpf_tail_call(ctx, &send_targets, o - 1);
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(qs_all_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	__u32 o = qs_owner_of(prev->tgid), n;

	if (o)
		bpf_tail_call(ctx, &switch_targets, o - 1);
	/* Here when prev has no owner, or its owner no program yet (a target attaching): next's
	 * owner must not miss the switch for it. */
	n = qs_owner_of(next->tgid);
	if (n && n != o)
		bpf_tail_call(ctx, &switch_targets, n - 1);
	return 0;
}

/* The wakeups name the task woken, not the one running: its process's owner. */
SEC("tp_btf/sched_wakeup")
int BPF_PROG(qs_all_wakeup, struct task_struct *p)
{
	__u32 o = qs_owner_of(p->tgid);

	if (o)
		bpf_tail_call(ctx, &wakeup_targets, o - 1);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(qs_all_wakeup_new, struct task_struct *p)
{
	__u32 o = qs_owner_of(p->tgid);

	if (o)
		bpf_tail_call(ctx, &wakeup_new_targets, o - 1);
	return 0;
}

/* Attached to every poll's syscall entry (the section names the first), as a target's own
 * entry program is (sched.bpf.c qs_loop_enter): it reads the syscall's number from the record. */
SEC("tracepoint/syscalls/sys_enter_epoll_wait")
int qs_all_poll_in(struct trace_event_raw_sys_enter *ctx)
{
	__u32 o = current_owner();

	if (o)
		bpf_tail_call(ctx, &poll_enter_targets, o - 1);
	return 0;
}

/* Attached to every poll's syscall exit; the record's syscall number picks the exit program. */
SEC("tracepoint/syscalls/sys_exit_epoll_wait")
int qs_all_poll_out(struct trace_event_raw_sys_exit *ctx)
{
	__u32 o = current_owner();
	int i;

	if (!o)
		return 0;
	i = qs_poll_index(ctx->id);
	if (i >= 0)
		bpf_tail_call(ctx, &poll_exit_targets, (o - 1) * QS_OWNER_POLLS + (__u32)i);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept4")
int qs_all_accept4(struct trace_event_raw_sys_exit *ctx)
{
	__u32 o = current_owner();

	if (o)
		bpf_tail_call(ctx, &accept4_targets, o - 1);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept")
int qs_all_accept(struct trace_event_raw_sys_exit *ctx)
{
	__u32 o = current_owner();

	if (o)
		bpf_tail_call(ctx, &accept_targets, o - 1);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_close")
int qs_all_close(struct trace_event_raw_sys_enter *ctx)
{
	__u32 o = current_owner();

	if (o)
		bpf_tail_call(ctx, &close_targets, o - 1);
	return 0;
}
