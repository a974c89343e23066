// libFuzzer: /proc/kallsyms (large, module-suffixed lines, symbols zeroed without
// CAP_SYSLOG) and the kernel-address symbolizer over the result.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "symbols/symbolizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto syms = qscope::parse_kallsyms(text);
    for (size_t i = 1; i < syms.size(); ++i)
        if (syms[i - 1].addr > syms[i].addr) __builtin_trap();  // promised sorted
    uint64_t probe[4] = {0, ~0ull, 0, 0};
    if (size >= 16) std::memcpy(&probe[2], data + size - 16, 16);
    for (uint64_t a : probe) (void)qscope::symbolize_kernel_addr(syms, a);
    for (size_t i = 0; i < syms.size() && i < 64; ++i) (void)qscope::symbolize_kernel_addr(syms, syms[i].addr + 1);
    // A function's text is never empty-but-claimed nor reversed (the sock family filters on it).
    for (size_t i = 0; i < syms.size() && i < 64; ++i) {
        const auto t = syms.text_of(syms[i].name);
        if (t.start > t.end || (!t.empty() && !t.contains(t.start))) __builtin_trap();
    }
    return 0;
}
