// SPDX-License-Identifier: GPL-2.0
/* The hooks an exporter's targets share (docs/design.md, "One exporter, several targets").
 *
 * Each target of `qscope export --target ...` loads its own objects. Attached each, a global
 * hook would run once per target for every event on the host, each run but one a reject. Here
 * the busiest hooks whose event names its process (every socket's reads and writes, the
 * switches and wakeups, the polls, accept and close) are attached once: the program looks the
 * process's owner up (a byte, bpf/owner.h) and jumps (a tail call) to that target's own
 * program, which user space put in the owner's slot. An event of no target's process costs one inlined array look-up; with the
 * slot empty the jump falls through and nothing runs. The target's program runs as if it were
 * attached itself: its own maps, its own filter (which passes).
 *
 * The softirq hooks (a socket's arrivals, state changes, drops and resets) name a socket, not a
 * process: the targets it concerns are those listening on its local port or calling its remote
 * port (bpf/port_owner.h), several at times. The first one's program runs, and hands the event
 * on to the next (qs_hand_on, in sock.bpf.c) through the same table.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "owner.h"
#include "port_owner.h"

char LICENSE[] SEC("license") = "GPL";

/* One table per hook: a tail call from a BTF tracepoint must land in a program of the same
 * tracepoint. Indexed by slot. */
QS_TARGET_TABLE(recv_targets, 1);
QS_TARGET_TABLE(send_targets, 1);
QS_TARGET_TABLE(wakeup_targets, 1);
QS_TARGET_TABLE(wakeup_new_targets, 1);

/* The sock family's syscall tracepoints of every process (a target's own programs filter on
 * the current process too): accept's and accept4's exits, close's entry. */
QS_TARGET_TABLE(accept4_targets, 1);
QS_TARGET_TABLE(accept_targets, 1);
QS_TARGET_TABLE(close_targets, 1);

/* A switch names two tasks: the program of prev's owner runs first (or next's, when prev has
 * none), and it hands the event on to next's owner when that is another target (sched.bpf.c,
 * which shares this table). */
QS_TARGET_TABLE(switch_targets, 1);

/* Every poll's entry: a target's one entry program (qs_loop_enter), by slot. */
QS_TARGET_TABLE(poll_enter_targets, 1);

/* Every poll's exit: a target's exit program of that poll, at slot * QS_OWNER_POLLS + the
 * poll's index (qs_poll_index). */
QS_TARGET_TABLE(poll_exit_targets, QS_OWNER_POLLS);

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

/* A syscall tracepoint of the current process: its owner's program in the table. */
#define QS_DISPATCH_SYSCALL(prog, tracepoint, record, table)          \
	SEC("tracepoint/syscalls/" tracepoint)                        \
	int prog(struct record *ctx)                                  \
	{                                                             \
		__u32 o = current_owner();                            \
		if (o)                                                \
			bpf_tail_call(ctx, &table, o - 1);            \
		return 0;                                             \
	}

QS_DISPATCH_SYSCALL(qs_all_accept4, "sys_exit_accept4", trace_event_raw_sys_exit, accept4_targets)
QS_DISPATCH_SYSCALL(qs_all_accept, "sys_exit_accept", trace_event_raw_sys_exit, accept_targets)
QS_DISPATCH_SYSCALL(qs_all_close, "sys_enter_close", trace_event_raw_sys_enter, close_targets)

/* ---- before Linux 6.3 and 6.6: the reads', writes' and arrivals' ways in -----------------------
 * Where the tracepoints are missing, the targets' sock programs are reached through the kernel
 * functions behind them, by the way the sock family's attach plan chose (probes/sock/
 * attach_plan.h); user space loads the programs of that way only. A tail call lands in a
 * program of the same type on the same function: one table per program. */

QS_TARGET_TABLE(recv_fexit_targets, 1);
QS_TARGET_TABLE(send_fexit_targets, 1);
QS_TARGET_TABLE(recv_kprobe_targets, 1);
QS_TARGET_TABLE(recv_kretprobe_targets, 1);
QS_TARGET_TABLE(send_kprobe_targets, 1);
QS_TARGET_TABLE(send_kretprobe_targets, 1);
QS_TARGET_TABLE(data_ready_fentry_targets, 1);
QS_TARGET_TABLE(data_ready_kprobe_targets, 1);

/* A read's or a write's entry or return, in the current process: its owner's program. */
#define QS_DISPATCH_CURRENT(prog, section, ctx_type, table)           \
	SEC(section)                                                  \
	int prog(ctx_type *ctx)                                       \
	{                                                             \
		__u32 o = current_owner();                            \
		if (o)                                                \
			bpf_tail_call(ctx, &table, o - 1);            \
		return 0;                                             \
	}

QS_DISPATCH_CURRENT(qs_all_recv_fexit, "fexit/tcp_recvmsg", unsigned long long, recv_fexit_targets)
QS_DISPATCH_CURRENT(qs_all_send_fexit, "fexit/tcp_sendmsg", unsigned long long, send_fexit_targets)
QS_DISPATCH_CURRENT(qs_all_recv_kprobe, "kprobe/tcp_recvmsg", struct pt_regs, recv_kprobe_targets)
QS_DISPATCH_CURRENT(qs_all_recv_kretprobe, "kretprobe/tcp_recvmsg", struct pt_regs, recv_kretprobe_targets)
QS_DISPATCH_CURRENT(qs_all_send_kprobe, "kprobe/tcp_sendmsg", struct pt_regs, send_kprobe_targets)
QS_DISPATCH_CURRENT(qs_all_send_kretprobe, "kretprobe/tcp_sendmsg", struct pt_regs, send_kretprobe_targets)

/* sock_def_readable: the socket's targets, as at sk_data_ready. */
SEC("fentry/sock_def_readable")
int BPF_PROG(qs_all_data_ready_fentry, struct sock *sk)
{
	qs_hand_on(ctx, &data_ready_fentry_targets, qs_sock_owners(sk, 0), 0);
	return 0;
}

SEC("kprobe/sock_def_readable")
int BPF_KPROBE(qs_all_data_ready_kprobe, struct sock *sk)
{
	qs_hand_on(ctx, &data_ready_kprobe_targets, qs_sock_owners(sk, 1), 0);
	return 0;
}

/* ---- the softirq hooks: by the socket's ports ----------------------------------------------- */

QS_TARGET_TABLE(data_ready_targets, 1);
QS_TARGET_TABLE(set_state_targets, 1);
QS_TARGET_TABLE(kfree_skb_targets, 1);
QS_TARGET_TABLE(rst_in_targets, 1);
QS_TARGET_TABLE(rst_out_targets, 1);

SEC("tp_btf/sk_data_ready")
int BPF_PROG(qs_all_data_ready, const struct sock *sk)
{
	qs_hand_on(ctx, &data_ready_targets, qs_sock_owners(sk, 0), 0);
	return 0;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(qs_all_set_state, const struct sock *sk, const int oldstate, const int newstate)
{
	qs_hand_on(ctx, &set_state_targets, qs_set_state_owners(sk), 0);
	return 0;
}

SEC("tp_btf/kfree_skb")
int BPF_PROG(qs_all_kfree_skb, struct sk_buff *skb, void *location, enum skb_drop_reason reason,
	     struct sock *rx_sk)
{
	qs_hand_on(ctx, &kfree_skb_targets, qs_drop_owners(rx_sk), 0);
	return 0;
}

SEC("tp_btf/tcp_receive_reset")
int BPF_PROG(qs_all_rst_in, struct sock *sk)
{
	qs_hand_on(ctx, &rst_in_targets, qs_sock_owners(sk, 0), 0);
	return 0;
}

SEC("tp_btf/tcp_send_reset")
int BPF_PROG(qs_all_rst_out, const struct sock *sk, const struct sk_buff *skb)
{
	qs_hand_on(ctx, &rst_out_targets, qs_sock_owners(sk, 0), 0);
	return 0;
}
