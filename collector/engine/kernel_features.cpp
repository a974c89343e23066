#include "engine/kernel_features.h"

#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "engine/bpf_util.h"
#include "sys/proc_stat.h"

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

bool kfree_skb_tells_overflows(KernelTracepoints& kernel) {
    return kernel.btf_args("kfree_skb") >= 4 && kernel.has_enum_value("skb_drop_reason", "SKB_DROP_REASON_TCP_LISTEN_OVERFLOW");
}

bool kprobes_available() {
    struct stat st;
    return stat("/sys/bus/event_source/devices/kprobe/type", &st) == 0 ||
           stat("/sys/kernel/tracing/kprobe_events", &st) == 0 ||
           stat("/sys/kernel/debug/tracing/kprobe_events", &st) == 0;
}

long pid_max() {
    std::string s;
    if (!read_file("/proc/sys/kernel/pid_max", s)) return 4194304;
    return std::max(1L, std::atol(s.c_str()));
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

const std::vector<BpfNeed>& bpf_needs() {
    using F = ProbeFamily;
    // Found by booting Debian 11's 5.10 (kernel matrix): the tree's object fails first, on the
    // atomics. The helpers' releases are the kernel's own (include/uapi/linux/bpf.h history).
    static const std::vector<BpfNeed> needs = {
        {"atomic fetch-and-op and compare-exchange instructions", nullptr, "5.12", {F::tree, F::sock, F::sched}},
        {"task-local storage", "BPF_FUNC_task_storage_get", "5.11", {F::sock, F::sched}},
        {"bpf_get_current_task_btf", "BPF_FUNC_get_current_task_btf", "5.11", {F::sock, F::sched}},
        {"bpf_sock_from_file", "BPF_FUNC_sock_from_file", "5.11", {F::sock}},
        {"bpf_task_pt_regs", "BPF_FUNC_task_pt_regs", "5.15", {F::sock, F::sched, F::jvm}},
        {"bpf_skc_to_unix_sock", "BPF_FUNC_skc_to_unix_sock", "5.16", {F::sock}},
    };
    return needs;
}

const std::vector<SwitchedHelper>& bpf_switched_helpers() {
    // bpf_loop: the HTTP/2 frame walk (sock.bpf.c h2_streams); bpf_copy_from_user_task: the
    // sleepable task iterator's stacks (sched.bpf.c, its program left unloaded without it);
    // bpf_sock_from_file in the tree: the fd-table iterator (tree.bpf.c qs_fd_sockets), which the
    // tree loads without where it is refused.
    static const std::vector<SwitchedHelper> helpers = {{"BPF_FUNC_loop", ProbeFamily::sock},
                                                        {"BPF_FUNC_copy_from_user_task", ProbeFamily::sched},
                                                        {"BPF_FUNC_sock_from_file", ProbeFamily::tree}};
    return helpers;
}

namespace {

// r0 = atomic_fetch_add(stack slot, 1) in a socket filter: 5.10's verifier rejects the
// instruction ("BPF_STX uses reserved fields"), 5.12's takes it. 1 yes, 0 no, -1 not allowed to
// load anything.
int probe_atomics() {
    const bpf_insn insns[] = {
        {BPF_ST | BPF_MEM | BPF_DW, BPF_REG_10, 0, -8, 0},
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_1, 0, 0, 1},
        {BPF_STX | BPF_ATOMIC | BPF_DW, BPF_REG_10, BPF_REG_1, -8, BPF_ADD | BPF_FETCH},
        {BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0},
        {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
    };
    const int fd = bpf_prog_load(BPF_PROG_TYPE_SOCKET_FILTER, "qs_atomics", "GPL", insns, 5, nullptr);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == EPERM || errno == EACCES ? -1 : 0;
}

bool has_bpf_need(KernelTracepoints& kernel, const BpfNeed& need) {
    if (need.helper) return kernel.has_enum_value("bpf_func_id", need.helper);
    const int a = probe_atomics();
    return a >= 0 ? a == 1 : kernel.has_enum_value("bpf_func_id", "BPF_FUNC_check_mtu");
}

}  // namespace

std::vector<const BpfNeed*> missing_bpf_needs(KernelTracepoints& kernel) {
    std::vector<const BpfNeed*> out;
    for (const BpfNeed& n : bpf_needs())
        if (!has_bpf_need(kernel, n)) out.push_back(&n);
    return out;
}

std::vector<const BpfNeed*> needs_of(const std::vector<const BpfNeed*>& missing, ProbeFamily family) {
    std::vector<const BpfNeed*> out;
    for (const BpfNeed* n : missing)
        for (ProbeFamily f : n->families)
            if (f == family || f == ProbeFamily::tree) {
                out.push_back(n);
                break;
            }
    return out;
}

std::string missing_needs_text(const std::vector<const BpfNeed*>& missing) {
    if (missing.empty()) return "";
    utsname u{};
    uname(&u);
    std::string s = std::string("this kernel (Linux ") + u.release + ") lacks ";
    for (size_t i = 0; i < missing.size(); ++i)
        s += (i ? ", " : "") + std::string(missing[i]->what) + " (Linux " + missing[i]->since + "+)";
    return s;
}

void throw_load_error(ProbeFamily family, const std::string& what, int err) {
    KernelTracepoints kernel;  // parsed only now: a load that works never pays for it
    const std::string lacks = missing_needs_text(needs_of(missing_bpf_needs(kernel), family));
    if (lacks.empty()) throw_bpf_error(what, err);
    throw Error(Exit::kernel, what + ": " + lacks + " (`qscope check` tells what runs here)");
}

}  // namespace qscope
