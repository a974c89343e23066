#include "sys/proc_table.h"

#include <dirent.h>

#include <cstdlib>
#include <sstream>

#include "sys/proc_fds.h"
#include "sys/proc_stat.h"

namespace qscope {

namespace {

constexpr unsigned kPfKthread = 0x00200000;

bool all_digits(const char* s) {
    if (!*s) return false;
    for (; *s; ++s)
        if (*s < '0' || *s > '9') return false;
    return true;
}

std::vector<int> proc_pids() {
    std::vector<int> out;
    if (DIR* d = opendir("/proc")) {
        while (dirent* e = readdir(d))
            if (all_digits(e->d_name)) out.push_back(std::atoi(e->d_name));
        closedir(d);
    }
    return out;
}

}  // namespace

std::optional<ProcEntry> read_proc_entry(int pid) {
    const std::string dir = "/proc/" + std::to_string(pid);
    std::string text;
    ProcStat st;
    if (!read_file(dir + "/stat", text) || !parse_proc_stat(text, st)) return std::nullopt;
    ProcEntry e;
    e.pid = pid;
    e.comm = st.comm;
    e.state = st.state;
    e.start_time_ticks = st.start_time;
    e.kernel_thread = (st.flags & kPfKthread) != 0;
    // ") S PPID ...": parse_proc_stat has no use for the parent; selectors need it for trees.
    const auto close = text.rfind(')');
    if (close != std::string::npos && close + 4 < text.size()) e.ppid = std::atoi(text.c_str() + close + 4);
    std::string cmd;
    if (!e.kernel_thread && read_file(dir + "/cmdline", cmd)) {
        for (auto& c : cmd)
            if (c == '\0') c = ' ';
        while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
        e.cmdline = std::move(cmd);
    }
    return e;
}

std::vector<ProcEntry> read_proc_table() {
    std::vector<ProcEntry> out;
    for (int pid : proc_pids())
        if (auto e = read_proc_entry(pid)) out.push_back(std::move(*e));
    return out;
}

std::optional<std::string> parse_cgroup_v2_line(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("0::", 0) == 0) return line.substr(3);
    return std::nullopt;
}

std::optional<std::string> proc_cgroup_v2(int pid) {
    std::string text;
    if (!read_file("/proc/" + std::to_string(pid) + "/cgroup", text)) return std::nullopt;
    return parse_cgroup_v2_line(text);
}

std::optional<std::string> parse_cgroup2_mount(const std::string& mounts) {
    std::istringstream in(mounts);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string dev, dir, type;
        if (f >> dev >> dir >> type && type == "cgroup2") return dir;
    }
    return std::nullopt;
}

std::optional<std::string> cgroup2_mount() {
    std::string text;
    if (!read_file("/proc/mounts", text)) return std::nullopt;
    return parse_cgroup2_mount(text);
}

std::vector<int> pids_holding_sockets(const std::set<uint64_t>& inodes) {
    std::vector<int> out;
    if (inodes.empty()) return out;
    for (int pid : proc_pids()) {
        const auto held = socket_inodes(pid);
        for (uint64_t ino : inodes)
            if (held.count(ino)) {
                out.push_back(pid);
                break;
            }
    }
    return out;
}

}  // namespace qscope
