// libFuzzer: unix_diag replies (NETLINK_SOCK_DIAG, AF_UNIX). Seeded with the bytes captured
// from a kernel (tests/unit/fixtures/unix_diag_sockets.bin): names, peers and queue lengths
// behind nlmsg_len/rta_len values the parser must never trust past the buffer.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/errors.h"
#include "sys/unix_diag.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> buf(data, data + size);  // exact size: ASan sees any over-read
    std::vector<qscope::UnixDiagSocket> out;
    try {
        (void)qscope::parse_unix_diag(buf.data(), buf.size(), out);
    } catch (const qscope::Error&) {
        // NLMSG_ERROR or a truncated message: a typed error, by contract.
    }
    return 0;
}
