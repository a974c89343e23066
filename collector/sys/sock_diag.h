// NETLINK_SOCK_DIAG for TCP sockets: the kernel's own view of listeners (accept-queue depth in
// rqueue, backlog in wqueue, drops in the meminfo) and of connections, by inode.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace qscope {

struct DiagSocket {
    int family = 0;                 // AF_INET / AF_INET6
    uint8_t state = 0;              // TCP_* (10 = LISTEN)
    std::string src, dst;           // "127.0.0.1", "::1"
    uint16_t sport = 0, dport = 0;  // host order
    uint32_t rqueue = 0;            // listener: accept-queue depth; else unread bytes
    uint32_t wqueue = 0;            // listener: backlog; else unsent bytes
    uint64_t inode = 0;
    uint32_t uid = 0;
    std::optional<uint32_t> drops;  // sk_drops, when meminfo was asked for
    std::optional<uint64_t> cgroup_id;  // the cgroup v2 the socket is charged to (Linux 5.7+)
};

enum class DiagStatus { more, done };

// Parses one recv() worth of netlink messages (one or more nlmsghdr) and appends every
// inet_diag_msg. Returns done at NLMSG_DONE. Throws Error on NLMSG_ERROR or a truncated
// message. Pure: unit-tested on hand-built messages.
DiagStatus parse_sock_diag(const void* buf, size_t len, std::vector<DiagSocket>& out);

// Dumps TCP sockets of one family in the states of `state_mask` (1 << TCP_LISTEN, ...).
// meminfo: also fetch INET_DIAG_SKMEMINFO (drops). netns_pid: dump the network namespace of
// that process (a target in a container), 0 for qscope's own. Throws Error naming the step
// and errno.
std::vector<DiagSocket> sock_diag_dump(int family, uint32_t state_mask, bool meminfo, int netns_pid = 0);

// A NETLINK_SOCK_DIAG socket in the network namespace of netns_pid (0: qscope's own); -1
// with errno when socket() fails. Throws Error when the namespace cannot be entered.
int diag_socket(int netns_pid);

// Both families; only sockets whose inode is in `inodes` (a process's fds).
std::vector<DiagSocket> sock_diag_by_inode(uint32_t state_mask, const std::set<uint64_t>& inodes,
                                           bool meminfo);

// Text form of a 4- or 16-byte address; IPv4-mapped IPv6 is shown as IPv4.
std::string format_ip(int family, const uint8_t* addr);
// "1.2.3.4:80", "[::1]:80"
std::string format_endpoint(int family, const uint8_t* addr, uint16_t port);
// The same for an address already in text (format_ip's).
std::string format_endpoint(const std::string& ip, uint16_t port);

}  // namespace qscope
