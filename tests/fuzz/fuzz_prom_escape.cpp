// libFuzzer: Prometheus exposition escaping. Label values come from the target (thread
// names, comm, peer names) and may hold any bytes; the output must stay parseable:
// no raw newline, every quote and backslash escaped, valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "prom/prom.h"

namespace {
bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
        i += n;
    }
    return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    const std::string v = qscope::prom::escape_label_value(in);
    const std::string h = qscope::prom::escape_help(in);
    for (const std::string* s : {&v, &h}) {
        if (s->find('\n') != std::string::npos) __builtin_trap();
        if (!valid_utf8(*s)) __builtin_trap();
    }
    // In a label value every '"' is preceded by an escaping backslash.
    for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] == '\\') {
            ++i;  // skip the escaped character
            continue;
        }
        if (v[i] == '"') __builtin_trap();
    }
    (void)qscope::prom::valid_metric_name(in);
    (void)qscope::prom::valid_label_name(in);
    return 0;
}
