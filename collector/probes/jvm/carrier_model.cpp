#include "probes/jvm/carrier_model.h"

#include <linux/types.h>

#include <initializer_list>

#include "carrier.h"

namespace qscope::carrier {

namespace {
struct Named {
    int64_t nr;
    const char* name;
};
constexpr Named kNames[] = {
    {0, "read"},          {1, "write"},          {7, "poll"},           {16, "ioctl"},
    {17, "pread64"},      {18, "pwrite64"},      {19, "readv"},         {20, "writev"},
    {23, "select"},       {24, "sched_yield"},   {35, "nanosleep"},     {40, "sendfile"},
    {42, "connect"},      {43, "accept"},        {44, "sendto"},        {45, "recvfrom"},
    {46, "sendmsg"},      {47, "recvmsg"},       {61, "wait4"},         {72, "fcntl"},
    {73, "flock"},        {74, "fsync"},         {75, "fdatasync"},     {202, "futex"},
    {230, "clock_nanosleep"}, {232, "epoll_wait"}, {257, "openat"},     {270, "pselect6"},
    {271, "ppoll"},       {275, "splice"},       {281, "epoll_pwait"},  {288, "accept4"},
    {295, "preadv"},      {296, "pwritev"},      {299, "recvmmsg"},     {307, "sendmmsg"},
    {326, "copy_file_range"}, {426, "io_uring_enter"}, {441, "epoll_pwait2"},
    {449, "futex_waitv"}, {455, "futex_wait"},
};

bool is_io(int64_t nr) {
    switch (nr) {
        case 0: case 1: case 7: case 17: case 18: case 19: case 20: case 23: case 40: case 42:
        case 43: case 44: case 45: case 46: case 47: case 74: case 75: case 257: case 270:
        case 271: case 275: case 288: case 295: case 296: case 299: case 307: case 326: case 426:
            return true;
        default:
            return false;
    }
}
}  // namespace

bool generic_idle_syscall(int64_t nr) {
    return nr == 202 || nr == 449 || nr == 455 || nr == 232 || nr == 281 || nr == 441;
}

std::string syscall_label(int64_t nr) {
    if (nr < 0) return "-";
    for (const auto& n : kNames)
        if (n.nr == nr) return n.name;
    return "syscall_" + std::to_string(nr);
}

std::string stall_reason(int64_t nr, bool jvm_reported_pinned) {
    if (jvm_reported_pinned) return "pinned park";
    if (nr == 35 || nr == 230) return "native call";
    if (nr == 202 || nr == 449 || nr == 455) return "futex wait";
    if (is_io(nr)) return "blocking io";
    return "blocked syscall";
}

namespace {
bool native_runtime_frame(const std::string& f) {
    const auto open = f.rfind(" (");
    if (open == std::string::npos) return false;
    const std::string mod = f.substr(open + 2);
    return mod.find("libjvm") != std::string::npos || mod.find("libc.so") != std::string::npos ||
           mod.find("libc-") != std::string::npos || mod.find("libpthread") != std::string::npos ||
           mod.find("ld-linux") != std::string::npos || mod.find("kernel") != std::string::npos;
}

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
        if (!native_runtime_frame(f)) break;
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

std::string classify(const Observation& o) {
    switch (o.bpf_state) {
        case QS_CS_RUNNING: return "running";
        case QS_CS_RUNNABLE: return "runnable";
        case QS_CS_IDLE: return "idle";
        case QS_CS_STALLED: return "stalled";
        default: break;
    }
    // No switch seen since attach: a thread that has not blocked or run since. /proc 'R'
    // covers both running and waiting for a CPU; call it running.
    if (o.proc_state == 'R' || o.proc_state == 0) return "running";
    if (o.generic) {
        if (o.proc_syscall == -2) return "idle";
        return generic_idle_syscall(o.proc_syscall) ? "idle" : "stalled";
    }
    return o.mounted_now == 1 ? "stalled" : "idle";
}

}  // namespace qscope::carrier
