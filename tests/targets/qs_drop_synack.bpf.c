/* A tc egress filter for loopback (direct action): drops every SYN-ACK sent from TCP port
 * QS_DROP_PORT. requests_test loads it with `tc` for a moment so that a client retransmits
 * its SYN to a request socket the listener already holds: the kernel counts that segment in
 * the listener's sk_drops (tcp_v4_rcv, discard_and_relse), though nothing overflowed. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define QS_TC_ACT_OK 0
#define QS_TC_ACT_SHOT 2
#define QS_ETH_P_IP 0x0800
#define QS_IPPROTO_TCP 6

SEC("tc")
int qs_drop_synack(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct tcphdr *th = (void *)(ip + 1);

	if ((void *)(th + 1) > end || eth->h_proto != bpf_htons(QS_ETH_P_IP))
		return QS_TC_ACT_OK;
	if (ip->protocol != QS_IPPROTO_TCP || ip->ihl != 5)
		return QS_TC_ACT_OK;
	if (th->source == bpf_htons(QS_DROP_PORT) && th->syn && th->ack)
		return QS_TC_ACT_SHOT;
	return QS_TC_ACT_OK;
}

char LICENSE[] SEC("license") = "GPL";
