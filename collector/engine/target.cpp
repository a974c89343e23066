#include "engine/target.h"

#include "engine/bpf_util.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <fstream>
#include <sstream>

#include "model/errors.h"
#include "sys/proc_tasks.h"

namespace qscope {

// A process names itself (prctl PR_SET_NAME): control characters would break the report,
// the TUI and log lines, so they become '?'.
static std::string sanitize_name(std::string n) {
    for (auto& c : n)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return n;
}

static constexpr unsigned PF_KTHREAD_FLAG = 0x00200000;

Target Target::open(int pid) {
    if (pid <= 0)
        throw Error(Exit::no_target, "invalid PID " + std::to_string(pid) + ": give the PID of a running process (see `pgrep NAME`)");
    std::string text;
    if (!read_file("/proc/" + std::to_string(pid) + "/stat", text))
        throw Error(Exit::no_target, "no process with PID " + std::to_string(pid) + " (it may have exited; see `pgrep NAME`)");
    ProcStat st;
    if (!parse_proc_stat(text, st))
        throw Error(Exit::no_target, "cannot parse /proc/" + std::to_string(pid) + "/stat");
    if (st.flags & PF_KTHREAD_FLAG)
        throw Error(Exit::no_target, "PID " + std::to_string(pid) + " (" + st.comm + ") is a kernel thread: qscope observes user-space server processes");
    if (process_exited(pid, st.state))
        throw Error(Exit::no_target, "PID " + std::to_string(pid) + " (" + st.comm + ") is a zombie: it has exited");
    // A thread id is not a process: /proc/TID exists but names the thread's group.
    std::string status;
    if (read_file("/proc/" + std::to_string(pid) + "/status", status)) {
        auto p = status.find("\nTgid:");
        if (p != std::string::npos) {
            int tgid = std::atoi(status.c_str() + p + 6);
            if (tgid != pid)
                throw Error(Exit::no_target, "PID " + std::to_string(pid) + " is a thread of process " + std::to_string(tgid) + ": attach to " + std::to_string(tgid));
        }
    }
    Target t;
    t.pid_ = pid;
    t.comm_ = sanitize_name(st.comm);
    t.start_ticks_ = st.start_time;
    std::string cmd;
    if (read_file("/proc/" + std::to_string(pid) + "/cmdline", cmd)) {
        for (auto& c : cmd)
            if (c == '\0') c = ' ';
        while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
        t.cmdline_ = cmd;
    }
    return t;
}

// /proc/PID/stat of a process sums CPU times over every thread (10 ms at 10,000 threads);
// the leader thread's own stat has the same start time and costs nothing extra.
bool Target::alive() const {
    std::string text;
    const std::string pid = std::to_string(pid_);
    if (!read_file("/proc/" + pid + "/task/" + pid + "/stat", text) && !read_file("/proc/" + pid + "/stat", text))
        return false;
    ProcStat st;
    if (!parse_proc_stat(text, st)) return false;
    return st.start_time == start_ticks_ && !process_exited(pid_, st.state);
}

// Threads: in /proc/PID/status is the kernel's counter; listing /proc/PID/task would
// allocate a directory entry per thread on every tick.
static int thread_count(int pid) {
    std::string status;
    if (!read_file("/proc/" + std::to_string(pid) + "/status", status)) return 0;
    auto p = status.find("\nThreads:");
    return p == std::string::npos ? 0 : std::atoi(status.c_str() + p + 9);
}

std::vector<int> Target::tids() const {
    std::vector<int> out;
    DIR* d = opendir(("/proc/" + std::to_string(pid_) + "/task").c_str());
    if (!d) return out;
    while (auto* e = readdir(d)) {
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') out.push_back(std::atoi(e->d_name));
    }
    closedir(d);
    return out;
}

void share_tree_maps(bpf_object* obj, const Target& target, const char* family) {
    const std::pair<const char*, int> maps[] = {{"qs_tree", target.tree_map_fd()},
                                                {".data.tree", target.tree_range_map_fd()}};
    for (const auto& [name, fd] : maps) {
        bpf_map* m = bpf_object__find_map_by_name(obj, name);
        if (!m) throw Error(Exit::failure, std::string(family) + ": BPF object has no map " + name);
        bpf_check(bpf_map__reuse_fd(m, fd), std::string(family) + ": sharing map " + name);
    }
}

void Target::follow(bool children, SharedSlot shared) { tree_ = ProcessTree::open(pid_, children, std::move(shared)); }

int Target::tree_map_fd() const { return tree_ ? tree_->map_fd() : -1; }

std::vector<ProbeAttach> Target::attach() const { return tree_ ? tree_->attach() : std::vector<ProbeAttach>{}; }

int Target::tree_range_map_fd() const { return tree_ ? tree_->range_map_fd() : -1; }

void Target::refresh() {
    if (tree_) tree_->refresh();
}

std::optional<std::vector<SocketFd>> Target::socket_fds_one_pass(int pid) const {
    return tree_ ? tree_->socket_fds(pid) : std::nullopt;
}

std::vector<SocketFd> Target::socket_fds(int pid) const {
    if (auto fds = socket_fds_one_pass(pid)) return std::move(*fds);
    return socket_fds_proc(pid);
}

std::optional<std::map<int, std::string>> Target::thread_names_one_pass(int pid) const {
    return tree_ ? tree_->thread_names(pid) : std::nullopt;
}

std::map<int, std::string> Target::thread_names(int pid) const {
    if (auto names = thread_names_one_pass(pid)) return std::move(*names);
    std::map<int, std::string> out;
    for (int tid : list_tids(pid)) out[tid] = read_task_comm(pid, tid);
    return out;
}

std::vector<ProcessMember> Target::processes() const {
    if (tree_) return tree_->members();
    ProcessMember root;
    root.pid = pid_;
    root.comm = comm_;
    root.start_time_ticks = start_ticks_;
    root.role = process_role(comm_, cmdline_, true);
    return {root};
}

TargetInfo Target::info() const {
    TargetInfo i;
    i.pid = pid_;
    // exec changes the name; the PID and start time stay, so it is still our target.
    std::string comm;
    // ...but only while the PID is still ours: a reused PID's newcomer must not lend its name.
    if (alive() && read_file("/proc/" + std::to_string(pid_) + "/comm", comm) && !comm.empty()) {
        if (comm.back() == '\n') comm.pop_back();
        i.comm = sanitize_name(comm);
    } else {
        i.comm = comm_;
    }
    i.cmdline = cmdline_;
    i.start_time_ticks = start_ticks_;
    i.follows_children = tree_ && tree_->follows_children();
    i.threads = 0;
    for (const auto& m : processes()) {
        ProcessInfo p;
        p.pid = m.pid;
        p.comm = sanitize_name(m.comm);
        p.role = sanitize_name(m.role);
        p.threads = thread_count(m.pid);
        i.threads += p.threads;
        i.processes.push_back(std::move(p));
    }
    return i;
}

}  // namespace qscope
