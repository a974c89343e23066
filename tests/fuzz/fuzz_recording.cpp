// libFuzzer: recordings (qscope snapshot --replay FILE). A recording is a file anyone can
// hand qscope: cut, corrupt, or crafted, the reader must stop with a reason and never read
// past the buffer, allocate what the lengths claim, or crash. The first byte picks what the
// rest is: a whole file (through the checksums), or a tick's payload framed with a valid
// checksum (so the mutations reach the snapshot decoder and the window code behind it).
#include <cstddef>
#include <cstdint>
#include <string>

#include "record/format.h"
#include "record/window.h"

using namespace qscope::record;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    // An exact-size heap copy so ASan catches any read past `size`.
    const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::string file;
    if (data[0] & 1) {
        RecordHeader h;
        h.started_unix_ms = 1764459600000;
        file = file_header() + header_frame(h) + frame(FrameKind::tick, rest) + frame(FrameKind::tick, rest);
    } else {
        file = rest;
    }
    const Recording r = parse(file);
    if (!r.ticks.empty()) {
        const int64_t first = r.ticks.front().taken_at_unix_ms;
        (void)window(r.ticks, {first, r.ticks.back().taken_at_unix_ms});
        (void)window(r.ticks, {std::nullopt, std::nullopt});
    }
    (void)parse_time(rest.substr(0, 32), 1764459600000);
    return 0;
}
