/* Kernel-version drift for the sock probes, in one place. Each shim cites the change. */
#ifndef QSCOPE_CORE_FIXES_BPF_H
#define QSCOPE_CORE_FIXES_BPF_H

#include <bpf/bpf_core_read.h>

/* include/net/sock.h: enum sock_flags. SOCK_DONE (a FIN was received) has been bit 1 since
 * 2.6; the macros around it (sock_flag()) are not in vmlinux.h. */
#define QS_SOCK_DONE 1

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif
#ifndef IPPROTO_TCP
#define IPPROTO_TCP 6
#endif

/* include/net/tcp_states.h */
#define QS_TCP_ESTABLISHED 1
#define QS_TCP_SYN_SENT 2
#define QS_TCP_SYN_RECV 3
#define QS_TCP_CLOSE 7
#define QS_TCP_CLOSE_WAIT 8
#define QS_TCP_LISTEN 10

/* include/uapi/linux/if_ether.h: skb->protocol, network order */
#define QS_ETH_P_IP 0x0800
#define QS_ETH_P_IPV6 0x86DD

/* Hooks and where they came from (the collector feature-probes each before load):
 *  - tp_btf/sock_recv_length, sock_send_length: include/trace/events/sock.h, v6.3.
 *  - tp_btf/sk_data_ready: include/trace/events/sock.h, v6.6.
 *  - tp_btf/kfree_skb with rx_sk (4th argument): v6.12 or later. Before it the listener of a dropped ACK is not in the event; this object is
 *    built for the 4-argument form and the collector disables the program on older kernels
 *    (overflows then come from sk_drops alone, including SYN-stage ones).
 *  - skb_drop_reason TCP_LISTEN_OVERFLOW: v5.19; its value is taken via CO-RE below. */
static __always_inline int qs_reason_listen_overflow(void)
{
	return bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_TCP_LISTEN_OVERFLOW);
}

/* v5.17, before TCP_LISTEN_OVERFLOW: present wherever qs_kfree_skb loads. */
static __always_inline int qs_reason_tcp_csum(void)
{
	return bpf_core_enum_value(enum skb_drop_reason, SKB_DROP_REASON_TCP_CSUM);
}

/* ss's Recv-Q for an established socket is rcv_nxt - copied_seq, which counts a received FIN
 * as one byte; a FIN is not a request, so it is taken off. */
static __always_inline __u32 qs_unread_bytes(__u32 rcv_nxt, __u32 copied_seq, unsigned long skc_flags)
{
	__s32 d = (__s32)(rcv_nxt - copied_seq);
	if (d > 0 && (skc_flags & (1UL << QS_SOCK_DONE)))
		d -= 1;
	return d > 0 ? (__u32)d : 0;
}

/* Is this the file's last reference (so closing one fd releases it)? v6.13 (commit 90ee6ed776c0,
 * "fs: port files to file_ref") replaced atomic_long_t f_count (1 = one reference) with
 * file_ref_t f_ref, whose counter is biased: FILE_REF_ONEREF is 0. */
struct file___f_count {
	atomic_long_t f_count;
} __attribute__((preserve_access_index));

static __always_inline int qs_file_last_ref(struct file *f)
{
	if (bpf_core_field_exists(f->f_ref))
		return BPF_CORE_READ(f, f_ref.refcnt.counter) == 0;
	return BPF_CORE_READ((struct file___f_count *)f, f_count.counter) == 1;
}

#endif
