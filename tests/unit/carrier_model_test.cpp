#include <catch2/catch.hpp>
#include <linux/types.h>

#include "carrier.h"
#include "carrier_model.h"

using namespace qscope::carrier;

TEST_CASE("carrier state: BPF events decide when seen", "[carrier]") {
    Observation o;
    o.bpf_state = QS_CS_RUNNING;
    o.proc_state = 'S';  // stale /proc does not override the event-driven state
    CHECK(classify(o) == "running");
    o.bpf_state = QS_CS_RUNNABLE;
    CHECK(classify(o) == "runnable");
    o.bpf_state = QS_CS_IDLE;
    o.mounted_now = 1;
    CHECK(classify(o) == "idle");
    o.bpf_state = QS_CS_STALLED;
    CHECK(classify(o) == "stalled");
}

TEST_CASE("carrier state: JVM carriers not seen switching use /proc and the mount fields", "[carrier]") {
    Observation o;
    o.proc_state = 'S';
    o.mounted_now = 0;
    CHECK(classify(o) == "idle");  // parked in ForkJoinPool.awaitWork
    o.mounted_now = 1;
    CHECK(classify(o) == "stalled");  // pinned park or native call with a virtual thread mounted
    o.mounted_now = -1;
    CHECK(classify(o) == "idle");  // unknown is never reported as a stall
    o.proc_state = 'R';
    o.mounted_now = 1;
    CHECK(classify(o) == "running");
    o.proc_state = 'D';
    CHECK(classify(o) == "stalled");
}

TEST_CASE("carrier state: generic runtimes idle in futex/epoll only", "[carrier]") {
    Observation o;
    o.generic = true;
    o.proc_state = 'S';
    o.proc_syscall = 202;  // futex
    CHECK(classify(o) == "idle");
    o.proc_syscall = 232;  // epoll_wait
    CHECK(classify(o) == "idle");
    o.proc_syscall = 0;  // read
    CHECK(classify(o) == "stalled");
    o.proc_syscall = 230;  // clock_nanosleep
    CHECK(classify(o) == "stalled");
    CHECK(generic_idle_syscall(449));
    CHECK_FALSE(generic_idle_syscall(35));
}

TEST_CASE("stall reasons and syscall labels", "[carrier]") {
    CHECK(stall_reason(202, true) == "pinned park");
    CHECK(stall_reason(202, false) == "futex wait");
    CHECK(stall_reason(230, false) == "native call");
    CHECK(stall_reason(35, false) == "native call");
    CHECK(stall_reason(0, false) == "blocking io");
    CHECK(stall_reason(45, false) == "blocking io");
    CHECK(stall_reason(61, false) == "blocked syscall");
    CHECK(syscall_label(230) == "clock_nanosleep");
    CHECK(syscall_label(202) == "futex");
    CHECK(syscall_label(9999) == "syscall_9999");
    CHECK(syscall_label(-1) == "-");
}
