// libFuzzer: /proc/PID/task/TID/syscall, fd links, /proc/PID/net/tcp{,6} — read from a
// live process whose threads and sockets vanish mid-read (truncated, racy text).
#include <cstddef>
#include <cstdint>
#include <string>

#include "sys/proc_tasks.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    qscope::ProcSyscall sc;
    (void)qscope::parse_proc_syscall(text, sc);
    (void)qscope::parse_socket_inode(text);
    const bool v6 = size > 0 && (data[0] & 1);
    for (const auto& s : qscope::parse_proc_net_tcp(text, v6)) {
        if (s.local.empty() && s.local_port != 0) __builtin_trap();
    }
    (void)qscope::format_proc_net_addr(text.substr(0, 40), v6);
    return 0;
}
