// `qscope check` on this host, against what the kernel itself says: the tracepoints tracefs
// lists, the kprobe event source, /proc/mounts for cgroup2, /sys/kernel/security/lockdown,
// and the capabilities of the user it runs as; probe_attach against the same and the target
// (a process that is no JVM). (The 6.1 and 6.12 sides run in the kernel matrix.)
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>

#include "harness.h"

using namespace qs_test;

namespace {

bool exists(const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0;
}

bool has_line(const std::string& out, const std::string& mark, const std::string& text) {
    return out.find("  " + mark + "  " + text) != std::string::npos;
}

// The poll syscalls qscope times event-loop turns on (probes/sched/loops.h kLoopPolls).
const char* const kPolls[] = {"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6", "io_uring_enter"};

bool tracefs_has(const std::string& event) { return exists("/sys/kernel/tracing/events/" + event); }

}  // namespace

TEST_CASE("qscope check names each hook's attach type as the kernel offers it", "[check]") {
    if (!require_root()) return;
    const RunResult r = run_qscope({"check"}, 30);
    INFO(r.out << r.err);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("qscope check: Linux ") != std::string::npos);
    // Oracle: tracefs lists the tracepoint -> the typed tracepoint is the way in.
    const bool recv_tp = exists("/sys/kernel/tracing/events/sock/sock_recv_length");
    CHECK(has_line(r.out, "ok  ", "requests in flight and latency, downstream replies (the app's reads): via " +
                                      std::string(recv_tp ? "tp_btf sock_recv_length" : "")));
    const bool ready_tp = exists("/sys/kernel/tracing/events/sock/sk_data_ready");
    if (ready_tp) CHECK(has_line(r.out, "ok  ", "connector queue and exact accept-queue peak (arrivals): via tp_btf sk_data_ready"));
    // Oracle: the perf kprobe event source exists iff the kernel has kprobes.
    const bool kprobes = exists("/sys/bus/event_source/devices/kprobe/type");
    CHECK(r.out.find(kprobes ? "kprobes: available" : "kprobes: unavailable") != std::string::npos);
    // Oracle: /proc/mounts.
    std::ifstream m("/proc/mounts");
    const std::string mounts((std::istreambuf_iterator<char>(m)), std::istreambuf_iterator<char>());
    CHECK(r.out.find(mounts.find(" cgroup2 ") != std::string::npos ? "cgroup v2: mounted" : "cgroup v2: not mounted") !=
          std::string::npos);
    // Oracle: securityfs's lockdown file, when there is one.
    const std::string lock = read_text("/sys/kernel/security/lockdown");
    if (lock.empty())
        CHECK(r.out.find("lockdown: unknown") != std::string::npos);
    else if (lock.find("[none]") != std::string::npos)
        CHECK(r.out.find("lockdown: none") != std::string::npos);
    // Oracle: the raw kallsyms line of tcp_v4_rcv, its address not zeroed.
    {
        const std::string ks = read_text("/proc/kallsyms");
        const size_t at = ks.find(" T tcp_v4_rcv\n");
        const bool shown = at != std::string::npos && at >= 16 && ks.substr(at - 16, 16) != std::string(16, '0');
        CHECK(has_line(r.out, shown ? "ok  " : "warn",
                       shown ? "kernel symbols: /proc/kallsyms shows addresses" : "kernel symbols: /proc/kallsyms hides"));
    }
    // Oracle: tracefs's syscall events, for the poll hooks behind event loops.
    std::string polls, missing;
    for (const char* p : kPolls) (tracefs_has(std::string("syscalls/sys_enter_") + p) ? polls : missing) += std::string(" ") + p;
    CHECK(has_line(r.out, "ok  ", "event loops (turns): via tracepoint syscalls/sys_{enter,exit}_* of" + polls +
                                      (missing.empty() ? "" : "; not on this kernel:" + missing)));
    CHECK(has_line(r.out, tracefs_has("syscalls/sys_exit_accept") ? "ok  " : "warn", "accept wait of accept(): "));
    CHECK(has_line(r.out, tracefs_has("syscalls/sys_enter_close") ? "ok  " : "warn", "Unix connections' closes: "));
    CHECK(has_line(r.out, "ok  ", "connections open before the attach, Unix listeners: via iterator iter/task_file"));
    CHECK(r.out.find("Verdict: qscope can run here (requests and threads).") != std::string::npos);
}

// probe_attach names every hook of every family, with its attach type or why it is off,
// against tracefs (tracepoints), this kernel's facts (no kprobes, fentry refused: tp_btf is the
// way in) and the target (not a JVM: the carrier hooks are off, and say why).
TEST_CASE("probe_attach lists every family's hooks as the kernel offers them", "[check]") {
    if (!require_root()) return;
    auto srv = start_target("qs_server", {"--port", "18190", "--workers", "2"});
    const RunResult r = run_qscope({"snapshot", "--pid", std::to_string(srv.proc.pid()), "--duration", "1", "--json"}, 60);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    const nlohmann::json s = nlohmann::json::parse(r.out);
    std::map<std::string, nlohmann::json> by;  // "family hook" -> entry
    for (const auto& a : s["probe_attach"]) by[a["family"].get<std::string>() + " " + a["hook"].get<std::string>()] = a;
    INFO(s["probe_attach"].dump(1));
    const auto attach = [&](const std::string& key) { return by.count(key) ? by[key]["attach"].get<std::string>() : "absent"; };
    // The sock family: the typed tracepoints this kernel has, the syscall exits, the iterators.
    for (const char* tp : {"sock_recv_length", "sock_send_length", "sk_data_ready"})
        CHECK(attach(std::string("sock ") + tp) == (tracefs_has(std::string("sock/") + tp) ? "tp_btf" : "fexit"));
    CHECK(attach("sock inet_sock_set_state") == "tp_btf");
    CHECK(attach("sock sys_exit_accept4") == "tracepoint");
    // The HTTP/2 frame walk: tail-called from the reads' and writes' programs, in before the
    // window (top alone loads it after its first frame: h2_test).
    CHECK(attach("sock http2_frame_walk") == "tail_call");
    CHECK(by["sock http2_frame_walk"].value("via", "") ==
          (tracefs_has("sock/sock_recv_length") ? "qs_recv, qs_send" : "qs_recv_fexit, qs_send_fexit"));
    CHECK(attach("sock task_file") == "iterator");
    CHECK(attach("sock task") == "iterator");
    // This sandbox's policy refuses iter/bpf_map_elem (EPERM) where iter/task loads: then the
    // hook is off, and says why.
    CHECK((attach("sock bpf_map_elem") == "iterator" || by["sock bpf_map_elem"].value("off", "").rfind("iter/bpf_map_elem: ", 0) == 0));
    // The sched family: scheduler tracepoints, the thread iterator, the poll hooks per tracefs.
    for (const char* tp : {"sched_switch", "sched_wakeup", "sched_wakeup_new"})
        CHECK(attach(std::string("sched ") + tp) == "tp_btf");
    CHECK(attach("sched task") == "iterator");
    for (const char* p : kPolls)
        for (const char* dir : {"enter", "exit"}) {
            const std::string ev = std::string("sys_") + dir + "_" + p;
            const std::string key = "sched " + ev;
            if (tracefs_has("syscalls/" + ev)) {
                CHECK(attach(key) == "tracepoint");
                CHECK(by[key]["via"] == "syscalls/" + ev);
            } else {
                CHECK(attach(key) == "none");
                CHECK(by[key].contains("off"));
            }
        }
    CHECK(attach("sched qs_loop_sample") == "perf_event");
    // The process tree: fork and exit, followed by default.
    CHECK(attach("tree sched_process_fork") == "tp_btf");
    CHECK(attach("tree sched_process_exit") == "tp_btf");
    // The jvm family, on a target that is no JVM: each hook off, with the reason.
    for (const char* h : {"sched_switch", "sched_wakeup", "JVM_VirtualThreadPinnedEvent"}) {
        const std::string key = std::string("jvm ") + h;
        CHECK(attach(key) == "none");
        CHECK(by[key].value("off", "") ==
              "the target is neither a JVM, a Go program nor a Tokio one (threads named tokio-runtime-worker, or found in "
              "its scheduler's frames), and no --carriers pattern was given");
    }
}

TEST_CASE("qscope check as an unprivileged user: exit 4, says what to grant", "[check]") {
    if (!require_root()) return;
    const RunResult r = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", qscope_bin(), "check"}, 30);
    INFO(r.out << r.err);
    CHECK(r.rc == 4);
    CHECK(has_line(r.out, "NO  ", "cannot load tracing programs: run as root, or grant CAP_BPF,CAP_PERFMON"));
    // Oracle: kallsyms as that user reads it (zeroed without CAP_SYSLOG, whatever kptr_restrict).
    const RunResult ks = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "head", "-1", "/proc/kallsyms"}, 10);
    const bool hidden = ks.out.rfind(std::string(16, '0'), 0) == 0;
    CHECK(has_line(r.out, hidden ? "warn" : "ok  ",
                   hidden ? "kernel symbols: /proc/kallsyms hides" : "kernel symbols: /proc/kallsyms shows addresses"));
    CHECK(r.out.find("Verdict: qscope cannot run here") != std::string::npos);
}

TEST_CASE("a run whose kallsyms hides addresses says what its overflows then count", "[check]") {
    if (!require_root()) return;
    // Root without CAP_SYSLOG reads /proc/kallsyms zeroed unless kptr_restrict is 0 and perf
    // is open to all; the oracle is the file as such a process reads it.
    const std::vector<std::string> no_syslog = {"setpriv", "--inh-caps=-syslog", "--bounding-set=-syslog"};
    auto as_no_syslog = [&](std::vector<std::string> argv) {
        argv.insert(argv.begin(), no_syslog.begin(), no_syslog.end());
        return argv;
    };
    const RunResult ks = run(as_no_syslog({"head", "-1", "/proc/kallsyms"}), 10);
    const bool hidden = ks.out.rfind(std::string(16, '0'), 0) == 0;
    auto srv = start_target("qs_server", {"--port", "18191", "--workers", "1"});
    const RunResult r = run(as_no_syslog({qscope_bin(), "snapshot", "--pid", std::to_string(srv.proc.pid()),
                                          "--duration", "3", "--json"}),
                            60);
    INFO(r.err);
    REQUIRE(r.rc == 0);
    const auto s = qscope_json(r.out);
    bool said = false;
    for (const auto& w : s["warnings"])
        said |= w.get<std::string>().rfind("sock: /proc/kallsyms hides tcp_v4_rcv's address", 0) == 0;
    INFO("kallsyms hidden: " << hidden << "\nwarnings " << s["warnings"].dump());
    CHECK(said == hidden);
}
