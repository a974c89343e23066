// Socket inodes a process holds open: the /proc/PID/fd links that read "socket:[INODE]".
// This is how listeners (found with sock_diag) are attributed to the target.
#pragma once
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

// A socket a process holds: its fd and its inode.
struct SocketFd {
    int fd = -1;
    uint64_t inode = 0;
};
// The same walk keeping the fds: a readlink() per fd. Empty when the process is gone or the
// directory is unreadable. Target::socket_fds() reads the table in one pass where it can.
std::vector<SocketFd> socket_fds_proc(int pid);

}  // namespace qscope
