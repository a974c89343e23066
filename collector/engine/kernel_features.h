// Feature probes of the running kernel beyond "does this tracepoint exist" (bpf_util.h):
// can a fentry/fexit program load and attach, are there kprobes, lockdown, cgroup v2,
// capabilities. The sock family picks its attach types from these at start
// (probes/sock/attach_plan.h) and `qscope check` prints them for an operator.
#pragma once
#include <string>

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

// The kernel has kprobes (CONFIG_KPROBES): the perf "kprobe" event source libbpf attaches
// through, or tracefs's kprobe_events.
bool kprobes_available();

// /sys/kernel/security/lockdown: "none", "integrity" or "confidentiality"; "" when unknown
// (no lockdown LSM, or securityfs not mounted).
std::string lockdown_mode();
// What lockdown leaves qscope, for `qscope check` and the start-up warning; "" for none.
std::string lockdown_consequence(const std::string& mode);

// A cgroup2 hierarchy is mounted (/proc/mounts).
bool cgroup2_mounted();

// An effective capability of this process (/proc/self/status CapEff).
bool has_capability(int cap);

}  // namespace qscope
