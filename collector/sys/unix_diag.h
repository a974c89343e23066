// NETLINK_SOCK_DIAG for Unix-domain sockets (unix_diag): the kernel's own view of Unix
// listeners (accept-queue depth and backlog with UDIAG_SHOW_RQLEN), of each socket's bound
// name (UDIAG_SHOW_NAME) and of who it is connected to (UDIAG_SHOW_PEER, by inode).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sys/sock_diag.h"

namespace qscope {

struct UnixDiagSocket {
    uint8_t type = 0;              // SOCK_STREAM 1, SOCK_DGRAM 2, SOCK_SEQPACKET 5
    uint8_t state = 0;             // TCP_* values: 10 listening, 1 connected, 7 unconnected
    uint64_t inode = 0;
    std::string name;              // "/run/php/fpm.sock", "@abstract"; empty when unbound
    std::optional<uint64_t> peer;  // inode of the other end (UDIAG_SHOW_PEER)
    std::optional<uint32_t> rqueue, wqueue;  // UDIAG_SHOW_RQLEN: listener: queue depth, backlog;
                                             // else bytes unread, and memory of what it sent
                                             // that the peer has not read (skb truesize)
};

// A Unix address's name as people write it: a filesystem path as is (up to its NUL), an
// abstract name (leading NUL byte) as "@name" with inner NULs shown as "@" too, as ss does.
std::string unix_name_text(const uint8_t* path, size_t len);

// Parses one recv() worth of netlink messages and appends every unix_diag_msg with the
// attributes it carries. Returns done at NLMSG_DONE. Throws Error on NLMSG_ERROR or a
// truncated message; an attribute whose length is odd or runs past its message ends that
// message's attributes (what was read stays). Pure: unit-tested on bytes captured from a
// kernel (tests/unit/fixtures/unix_diag_*.bin).
DiagStatus parse_unix_diag(const void* buf, size_t len, std::vector<UnixDiagSocket>& out);

// Dumps the Unix sockets in the states of `state_mask` (1 << 10 for listeners, ~0u for all)
// with name, peer and queue lengths. netns_pid: that process's network namespace (0: ours).
// Throws Error naming the step and errno.
std::vector<UnixDiagSocket> unix_diag_dump(uint32_t state_mask, int netns_pid = 0);

}  // namespace qscope
