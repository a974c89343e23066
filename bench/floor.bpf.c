// The floor any BPF tool pays on qscope's hooks: an empty program on each tracepoint the
// default probe set attaches (bpf/sock.bpf.c, bpf/sched.bpf.c). bench/overhead.sh runs it
// as its own condition, so qscope's cost is read against what the hooks alone cost.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/inet_sock_set_state") int floor_set_state(void *ctx) { return 0; }
SEC("tp_btf/sock_recv_length") int floor_recv(void *ctx) { return 0; }
SEC("tp_btf/sock_send_length") int floor_send(void *ctx) { return 0; }
SEC("tp_btf/sk_data_ready") int floor_data_ready(void *ctx) { return 0; }
SEC("tracepoint/syscalls/sys_exit_accept4") int floor_accept4_exit(void *ctx) { return 0; }
SEC("tracepoint/syscalls/sys_exit_accept") int floor_accept_exit(void *ctx) { return 0; }
SEC("tp_btf/kfree_skb") int floor_kfree_skb(void *ctx) { return 0; }
SEC("tp_btf/tcp_receive_reset") int floor_rst_in(void *ctx) { return 0; }
SEC("tp_btf/tcp_send_reset") int floor_rst_out(void *ctx) { return 0; }
SEC("tp_btf/sched_switch") int floor_sched_switch(void *ctx) { return 0; }
SEC("tp_btf/sched_wakeup") int floor_sched_wakeup(void *ctx) { return 0; }
SEC("tp_btf/sched_wakeup_new") int floor_sched_wakeup_new(void *ctx) { return 0; }
SEC("tracepoint/syscalls/sys_enter_close") int floor_close_enter(void *ctx) { return 0; }
// The event-loop polls (bpf/sched.bpf.c LOOP_POLL and io_uring_enter): entry and exit each.
#define FLOOR_POLL(name)                                                                   \
	SEC("tracepoint/syscalls/sys_enter_" #name) int floor_##name##_enter(void *ctx) { return 0; } \
	SEC("tracepoint/syscalls/sys_exit_" #name) int floor_##name##_exit(void *ctx) { return 0; }
FLOOR_POLL(epoll_wait)
FLOOR_POLL(epoll_pwait)
FLOOR_POLL(epoll_pwait2)
FLOOR_POLL(poll)
FLOOR_POLL(ppoll)
FLOOR_POLL(select)
FLOOR_POLL(pselect6)
FLOOR_POLL(io_uring_enter)
