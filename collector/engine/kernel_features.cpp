#include "engine/kernel_features.h"

#include <linux/bpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "engine/bpf_util.h"

namespace qscope {

namespace {

// Loads an empty tracing program (r0 = 0; exit) of `type` on BTF function `function`: its fd,
// or -1 with `why` set.
int load_empty_tracing(KernelTracepoints& kernel, bpf_attach_type type, const std::string& function,
                       std::string& why) {
    btf* vmlinux = kernel.vmlinux();
    if (!vmlinux) {
        why = "no kernel BTF";
        return -1;
    }
    const int id = btf__find_by_name_kind(vmlinux, function.c_str(), BTF_KIND_FUNC);
    if (id <= 0) {
        why = "no BTF for function " + function;
        return -1;
    }
    const bpf_insn insns[] = {
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = type, .attach_btf_id = static_cast<__u32>(id));
    const int prog = bpf_prog_load(BPF_PROG_TYPE_TRACING, "qs_probe", "GPL", insns, 2, &opts);
    if (prog < 0) why = "load: " + errno_text(errno);
    return prog;
}

}  // namespace

std::string fentry_probe(KernelTracepoints& kernel, const std::string& function) {
    std::string why;
    const int prog = load_empty_tracing(kernel, BPF_TRACE_FEXIT, function, why);
    if (prog < 0) return why;
    const int link = bpf_link_create(prog, 0, BPF_TRACE_FEXIT, nullptr);
    const int err = errno;
    close(prog);
    if (link < 0) return "attach: " + errno_text(err);
    close(link);
    return "";
}

std::string iter_probe(KernelTracepoints& kernel, const std::string& target) {
    // DEFINE_BPF_ITER_FUNC gives each iterator target a function bpf_iter_<target>.
    std::string why;
    const int prog = load_empty_tracing(kernel, BPF_TRACE_ITER, "bpf_iter_" + target, why);
    if (prog < 0) return why;
    close(prog);
    return "";
}

bool kprobes_available() {
    struct stat st;
    return stat("/sys/bus/event_source/devices/kprobe/type", &st) == 0 ||
           stat("/sys/kernel/tracing/kprobe_events", &st) == 0 ||
           stat("/sys/kernel/debug/tracing/kprobe_events", &st) == 0;
}

std::string lockdown_mode() {
    // "none [integrity] confidentiality": the bracketed one is in force.
    std::ifstream f("/sys/kernel/security/lockdown");
    std::string line;
    if (!std::getline(f, line)) return "";
    const auto a = line.find('['), b = line.find(']');
    if (a == std::string::npos || b == std::string::npos || b < a) return "";
    return line.substr(a + 1, b - a - 1);
}

std::string lockdown_consequence(const std::string& mode) {
    // security/lockdown: integrity forbids writes into the kernel (bpf_probe_write_user among
    // them), which qscope never does; confidentiality also forbids reading kernel memory
    // (bpf_probe_read_kernel, BPF_CORE_READ), kprobes and perf, which every family needs.
    // Both checked in the kernel matrix's guest (lockdown=integrity: a snapshot runs, with
    // this warning; lockdown=confidentiality: the first load fails, exit 5).
    if (mode == "integrity")
        return "kernel lockdown: integrity: qscope's probes only read, so they all still load";
    if (mode == "confidentiality")
        return "kernel lockdown: confidentiality: reading kernel memory from BPF is forbidden; qscope's probes "
               "cannot load (boot without lockdown=confidentiality, or with Secure Boot off)";
    return "";
}

bool cgroup2_mounted() {
    std::ifstream f("/proc/mounts");
    std::string dev, dir, type, rest;
    while (f >> dev >> dir >> type && std::getline(f, rest))
        if (type == "cgroup2") return true;
    return false;
}

bool has_capability(int cap) {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("CapEff:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> cap) & 1ULL;
    return false;
}

}  // namespace qscope
