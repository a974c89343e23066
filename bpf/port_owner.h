/* Which of an exporter's targets an event on a socket concerns, for the shared softirq hooks
 * (bpf/dispatch.bpf.c): a socket's arrivals, state changes, drops and resets run in no
 * target's process, so the owner byte of bpf/owner.h cannot name them. Shared by
 * dispatch.bpf.c (the first reader), sock.bpf.c (which sets bits as it meets listeners and
 * peers, and hands each event on to the next target) and collector/engine/shared_hooks.cpp
 * (which sizes, seeds and clears them).
 */
#ifndef QSCOPE_PORT_OWNER_H
#define QSCOPE_PORT_OWNER_H

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>

#include "core_fixes.bpf.h"
#include "owner.h"
#include "sock.h"

/* The targets a socket concerns: those that listen on its local port, or call its remote
 * port. A bit per slot, per port. A target's own copy has one entry, unused: it reads them only
 * when shared (user space then gives it the exporter's). */
#define QS_PORT_OWNERS(name)                                            \
	struct {                                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY);                       \
		__uint(map_flags, BPF_F_MMAPABLE);                      \
		__uint(max_entries, 1);   /* 65536 when shared */       \
		__type(key, __u32);                                     \
		__type(value, __u64);                                   \
	} name SEC(".maps")

QS_PORT_OWNERS(qs_listen_owners);  /* by local port: the targets listening on it */
QS_PORT_OWNERS(qs_peer_owners);    /* by remote port: the targets calling a peer there */
QS_PORT_OWNERS(qs_unix_owners);    /* entry 0: the targets that follow Unix sockets */

static __always_inline __u64 qs_owners_at(void *map, __u32 key)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);

	return v ? *v : 0;
}

static __always_inline void qs_owners_add(void *map, __u32 key, __u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(map, &key);

	if (v && !((*v >> slot) & 1))
		__sync_fetch_and_or(v, 1ULL << slot);
}

/* A field of sk: a plain load from a BTF pointer (tp_btf, fentry), a CO-RE probe read from a
 * kprobe's (sock_def_readable before 6.6). */
#define QS_SK(probe, sk, field) ((probe) ? BPF_CORE_READ(sk, field) : (sk)->field)

/* The targets an event on a TCP or Unix socket concerns (slots as bits); none without one
 * (tcp_send_reset answers a segment for no socket with a null one). */
static __always_inline __u64 qs_sock_owners(const struct sock *sk, const int probe)
{
	if (!sk)
		return 0;
	if (QS_SK(probe, sk, __sk_common.skc_family) == AF_UNIX)
		return qs_owners_at(&qs_unix_owners, 0);
	return qs_owners_at(&qs_listen_owners, QS_SK(probe, sk, __sk_common.skc_num)) |
	       qs_owners_at(&qs_peer_owners, bpf_ntohs(QS_SK(probe, sk, __sk_common.skc_dport)));
}

/* inet_sock_set_state (TCP's only: it fires for other protocols too): a connect (SYN_SENT) or a
 * listen is made by the current process, whose peer or port no bit names yet; the rest by the
 * socket. */
static __always_inline __u64 qs_set_state_owners(const struct sock *sk)
{
	__u32 o;

	if (sk->sk_protocol != IPPROTO_TCP)
		return 0;
	o = qs_owner_of((__u32)(bpf_get_current_pid_tgid() >> 32));
	return qs_sock_owners(sk, 0) | (o ? 1ULL << ((o - 1) & (QS_OWNER_SLOTS - 1)) : 0);
}

/* kfree_skb: only a listener's drops are counted (sock.bpf.c qs_kfree_skb); a drop before any
 * socket was found has none. */
static __always_inline __u64 qs_drop_owners(const struct sock *rx_sk)
{
	if (!rx_sk || rx_sk->__sk_common.skc_state != QS_TCP_LISTEN)
		return 0;
	return qs_owners_at(&qs_listen_owners, rx_sk->__sk_common.skc_num);
}

/* Hands the event on to the next target in `owners` from slot `from` on (a tail call); past an
 * empty slot (a target without this hook) to the one after. Returns when none is left. */
static __always_inline void qs_hand_on(void *ctx, void *table, __u64 owners, __u32 from)
{
	for (__u32 i = from; i < QS_OWNER_SLOTS; i++) {
		if (!(owners >> i))
			return;
		if ((owners >> i) & 1)
			bpf_tail_call(ctx, table, i);
	}
}

#endif
