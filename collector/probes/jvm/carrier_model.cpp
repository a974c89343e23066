#include "probes/jvm/carrier_model.h"

#include <linux/types.h>

#include <algorithm>
#include <initializer_list>

#include "carrier.h"
#include "model/runtime_frames.h"
#include "model/syscall_table.h"

namespace qscope::carrier {

std::string syscall_label(int64_t nr) { return nr < 0 ? "-" : syscall_name(nr); }

std::string stall_reason(int64_t nr, bool jvm_reported_pinned, CarrierRuntime runtime,
                         const std::vector<std::string>& stack) {
    if (jvm_reported_pinned) return "pinned park";
    if (runtime == CarrierRuntime::go && go_cgo_call(stack)) return "cgo call";
    switch (syscall_class(nr)) {
        case SyscallClass::sleep: return runtime == CarrierRuntime::tokio ? "blocking call" : "native call";
        case SyscallClass::futex:
            return runtime == CarrierRuntime::tokio && tokio_task_blocked(stack) ? "lock wait" : "futex wait";
        case SyscallClass::poll:
        case SyscallClass::accept:
        case SyscallClass::recv:
        case SyscallClass::send:
        case SyscallClass::connect:
        case SyscallClass::file:
        case SyscallClass::aio: return "blocking io";
        default: return "blocked syscall";
    }
}

namespace {
bool has_any(const std::string& f, std::initializer_list<const char*> pats) {
    for (const char* p : pats)
        if (f.find(p) != std::string::npos) return true;
    return false;
}
}  // namespace

std::string vm_wait_reason(const std::vector<std::string>& stack) {
    bool gc = false, safepoint = false, jit = false, vmop = false;
    for (const auto& f : stack) {
        // Java or JIT code reached: whatever the VM does further out did not cause this block.
        if (!is_runtime_frame(f)) break;
        if (f.find("libjvm") == std::string::npos) continue;
        gc = gc || has_any(f, {"G1CollectedHeap::", "CollectedHeap::", "ParallelScavengeHeap::",
                               "SerialHeap::", "ShenandoahHeap::", "ZCollectedHeap::", "ZPageAllocator::",
                               "MemAllocator::", "GCLocker::", "G1Policy::"});
        // ThreadBlockInVM and friends are inlined RAII guards: an out-of-line frame of theirs
        // is the transition back into the VM stopping for a safepoint or handshake.
        safepoint = safepoint || has_any(f, {"SafepointSynchronize::", "SafepointMechanism::",
                                             "ThreadBlockInVM", "HandshakeState::"});
        jit = jit || has_any(f, {"CompileBroker::", "CompileQueue::", "CompilationPolicy::"});
        vmop = vmop || has_any(f, {"VMThread::wait_until_executed", "VMThread::execute"});
    }
    if (gc) return "vm: gc";
    if (safepoint) return "vm: safepoint";
    if (jit) return "vm: jit compile queue";
    if (vmop) return "vm: vm operation";
    return {};
}

uint64_t busy_ns(const qs_carrier& k, uint64_t now_ns) {
    uint64_t busy = k.state_ns[QS_CS_RUNNING] + k.state_ns[QS_CS_RUNNABLE];
    if ((k.state == QS_CS_RUNNING || k.state == QS_CS_RUNNABLE) && k.since_ns && now_ns > k.since_ns)
        busy += now_ns - k.since_ns;
    return busy;
}

double utilization(uint64_t busy_from, uint64_t busy_now, uint64_t from_ns, uint64_t now_ns) {
    if (now_ns <= from_ns || busy_now <= busy_from) return 0;
    return std::min(1.0, static_cast<double>(busy_now - busy_from) / static_cast<double>(now_ns - from_ns));
}

CarrierState classify(const Observation& o) {
    switch (o.bpf_state) {
        case QS_CS_RUNNING: return CarrierState::running;
        case QS_CS_RUNNABLE: return CarrierState::runnable;
        case QS_CS_IDLE: return CarrierState::idle;
        case QS_CS_STALLED: return CarrierState::stalled;
        default: break;
    }
    // No switch seen since attach: a thread that has not blocked or run since. /proc 'R'
    // covers both running and waiting for a CPU; call it running.
    if (o.proc_state == 'R' || o.proc_state == 0) return CarrierState::running;
    if (o.generic) {
        if (o.proc_syscall == -2) return CarrierState::idle;
        const bool idle = o.go ? go_idle_syscall(o.proc_syscall) : carrier_idle_syscall(o.proc_syscall);
        return idle ? CarrierState::idle : CarrierState::stalled;
    }
    return o.mounted_now == 1 ? CarrierState::stalled : CarrierState::idle;
}

std::string name_family(std::string_view comm) {
    size_t end = comm.size();
    while (end > 0 && comm[end - 1] >= '0' && comm[end - 1] <= '9') --end;
    return std::string(end == 0 ? comm : comm.substr(0, end));
}

bool in_name_family(std::string_view comm, std::string_view family) { return name_family(comm) == family; }

}  // namespace qscope::carrier
