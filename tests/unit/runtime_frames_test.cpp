// One list of runtime frames (model/runtime_frames.h) for the verdict's gate names, the wait
// rows' sites and the carrier model's VM waits.
#include <catch2/catch.hpp>

#include "model/runtime_frames.h"

using namespace qscope;

TEST_CASE("runtime frames: by module, else by function name; JIT addresses are the app's", "[frames]") {
    CHECK(is_runtime_frame("pthread_cond_wait+0x1e8 (libc.so.6)"));
    CHECK(is_runtime_frame("std::condition_variable::wait(std::unique_lock<std::mutex>&)+0x1d (libstdc++.so.6)"));
    CHECK(is_runtime_frame("Parker::park(bool, long)+0x1a0 (libjvm.so)"));
    CHECK(is_runtime_frame("_dl_runtime_resolve+0x10 (ld-linux-x86-64.so.2)"));
    CHECK_FALSE(is_runtime_frame("pool_borrow()+0x4e (qs_server)"));
    CHECK_FALSE(is_runtime_frame("java.util.Arrays.copyOf+0x54 (jit)"));
    // Hand-built frames without a module.
    CHECK(is_runtime_frame("__futex_abstimed_wait_common64+0x105"));
    CHECK(is_runtime_frame("Unsafe_Park+0x9c"));
    CHECK_FALSE(is_runtime_frame("ConnQueue::pop+0x3c"));
    CHECK_FALSE(is_runtime_frame("0x7f46d3945085"));
    CHECK(first_app_frame({"__futex_abstimed_wait_common64+0x105", "pthread_cond_wait+0x1f4", "ConnQueue::pop+0x3c",
                           "worker_main+0x52"}) == "ConnQueue::pop");
    CHECK(first_app_frame({"futex_wait+0x10 (libc.so.6)"}).empty());
}

// Go 1.19's Ms, as qscope symbolized their waits in qs_gopool (tests/apps/go), innermost first.
TEST_CASE("go: an M with no goroutine waits under the runtime's idle frames", "[frames][go]") {
    const std::vector<std::string> stopm = {"runtime.futex.abi0+0x23 (qs_gopool)", "runtime.futexsleep+0x36 (qs_gopool)",
                                            "runtime.notesleep+0x87 (qs_gopool)", "runtime.stopm+0x8c (qs_gopool)",
                                            "runtime.findRunnable+0x9e8 (qs_gopool)", "runtime.schedule+0xbe (qs_gopool)"};
    CHECK(go_idle_frame(stopm) == "runtime.notesleep");
    CHECK(go_idle_frame({"runtime.futex.abi0+0x23 (qs_gopool)", "runtime.futexsleep+0x36 (qs_gopool)",
                         "runtime.notesleep+0x87 (qs_gopool)", "runtime.templateThread+0x71 (qs_gopool)",
                         "runtime.mstart1+0x93 (qs_gopool)"}) == "runtime.notesleep");
    CHECK(go_idle_frame({"runtime.epollwait.abi0+0x20 (qs_gopool)", "runtime.netpoll+0xdc (qs_gopool)",
                         "runtime.findRunnable+0x6a5 (qs_gopool)", "runtime.schedule+0xbe (qs_gopool)"}) ==
          "runtime.netpoll");
    CHECK(go_idle_frame({"runtime.futex.abi0+0x23 (qs_gopool)", "runtime.futexsleep+0xaf (qs_gopool)",
                         "runtime.notetsleep_internal+0xc5 (qs_gopool)", "runtime.notetsleep+0x34 (qs_gopool)",
                         "runtime.sysmon+0x1c9 (qs_gopool)"}) == "runtime.notetsleep");
    CHECK(go_idle_frame({"runtime.usleep.abi0+0x3d (qs_gopool)", "runtime.sysmon+0x9c (qs_gopool)"}) ==
          "runtime.sysmon");
    // A goroutine's own blocking call holds its M: not idle.
    CHECK(go_idle_frame({"syscall.Syscall+0x19 (qs_gopool)", "syscall.read+0x4d (qs_gopool)",
                         "main.slowHandler+0x4a (qs_gopool)"})
              .empty());
    // A cgo call blocked on a pthread lock: a futex wait outside the idle frames, a stall.
    const std::vector<std::string> cgo = {"__futex_abstimed_wait_common+0x174 (libc.so.6)",
                                          "___pthread_mutex_lock+0x8f (libc.so.6)", "lib_call+0x12 (libfoo.so)",
                                          "runtime.asmcgocall+0x44 (qs_gopool)", "runtime.cgocall+0x5c (qs_gopool)",
                                          "main._Cfunc_lib_call+0x2d (qs_gopool)"};
    CHECK(go_idle_frame(cgo).empty());
    CHECK(go_cgo_call(cgo));
    CHECK_FALSE(go_cgo_call(stopm));
    // By function name, not by prefix: runtime.stopmX is not runtime.stopm.
    CHECK(go_idle_frame({"runtime.stopmX+0x1 (qs_gopool)"}).empty());
}

// Tokio 1.24's threads, as qscope symbolized their waits in qs_tokio (tests/apps/tokio),
// innermost first.
TEST_CASE("tokio: threads with no task park under the runtime's frames; the blocking pool's jobs are not a worker's",
          "[frames][tokio]") {
    const std::vector<std::string> main_in_block_on = {
        "syscall+0x19 (libc.so.6)", "std::sys::unix::futex::futex_wait+0xd5 (qs_tokio)",
        "std::sys::unix::locks::futex::Condvar::wait+0x57 (qs_tokio)", "tokio::runtime::park::Inner::park+0xb4 (qs_tokio)",
        "tokio::runtime::park::CachedParkThread::block_on+0xeb (qs_tokio)", "qs_tokio::main+0x4db (qs_tokio)"};
    CHECK(tokio_idle_frame(main_in_block_on) == "tokio::runtime::park::Inner::park");
    const std::vector<std::string> worker_parked = {
        "syscall+0x19 (libc.so.6)", "std::sys::unix::futex::futex_wait+0xd5 (qs_tokio)",
        "std::sys::unix::locks::futex::Condvar::wait+0x57 (qs_tokio)",
        "tokio::runtime::scheduler::multi_thread::park::Parker::park+0x175 (qs_tokio)",
        "tokio::runtime::scheduler::multi_thread::worker::Context::park_timeout+0xc4 (qs_tokio)",
        "tokio::runtime::scheduler::multi_thread::worker::run+0xb1 (qs_tokio)",
        "tokio::runtime::task::core::Core<T,S>::poll+0x2e (qs_tokio)",
        "tokio::runtime::task::harness::Harness<T,S>::poll+0x9f (qs_tokio)",
        "tokio::runtime::blocking::pool::Inner::run+0x133 (qs_tokio)"};
    CHECK(tokio_idle_frame(worker_parked) == "tokio::runtime::scheduler::multi_thread::park::Parker::park");
    CHECK_FALSE(tokio_blocking_pool(worker_parked));  // Tokio launches its workers on the pool
    CHECK(tokio_worker(worker_parked));                // whatever the program named it
    CHECK_FALSE(tokio_worker(main_in_block_on));
    // block_on polls main's future under CachedParkThread::block_on: a lock taken there holds it.
    CHECK(tokio_idle_frame({"syscall+0x19 (libc.so.6)", "std::sys::unix::locks::futex::Mutex::lock_contended+0x40 (app)",
                            "app::handler+0x10 (app)", "tokio::runtime::park::CachedParkThread::block_on+0xeb (app)"})
              .empty());
    // A worker's task waiting on a std Mutex holds the task.
    const std::vector<std::string> worker_in_mutex = {
        "syscall+0x19 (libc.so.6)", "std::sys::unix::locks::futex::Mutex::lock_contended+0x40 (app)",
        "app::handler+0x10 (app)", "tokio::runtime::task::core::Core<T,S>::poll+0x4c (app)",
        "tokio::runtime::scheduler::multi_thread::worker::Context::run_task+0x1 (app)",
        "tokio::runtime::scheduler::multi_thread::worker::run+0xb1 (app)",
        "tokio::runtime::task::core::Core<T,S>::poll+0x2e (app)", "tokio::runtime::blocking::pool::Inner::run+0x133 (app)"};
    CHECK(tokio_idle_frame(worker_in_mutex).empty());
    CHECK(tokio_task_blocked(worker_in_mutex));
    CHECK_FALSE(tokio_task_blocked(worker_parked));
    // As read from qs_tokio's /lock: the copy ends in the task's poll, before the worker's frames.
    CHECK(tokio_task_blocked({"syscall+0x19 (libc.so.6)", "std::sys::unix::futex::futex_wait+0xd5 (qs_tokio)",
                              "std::sys::unix::locks::futex::Mutex::lock_contended+0x78 (qs_tokio)",
                              "_<core::future::from_generator::GenFuture<T> as core::future::future::Future>::poll+0xc5e "
                              "(qs_tokio)",
                              "tokio::runtime::task::core::Core<T,S>::poll+0x58 (qs_tokio)",
                              "tokio::runtime::task::harness::Harness<T,S>::poll+0x62 (qs_tokio)"}));
    // Cut short before any of Tokio's frames: no evidence either way, not a blocked task.
    CHECK_FALSE(tokio_task_blocked({worker_in_mutex[0], worker_in_mutex[1], worker_in_mutex[2]}));
    CHECK_FALSE(tokio_task_blocked(main_in_block_on));
    // A blocking-pool thread in its job (spawn_blocking(|| sleep(..))): the pool's, not idle.
    const std::vector<std::string> pool_job = {
        "clock_nanosleep+0x65 (libc.so.6)", "__nanosleep+0x13 (libc.so.6)", "std::thread::sleep+0x60 (qs_tokio)",
        "tokio::runtime::task::core::Core<T,S>::poll+0x4c (qs_tokio)",
        "tokio::runtime::task::harness::Harness<T,S>::poll+0x51 (qs_tokio)",
        "tokio::runtime::blocking::pool::Inner::run+0x133 (qs_tokio)"};
    CHECK(tokio_blocking_pool(pool_job));
    CHECK_FALSE(tokio_worker(pool_job));
    CHECK_FALSE(tokio_task_blocked(pool_job));  // the pool's job, not a worker's task
    CHECK(tokio_idle_frame(pool_job).empty());
    // Between jobs, on its condvar: idle.
    CHECK(tokio_idle_frame({"syscall+0x19 (libc.so.6)", "std::sys::unix::locks::futex::Condvar::wait_timeout+0x40 (a)",
                            "tokio::runtime::blocking::pool::Inner::run+0x2a1 (a)"}) ==
          "tokio::runtime::blocking::pool::Inner::run");
    CHECK(tokio_idle_frame({"runtime.futex.abi0+0x23 (qs_gopool)", "runtime.notesleep+0x87 (qs_gopool)"}).empty());
}
