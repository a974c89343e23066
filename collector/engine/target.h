// The process qscope attaches to, identified by PID *and* start time so a reused PID is
// never mistaken for the original.
#pragma once
#include <bpf/libbpf.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/process_tree.h"
#include "model/snapshot.h"
#include "sys/proc_stat.h"

namespace qscope {

class Target {
public:
    // Validates the PID: exists, not a kernel thread. Throws Error(no_target) otherwise.
    static Target open(int pid);

    int pid() const { return pid_; }
    const std::string& comm() const { return comm_; }
    uint64_t start_time_ticks() const { return start_ticks_; }
    // Still the same process (same PID, same start time)?
    bool alive() const;
    std::vector<int> tids() const;
    TargetInfo info() const;

    // Loads the tree filter every probe family shares (bpf/tree.bpf.c) and marks the target:
    // its root and, with `children`, its descendants and whatever they fork from now on.
    // Call after the privilege checks; throws Error naming the step that failed. `shared`:
    // the exporter's shared hooks and this target's slot in them (ProcessTree::open).
    void follow(bool children, SharedSlot shared = {});
    // Where the shared hooks hand this target's events on; empty when its families attach
    // their own programs.
    SharedSlot shared_slot() const { return tree_ ? tree_->shared_slot() : SharedSlot{}; }
    // The tree maps (bitmap, range), for bpf_map__reuse_fd() before a family loads.
    int tree_map_fd() const;
    int tree_range_map_fd() const;
    // The process tree's hooks (fork, exit) for the snapshot's probe_attach; none before follow().
    std::vector<ProbeAttach> attach() const;
    // Applies the forks and exits since the last call: once per tick, before the sources.
    void refresh();
    // The processes observed now, root first (the root alone before follow()).
    std::vector<ProcessMember> processes() const;
    // The sockets process `pid` holds (fd and inode): its fd table in one pass where the
    // kernel allows (ProcessTree::socket_fds), else a readlink per fd of /proc/PID/fd.
    std::vector<SocketFd> socket_fds(int pid) const;
    // The one-pass read alone: nullopt where only /proc could answer.
    std::optional<std::vector<SocketFd>> socket_fds_one_pass(int pid) const;
    // A process's threads and their names (comm), from the tree's one-pass read where the
    // kernel allows (ProcessTree::thread_names), else /proc/PID/task/TID/comm a file each.
    std::map<int, std::string> thread_names(int pid) const;
    // The one-pass read alone: nullopt where only /proc could answer.
    std::optional<std::map<int, std::string>> thread_names_one_pass(int pid) const;

private:
    std::shared_ptr<ProcessTree> tree_;
    int pid_ = 0;
    std::string comm_;
    std::string cmdline_;
    uint64_t start_ticks_ = 0;
};

// Makes a probe family's copies of the tree maps (bpf/tree.h) the target's, before the
// family loads: every family then filters on the same, current set of processes.
void share_tree_maps(bpf_object* obj, const Target& target, const char* family);

}  // namespace qscope
