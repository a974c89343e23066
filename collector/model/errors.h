// Typed errors: every failure names what failed and how to fix it, and maps to an exit code.
#pragma once
#include <stdexcept>
#include <string>

namespace qscope {

enum class Exit : int {
    ok = 0,
    failure = 1,        // anything unexpected
    usage = 2,          // bad flags
    no_target = 3,      // no such PID, kernel thread, PID reused
    permission = 4,     // not root / missing CAP_BPF+CAP_PERFMON
    kernel = 5,         // missing BTF, tracepoint, map type
    target_exited = 6,  // the target went away mid-run (output still printed, marked)
};

class Error : public std::runtime_error {
public:
    Error(Exit code, const std::string& msg) : std::runtime_error(msg), code_(code) {}
    Exit code() const { return code_; }
    int exit_code() const { return static_cast<int>(code_); }

private:
    Exit code_;
};

// "<what>: <strerror(err)>" — err is a positive errno or a negative libbpf return.
std::string errno_text(int err);

}  // namespace qscope
