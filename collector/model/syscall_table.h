// x86-64 syscalls: names (what /proc/PID/task/TID/syscall prints as a number) and classes.
// The numbers and classes are bpf/syscalls.h's, the one home the BPF programs share; this is
// the full name table beside it (tests/unit/syscalls_test.cpp checks that they agree).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace qscope {

// "read", "futex", ...; "none" for -1 (blocked outside a syscall, e.g. a page fault);
// "syscall_N" for numbers this table does not know (newer kernels add syscalls).
std::string syscall_name(int64_t nr);
// Inverse; -1 when unknown (also for "other", the overflow row of a full waits map).
int syscall_number(std::string_view name);

// What a thread blocked in the syscall waits for: bpf/syscalls.h enum qs_sys_class.
enum class SyscallClass { other, futex, epoll, poll, accept, recv, send, connect, file, aio, sleep, process };
SyscallClass syscall_class(int64_t nr);

// Where a generic runtime parks a carrier with no task (futex, epoll): qs_sys_carrier_idle.
bool carrier_idle_syscall(int64_t nr);
// Where a Go M with no goroutine waits (futex, epoll, sleep): qs_sys_go_idle.
bool go_idle_syscall(int64_t nr);
// What a thread holding no request sits in, for the verdict: qs_sys_waiting_for_work, whose
// comment says why reads and sleeps count.
bool waiting_for_work_syscall(int64_t nr);

}  // namespace qscope
