// The process qscope attaches to, identified by PID *and* start time so a reused PID is
// never mistaken for the original.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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

private:
    int pid_ = 0;
    std::string comm_;
    std::string cmdline_;
    uint64_t start_ticks_ = 0;
};

}  // namespace qscope
