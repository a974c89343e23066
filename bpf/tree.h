/* The target as a process tree: which tgids belong to it. Shared by every BPF object (the
 * filter) and collector/engine/process_tree.cpp (the seeding and the member list).
 *
 * One bit per tgid in an array map that every object shares (user space hands tree.bpf.c's
 * map to the others with bpf_map__reuse_fd before they load). The verifier inlines an array
 * look-up, so the test an unrelated event pays is a bounds check, a load, a shift and a mask:
 * about what the single-tgid compare it replaces cost, and no hashing. A bitmap is exact (no
 * collisions) and small: pid_max/8 bytes, 4 KiB at the default 32,768, 512 KiB at 2^22. A
 * range check on one hot cache line comes first (qs_tree_range): an event of a process
 * outside [smallest, largest member] never touches the bitmap, and a tree of one process
 * (--no-children, or a root that has not forked) is exactly the single-tgid compare.
 */
#ifndef QSCOPE_TREE_H
#define QSCOPE_TREE_H

/* Fork and exit of tree members, for the user-space member list (ring buffer records). */
#define QS_TREE_FORK 1
#define QS_TREE_EXIT 2

/* The smallest and largest member tgid: most unrelated events are rejected by two compares on
 * one hot cache line, before the bitmap (512 KiB at pid_max 2^22) is touched at all. */
struct qs_tree_range {
	__u64 min;	/* 64-bit: the fork program widens them with compare-and-swap */
	__u64 max;
};

struct qs_tree_event {
	__u32 kind;      /* QS_TREE_FORK / QS_TREE_EXIT */
	__u32 tgid;      /* the new or exited process */
	__u32 ptgid;     /* FORK: the member that forked it */
	__u32 pad;
};

/* A socket one process holds open, from the fd-table iterator (tree.bpf.c, qs_fd_sockets):
 * its fd and its inode, the number /proc/PID/fd/N names as "socket:[INODE]"; for a TCP
 * socket also its ends, so naming a process's connections needs no dump of every TCP
 * socket in the namespace. */
struct qs_fd_sock {
	__u32 tgid;      /* the process whose table was walked (user space checks it) */
	__u32 fd;
	__u64 ino;
	__u16 family;    /* AF_INET / AF_INET6 when tcp, else 0 */
	__u8 tcp;        /* 1: an IPPROTO_TCP socket of those families; the fields below are set */
	__u8 state;      /* TCP_* (10 = LISTEN) */
	__u16 lport;     /* host order */
	__u16 rport;     /* host order */
	__u8 laddr[16];  /* 4 bytes for AF_INET */
	__u8 raddr[16];
};

/* A thread of one process and its name, from the thread iterator (tree.bpf.c,
 * qs_thread_names): the comm /proc/PID/task/TID/comm reads, for every thread in one read. */
struct qs_thread_name {
	__u32 tgid;      /* the process whose threads were walked (user space checks it) */
	__u32 tid;
	char comm[16];   /* TASK_COMM_LEN, NUL-terminated */
};

#ifdef __BPF__
/* Defined in every object that filters on the tree; sized and shared by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);   /* user space sets bits with atomic ORs, as the kernel does */
	__uint(max_entries, 512);     /* words; set from /proc/sys/kernel/pid_max before load */
	__type(key, __u32);
	__type(value, __u64);
} qs_tree SEC(".maps");

/* The range is a global in a data section of its own, not a map looked up: an unrelated event
 * is rejected by two plain loads at a fixed address and two compares, what the single-tgid
 * compare against rodata cost (no key on the stack, no inlined look-up, no NULL check). The
 * section is an internal array map of one value; user space replaces every object's copy with
 * tree.bpf.c's (share_tree_maps, by the name ".data.tree") before load, so all see one range.
 * Nothing else may live in this section: every object's copy must have the same size. */
struct qs_tree_range qs_tree_range SEC(".data.tree") = { .min = ~0ULL, .max = 0 };

static __always_inline __u64 *qs_tree_word(__u32 tgid)
{
	__u32 w = tgid >> 6;
	return bpf_map_lookup_elem(&qs_tree, &w);
}

static __always_inline int qs_in_tree(__u32 tgid)
{
	__u64 *bits;

	/* The reject path: nothing but these two compares. */
	if (tgid < qs_tree_range.min || tgid > qs_tree_range.max)
		return 0;
	bits = qs_tree_word(tgid);
	return bits && ((*bits >> (tgid & 63)) & 1);
}

static __always_inline int qs_current_in_tree(void)
{
	return qs_in_tree((__u32)(bpf_get_current_pid_tgid() >> 32));
}
#endif

#endif
