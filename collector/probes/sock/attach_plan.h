// Which attach type each of the sock family's version-dependent hooks uses on this kernel.
// A pure function of what the kernel offers (feature probes at start, SockSource), so the
// choice and its warnings are unit-tested without a kernel; `qscope check` prints the same.
//
// The facts and their tracepoints: the app's reads (sock_recv_length, Linux 6.3), its writes
// (sock_send_length, 6.3), arrivals and accept-queue joins (sk_data_ready, 6.6). Each has one
// BPF body behind several entry points (bpf/sock.bpf.c): the tracepoint (tp_btf); else
// fexit/fentry on the kernel function every such event passes through; else kprobe(+kretprobe)
// on it; else, for reads and writes, the exits of the syscalls that make them (tracepoints
// syscalls/sys_exit_*, on fds that are tracked sockets).
#pragma once
#include <set>
#include <string>
#include <vector>

#include "engine/bpf_util.h"
#include "engine/shared_hooks.h"
#include "model/snapshot.h"

namespace qscope {

// What the running kernel offers, from the feature probes.
struct KernelOffer {
    std::set<std::string> tracepoints;  // BTF-typed tracepoints present (btf_trace_<name>)
    std::set<std::string> functions;    // kernel functions with BTF (fentry/kprobe targets)
    bool fentry = false;                // fentry/fexit programs load and attach here
    std::string fentry_error;           // why not, when probed ("" otherwise)
    bool kprobes = false;               // the kernel has kprobes
    bool syscall_exits = false;         // tracefs has every syscalls/sys_exit_* of kSyscallReads/Writes
};

// The syscalls whose exits stand in for sock_recv_length and sock_send_length when nothing
// better is offered (bpf/sock.bpf.c qs_sys_exit_<name>).
inline constexpr const char* kSyscallReads[] = {"read", "readv", "recvfrom", "recvmsg"};
inline constexpr const char* kSyscallWrites[] = {"write", "writev", "sendto", "sendmsg", "sendfile64"};

enum class SockHook { recv, send, data_ready };

struct HookChoice {
    SockHook hook{};
    std::string tracepoint;             // the fact's tracepoint ("sock_recv_length")
    AttachType attach = AttachType::none;
    std::string via;                    // tracepoint or kernel function; "" with none
    std::string caveat;                 // what this way in misses, or what is lost without one
    std::string warning;                // its line in SockAttachPlan::warnings ("": none)
};

struct SockAttachPlan {
    std::vector<HookChoice> hooks;      // recv, send, data_ready
    std::vector<std::string> warnings;  // for the snapshot's warnings
    std::string error;                  // set when a required hook has no way in
    const HookChoice& of(SockHook h) const { return hooks.at(static_cast<size_t>(h)); }
};

SockAttachPlan plan_sock_attach(const KernelOffer& offer);

// The feature probes behind a KernelOffer (not pure: asks the kernel). The tracepoints from
// BTF; the fallbacks' functions (tcp_recvmsg in a shape the BPF side knows, tcp_sendmsg,
// sock_def_readable), a real fexit load+attach and kprobes only when a tracepoint is missing
// or `always` (qscope check), so a kernel with all three pays three BTF look-ups.
// `at_most`: restrict_offer's.
KernelOffer probe_sock_offer(KernelTracepoints& tps, const std::string& at_most, bool always = false);

// probe_sock_offer(tps, $QSCOPE_SOCK_ATTACH), probed once per process: the kernel's offer does
// not change while qscope runs, and an exporter's shared hooks (shared_fallbacks) and every one
// of its targets, at each re-attach, must take the ways in of one plan. Thread-safe.
KernelOffer sock_offer(KernelTracepoints& tps);

// QSCOPE_SOCK_ATTACH=fentry|kprobe|syscall (tests): ignore the faster ways in, so a kernel
// that has the tracepoints can exercise a fallback. "" leaves the offer as is; anything else
// throws.
KernelOffer restrict_offer(KernelOffer offer, const std::string& at_most);

// The ways in of `plan` that an exporter's targets share (engine/shared_hooks.h) where the
// tracepoints are missing: the kernel functions' programs the plan takes (fexit, or a kprobe
// and its kretprobe; fentry or a kprobe for arrivals). None for the tracepoints (always
// shared) or the syscall exits (each target's own).
std::vector<SharedHooks::Hook> shared_fallbacks(const SockAttachPlan& plan);

}  // namespace qscope
