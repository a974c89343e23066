// libFuzzer: /tmp/perf-PID.map, written by the target's JIT (any content, any size).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "symbols/symbolizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto map = qscope::parse_perf_map(text);
    for (size_t i = 1; i < map.size(); ++i)
        if (map[i - 1].start > map[i].start) __builtin_trap();  // promised sorted
    // Look up a few addresses the input itself suggests, plus the edges.
    uint64_t probe[4] = {0, ~0ull, 0, 0};
    if (size >= 16) std::memcpy(&probe[2], data, 16);
    for (uint64_t a : probe) {
        const auto* e = qscope::find_perf_map_entry(map, a);
        if (e && !(a >= e->start)) __builtin_trap();
    }
    for (const auto& e : map) {
        const auto* hit = qscope::find_perf_map_entry(map, e.start);
        if (e.size > 0 && hit == nullptr) __builtin_trap();
    }
    return 0;
}
