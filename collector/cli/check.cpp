// `qscope check`: what qscope can observe on this kernel, for an operator, before a run.
// Each probe family's hooks with the attach type qscope would choose (or why none), the
// privileges present, BTF, cgroup v2 and lockdown. The sock family's choice is the same pure
// function a run uses (probes/sock/attach_plan.h), fed by the same probes.
#include <sys/utsname.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/app.h"
#include "engine/bpf_util.h"
#include "engine/kernel_features.h"
#include "model/errors.h"
#include "probes/sched/loops.h"
#include "probes/sock/attach_plan.h"
#include "probes/sock/scope.h"
#include "symbols/symbolizer.h"
#include "sys/proc_table.h"

namespace qscope {

namespace {

enum class Mark { ok, warn, no };

struct Line {
    Mark mark;
    std::string text;
};

struct Section {
    std::string title;
    std::vector<Line> lines;
    void add(Mark m, std::string t) { lines.push_back({m, std::move(t)}); }
};

const char* mark_text(Mark m) {
    switch (m) {
        case Mark::ok: return "ok  ";
        case Mark::warn: return "warn";
        case Mark::no: return "NO  ";
    }
    return "?";
}

bool exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

std::string describe(const HookChoice& c) {
    if (c.attach == AttachType::none) return "unavailable: " + c.caveat;
    std::string s = std::string("via ") + contract_name(c.attach) + " " + c.via;
    if (c.attach != AttachType::tp_btf)
        s += " (no tracepoint " + c.tracepoint + ")" + (c.caveat.empty() ? "" : ": " + c.caveat);
    return s;
}

const char* family_word(ProbeFamily f) {
    switch (f) {
        case ProbeFamily::tree: return "everything (the process-tree filter)";
        case ProbeFamily::sock: return "requests";
        case ProbeFamily::sched: return "threads";
        case ProbeFamily::jvm: return "carriers";
    }
    return "?";
}

}  // namespace

int run_check() {
    constexpr int kSysAdmin = 21, kPerfmon = 38, kBpf = 39, kPtrace = 19, kDacReadSearch = 2;
    std::vector<Section> sections;
    utsname u{};
    uname(&u);

    // ---- privileges and the kernel's general features -------------------------------
    Section priv{"Privileges"};
    const bool admin = has_capability(kSysAdmin);
    const bool may_bpf = admin || (has_capability(kBpf) && has_capability(kPerfmon));
    priv.add(may_bpf ? Mark::ok : Mark::no,
             may_bpf ? std::string(admin ? "CAP_SYS_ADMIN" : "CAP_BPF + CAP_PERFMON") + ": may load tracing programs"
                     : "cannot load tracing programs: run as root, or grant CAP_BPF,CAP_PERFMON,CAP_DAC_READ_SEARCH,"
                       "CAP_SYS_PTRACE (docs/security.md)");
    const bool read_others = has_capability(kPtrace) && (admin || has_capability(kDacReadSearch) || geteuid() == 0);
    priv.add(read_others ? Mark::ok : Mark::no,
             read_others ? "CAP_SYS_PTRACE + CAP_DAC_READ_SEARCH: may read another process's fds, maps and memory"
                         : "cannot read another process's /proc/PID/fd and maps: add CAP_DAC_READ_SEARCH and "
                           "CAP_SYS_PTRACE");
    sections.push_back(priv);

    KernelTracepoints tps;
    Section kern{"Kernel"};
    const bool btf = exists("/sys/kernel/btf/vmlinux");
    kern.add(btf ? Mark::ok : Mark::no, btf ? "BTF: /sys/kernel/btf/vmlinux (CO-RE, typed tracepoints)"
                                            : "no BTF (/sys/kernel/btf/vmlinux): qscope needs CONFIG_DEBUG_INFO_BTF=y");
    const bool cg2 = cgroup2_mounted();
    kern.add(cg2 ? Mark::ok : Mark::warn,
             cg2 ? "cgroup v2: mounted" : "cgroup v2: not mounted (qscope does not need it today)");
    const std::string lock = lockdown_mode();
    const std::string lock_note = lockdown_consequence(lock);
    if (lock.empty())
        kern.add(Mark::ok, "lockdown: unknown (no /sys/kernel/security/lockdown: lockdown LSM absent or securityfs "
                           "not mounted), so not enforced by it");
    else if (lock == "none")
        kern.add(Mark::ok, "lockdown: none");
    else
        kern.add(lock == "confidentiality" ? Mark::no : Mark::warn, lock_note);
    // Kernel frames are named from it, and a listener's overflows told from its other drops
    // (tcp_v4_rcv's text, docs/kernel.md "overflows").
    const bool ksyms = !kernel_symbols().text_of("tcp_v4_rcv").empty();
    kern.add(ksyms ? Mark::ok : Mark::warn,
             ksyms ? "kernel symbols: /proc/kallsyms shows addresses (kernel frames named; a listener's drops that "
                     "are not overflows told apart)"
                   : "kernel symbols: /proc/kallsyms hides its addresses (kptr_restrict, or no CAP_SYSLOG): kernel "
                     "frames shown as addresses, and a listener's other drops (a SYN retransmitted to a request "
                     "socket) counted as overflows");
    // BTF is readable by anyone: the plan below is this kernel's even without privileges;
    // only the fentry probe (a real load) needs them.
    KernelOffer offer = probe_sock_offer(tps, "", true);
    if (!may_bpf) {
        offer.fentry = false;
        offer.fentry_error = "not tried: no privilege to load BPF";
    }
    const std::string fentry_why = offer.fentry_error;
    kern.add(offer.fentry ? Mark::ok : Mark::warn,
             offer.fentry ? "fentry/fexit: load and attach" : "fentry/fexit: unavailable (" + fentry_why + ")");
    kern.add(offer.kprobes ? Mark::ok : Mark::warn,
             offer.kprobes ? "kprobes: available" : "kprobes: unavailable (CONFIG_KPROBES off)");
    kern.add(offer.syscall_exits ? Mark::ok : Mark::warn,
             offer.syscall_exits ? "syscall exit tracepoints of reads and writes: in tracefs (the last way in)"
                                 : "syscall exit tracepoints of reads and writes: not all in tracefs");
    sections.push_back(kern);

    // ---- what the families' objects need of the kernel's BPF ------------------------
    Section needs{"BPF (instructions and helpers the probes use)"};
    const std::vector<const BpfNeed*> missing = missing_bpf_needs(tps);
    for (const BpfNeed& n : bpf_needs()) {
        std::string users;
        for (ProbeFamily f : n.families) users += (users.empty() ? "" : ", ") + std::string(family_word(f));
        const bool have = std::find(missing.begin(), missing.end(), &n) == missing.end();
        needs.add(have ? Mark::ok : Mark::no, std::string(n.what) + " (Linux " + n.since + "+)" +
                                                  (have ? "" : ": missing, needed by ") + (have ? "" : users));
    }
    sections.push_back(needs);
    // A family whose object this kernel would refuse says so first in its own section.
    const auto bpf_fits = [&](ProbeFamily f, Section& s) {
        const std::string lacks = missing_needs_text(needs_of(missing, f));
        if (!lacks.empty()) s.add(Mark::no, "cannot load: " + lacks);
        return lacks.empty();
    };

    // ---- the sock family: requests, connector, downstream ---------------------------
    Section sock{"Requests (sock family: accept queue, connector, in flight, downstream)"};
    const bool sock_fits = bpf_fits(ProbeFamily::sock, sock);
    const SockAttachPlan plan = plan_sock_attach(offer);
    const bool set_state = tps.has_btf("inet_sock_set_state");
    sock.add(set_state ? Mark::ok : Mark::no,
             set_state ? "connections, handshakes, closes: via tp_btf inet_sock_set_state"
                       : "connections: no tracepoint inet_sock_set_state (Linux 4.16+)");
    const auto line = [&](const HookChoice& c, const char* what, bool required) {
        const Mark m = c.attach == AttachType::tp_btf ? Mark::ok
                       : c.attach != AttachType::none ? Mark::ok
                       : required                     ? Mark::no
                                                      : Mark::warn;
        sock.add(m, std::string(what) + ": " + describe(c));
    };
    line(plan.of(SockHook::recv), "requests in flight and latency, downstream replies (the app's reads)", true);
    line(plan.of(SockHook::send), "responses and their status, downstream calls (the app's writes)", true);
    line(plan.of(SockHook::data_ready), "connector queue and exact accept-queue peak (arrivals)", false);
    {
        // --scope: the arrivals' hook on the target's cgroup alone (probes/sock/scope.h).
        std::string why = !may_bpf ? "not probed without privileges" : scoped_arrivals_unsupported();
        if (why.empty() && !cgroup2_mount()) why = "no cgroup v2 hierarchy is mounted";
        sock.add(why.empty() ? Mark::ok : Mark::warn,
                 why.empty() ? "arrivals scoped to a target's own cgroup (--scope auto|cgroup): via cgroup_skb/ingress"
                             : "arrivals scoped to a target's own cgroup: unavailable (" + why +
                                   "): every process runs the global hook");
    }
    const bool acc = KernelTracepoints::has_tracefs("syscalls", "sys_exit_accept4");
    sock.add(acc ? Mark::ok : Mark::warn, acc ? "accept wait: via tracepoint syscalls/sys_exit_accept4"
                                              : "accept wait: unavailable (no syscalls/sys_exit_accept4 in tracefs, or tracefs not readable)");
    const bool kfree4 = tps.btf_args("kfree_skb") >= 4 &&
                        tps.has_enum_value("skb_drop_reason", "SKB_DROP_REASON_TCP_LISTEN_OVERFLOW");
    sock.add(kfree4 ? Mark::ok : Mark::warn,
             kfree4 ? "ACK-stage listen overflows: via tp_btf kfree_skb (with rx_sk)"
                    : "ACK-stage listen overflows: kfree_skb has no rx_sk or no SKB_DROP_REASON_TCP_LISTEN_OVERFLOW "
                      "here: overflows counted from sk_drops, accept waits start at the handshake, not the first "
                      "dropped ACK");
    const bool acc3 = KernelTracepoints::has_tracefs("syscalls", "sys_exit_accept");
    sock.add(acc3 ? Mark::ok : Mark::warn, acc3 ? "accept wait of accept(): via tracepoint syscalls/sys_exit_accept"
                                                : "accept wait of accept(): unavailable (no syscalls/sys_exit_accept)");
    const bool close = KernelTracepoints::has_tracefs("syscalls", "sys_enter_close");
    sock.add(close ? Mark::ok : Mark::warn,
             close ? "Unix connections' closes: via tracepoint syscalls/sys_enter_close"
                   : "Unix connections' closes: seen at the next tick (no syscalls/sys_enter_close)");
    // A real load where privileges allow (a kernel or its policy may refuse one target alone),
    // else BTF: DEFINE_BPF_ITER_FUNC gives each iterator target a function bpf_iter_<target>.
    for (const auto& [target, what] :
         {std::pair<const char*, const char*>{"task_file", "connections open before the attach, Unix listeners"},
          {"task", "threads blocked on a downstream read at attach"},
          {"bpf_map_elem", "Unix connections gone since the last tick"}}) {
        const std::string why = may_bpf ? iter_probe(tps, target)
                                : tps.has_function(std::string("bpf_iter_") + target) ? ""
                                                                                       : "not in this kernel";
        sock.add(why.empty() ? Mark::ok : Mark::warn,
                 std::string(what) + (why.empty() ? ": via iterator iter/" + std::string(target)
                                                  : ": no iterator iter/" + std::string(target) + " (" + why + ")"));
    }
    // The HTTP/2 frame walk runs in bpf_loop; BTF names the helper's function where it exists.
    const bool loop = tps.has_function("bpf_loop");
    sock.add(loop ? Mark::ok : Mark::warn,
             loop ? "HTTP/2 (h2c) streams as requests: frame headers walked in bpf_loop"
                  : "HTTP/2 (h2c): no bpf_loop (Linux 5.17+): counted per connection, not per stream");
    const bool rst = tps.has_btf("tcp_receive_reset") && tps.has_btf("tcp_send_reset");
    sock.add(rst ? Mark::ok : Mark::warn, rst ? "downstream resets: via tp_btf tcp_receive_reset, tcp_send_reset"
                                              : "downstream resets: not counted (no tcp_*_reset tracepoints)");
    const bool sock_runs =
        may_bpf && btf && set_state && plan.error.empty() && lock != "confidentiality" && sock_fits;
    sections.push_back(sock);

    // ---- the sched family and the process tree --------------------------------------
    Section sched{"Threads (sched family: thread groups, waits, run queue)"};
    const bool sched_fits = bpf_fits(ProbeFamily::sched, sched);
    const int sw_args = tps.btf_args("sched_switch");
    const bool sw = sw_args >= 4;
    sched.add(sw ? Mark::ok : Mark::no,
              sw ? "waits and run queue: via tp_btf sched_switch (with prev_state), sched_wakeup, sched_wakeup_new"
                 : sw_args >= 0 ? "waits: tp_btf sched_switch has no prev_state argument (Linux 5.18+)"
                                : "waits: no tp_btf sched_switch");
    const bool copy_task = tps.has_function("bpf_copy_from_user_task");
    sched.add(copy_task ? Mark::ok : Mark::warn,
              copy_task ? "thread states and stacks of long waits: via sleepable task iterator (iter.s/task)"
                        : "sleepable task iterator with bpf_copy_from_user_task (Linux 5.18+) not found: no states");
    const bool fork = tps.has_btf("sched_process_fork") && tps.has_btf("sched_process_exit");
    // (The process tree is its own BPF object every family filters on: probe_attach "tree".)
    sched.add(fork ? Mark::ok : Mark::warn,
              fork ? "process trees (processes forked later): via tp_btf sched_process_fork, sched_process_exit"
                   : "process trees: no fork/exit tracepoints: only the PID given is observed");
    std::string polls, no_polls;
    for (const char* name : kLoopPolls)
        (KernelTracepoints::has_tracefs("syscalls", std::string("sys_enter_") + name) ? polls : no_polls) +=
            std::string(" ") + name;
    sched.add(polls.empty() ? Mark::warn : Mark::ok,
              polls.empty() ? "event loops: no poll syscall tracepoints in tracefs"
                            : "event loops (turns): via tracepoint syscalls/sys_{enter,exit}_* of" + polls +
                                  (no_polls.empty() ? "" : "; not on this kernel:" + no_polls));
    const bool sw_clock = exists("/sys/bus/event_source/devices/software/type");
    sched.add(sw_clock ? Mark::ok : Mark::warn, sw_clock ? "event-loop stall stacks: via perf_event cpu-clock sampling"
                                                         : "event-loop stall stacks: no software perf events");
    const bool sched_runs = may_bpf && btf && sw && lock != "confidentiality" && sched_fits;
    sections.push_back(sched);

    Section jvm{"Carriers (jvm family)"};
    bpf_fits(ProbeFamily::jvm, jvm);
    const bool uprobe = exists("/sys/bus/event_source/devices/uprobe/type");
    jvm.add(sw ? Mark::ok : Mark::no, sw ? "carrier stalls: via tp_btf sched_switch, sched_wakeup"
                                         : "carrier stalls: no usable sched_switch");
    jvm.add(uprobe ? Mark::ok : Mark::warn, uprobe ? "\"pinned park\" labels: via uprobe (JDK 24+)"
                                                   : "\"pinned park\" labels: no uprobes");
    sections.push_back(jvm);

    // ---- print ---------------------------------------------------------------------
    std::printf("qscope check: Linux %s (%s)\n", u.release, u.machine);
    for (const auto& s : sections) {
        std::printf("\n%s\n", s.title.c_str());
        for (const auto& l : s.lines) std::printf("  %s  %s\n", mark_text(l.mark), l.text.c_str());
    }
    std::printf("\n");
    if (!plan.error.empty()) std::printf("%s\n", plan.error.c_str());
    if (sock_runs && sched_runs)
        std::printf("Verdict: qscope can run here (requests and threads).\n");
    else if (sock_runs)
        std::printf("Verdict: qscope can run here with --no-threads (requests only).\n");
    else if (sched_runs)
        std::printf("Verdict: qscope can run here with --no-requests (threads only).\n");
    else
        std::printf("Verdict: qscope cannot run here (see NO above).\n");
    if (sock_runs || sched_runs) return 0;
    return static_cast<int>(may_bpf && read_others ? Exit::kernel : Exit::permission);
}

}  // namespace qscope
