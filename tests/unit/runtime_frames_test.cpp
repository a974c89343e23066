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
