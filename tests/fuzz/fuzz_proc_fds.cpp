// libFuzzer: readlink() text of /proc/PID/fd/N ("socket:[INODE]", "pipe:[..]", paths).
#include <cstddef>
#include <cstdint>
#include <string>

#include "sys/proc_fds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string link(reinterpret_cast<const char*>(data), size);
    const auto inode = qscope::parse_socket_link(link);
    if (inode && link.rfind("socket:[", 0) != 0) __builtin_trap();
    return 0;
}
