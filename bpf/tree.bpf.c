// SPDX-License-Identifier: GPL-2.0
/* Keeps the target's process tree current: a process forked by a member joins, a member
 * whose last thread exits leaves. User space seeds the tree (the root and the descendants
 * that exist at attach) after these programs are attached, so no fork falls in between.
 *
 * Both hooks fire for every fork and exit on the machine; they are rare next to socket and
 * scheduler events, and an unrelated one costs the bitmap test.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "core_fixes.bpf.h"
#include "tree.h"
#include "owner.h"

char LICENSE[] SEC("license") = "GPL";

/* Events user space could not be told about (ring buffer full): it rescans /proc. */
__u64 lost_events = 0;

/* The target's slot + 1 among an exporter's shared hooks (bpf/owner.h), 0 when it has none:
 * set by user space after the load, before it seeds the tree, so a fork from then on marks
 * its child's owner here and one before is in the seeding. A mark lost to races on the word
 * is made again by user space when it reads the fork's record (ProcessTree::add). */
__u32 owner_slot = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} tree_events SEC(".maps");

static __always_inline void emit(__u32 kind, __u32 tgid, __u32 ptgid)
{
	struct qs_tree_event *e = bpf_ringbuf_reserve(&tree_events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&lost_events, 1);
		return;
	}
	e->kind = kind;
	e->tgid = tgid;
	e->ptgid = ptgid;
	e->pad = 0;
	bpf_ringbuf_submit(e, 0);
}

/* Set the bit before widening: a reader that sees the new range finds the bit. A racing
 * fork elsewhere in the tree may lose this update; both are retried a few times. */
static __always_inline void widen_range(__u32 tgid)
{
	struct qs_tree_range *r = &qs_tree_range;
	int i;

	for (i = 0; i < 4; i++) {
		__u64 cur = r->max;
		if (tgid <= cur || __sync_val_compare_and_swap(&r->max, cur, tgid) == cur)
			break;
	}
	for (i = 0; i < 4; i++) {
		__u64 cur = r->min;
		if (tgid >= cur || __sync_val_compare_and_swap(&r->min, cur, tgid) == cur)
			break;
	}
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(qs_tree_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u64 *bits;

	/* A new thread shares its process's bit already. */
	if (ptgid == ctgid || !qs_in_tree(ptgid))
		return 0;
	bits = qs_tree_word(ctgid);
	if (!bits) {
		/* Beyond the bitmap: pid_max was raised after attach. */
		__sync_fetch_and_add(&lost_events, 1);
		return 0;
	}
	__sync_fetch_and_or(bits, 1ULL << (ctgid & 63));
	widen_range(ctgid);
	if (owner_slot)
		qs_owner_swap(ctgid, 0, owner_slot);
	emit(QS_TREE_FORK, ctgid, ptgid);
	return 0;
}

/* Fires once per exiting thread; the process leaves with its last one. signal->live is
 * decremented before the tracepoint (do_exit), so 0 means this was the last thread. A
 * member whose PID is reused later must not be counted: that is why the bit is cleared here
 * and not left to user space's next tick. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(qs_tree_exit, struct task_struct *p)
{
	__u32 tgid = p->tgid;
	__u64 *bits;

	if (!qs_in_tree(tgid))
		return 0;
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	bits = qs_tree_word(tgid);
	if (!bits)
		return 0;
	__sync_fetch_and_and(bits, ~(1ULL << (tgid & 63)));
	if (owner_slot)
		qs_owner_swap(tgid, owner_slot, 0);
	emit(QS_TREE_EXIT, tgid, 0);
	return 0;
}

/* The socket fds of one process, for user space to read in one pass instead of a readlink()
 * per fd of /proc/PID/fd (10,000 connections: 10,000 system calls, ~50 ms of CPU on the way
 * to the first frame). User space attaches it with a pid filter (Linux 6.1+), so only that
 * process's table is walked; the kernel visits a table shared by threads once. */
#define QS_S_IFMT   00170000
#define QS_S_IFSOCK 0140000

/* As sock.bpf.c's qs_seed reads a socket. A connection changing state as it is read is named
 * by its old or its new ends, as a sock_diag dump a moment apart would name it. */
static __always_inline void tcp_ends(struct file *f, struct qs_fd_sock *rec)
{
	struct socket *so = bpf_sock_from_file(f);
	struct sock *sk;
	__u16 family;

	if (!so)
		return;
	sk = BPF_CORE_READ(so, sk);
	if (!sk || BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP ||
	    BPF_CORE_READ(sk, sk_type) != 1 /* SOCK_STREAM */)
		return;
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	/* bpf_core_read with the address's own size: BPF_CORE_READ_INTO would read one byte
	 * (the size of the array's element). */
	if (family == AF_INET) {
		bpf_core_read(rec->laddr, 4, &sk->__sk_common.skc_rcv_saddr);
		bpf_core_read(rec->raddr, 4, &sk->__sk_common.skc_daddr);
	} else if (family == AF_INET6) {
		bpf_core_read(rec->laddr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
		bpf_core_read(rec->raddr, 16, &sk->__sk_common.skc_v6_daddr);
	} else {
		return;
	}
	rec->family = family;
	rec->tcp = 1;
	rec->state = BPF_CORE_READ(sk, __sk_common.skc_state);
	rec->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	rec->rport = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
}

SEC("iter/task_file")
int qs_fd_sockets(struct bpf_iter__task_file *ctx)
{
	struct file *f = ctx->file;
	struct task_struct *task = ctx->task;
	struct qs_fd_sock rec;
	struct inode *ino;

	if (!f || !task)
		return 0;
	ino = f->f_inode;
	if (!ino || (ino->i_mode & QS_S_IFMT) != QS_S_IFSOCK)
		return 0;
	__builtin_memset(&rec, 0, sizeof(rec));
	rec.tgid = task->tgid;
	rec.fd = ctx->fd;
	rec.ino = ino->i_ino;
	tcp_ends(f, &rec);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}

/* A process's threads and their names: a 10,000-thread target's attach read 10,000
 * /proc/PID/task/TID/comm files to learn whether any is a Tokio worker (~120 ms). */
SEC("iter/task")
int qs_thread_names(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	struct qs_thread_name rec;

	if (!task)
		return 0;
	__builtin_memset(&rec, 0, sizeof(rec));
	rec.tgid = task->tgid;
	rec.tid = task->pid;
	bpf_probe_read_kernel(rec.comm, sizeof(rec.comm), task->comm);
	bpf_seq_write(ctx->meta->seq, &rec, sizeof(rec));
	return 0;
}
