// libFuzzer: /proc/PID/maps (paths with spaces, " (deleted)", JIT "//anon" regions,
// truncated reads of an exiting process), and the TLS libraries --tls looks for in it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sys/proc_maps.h"
#include "sys/tls_libs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto maps = qscope::parse_proc_maps(text);
    for (const auto& l : qscope::tls_libraries(maps))
        if (l.path.empty() || l.path.size() > text.size()) __builtin_trap();
    for (const auto& m : maps) {
        (void)m.executable();
        (void)m.file_backed();
        if (m.path.size() > text.size()) __builtin_trap();
    }
    return 0;
}
