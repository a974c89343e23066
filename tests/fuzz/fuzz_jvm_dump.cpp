// libFuzzer: jcmd output — Thread.print text and Thread.dump_to_file JSON. Thread names in
// both are chosen by the application (quotes, brackets, newlines, any bytes).
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "probes/jvm/jvm_dump.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    for (const auto& e : qscope::jvm::parse_thread_print(text)) (void)qscope::jvm::is_carrier_name(e.name);
    try {
        (void)qscope::jvm::aggregate_thread_dump(text, 3);
    } catch (const std::runtime_error&) {
        // Documented: JSON that is not a thread dump is a typed error, not a crash.
    }
    (void)qscope::jvm::frame_method(text.substr(0, 512));
    return 0;
}
