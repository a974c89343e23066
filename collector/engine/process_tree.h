// The target as a process tree: the PID the operator gave and, by default, every process it
// forks (nginx and PostgreSQL serve from children). The kernel side (bpf/tree.bpf.c) keeps
// a bitmap of member tgids current at every fork and exit; every probe family filters on it.
// This side seeds the bitmap at attach and keeps the member list the /proc readers walk.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/snapshot.h"
#include "sys/proc_fds.h"

namespace qscope {

struct ProcessMember {
    int pid = 0;
    int ppid = 0;                 // at the time it joined (re-parenting does not change it)
    uint64_t start_time_ticks = 0;
    std::string comm;
    std::string role;             // process_role(): "worker process", "client backend", ...
};

// What a process does in its tree, from the title servers set for ps(1) ("nginx: worker
// process", "postgres: checkpointer", "postgres: app db 127.0.0.1(5432) idle" → "client
// backend", "gunicorn: worker [app]" → "worker"). Processes without a title are "main" (the
// root) or "child". Pure: unit-tested.
std::string process_role(const std::string& comm, const std::string& cmdline, bool is_root);

// Has the process exited, given its leader's state from /proc/PID/stat? A zombie leader is
// not enough: a main thread that called pthread_exit leaves a zombie leader while the other
// threads serve on (ps shows "Zl"); the process is gone when no thread is left.
bool process_exited(int pid, char leader_state);

class SharedHooks;

// A target's place among an exporter's shared hooks (engine/shared_hooks.h).
struct SharedSlot {
    std::shared_ptr<SharedHooks> hooks;
    int slot = -1;
};

class ProcessTree {
public:
    // Loads bpf/tree.bpf.c and marks `root` (and, with `children`, its descendants, and from
    // then on whatever they fork). With `shared`, also marks them as the slot's in the shared
    // hooks' owner map, unless another target owns one of them already: then the tree takes
    // no slot (shared_slot() is empty) and its families attach their own programs. Throws
    // Error naming the step that failed.
    static std::unique_ptr<ProcessTree> open(int root, bool children, SharedSlot shared = {});
    ~ProcessTree();
    ProcessTree(const ProcessTree&) = delete;
    ProcessTree& operator=(const ProcessTree&) = delete;

    // The bitmap every BPF object shares: pass to bpf_map__reuse_fd() before loading.
    int map_fd() const;
    int range_map_fd() const;  // the .data.tree section (qs_tree_range), shared the same way
    // The fork and exit hooks and how they were reached, or why they are off.
    std::vector<ProbeAttach> attach() const;
    // Applies the forks and exits since the last call; rescans /proc if events were lost.
    void refresh();
    // Current members, root first then by PID.
    std::vector<ProcessMember> members() const;
    size_t size() const { return members_.size(); }
    bool contains(int pid) const { return members_.count(pid) != 0; }
    bool follows_children() const { return children_; }
    // The slot whose shared hooks hand this tree's events on; empty when the hooks are not
    // shared or another target owns one of its processes.
    const SharedSlot& shared_slot() const { return shared_; }
    // Fork/exit records the ring buffer could not hold (each one triggered a rescan).
    uint64_t lost_events() const;
    // The sockets a member holds, read from its fd table in one pass (iter/task_file); nullopt
    // where that cannot run (no pid filter for iterators before Linux 6.1, or the iterator
    // refused), and the caller reads /proc/PID/fd instead. Safe from any thread.
    std::optional<std::vector<SocketFd>> socket_fds(int pid) const;
    // A member's threads and their names (comm), read in one pass (iter/task); nullopt where
    // that cannot run (as socket_fds), and the caller reads /proc/PID/task/TID/comm instead.
    // Safe from any thread.
    std::optional<std::map<int, std::string>> thread_names(int pid) const;

private:
    ProcessTree() = default;
    struct Bpf;
    void add(int pid, int ppid);
    void mark(int pid, bool on);
    void seed_descendants(int pid);
    void rescan();
    static int on_event(void* ctx, void* data, size_t size);

    int root_ = 0;
    bool children_ = true;
    SharedSlot shared_;
    bool owner_conflict_ = false;  // a member's owner byte was another target's
    std::unique_ptr<Bpf> bpf_;
    std::map<int, ProcessMember> members_;
    uint64_t lost_seen_ = 0;
    // Members whose title may still change (just forked): pid → refreshes left to re-read it.
    static constexpr int kSettlingRefreshes = 5;
    std::map<int, int> unsettled_;
};

}  // namespace qscope
