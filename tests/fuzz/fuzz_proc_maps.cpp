// libFuzzer: /proc/PID/maps (paths with spaces, " (deleted)", JIT "//anon" regions,
// truncated reads of an exiting process).
#include <cstddef>
#include <cstdint>
#include <string>

#include "sys/proc_maps.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (const auto& m : qscope::parse_proc_maps(text)) {
        (void)m.executable();
        (void)m.file_backed();
        if (m.path.size() > text.size()) __builtin_trap();
    }
    return 0;
}
