// Socket inodes a process holds open: the /proc/PID/fd links that read "socket:[INODE]".
// This is how listeners (found with sock_diag) are attributed to the target.
#pragma once
#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace qscope {

// "socket:[12345]" → 12345; anything else → nullopt.
std::optional<uint64_t> parse_socket_link(const std::string& link);

// Every socket inode in /proc/PID/fd. Empty when the process is gone or the directory is
// unreadable (the caller decides whether that matters).
std::set<uint64_t> socket_inodes(int pid);

// A TCP socket's ends, read from the socket itself by the fd-table iterator.
struct TcpEnds {
    int family = 0;  // AF_INET / AF_INET6
    uint8_t state = 0;  // TCP_* (10 = LISTEN)
    uint16_t local_port = 0, remote_port = 0;
    std::array<uint8_t, 16> local{}, remote{};  // 4 bytes used for AF_INET
};

// A socket a process holds: its fd and its inode, and its ends when it is a TCP socket and
// the one-pass read could see them (socket_fds_proc cannot: it leaves `tcp` empty).
struct SocketFd {
    int fd = -1;
    uint64_t inode = 0;
    std::optional<TcpEnds> tcp;
};
// The same walk keeping the fds: a readlink() per fd. Empty when the process is gone or the
// directory is unreadable. Target::socket_fds() reads the table in one pass where it can.
std::vector<SocketFd> socket_fds_proc(int pid);

}  // namespace qscope
