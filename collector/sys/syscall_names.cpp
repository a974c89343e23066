#include "sys/syscall_names.h"

#include <linux/types.h>
extern "C" {
#include "syscalls.h"
}

namespace qscope {

static constexpr uint32_t kFutexPrivate = 128, kFutexClockRealtime = 256;

std::string futex_cmd_name(uint32_t op) {
    static constexpr const char* names[] = {
        "WAIT",        "WAKE",      "FD",          "REQUEUE",         "CMP_REQUEUE",
        "WAKE_OP",     "LOCK_PI",   "UNLOCK_PI",   "TRYLOCK_PI",      "WAIT_BITSET",
        "WAKE_BITSET", "WAIT_REQUEUE_PI", "CMP_REQUEUE_PI", "LOCK_PI2"};
    const uint32_t cmd = op & ~(kFutexPrivate | kFutexClockRealtime);
    if (cmd < sizeof(names) / sizeof(names[0])) return names[cmd];
    return "CMD_" + std::to_string(cmd);
}

std::string futex_op_name(uint32_t op) {
    std::string s = futex_cmd_name(op);
    if (op & kFutexPrivate) s += "|PRIVATE";
    if (op & kFutexClockRealtime) s += "|CLOCK_REALTIME";
    return s;
}

bool futex_op_waits(uint32_t op) {
    switch (op & ~(kFutexPrivate | kFutexClockRealtime)) {
    case 0:   // WAIT
    case 6:   // LOCK_PI
    case 9:   // WAIT_BITSET
    case 11:  // WAIT_REQUEUE_PI
    case 13:  // LOCK_PI2
        return true;
    default:
        return false;
    }
}

SyscallArg0 syscall_arg0_kind(int64_t nr) {
    // One classification for both sides: the BPF program reads arg0 by the same rule.
    switch (qs_sys_arg0_kind(nr)) {
    case QS_ARG0_FD: return SyscallArg0::fd;
    case QS_ARG0_FUTEX: return SyscallArg0::futex_addr;
    case QS_ARG0_FUTEX_VEC: return SyscallArg0::futex_vec;
    default: return SyscallArg0::none;
    }
}

}  // namespace qscope
