// The machine's processes as target selectors see them (--comm, --cmdline, --port,
// --cgroup): one row per process from /proc, and the two other facts a selector asks of
// the system, which cgroup v2 path a process is in and which processes hold a socket.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace qscope {

struct ProcEntry {
    int pid = 0;
    int ppid = 0;
    uint64_t start_time_ticks = 0;
    char state = '?';            // 'Z' zombie, ...
    bool kernel_thread = false;
    std::string comm;
    std::string cmdline;         // NULs as spaces, trailing ones dropped
};

// Every process in /proc now (kernel threads and zombies included, flagged). Processes
// that exit during the scan are skipped.
std::vector<ProcEntry> read_proc_table();

// The one row of `pid`, or nullopt when it is gone or unreadable.
std::optional<ProcEntry> read_proc_entry(int pid);

// The cgroup v2 path of a process ("/system.slice/nginx.service"), from the "0::" line of
// /proc/PID/cgroup; nullopt when the process is gone or has none. Pure parse below.
std::optional<std::string> proc_cgroup_v2(int pid);
std::optional<std::string> parse_cgroup_v2_line(const std::string& proc_pid_cgroup);

// Where cgroup2 is mounted, from /proc/mounts text ("/sys/fs/cgroup" on a unified host,
// "/sys/fs/cgroup/unified" on a hybrid one); nullopt when it is not mounted.
std::optional<std::string> parse_cgroup2_mount(const std::string& proc_mounts);
std::optional<std::string> cgroup2_mount();

// PIDs of the processes holding any of `inodes` among their fds (a listener shared by a
// master and its workers is held by all of them). Unreadable fd tables are skipped.
std::vector<int> pids_holding_sockets(const std::set<uint64_t>& inodes);

}  // namespace qscope
