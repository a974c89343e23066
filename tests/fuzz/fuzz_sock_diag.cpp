// libFuzzer: NETLINK_SOCK_DIAG replies. The kernel is trusted, but a parser that walks
// nlmsg_len/rta_len must never read past the buffer it was given, whatever the lengths say.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "model/errors.h"
#include "sys/sock_diag.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // An exact-size heap copy so ASan catches any read past `size`.
    std::vector<uint8_t> buf(data, data + size);
    std::vector<qscope::DiagSocket> out;
    try {
        (void)qscope::parse_sock_diag(buf.data(), buf.size(), out);
    } catch (const qscope::Error&) {
        // Documented: NLMSG_ERROR or a truncated message is a typed error, not a crash.
    }
    return 0;
}
