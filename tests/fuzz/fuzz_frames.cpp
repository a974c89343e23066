// libFuzzer: symbolized frame text and thread-name grouping. Frame and thread names come
// from the target's binaries, JIT maps and pthread_setname_np: arbitrary bytes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "probes/sched/sched_source.h"
#include "model/thread_group.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::string f = qscope::frame_function(text);
    (void)qscope::short_function(f);
    (void)qscope::short_function(text);
    (void)qscope::frame_module(text);
    const std::string comm = text.substr(0, 16);
    const std::string g = qscope::kernel_group_name(comm);
    const std::string u = qscope::thread_group_name(comm);
    if (g.size() > comm.size() + 1 || u.size() > comm.size()) __builtin_trap();
    return 0;
}
