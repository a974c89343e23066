// The sched source's pure pieces: syscall names, futex ops, group naming (kernel and user
// space must agree), the compact wait histogram, stack-site signatures, label capping.
#include <sys/syscall.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "probes/sched/sched_source.h"
#include "sys/syscall_names.h"
#include "engine/target.h"
#include "model/thread_group.h"

using namespace qscope;

TEST_CASE("syscall names match the C library's SYS_* numbers", "[sched]") {
    // Oracle: glibc's <sys/syscall.h>, independent of our table.
    CHECK(syscall_name(SYS_read) == "read");
    CHECK(syscall_name(SYS_write) == "write");
    CHECK(syscall_name(SYS_futex) == "futex");
    CHECK(syscall_name(SYS_recvfrom) == "recvfrom");
    CHECK(syscall_name(SYS_accept4) == "accept4");
    CHECK(syscall_name(SYS_epoll_wait) == "epoll_wait");
    CHECK(syscall_name(SYS_clock_nanosleep) == "clock_nanosleep");
    CHECK(syscall_name(SYS_rt_sigtimedwait) == "rt_sigtimedwait");
    CHECK(syscall_name(SYS_poll) == "poll");
    CHECK(syscall_name(SYS_io_uring_enter) == "io_uring_enter");
    CHECK(syscall_name(SYS_futex_waitv) == "futex_waitv");
    CHECK(syscall_name(455) == "futex_wait");  // futex2, newer than Debian 12's headers
    CHECK(syscall_name(-1) == "none");
    CHECK(syscall_name(100000) == "syscall_100000");
    CHECK(syscall_name(400) == "syscall_400");  // the hole between 334 and 424
    CHECK(syscall_number("futex") == SYS_futex);
    CHECK(syscall_number("no_such_call") == -1);
}

TEST_CASE("futex op decoding", "[sched]") {
    CHECK(futex_op_name(0) == "WAIT");
    CHECK(futex_op_name(128) == "WAIT|PRIVATE");
    CHECK(futex_op_name(137) == "WAIT_BITSET|PRIVATE");                  // JVM timed park
    CHECK(futex_op_name(393) == "WAIT_BITSET|PRIVATE|CLOCK_REALTIME");   // glibc condvar / JVM park
    CHECK(futex_op_name(129) == "WAKE|PRIVATE");
    CHECK(futex_op_name(134) == "LOCK_PI|PRIVATE");
    CHECK(futex_cmd_name(99) == "CMD_99");
    CHECK(futex_op_waits(393));
    CHECK(futex_op_waits(128));
    CHECK(futex_op_waits(134));
    CHECK(futex_op_waits(13));
    CHECK(futex_op_waits(11));
    CHECK_FALSE(futex_op_waits(129));
    CHECK_FALSE(futex_op_waits(5));
}

TEST_CASE("which first argument names a wait's resource", "[sched]") {
    CHECK(syscall_arg0_kind(SYS_read) == SyscallArg0::fd);
    CHECK(syscall_arg0_kind(SYS_recvfrom) == SyscallArg0::fd);
    CHECK(syscall_arg0_kind(SYS_accept4) == SyscallArg0::fd);
    CHECK(syscall_arg0_kind(SYS_epoll_wait) == SyscallArg0::fd);
    CHECK(syscall_arg0_kind(SYS_futex) == SyscallArg0::futex_addr);
    CHECK(syscall_arg0_kind(SYS_futex_waitv) == SyscallArg0::futex_vec);
    CHECK(syscall_arg0_kind(SYS_poll) == SyscallArg0::none);    // a pollfd array, not an fd
    CHECK(syscall_arg0_kind(SYS_select) == SyscallArg0::none);  // nfds
    CHECK(syscall_arg0_kind(SYS_nanosleep) == SyscallArg0::none);
    // glibc condvar words +0x28 and +0x2c are one gate; a neighbouring object is not.
    CHECK(qs_wait_res(SYS_futex, 0x1000 + 0x28) == qs_wait_res(SYS_futex, 0x1000 + 0x2c));
    CHECK(qs_wait_res(SYS_futex, 0x1000 + 0x28) != qs_wait_res(SYS_futex, 0x1000 + 0x30));
    CHECK(qs_wait_res(SYS_read, 0xffffffff00000007ULL) == 7);
    CHECK(qs_wait_res(SYS_nanosleep, 1234) == 0);
}

TEST_CASE("the kernel's group name equals thread_group_name()", "[sched]") {
    // Real comms: at most 15 bytes (TASK_COMM_LEN - 1).
    const char* comms[] = {"qs-worker-12", "qs-worker-0", "qs-acceptor", "ForkJoinPool-1-",
                           "ForkJoinPool-1-", "http-nio-8080-e", "http-nio-18080-",
                           "abc-1-2", "123", "java", "", "a.b.3", "worker#7", "x_9", "name 4",
                           "C2 CompilerThre", "GC Thread#0", "VM Periodic Tas", "pool-2-thread-1",
                           "-5", "--7", "a1", "123456789012345"};
    for (const char* c : comms) {
        INFO("comm '" << c << "'");
        CHECK(kernel_group_name(c) == thread_group_name(c));
    }
    CHECK(kernel_group_name("qs-worker-12") == "qs-worker");
    CHECK(kernel_group_name("GC Thread#0") == "GC Thread");
}

TEST_CASE("compact wait histogram slots bracket their values", "[sched]") {
    uint64_t prev_slot = 0;
    for (uint64_t v = 1; v < (1ULL << 42); v = v * 5 / 4 + 1) {
        const uint64_t s = qs_whist_slot(v);
        REQUIRE(s < QS_WHIST_SLOTS);
        CHECK(s >= prev_slot);  // monotonic
        prev_slot = s;
        CHECK(qs_whist_slot_low(static_cast<uint32_t>(s)) <= v);
        if (s + 1 < QS_WHIST_SLOTS) {
            CHECK(v < qs_whist_slot_low(static_cast<uint32_t>(s + 1)));
            // Above 4 us a slot is at most 25% of its lower bound wide.
            if (v > 4096) CHECK(qs_whist_slot_low(static_cast<uint32_t>(s + 1)) - qs_whist_slot_low(static_cast<uint32_t>(s)) <= qs_whist_slot_low(static_cast<uint32_t>(s)) / 4);
        }
    }
    // Quantiles from the compact form land within the slot error of the truth.
    uint32_t slots[QS_WHIST_SLOTS] = {0};
    for (int i = 0; i < 100; i++) slots[qs_whist_slot(50'000'000)]++;  // 100 waits of 50 ms
    Histogram h;
    add_wait_slots(h, slots, QS_WHIST_SLOTS);
    CHECK(h.count() == 100);
    CHECK(h.quantile(0.5) == Approx(0.050).epsilon(0.13));
}

TEST_CASE("stack frames: function, module, first application frame, site", "[sched]") {
    const std::vector<std::string> pool = {
        "__futex_abstimed_wait_common+0xc6 (libc.so.6)", "pthread_cond_wait+0x1e8 (libc.so.6)",
        "pool_borrow()+0x4e (qs_server)", "(anonymous namespace)::serve_connection(int)+0xae9 (qs_server)",
        "start_thread+0x305 (libc.so.6)", "__clone3+0x2c (libc.so.6)"};
    CHECK(frame_function(pool[2]) == "pool_borrow()");
    CHECK(frame_module(pool[2]) == "qs_server");
    CHECK(frame_function("0x7f00aa (libc.so.6)") == "0x7f00aa");
    CHECK(frame_module("0x7f00aa") == "");
    CHECK(first_app_frame(pool) == "pool_borrow()");
    // A condvar wait and the mutex re-lock after it, from the same call site: one gate.
    const std::vector<std::string> relock = {
        "__lll_lock_wait+0x30 (libc.so.6)", "pthread_cond_wait+0x2a0 (libc.so.6)",
        "pool_borrow()+0x4e (qs_server)", "(anonymous namespace)::serve_connection(int)+0xae9 (qs_server)",
        "start_thread+0x305 (libc.so.6)", "__clone3+0x2c (libc.so.6)"};
    CHECK(wait_site_signature(pool) == wait_site_signature(relock));
    // A JVM park: libjvm frames are runtime, the Java frame is the site.
    const std::vector<std::string> jvm = {
        "__futex_abstimed_wait_common+0xc6 (libc.so.6)", "pthread_cond_timedwait+0x1e8 (libc.so.6)",
        "Parker::park(bool, long)+0x1a0 (libjvm.so)", "Unsafe_Park+0xa2 (libjvm.so)",
        "Interpreted java.util.concurrent.locks.LockSupport.parkNanos (perf-1234.map)"};
    CHECK(first_app_frame(jvm) == "Interpreted java.util.concurrent.locks.LockSupport.parkNanos");
    CHECK(wait_site_signature({"read+0x4c (libc.so.6)"}).empty());
    // Without a perf map the Java frames are bare addresses, the same for every thread
    // parked by the same code: one site, named by the runtime's entry point.
    const std::vector<std::string> jvm_a = {
        "__futex_abstimed_wait_common+0xc6 (libc.so.6)", "pthread_cond_wait+0x1e8 (libc.so.6)",
        "Parker::park(bool, long)+0x1a3 (libjvm.so)", "Unsafe_Park+0x1a0 (libjvm.so)", "0x7f46d3945085",
        "0x7f46d3940438"};
    CHECK(first_app_frame(jvm_a) == "Unsafe_Park");
    CHECK(wait_site_signature(jvm_a) == "0x7f46d3945085;0x7f46d3940438;");
}

TEST_CASE("short function names for resource labels", "[sched]") {
    CHECK(short_function("(anonymous namespace)::serve_connection(int)") == "serve_connection");
    CHECK(short_function("pool_borrow()") == "pool_borrow");
    CHECK(short_function("Parker::park(bool, long)") == "Parker::park");
    CHECK(short_function("Foo::bar(int (*)(int)) const") == "Foo::bar");
    CHECK(short_function("std::vector<int, std::allocator<int> >::push_back(int const&)") ==
          "std::vector<int, std::allocator<int> >::push_back");
    CHECK(short_function("main") == "main");
    CHECK(short_function("0x7f00aa") == "0x7f00aa");
    CHECK(short_function("(anonymous namespace)::worker_main(void*)") == "worker_main");
}

TEST_CASE("labels are capped, sticky, and overflow into other", "[sched]") {
    LabelCap c(2);
    CHECK(c.label("a") == "a");
    CHECK(c.label("b") == "b");
    CHECK(c.label("c") == "other");
    CHECK(c.label("a") == "a");
    CHECK(c.label("") == "other");
    CHECK(c.size() == 2);
}

TEST_CASE("thread state from an iterator record", "[sched]") {
    qs_thread_rec r{};
    r.state = 0;
    r.flags = QS_TREC_ON_CPU;
    CHECK(thread_state(r) == ThreadState::running);
    r.flags = 0;
    CHECK(thread_state(r) == ThreadState::runnable);
    r.state = 1;  // TASK_INTERRUPTIBLE
    CHECK(thread_state(r) == ThreadState::blocked);
    r.state = 0x402;  // TASK_UNINTERRUPTIBLE | TASK_NOLOAD (shown as I)
    CHECK(thread_state(r) == ThreadState::blocked);
}
