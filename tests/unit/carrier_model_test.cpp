#include <catch2/catch.hpp>
#include <linux/types.h>

#include "carrier.h"
#include "model/syscall_table.h"
#include "probes/jvm/carrier_model.h"

using namespace qscope;
using namespace qscope::carrier;

TEST_CASE("carrier state: BPF events decide when seen", "[carrier]") {
    Observation o;
    o.bpf_state = QS_CS_RUNNING;
    o.proc_state = 'S';  // stale /proc does not override the event-driven state
    CHECK(classify(o) == CarrierState::running);
    o.bpf_state = QS_CS_RUNNABLE;
    CHECK(classify(o) == CarrierState::runnable);
    o.bpf_state = QS_CS_IDLE;
    o.mounted_now = 1;
    CHECK(classify(o) == CarrierState::idle);
    o.bpf_state = QS_CS_STALLED;
    CHECK(classify(o) == CarrierState::stalled);
}

TEST_CASE("carrier state: JVM carriers not seen switching use /proc and the mount fields", "[carrier]") {
    Observation o;
    o.proc_state = 'S';
    o.mounted_now = 0;
    CHECK(classify(o) == CarrierState::idle);  // parked in ForkJoinPool.awaitWork
    o.mounted_now = 1;
    CHECK(classify(o) == CarrierState::stalled);  // pinned park or native call with a virtual thread mounted
    o.mounted_now = -1;
    CHECK(classify(o) == CarrierState::idle);  // unknown is never reported as a stall
    o.proc_state = 'R';
    o.mounted_now = 1;
    CHECK(classify(o) == CarrierState::running);
    o.proc_state = 'D';
    CHECK(classify(o) == CarrierState::stalled);
}

TEST_CASE("carrier state: generic runtimes idle in futex/epoll only", "[carrier]") {
    Observation o;
    o.generic = true;
    o.proc_state = 'S';
    o.proc_syscall = 202;  // futex
    CHECK(classify(o) == CarrierState::idle);
    o.proc_syscall = 232;  // epoll_wait
    CHECK(classify(o) == CarrierState::idle);
    o.proc_syscall = 0;  // read
    CHECK(classify(o) == CarrierState::stalled);
    o.proc_syscall = 230;  // clock_nanosleep
    CHECK(classify(o) == CarrierState::stalled);
    CHECK(carrier_idle_syscall(449));
    CHECK_FALSE(carrier_idle_syscall(35));
}

TEST_CASE("carrier state: a Go M also idles in a sleep (sysmon)", "[carrier][go]") {
    Observation o;
    o.generic = true;
    o.go = true;
    o.proc_state = 'S';
    o.proc_syscall = 35;  // nanosleep: sysmon's usleep
    CHECK(classify(o) == CarrierState::idle);
    o.proc_syscall = 281;  // epoll_pwait: the netpoller
    CHECK(classify(o) == CarrierState::idle);
    o.proc_syscall = 0;  // read: a goroutine in a blocking syscall holds the M
    CHECK(classify(o) == CarrierState::stalled);
    o.go = false;
    o.proc_syscall = 35;
    CHECK(classify(o) == CarrierState::stalled);  // other generic runtimes: a sleep holds the task
}

TEST_CASE("carrier utilization: on a CPU or runnable over the window", "[carrier]") {
    qs_carrier k{};
    k.state_ns[QS_CS_RUNNING] = 300;
    k.state_ns[QS_CS_RUNNABLE] = 100;
    k.state_ns[QS_CS_IDLE] = 5000;
    k.state = QS_CS_IDLE;
    k.since_ns = 1000;
    CHECK(busy_ns(k, 2000) == 400);  // idle now: only the states it left
    k.state = QS_CS_RUNNING;
    CHECK(busy_ns(k, 2000) == 1400);  // running since 1000
    k.since_ns = 0;                   // no event since registration: nothing known to add
    CHECK(busy_ns(k, 2000) == 400);
    CHECK(utilization(400, 900, 1000, 2000) == Approx(0.5));
    CHECK(utilization(0, 5000, 1000, 2000) == 1.0);  // clamped
    CHECK(utilization(500, 400, 1000, 2000) == 0);   // a baseline ahead of the counter
    CHECK(utilization(0, 100, 2000, 2000) == 0);     // an empty window
}

TEST_CASE("stall reasons and syscall labels", "[carrier]") {
    CHECK(stall_reason(202, true, CarrierRuntime::jvm) == "pinned park");
    CHECK(stall_reason(202, false, CarrierRuntime::jvm) == "futex wait");
    CHECK(stall_reason(230, false, CarrierRuntime::jvm) == "native call");
    CHECK(stall_reason(35, false, CarrierRuntime::jvm) == "native call");
    CHECK(stall_reason(0, false, CarrierRuntime::jvm) == "blocking io");
    CHECK(stall_reason(45, false, CarrierRuntime::jvm) == "blocking io");
    CHECK(stall_reason(61, false, CarrierRuntime::jvm) == "blocked syscall");
    // A sleep on a Tokio worker is a task's blocking call; the other reasons are the same.
    CHECK(stall_reason(230, false, CarrierRuntime::tokio) == "blocking call");
    CHECK(stall_reason(202, false, CarrierRuntime::tokio) == "futex wait");
    // Reasons read from the stack (model/runtime_frames.h decides its shape): a Tokio task in a
    // futex under its poll waits on a lock; a Go M in runtime.cgocall is in C code.
    const std::vector<std::string> task_in_mutex = {
        "syscall+0x19 (libc.so.6)", "std::sys::unix::locks::futex::Mutex::lock_contended+0x40 (app)",
        "app::handler+0x10 (app)", "tokio::runtime::task::harness::Harness<T,S>::poll+0x62 (app)"};
    CHECK(stall_reason(202, false, CarrierRuntime::tokio, task_in_mutex) == "lock wait");
    CHECK(stall_reason(202, false, CarrierRuntime::jvm, task_in_mutex) == "futex wait");  // Tokio's frames only on Tokio
    CHECK(stall_reason(230, false, CarrierRuntime::tokio, task_in_mutex) == "blocking call");  // not a futex
    const std::vector<std::string> cgo = {"___pthread_mutex_lock+0x8f (libc.so.6)", "runtime.cgocall+0x5c (app)"};
    CHECK(stall_reason(202, false, CarrierRuntime::go, cgo) == "cgo call");
    CHECK(stall_reason(202, false, CarrierRuntime::go) == "futex wait");
    CHECK(syscall_label(230) == "clock_nanosleep");
    CHECK(syscall_label(202) == "futex");
    CHECK(syscall_label(9999) == "syscall_9999");
    CHECK(syscall_label(-1) == "-");
}

// Stacks shaped like the ones qscope symbolized from Temurin 25 carriers (innermost first,
// "function+0xOFF (module)"; JIT code as bare addresses or "name (jit)").
TEST_CASE("VM waits: safepoint, GC, VM operation and JIT queue blocks are not stalls", "[carrier]") {
    const std::vector<std::string> safepoint = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "__pthread_cond_wait+0x23b (libc.so.6)",
        "PlatformMonitor::wait(unsigned long)+0x5d (libjvm.so)",
        "Monitor::wait_without_safepoint_check(unsigned long)+0x36 (libjvm.so)",
        "SafepointSynchronize::block(JavaThread*)+0x15e (libjvm.so)",
        "SafepointMechanism::process(JavaThread*, bool, bool)+0x2e (libjvm.so)",
        "ThreadBlockInVMPreprocess<void (*)(JavaThread*)>::~ThreadBlockInVMPreprocess()+0x5c (libjvm.so)",
        "Unsafe_Park+0x1a3 (libjvm.so)",
        "0x7f3a1c0a2f8c",
    };
    CHECK(vm_wait_reason(safepoint) == "vm: safepoint");

    const std::vector<std::string> gc = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "__pthread_cond_wait+0x23b (libc.so.6)",
        "PlatformMonitor::wait(unsigned long)+0x5d (libjvm.so)",
        "Monitor::wait(unsigned long)+0x96 (libjvm.so)",
        "VMThread::wait_until_executed(VM_Operation*)+0x91 (libjvm.so)",
        "VMThread::execute(VM_Operation*)+0x1c2 (libjvm.so)",
        "G1CollectedHeap::do_collection_pause(unsigned long, unsigned int, bool*, GCCause::Cause)+0x6c (libjvm.so)",
        "G1CollectedHeap::attempt_allocation_slow(unsigned long)+0x3c9 (libjvm.so)",
        "G1CollectedHeap::mem_allocate_work(unsigned long, bool)+0x4a (libjvm.so)",
        "MemAllocator::allocate() const+0x9a (libjvm.so)",
        "OptoRuntime::new_array_C(Klass*, int, JavaThread*)+0x11d (libjvm.so)",
        "_new_array_Java+0x2b (jit)",
        "java.util.Arrays.copyOf+0x54 (jit)",
    };
    CHECK(vm_wait_reason(gc) == "vm: gc");

    const std::vector<std::string> vmop = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "PlatformMonitor::wait(unsigned long)+0x5d (libjvm.so)",
        "Monitor::wait(unsigned long)+0x96 (libjvm.so)",
        "VMThread::wait_until_executed(VM_Operation*)+0x91 (libjvm.so)",
        "VMThread::execute(VM_Operation*)+0x1c2 (libjvm.so)",
        "Deoptimization::deoptimize_all_marked()+0x8a (libjvm.so)",
        "0x7f3a1c0a2f8c",
    };
    CHECK(vm_wait_reason(vmop) == "vm: vm operation");

    const std::vector<std::string> jit = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "__lll_lock_wait+0x30 (libc.so.6)",
        "PlatformMutex::lock()+0x12 (libjvm.so)",
        "Mutex::lock(Thread*)+0x85 (libjvm.so)",
        "MutexLocker::MutexLocker(Mutex*, Mutex::SafepointCheckFlag)+0x2f (libjvm.so)",
        "CompileBroker::compile_method_base(methodHandle const&, int, int, methodHandle const&, int, "
        "CompileTask::CompileReason, bool, JavaThread*)+0x1b6 (libjvm.so)",
        "CompileBroker::compile_method(methodHandle const&, int, int, methodHandle const&, int, "
        "DirectiveSet*, CompileTask::CompileReason, JavaThread*)+0x5c1 (libjvm.so)",
        "CompilationPolicy::event(methodHandle const&, methodHandle const&, int, int, CompLevel, "
        "nmethod*, JavaThread*)+0x1c4 (libjvm.so)",
        "Runtime1::counter_overflow(JavaThread*, int, Method*)+0x1a5 (libjvm.so)",
        "0x7f3a1c0a2f8c",
    };
    CHECK(vm_wait_reason(jit) == "vm: jit compile queue");
}

TEST_CASE("VM waits: pinned parks, native calls and class init stay stalls", "[carrier]") {
    // A pinned park: the virtual thread's own code parks the carrier.
    const std::vector<std::string> pinned = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "__pthread_cond_wait+0x23b (libc.so.6)",
        "Parker::park(bool, long)+0x18b (libjvm.so)",
        "Unsafe_Park+0x1a3 (libjvm.so)",
        "0x7f3a1c0a2f8c",
        "java.lang.VirtualThread.parkOnCarrierThread+0x90 (jit)",
    };
    CHECK(vm_wait_reason(pinned).empty());
    // FFM downcall into usleep.
    const std::vector<std::string> native = {
        "clock_nanosleep@GLIBC_2.2.5+0x65 (libc.so.6)",
        "__nanosleep+0x13 (libc.so.6)",
        "usleep+0x34 (libc.so.6)",
        "0x7f3a1c0b1234",
    };
    CHECK(vm_wait_reason(native).empty());
    // Waiting for another thread's class initializer.
    const std::vector<std::string> clinit = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "PlatformMonitor::wait(unsigned long)+0x5d (libjvm.so)",
        "ObjectMonitor::wait(long, bool, JavaThread*)+0x2f4 (libjvm.so)",
        "ObjectSynchronizer::wait(Handle, long, JavaThread*)+0xa3 (libjvm.so)",
        "InstanceKlass::initialize_impl(JavaThread*)+0x3a9 (libjvm.so)",
        "InterpreterRuntime::_new(JavaThread*, ConstantPool*, int)+0x5c (libjvm.so)",
        "0x7f3a1c0a2f8c",
    };
    CHECK(vm_wait_reason(clinit).empty());
    // VM frames further out than Java code did not cause this block: the scan stops there.
    const std::vector<std::string> outer = {
        "__futex_abstimed_wait_common+0x174 (libc.so.6)",
        "Parker::park(bool, long)+0x18b (libjvm.so)",
        "0x7f3a1c0a2f8c",
        "SafepointSynchronize::block(JavaThread*)+0x15e (libjvm.so)",
    };
    CHECK(vm_wait_reason(outer).empty());
    // No stack (not captured, or symbolizing skipped): an unexplained block stays a stall.
    CHECK(vm_wait_reason({}).empty());
    CHECK(vm_wait_reason({"0x7f3a1c0a2f8c", "0x7f3a1c0a2000"}).empty());
}

TEST_CASE("carrier name family: a pool's numbered names less their number", "[carrier]") {
    CHECK(name_family("api-worker-3") == "api-worker-");
    CHECK(name_family("qs-api-12") == "qs-api-");
    CHECK(name_family("worker") == "worker");
    CHECK(name_family("0123") == "0123");  // all digits: the whole name
    CHECK(name_family("").empty());
    CHECK(in_name_family("qs-api-12", "qs-api-"));
    CHECK(in_name_family("qs-api-", "qs-api-"));
    CHECK_FALSE(in_name_family("qs-api-metrics", "qs-api-"));  // the prefix, not the family
    CHECK_FALSE(in_name_family("qs-api-1x", "qs-api-"));
    CHECK(in_name_family("tokio-runtime-w", "tokio-runtime-w"));  // Tokio's default, cut at 15
}
