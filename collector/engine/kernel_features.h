// Feature probes of the running kernel beyond "does this tracepoint exist" (bpf_util.h):
// can a fentry/fexit program load and attach, are there kprobes, lockdown, cgroup v2,
// capabilities. The sock family picks its attach types from these at start
// (probes/sock/attach_plan.h) and `qscope check` prints them for an operator.
#pragma once
#include <string>
#include <vector>

#include "model/snapshot.h"

namespace qscope {

class KernelTracepoints;

// Tries what the sock family would do: loads an empty fexit program on `function` (a kernel
// function in vmlinux BTF) and attaches it for a moment. "" when that works, else why not
// ("load: Operation not permitted", "no BTF for function x"). `kernel` holds the kernel's
// BTF, parsed once (each parse costs ~60 ms of CPU on the way to the first frame).
std::string fentry_probe(KernelTracepoints& kernel, const std::string& function);

// "" when an iterator program for `target` ("bpf_map_elem") loads here, else why not. A kernel
// (or a security policy) may refuse one iterator target and not the others: this sandbox
// refuses iter/bpf_map_elem with EPERM while iter/task and iter/task_file load.
std::string iter_probe(KernelTracepoints& kernel, const std::string& target);

// tp_btf/kfree_skb names the listener of a dropped segment (its 4th argument, rx_sk: 6.12) and
// the kernel has SKB_DROP_REASON_TCP_LISTEN_OVERFLOW (later than rx_sk: Debian's 6.12 lacks
// it): what the sock family's qs_kfree_skb needs, and so the shared hook that jumps to it.
bool kfree_skb_tells_overflows(KernelTracepoints& kernel);

// The kernel has kprobes (CONFIG_KPROBES): the perf "kprobe" event source libbpf attaches
// through, or tracefs's kprobe_events.
bool kprobes_available();

// /sys/kernel/security/lockdown: "none", "integrity" or "confidentiality"; "" when unknown
// (no lockdown LSM, or securityfs not mounted).
std::string lockdown_mode();
// What lockdown leaves qscope, for `qscope check` and the start-up warning; "" for none.
std::string lockdown_consequence(const std::string& mode);

// /proc/sys/kernel/pid_max: the largest PID is below it. 4194304 (the most it can be) when
// unreadable. Maps with a bit or a byte per tgid are sized from it.
long pid_max();

// A cgroup2 hierarchy is mounted (/proc/mounts).
bool cgroup2_mounted();

// An effective capability of this process (/proc/self/status CapEff).
bool has_capability(int cap);

// ---- the BPF a family's object needs --------------------------------------------------------
// What a probe family's programs need of the kernel's BPF beyond BTF and their hooks: newer
// instructions and helpers. A kernel without one refuses the family's whole object at load
// ("BPF_STX uses reserved fields", "invalid func unknown#178"), so it is named instead, by
// `qscope check` and by a load that failed. Every family filters on the tree's object, so the
// tree's needs are everyone's. tests/unit/bpf_needs_test.cpp holds this list to the helpers
// and instructions the built objects really use.
struct BpfNeed {
    const char* what;   // for the operator: "bpf_task_pt_regs", "atomic fetch-and-op instructions"
    const char* helper; // the BPF_FUNC_* enumerator of a helper; nullptr for the instructions
    const char* since;  // the Linux release that brought it: "5.15"
    std::vector<ProbeFamily> families;
};
const std::vector<BpfNeed>& bpf_needs();
// Helpers a family's programs call only behind a switch user space clears where the kernel
// lacks them (the verifier drops the call as dead code), or in a program the family loads
// without when refused: features, not needs.
struct SwitchedHelper {
    const char* helper;  // the BPF_FUNC_* enumerator
    ProbeFamily family;
};
const std::vector<SwitchedHelper>& bpf_switched_helpers();

// The needs this kernel lacks, each asked once: a helper of its BTF; the atomics by loading a
// five-instruction program (when privileges allow; else BTF's bpf_check_mtu, from the same
// release, stands in).
std::vector<const BpfNeed*> missing_bpf_needs(KernelTracepoints& kernel);
// Those of `missing` that `family` needs (the tree's needs are everyone's).
std::vector<const BpfNeed*> needs_of(const std::vector<const BpfNeed*>& missing, ProbeFamily family);
// "this kernel (Linux 5.10.0) lacks atomic fetch-and-op instructions (Linux 5.12+), ...";
// "" when none is missing.
std::string missing_needs_text(const std::vector<const BpfNeed*>& missing);

// For a family's object that failed to load: throws naming the needs this kernel lacks, when
// it lacks some, else the plain error of `what` (bpf_util.h throw_bpf_error).
[[noreturn]] void throw_load_error(ProbeFamily family, const std::string& what, int err);

}  // namespace qscope
