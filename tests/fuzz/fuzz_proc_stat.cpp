// libFuzzer: /proc/PID/stat and thread names. The text comes from a process that may be
// exiting (truncated reads) and its comm is chosen by the target (spaces, ')', newlines).
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/thread_group.h"
#include "sys/proc_stat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    qscope::ProcStat st;
    if (qscope::parse_proc_stat(text, st)) {
        // The comm sits between the first '(' and the last ')'.
        if (st.comm.size() > text.size()) __builtin_trap();
    }
    const std::string group = qscope::thread_group_name(text.substr(0, 64));
    if (group.size() > 64) __builtin_trap();
    return 0;
}
