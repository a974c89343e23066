// The process qscope attaches to, identified by PID *and* start time so a reused PID is
// never mistaken for the original.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "snapshot.h"

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

// /proc/PID/stat parsed past the parenthesised comm (which may contain spaces and ')').
struct ProcStat {
    int pid = 0;
    std::string comm;
    char state = '?';
    unsigned flags = 0;
    int num_threads = 0;
    uint64_t start_time = 0;
    uint64_t utime = 0, stime = 0;
};
bool parse_proc_stat(const std::string& text, ProcStat& out);
bool read_file(const std::string& path, std::string& out);

// "http-nio-8080-exec-17" → "http-nio-8080-exec"; "ForkJoinPool-1-worker-3" →
// "ForkJoinPool-1-worker"; digits inside the name stay.
std::string thread_group_name(const std::string& comm);

}  // namespace qscope
