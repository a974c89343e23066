#include "model/errors.h"

#include <climits>
#include <cstring>

namespace qscope {

std::string errno_text(int err) {
    // Netlink replies carry -errno; a hostile or corrupt one may carry INT_MIN, whose
    // negation overflows (found by fuzz_sock_diag).
    if (err == INT_MIN) return "unknown error " + std::to_string(err);
    if (err < 0) err = -err;
    return std::strerror(err);
}

}  // namespace qscope
