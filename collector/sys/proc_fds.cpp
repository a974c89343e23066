#include "sys/proc_fds.h"

#include <dirent.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace qscope {

std::optional<uint64_t> parse_socket_link(const std::string& link) {
    static const std::string prefix = "socket:[";
    if (link.size() <= prefix.size() + 1 || link.compare(0, prefix.size(), prefix) != 0 || link.back() != ']')
        return std::nullopt;
    const std::string digits = link.substr(prefix.size(), link.size() - prefix.size() - 1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    errno = 0;
    const unsigned long long v = std::strtoull(digits.c_str(), nullptr, 10);
    if (errno) return std::nullopt;
    return v;
}

std::vector<SocketFd> socket_fds_proc(int pid) {
    std::vector<SocketFd> out;
    const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    char buf[64];
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        // Relative to the open directory: no path walk of /proc/PID/fd per fd (10,000 fds
        // on a large server).
        const ssize_t n = readlinkat(dirfd(d), e->d_name, buf, sizeof(buf) - 1);
        if (n <= 0) continue;  // closed between readdir and readlink
        if (auto ino = parse_socket_link(std::string(buf, static_cast<size_t>(n))))
            out.push_back({std::atoi(e->d_name), *ino});
    }
    closedir(d);
    return out;
}

std::set<uint64_t> socket_inodes(int pid) {
    std::set<uint64_t> out;
    for (const SocketFd& s : socket_fds_proc(pid)) out.insert(s.inode);
    return out;
}

}  // namespace qscope
