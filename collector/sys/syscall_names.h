// Decoding a blocked syscall's arguments: futex ops, and what the first argument names.
// Pure functions: unit-tested without privileges. The syscall table itself (names, classes)
// is pure data the verdict reasons with, so it lives in the model; included here for the
// readers of /proc and BPF records, which name syscalls too.
#pragma once
#include <cstdint>
#include <string>

#include "model/syscall_table.h"

namespace qscope {

// FUTEX_* command of a futex(2) op word, without the PRIVATE/CLOCK_REALTIME flags:
// "WAIT_BITSET", "LOCK_PI", ...; "CMD_N" for an unknown command.
std::string futex_cmd_name(uint32_t op);
// "WAIT_BITSET|PRIVATE|CLOCK_REALTIME" (the form strace prints, without FUTEX_ prefixes).
std::string futex_op_name(uint32_t op);
// Does this op make the caller sleep until another thread acts (a gate)? WAIT, WAIT_BITSET,
// LOCK_PI, LOCK_PI2, WAIT_REQUEUE_PI; WAKE/REQUEUE/... do not block.
bool futex_op_waits(uint32_t op);

// What the first argument of a blocking syscall is, so the wait's resource can be named.
enum class SyscallArg0 { none, fd, futex_addr, futex_vec };
SyscallArg0 syscall_arg0_kind(int64_t nr);

}  // namespace qscope
