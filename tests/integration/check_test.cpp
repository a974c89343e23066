// `qscope check` on this host, against what the kernel itself says: the tracepoints tracefs
// lists, the kprobe event source, /proc/mounts for cgroup2, /sys/kernel/security/lockdown,
// and the capabilities of the user it runs as. (The 6.1 side runs in the kernel matrix.)
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

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
    CHECK(r.out.find("Verdict: qscope can run here (requests and threads).") != std::string::npos);
}

TEST_CASE("qscope check as an unprivileged user: exit 4, says what to grant", "[check]") {
    if (!require_root()) return;
    const RunResult r = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", qscope_bin(), "check"}, 30);
    INFO(r.out << r.err);
    CHECK(r.rc == 4);
    CHECK(has_line(r.out, "NO  ", "cannot load tracing programs: run as root, or grant CAP_BPF,CAP_PERFMON"));
    CHECK(r.out.find("Verdict: qscope cannot run here") != std::string::npos);
}
