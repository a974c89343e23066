// One home for syscall facts: bpf/syscalls.h (numbers and classes the BPF programs use) and
// the C++ name table must agree, and the rules built from classes must say what the
// verdict and the carrier model rely on.
#include <catch2/catch.hpp>
#include <linux/types.h>
#include <sys/syscall.h>

#include <set>
#include <string>

extern "C" {
#include "syscalls.h"
}
#include "model/syscall_table.h"
#include "sys/syscall_names.h"

using namespace qscope;

TEST_CASE("bpf/syscalls.h and the C++ table agree on every number", "[syscalls]") {
    int n = 0;
#define QS_CHECK_SAME(name, nr)                     \
    CHECK(syscall_name(QS_NR_##name) == #name);     \
    CHECK(syscall_number(#name) == QS_NR_##name);   \
    ++n;
    QS_SYSCALLS(QS_CHECK_SAME)
#undef QS_CHECK_SAME
    CHECK(n > 40);
    // And both agree with the system's headers where those know the call.
    CHECK(QS_NR_futex == SYS_futex);
    CHECK(QS_NR_epoll_pwait2 == SYS_epoll_pwait2);
    CHECK(QS_NR_clock_nanosleep == SYS_clock_nanosleep);
    CHECK(QS_NR_recvmmsg == SYS_recvmmsg);
    CHECK(QS_NR_io_uring_enter == SYS_io_uring_enter);
}

TEST_CASE("syscall classes: the C++ lookup is the BPF predicate", "[syscalls]") {
    for (int64_t nr = -2; nr < 480; ++nr) {
        INFO(syscall_name(nr));
        CHECK(static_cast<int>(syscall_class(nr)) == qs_sys_class(nr));
        CHECK(carrier_idle_syscall(nr) == (qs_sys_carrier_idle(nr) != 0));
        CHECK(waiting_for_work_syscall(nr) == (qs_sys_waiting_for_work(nr) != 0));
        CHECK(go_idle_syscall(nr) == (qs_sys_go_idle(nr) != 0));
    }
    CHECK(syscall_class(SYS_futex) == SyscallClass::futex);
    CHECK(syscall_class(SYS_epoll_wait) == SyscallClass::epoll);
    CHECK(syscall_class(SYS_recvfrom) == SyscallClass::recv);
    CHECK(syscall_class(SYS_sendto) == SyscallClass::send);
    CHECK(syscall_class(SYS_nanosleep) == SyscallClass::sleep);
    CHECK(syscall_class(SYS_mmap) == SyscallClass::other);
    CHECK(syscall_class(-1) == SyscallClass::other);
}

TEST_CASE("carrier idle and waiting for work: two named rules over the same classes", "[syscalls]") {
    // A generic runtime parks a worker with no task in a futex or epoll wait, nowhere else.
    for (const char* idle : {"futex", "futex_waitv", "futex_wait", "epoll_wait", "epoll_pwait", "epoll_pwait2"})
        CHECK(carrier_idle_syscall(syscall_number(idle)));
    for (const char* busy : {"read", "poll", "nanosleep", "clock_nanosleep", "accept4", "recvfrom"}) {
        INFO(busy);
        CHECK_FALSE(carrier_idle_syscall(syscall_number(busy)));
    }
    // A thread that holds no request: everything a carrier idles in, and more.
    for (const char* idle : {"futex", "epoll_wait", "poll", "ppoll", "select", "pselect6", "accept", "accept4",
                             "wait4", "waitid", "rt_sigtimedwait", "rt_sigsuspend", "pause", "io_getevents",
                             "io_uring_enter", "restart_syscall", "read", "readv", "pread64", "recvfrom", "recvmsg",
                             "nanosleep", "clock_nanosleep"}) {
        INFO(idle);
        CHECK(waiting_for_work_syscall(syscall_number(idle)));
    }
    for (int64_t nr = 0; nr < 480; ++nr)
        if (carrier_idle_syscall(nr)) CHECK(waiting_for_work_syscall(nr));
    // Work a request waits for: file I/O, writes, connects, and calls no class names.
    for (const char* busy : {"fsync", "openat", "write", "sendto", "connect", "flock", "mmap"}) {
        INFO(busy);
        CHECK_FALSE(waiting_for_work_syscall(syscall_number(busy)));
    }
    CHECK_FALSE(waiting_for_work_syscall(syscall_number("other")));  // a full waits map's row
}

TEST_CASE("go: an M idles in futex, epoll and sleeps; anything else holds a goroutine", "[syscalls][go]") {
    for (const char* idle : {"futex", "epoll_pwait", "epoll_wait", "nanosleep", "clock_nanosleep"}) {
        INFO(idle);
        CHECK(go_idle_syscall(syscall_number(idle)));
    }
    for (const char* busy : {"read", "write", "openat", "fsync", "flock", "wait4", "poll", "connect"}) {
        INFO(busy);
        CHECK_FALSE(go_idle_syscall(syscall_number(busy)));
    }
    for (int64_t nr = 0; nr < 480; ++nr)
        if (carrier_idle_syscall(nr)) CHECK(go_idle_syscall(nr));
}
