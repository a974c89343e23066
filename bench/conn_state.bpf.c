// Per-connection state two ways, on the hook that runs most (every read on the host): a hash
// keyed by the socket's address, as bpf/sock.bpf.c keeps `conns`, and socket-local storage
// (BPF_MAP_TYPE_SK_STORAGE), which has no size limit and goes with the socket. Both find or
// create a struct qs_conn and touch it; an empty program on the same hook is the floor.
// bench/conn_state.sh reads each one's ns per run. CONN_STORAGE_FIRST swaps the two, whose
// order on the hook is their attach order (the first one pays for bringing the socket into
// the cache).
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "conn_state.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct qs_conn);
} by_hash_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct qs_conn);
} by_storage_map SEC(".maps");

static const struct qs_conn zero;

static __always_inline int by_hash(struct sock *sk, int ret)
{
	__u64 key = (__u64)sk;
	struct qs_conn *c = bpf_map_lookup_elem(&by_hash_map, &key);
	if (!c) {
		bpf_map_update_elem(&by_hash_map, &key, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&by_hash_map, &key);
	}
	if (c)
		c->t_unread += ret;  /* a write to the value, as every event makes */
	return 0;
}

static __always_inline int by_storage(struct sock *sk, int ret)
{
	struct qs_conn *c = bpf_sk_storage_get(&by_storage_map, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (c)
		c->t_unread += ret;  /* a write to the value, as every event makes */
	return 0;
}

SEC("tp_btf/sock_recv_length") int BPF_PROG(conn_empty, struct sock *sk, int ret, int flags) { return 0; }
#ifdef CONN_STORAGE_FIRST
SEC("tp_btf/sock_recv_length") int BPF_PROG(conn_by_storage, struct sock *sk, int ret, int flags) { return by_storage(sk, ret); }
SEC("tp_btf/sock_recv_length") int BPF_PROG(conn_by_hash, struct sock *sk, int ret, int flags) { return by_hash(sk, ret); }
#else
SEC("tp_btf/sock_recv_length") int BPF_PROG(conn_by_hash, struct sock *sk, int ret, int flags) { return by_hash(sk, ret); }
SEC("tp_btf/sock_recv_length") int BPF_PROG(conn_by_storage, struct sock *sk, int ret, int flags) { return by_storage(sk, ret); }
#endif
