/* The target as a process tree: which tgids belong to it. Shared by every BPF object (the
 * filter) and collector/engine/process_tree.cpp (the seeding and the member list).
 *
 * One bit per tgid in an array map that every object shares (user space hands tree.bpf.c's
 * map to the others with bpf_map__reuse_fd before they load). The verifier inlines an array
 * look-up, so the test an unrelated event pays is a bounds check, a load, a shift and a mask:
 * about what the single-tgid compare it replaces cost, and no hashing. A bitmap is exact (no
 * collisions) and small: pid_max/8 bytes, 4 KiB at the default 32,768, 512 KiB at 2^22.
 */
#ifndef QSCOPE_TREE_H
#define QSCOPE_TREE_H

/* Fork and exit of tree members, for the user-space member list (ring buffer records). */
#define QS_TREE_FORK 1
#define QS_TREE_EXIT 2

struct qs_tree_event {
	__u32 kind;      /* QS_TREE_FORK / QS_TREE_EXIT */
	__u32 tgid;      /* the new or exited process */
	__u32 ptgid;     /* FORK: the member that forked it */
	__u32 pad;
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

static __always_inline __u64 *qs_tree_word(__u32 tgid)
{
	__u32 w = tgid >> 6;
	return bpf_map_lookup_elem(&qs_tree, &w);
}

static __always_inline int qs_in_tree(__u32 tgid)
{
	__u64 *bits = qs_tree_word(tgid);
	return bits && ((*bits >> (tgid & 63)) & 1);
}

static __always_inline int qs_current_in_tree(void)
{
	return qs_in_tree((__u32)(bpf_get_current_pid_tgid() >> 32));
}
#endif

#endif
