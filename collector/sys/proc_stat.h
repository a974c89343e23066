// /proc/PID/stat and whole-file reads: the two things every /proc reader needs.
#pragma once
#include <cstdint>
#include <string>

namespace qscope {

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

}  // namespace qscope
