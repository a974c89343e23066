// The kernel matrix (issue 21): qscope on a packaged Debian kernel booted under QEMU (TCG),
// proving the fallbacks this development kernel (6.18: no kprobes, fentry EPERM) cannot
// exercise. vm.sh boots the kernel with an initramfs that runs smoke.sh; smoke.sh prints
// qscope's JSON and the oracles (the targets' own counters, /proc/net/tcp,
// /proc/PID/task/*/syscall) on the serial console, and this test asserts on them with the
// tolerances of tests/integration/{requests,downstream,waits}_test.cpp.
//
// QSCOPE_KM_KERNEL: the package pattern, or SUITE:PATTERN for another Debian release (vm.sh;
// default Debian 12's 6.1 cloud kernel).
// QSCOPE_KM_MODES: the attach types the socket cases run under (default "auto kprobe"): auto is
// qscope's own choice, checked against the guest kernel's own list of sock tracepoints.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <vector>
#include <sstream>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

// The attach types the socket cases ran under (QSCOPE_KM_MODES; vm.sh passes them on).
std::vector<std::string> modes() {
    const char* m = std::getenv("QSCOPE_KM_MODES");
    std::istringstream in(m && *m ? m : "auto kprobe");
    std::vector<std::string> out;
    for (std::string w; in >> w;) out.push_back(w);
    return out;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string s;
    for (const auto& w : v) s += (s.empty() ? "" : sep) + w;
    return s;
}

struct Guest {
    int rc = -1;
    std::map<std::string, std::string> blocks;  // "requests-auto.snapshot" -> text
    std::map<std::string, std::string> notes;   // "KM <key> <value>" lines
    // For a guest that failed: the processes smoke.sh killed past their bound ("KM hung" lines,
    // with their threads), the kernel's own reports, and the console's end (a truncated CI log
    // keeps its start: the firmware and the first cases).
    std::string hung, kernel_said;
    std::deque<std::string> console_tail;
};

// The kernel's lines that say it is in trouble.
bool kernel_report(const std::string& line) {
    for (const char* mark : {"BUG:", "Oops", "RIP:", "Call Trace", "soft lockup", "rcu_sched", "hung_task", "Kernel panic"})
        if (line.find(mark) != std::string::npos) return true;
    return false;
}

// Boots the kernel with `script` as the guest's payload; lockdown: "" or a lockdown= mode.
Guest boot(const std::string& script, const std::string& lockdown) {
    Guest g;
    const char* k = std::getenv("QSCOPE_KM_KERNEL");
    const std::string kernel = k ? k : "linux-image-6.1.0-*-cloud-amd64-unsigned";
    const double t0 = now_s();
    RunResult r = run({"bash", source_dir() + "/tests/kernel-matrix/vm.sh", QSCOPE_BINARY_DIR, kernel,
                       source_dir() + "/tests/kernel-matrix/" + script, "420"},
                      480, {{"QSCOPE_VM_LOCKDOWN", lockdown}, {"QSCOPE_KM_MODES", join(modes(), " ")}});
    std::printf("kernel-matrix: %s %s%s: vm.sh exit %d after %.0f s\n%s", kernel.c_str(), script.c_str(),
                lockdown.empty() ? "" : (" lockdown=" + lockdown).c_str(), r.rc, now_s() - t0, r.err.c_str());
    g.rc = r.rc;
    std::istringstream in(r.out);
    std::string line, name, body;
    bool inside = false;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (const auto at = line.find("KM hung"); at != std::string::npos) g.hung += line.substr(at) + "\n";
        if (kernel_report(line)) g.kernel_said += line + "\n";
        g.console_tail.push_back(line);
        if (g.console_tail.size() > 60) g.console_tail.pop_front();
        // The firmware's terminal escapes can precede the first line the guest prints.
        if (!inside)
            if (const auto at = line.find("KM"); at != std::string::npos && at > 0 && line[at - 1] != ' ')
                line = line.substr(at);
        if (line.rfind("KM-BEGIN ", 0) == 0) {
            name = line.substr(9);
            body.clear();
            inside = true;
        } else if (line == "KM-END " + name && inside) {
            g.blocks[name] = body;
            inside = false;
        } else if (inside) {
            body += line + "\n";
        } else if (line.rfind("KM ", 0) == 0) {
            const auto sp = line.find(' ', 3);
            g.notes[line.substr(3, sp - 3)] = sp == std::string::npos ? "" : line.substr(sp + 1);
        }
    }
    return g;
}

// The smoke subset's guest, booted once for every test case that reads it.
const Guest& guest() {
    static const Guest g = boot("smoke.sh", "");
    return g;
}

json block_json(const std::string& name) {
    const auto& b = guest().blocks;
    auto it = b.find(name);
    if (it == b.end()) return json();
    try {
        return json::parse(it->second);
    } catch (...) {
        return json();
    }
}

std::string block_text(const std::string& name) {
    auto it = guest().blocks.find(name);
    return it == guest().blocks.end() ? "" : it->second;
}

// What a guest that did not run to its end was doing: the step it reached, its watchdog's list of
// stuck tasks, the kernel's own reports, and the console's end.
std::string stopped_at(const Guest& g) {
    std::string out = "last step: " + (g.notes.count("step") ? g.notes.at("step") : "none (before the first case)");
    if (g.blocks.count("watchdog")) out += "\nthe guest's watchdog:\n" + g.blocks.at("watchdog");
    if (!g.kernel_said.empty()) out += "\nthe kernel said:\n" + g.kernel_said;
    out += "\nthe console's last " + std::to_string(g.console_tail.size()) + " lines:\n";
    for (const auto& line : g.console_tail) out += line + "\n";
    return out;
}

// The guest booted and ran its script to its end, and nothing in it hung; otherwise say where.
bool booted(const Guest& g = guest()) {
    if (g.rc != 0 || !g.notes.count("smoke-seconds")) {
        FAIL_CHECK("the guest did not run to its end (vm.sh exit " << g.rc << "); " << stopped_at(g));
        return false;
    }
    if (g.notes.count("hung")) {
        FAIL_CHECK("a process in the guest outlived its bound and was killed:\n" << g.hung);
        return false;
    }
    return true;
}

// "hook attach via" of every sock hook, for the log: which attach types the guest used.
std::string attach_summary(const json& snap) {
    std::string s;
    for (const auto& a : snap["probe_attach"])
        s += "  " + a["family"].get<std::string>() + " " + a["hook"].get<std::string>() + ": " +
             a["attach"].get<std::string>() + " " + a["via"].get<std::string>() +
             (a.contains("off") ? " (off: " + a["off"].get<std::string>() + ")" : "") + "\n";
    return s;
}

std::string attach_of(const json& snap, const std::string& hook, const std::string& family = "sock") {
    for (const auto& a : snap["probe_attach"])
        if (a["family"] == family && a["hook"] == hook) return a["attach"].get<std::string>() + " " + a["via"].get<std::string>();
    return "";
}

// The attach type and function or tracepoint expected for a sock hook under `mode`. For auto:
// the tracepoint when the guest's tracefs lists it (events/sock), else the fexit/fentry fallback.
std::string expected_attach(const std::string& mode, const std::string& hook) {
    static const std::map<std::string, std::pair<std::string, std::string>> fallback = {
        {"sock_recv_length", {"tcp_recvmsg", "ret"}},
        {"sock_send_length", {"tcp_sendmsg", "ret"}},
        {"sk_data_ready", {"sock_def_readable", ""}},
    };
    const auto& [fn, at] = fallback.at(hook);
    if (mode == "syscall") {
        if (hook == "sock_recv_length") return "tracepoint syscalls/sys_exit_{read,readv,recvfrom,recvmsg}";
        if (hook == "sock_send_length") return "tracepoint syscalls/sys_exit_{write,writev,sendto,sendmsg,sendfile64}";
        return "none ";  // no syscall sees arrivals
    }
    if (mode == "kprobe") return std::string(at.empty() ? "kprobe " : "kretprobe ") + fn;
    if (mode == "fentry") return std::string(at.empty() ? "fentry " : "fexit ") + fn;
    std::istringstream tps(block_text("sock-tracepoints"));
    for (std::string tp; tps >> tp;)
        if (tp == hook) return "tp_btf " + hook;
    return std::string(at.empty() ? "fentry " : "fexit ") + fn;
}

// /proc/net/tcp{,6}: sockets in ESTABLISHED (st 01) with local port `port`; how many have
// unread bytes (rx_queue > 0, i.e. rcv_nxt - copied_seq, what ss prints as Recv-Q).
struct TcpCount {
    int established = 0, with_unread = 0;
};
TcpCount proc_net_tcp(const std::string& text, int port) {
    TcpCount c;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::istringstream f(line);
        std::string sl, local, remote, st, queues;
        if (!(f >> sl >> local >> remote >> st >> queues) || sl == "sl") continue;
        const auto colon = local.rfind(':');
        if (colon == std::string::npos || std::stoi(local.substr(colon + 1), nullptr, 16) != port || st != "01") continue;
        c.established++;
        const auto q = queues.find(':');
        if (q != std::string::npos && std::stoul(queues.substr(q + 1), nullptr, 16) > 0) c.with_unread++;
    }
    return c;
}

// Threads named `comm` in syscall `nr` in a "comm nr" listing.
int threads_in(const std::string& tasks, const std::string& comm, long nr) {
    std::istringstream in(tasks);
    std::string c, n;
    int count = 0;
    while (in >> c >> n)
        if (c.rfind(comm, 0) == 0 && n == std::to_string(nr)) count++;
    return count;
}

}  // namespace

TEST_CASE("kernel matrix: qscope check in the guest", "[kernel-matrix]") {
    if (!booted()) return;
    const Guest& g = guest();
    const std::string check = block_text("check");
    INFO(check);
    std::printf("kernel-matrix: guest %s; smoke ran %s (guest uptime, s); modes %s; sock tracepoints: %s\n%s",
                g.notes.at("uname").c_str(), g.notes.at("smoke-seconds").c_str(), join(modes(), " ").c_str(),
                block_text("sock-tracepoints").c_str(), check.c_str());
    CHECK(g.notes.at("check-exit") == "0");
    CHECK(check.find("Verdict: qscope can run here (requests and threads).") != std::string::npos);
    CHECK(check.find("BTF: /sys/kernel/btf/vmlinux") != std::string::npos);
    CHECK(check.find("lockdown: none") != std::string::npos);
}

TEST_CASE("kernel matrix: in flight max, completions, latency vs qs_server (each attach type)", "[kernel-matrix]") {
    if (!booted()) return;
    for (const std::string& mode : modes()) {
        const std::string c = "requests-" + mode;
        const json s = block_json(c + ".snapshot");
        const json k = block_json(c + ".counters");
        INFO(c << "\nqscope stderr: " << block_text(c + ".stderr") << "\nsnapshot: " << block_text(c + ".snapshot")
               << "\ncounters: " << block_text(c + ".counters") << "\nload: " << block_text(c + ".load"));
        CHECK(guest().notes.at(c + ".qscope-exit") == "0");
        REQUIRE(s.is_object());
        REQUIRE(k.is_object());
        std::printf("kernel-matrix: %s attach types:\n%s", c.c_str(), attach_summary(s).c_str());
        for (const char* hook : {"sock_recv_length", "sock_send_length", "sk_data_ready"})
            CHECK(attach_of(s, hook) == expected_attach(mode, hook));
        CHECK(attach_of(s, "inet_sock_set_state") == "tp_btf inet_sock_set_state");
        // The HTTP/2 frame walk's twins loaded and went into their slots (this kernel takes the
        // tail call from each way in), or are inline (syscall exits).
        if (mode == "syscall")
            CHECK(attach_of(s, "http2_frame_walk") == "tracepoint inline in the syscall exits' programs");
        else
            CHECK(attach_of(s, "http2_frame_walk").rfind("tail_call ", 0) == 0);
        // 6.1 and later filter the fd-table iterator by pid: socket fds in one pass.
        CHECK(attach_of(s, "task_file", "tree") == "iterator iter/task_file");
        const json& r = s["requests"];
        CHECK(r["in_flight_max"].get<uint64_t>() == k["in_flight_max"].get<uint64_t>());
        CHECK(r["completed"].get<uint64_t>() == k["completed"].get<uint64_t>());
        CHECK(r["status"]["2xx"].get<uint64_t>() == k["completed"].get<uint64_t>());
        CHECK(r["completed"].get<uint64_t>() > 0);
        CHECK(r["in_flight"].get<uint64_t>() == 0);
        // Against the server's own median, read to write: the 50 ms service time is only its
        // floor, since the guest's timers and wakeups run late by as long as its host thread
        // waits for a CPU (thread=single): 51.6-55.1 ms seen, more on a busy host.
        const double p50 = r["latency_seconds"]["p50"].get<double>();
        const double own_p50 = k["request_p50_us"].get<double>() / 1e6;
        CHECK(own_p50 >= 0.050);
        CHECK(p50 == Approx(own_p50).epsilon(0.10));
        REQUIRE(s["listeners"].size() == 1);
        CHECK(s["listeners"][0]["accepted"].get<uint64_t>() == k["accepted"].get<uint64_t>());
        CHECK(s["lost_events"].get<uint64_t>() == 0);
    }
}

TEST_CASE("kernel matrix: kprobes, a kretprobe's return slots, and its missed returns counted as lost",
          "[kernel-matrix]") {
    if (!booted()) return;
    if (!guest().notes.count("kretprobe-ran")) return;  // no kprobe mode asked of this kernel
    for (const std::string slots : {"4096", "default"}) {
        const std::string c = "kretprobe-" + slots;
        const json s = block_json(c + ".snapshot");
        const json k = block_json(c + ".counters");
        INFO(c << "\nqscope stderr: " << block_text(c + ".stderr") << "\nrequests: "
               << (s.is_object() ? s["requests"].dump() : "") << "\nlost: "
               << (s.is_object() ? s["lost_events"].dump() : "") << "\npartial: "
               << (s.is_object() ? s["partial"].dump() : "") << "\ncounters: " << block_text(c + ".counters")
               << "\nkprobe_events: " << block_text(c + ".kprobe-events"));
        CHECK(guest().notes.at(c + ".qscope-exit") == "0");
        REQUIRE(s.is_object());
        REQUIRE(k.is_object());
        const uint64_t completed = s["requests"]["completed"].get<uint64_t>(), served = k["completed"].get<uint64_t>();
        const uint64_t lost = s["lost_events"].get<uint64_t>();
        std::printf("kernel-matrix: 12 held reads and 24 clients under kprobes, %s return slots: completed %llu of "
                    "the server's %llu, %llu lost\n",
                    slots.c_str(), (unsigned long long)completed, (unsigned long long)served,
                    (unsigned long long)lost);
        const std::string events = block_text(c + ".kprobe-events");
        CHECK(served > 0);
        if (slots == "4096") {
            // The kretprobes are qscope's tracefs events, with its slots: a slot for every reader,
            // nothing missed, every request counted.
            CHECK(events.find("r4096:qscope/tcp_recvmsg_") != std::string::npos);
            CHECK(events.find("r4096:qscope/tcp_sendmsg_") != std::string::npos);
            CHECK(lost == 0);
            CHECK(completed == served);
        } else {
            // kprobe_events hidden: no event of qscope's, libbpf's attach at the kernel's default
            // slots. The held reads take them, returns are missed, and said so with the slots as
            // the cause; each missed return loses at most the one request it read or answered.
            CHECK(events.find("qscope/") == std::string::npos);
            CHECK(lost > 0);
            CHECK(completed <= served);
            CHECK(served - completed <= lost);
            CHECK(s["partial"].dump().find("it has the kernel's default return slots") != std::string::npos);
        }
    }
    // Removed when qscope exited.
    CHECK(block_text("kretprobe-after.kprobe-events").find("qscope/") == std::string::npos);
}

TEST_CASE("kernel matrix: connections and unread requests (connector queue) vs /proc/net/tcp", "[kernel-matrix]") {
    if (!booted()) return;
    for (const std::string& mode : modes()) {
        if (mode == "syscall") continue;  // no way into arrivals (smoke.sh does not run it)
        const std::string c = "unread-" + mode;
        const json s = block_json(c + ".snapshot");
        const TcpCount t = proc_net_tcp(block_text(c + ".proc-net-tcp"), 28130);
        INFO(c << "\nqscope stderr: " << block_text(c + ".stderr") << "\nrequests: "
               << (s.is_object() ? s["requests"].dump() : "") << "\n/proc/net/tcp: " << t.established
               << " established, " << t.with_unread << " with unread bytes\ncounters: " << block_text(c + ".counters"));
        CHECK(guest().notes.at(c + ".qscope-exit") == "0");
        REQUIRE(s.is_object());
        CHECK(attach_of(s, "sk_data_ready") == expected_attach(mode, "sk_data_ready"));
        const json& r = s["requests"];
        CHECK(t.established == 12);
        CHECK(r["connections"].get<int>() == t.established);
        CHECK(t.with_unread >= 8);
        // Two instants, qscope's last tick then /proc's read: a worker that answers in between
        // turns its connection's next request from unread to read (a 12-connection TCG guest
        // read 9 unread and 3 in flight against the server's 8 queued and 4 busy).
        CHECK(std::abs(r["waiting_unread"].get<double>() - t.with_unread) <= std::max(1.0, 0.10 * t.with_unread));
        CHECK(r["waiting_unread_max"].get<int>() >= 8);
        CHECK(r["oldest_unread_seconds"].get<double>() > 0);
    }
}

TEST_CASE("kernel matrix: downstream busy vs the pool's count, calls vs completions", "[kernel-matrix]") {
    if (!booted()) return;
    const json s = block_json("downstream.snapshot");
    const json k = block_json("downstream.counters");
    INFO("qscope stderr: " << block_text("downstream.stderr") << "\ndownstream: "
                           << (s.is_object() ? s["downstream"].dump() : "") << "\ncounters: "
                           << block_text("downstream.counters"));
    CHECK(guest().notes.at("downstream.qscope-exit") == "0");
    REQUIRE(s.is_object());
    REQUIRE(k.is_object());
    REQUIRE(s["downstream"].size() == 1);
    const json& d = s["downstream"][0];
    CHECK(d["peer"] == "127.0.0.1:28210");
    CHECK(d["connections"].get<int>() == 3);
    CHECK(d["busy_max"].get<uint64_t>() == 3);
    CHECK(d["busy_max"].get<uint64_t>() == k["pool_busy_max"].get<uint64_t>());
    CHECK(d["busy"].get<uint64_t>() == 0);
    CHECK(d["calls"].get<uint64_t>() == k["completed"].get<uint64_t>());
    // Against the server's own median call time: under TCG the peer's 20 ms sleep overshoots
    // by milliseconds (22.7 ms seen on 6.12), so the nominal delay is no oracle here.
    const double own_p50 = k["call_p50_us"].get<double>() / 1e6;
    CHECK(own_p50 >= 0.020);
    CHECK(d["call_seconds"]["p50"].get<double>() == Approx(own_p50).epsilon(0.10));
}

// "count name" lines (smoke.sh `linked`): how many of the exporter's links attach each program.
std::map<std::string, int> linked_programs(const std::string& text) {
    std::map<std::string, int> out;
    std::istringstream in(text);
    int n;
    for (std::string name; in >> n >> name;) out[name] += n;
    return out;
}

// The programs the exporter's shared hooks put on a way in (bpf/dispatch.bpf.c), and the
// targets' own programs there, which must then not be linked themselves.
struct SharedWay {
    std::vector<std::string> shared, own;
};
SharedWay shared_way(const std::string& attach) {
    const auto kind = attach.substr(0, attach.find(' '));
    const auto fn = attach.substr(attach.find(' ') + 1);
    if (kind == "tp_btf") {
        if (fn == "sock_recv_length") return {{"qs_all_recv"}, {"qs_recv"}};
        if (fn == "sock_send_length") return {{"qs_all_send"}, {"qs_send"}};
        return {{"qs_all_data_ready"}, {"qs_data_ready"}};
    }
    const std::string base = fn == "tcp_recvmsg" ? "recv" : fn == "tcp_sendmsg" ? "send" : "data_ready";
    if (kind == "fexit" || kind == "fentry") return {{"qs_all_" + base + "_" + kind}, {"qs_" + base + "_" + kind}};
    if (kind == "kretprobe")
        return {{"qs_all_" + base + "_kprobe", "qs_all_" + base + "_kretprobe"}, {"qs_" + base + "_kprobe", "qs_" + base + "_kretprobe"}};
    return {{"qs_all_" + base + "_kprobe"}, {"qs_" + base + "_kprobe"}};
}

TEST_CASE("kernel matrix: two services in one exporter, through the hooks they share", "[kernel-matrix]") {
    if (!booted()) return;
    // The ways smoke.sh ran it: qscope's own, and kprobes where the tracepoints are missing.
    REQUIRE(guest().notes.count("export-modes"));
    std::istringstream ran(guest().notes.at("export-modes"));
    for (std::string mode; ran >> mode;) {
        const std::string c = "export-" + mode;
        const auto m = parse_metrics(block_text(c + ".metrics"));
        const auto sum = [&](const std::string& family, const std::string& service) {
            double v = 0;
            for (const auto& [series, value] : m)
                if (series.rfind(family + "{", 0) == 0 && series.find("service=\"" + service + "\"") != std::string::npos)
                    v += value;
            return v;
        };
        const std::string err = block_text(c + ".stderr");
        INFO(c << "\nexporter stderr: " << err << "\ncounters: " << block_text(c + ".counters-a") << " "
               << block_text(c + ".counters-b") << "\nlinked:\n" << block_text(c + ".linked") << "metrics:\n"
               << block_text(c + ".metrics"));
        CHECK(err.find("not shared") == std::string::npos);
        for (const auto& [service, counters] : {std::pair{"a", ".counters-a"}, std::pair{"b", ".counters-b"}}) {
            const json k = block_json(c + counters);
            REQUIRE(k.is_object());
            const double completed = k["completed"].get<double>();
            std::printf("kernel-matrix: exporter of two (%s), service %s: completed %.0f (server %.0f), downstream "
                        "calls %.0f\n",
                        mode.c_str(), service, sum("qscope_requests_completed_total", service), completed,
                        sum("qscope_downstream_calls_total", service));
            CHECK(sum("qscope_up", service) == 1);
            CHECK(completed > 0);
            CHECK(sum("qscope_requests_completed_total", service) == completed);
            CHECK(sum("qscope_accepted_connections_total", service) == k["accepted"].get<double>());
            CHECK(sum("qscope_downstream_calls_total", service) == completed);  // one call per request
            // Nothing lost of what is checked here: no sock or tree loss, by the exporter's own
            // account (its ring's last ticks, replayed). The sched family may lose per-thread
            // state: task storage refuses a get nested in another program's on the same CPU
            // (tree_test sees it on this host too; here 4 events in the first of 3 runs, and
            // CI73 and CI74 failed on it); it is counted, and printed here.
            const json replay = block_json(c + ".replay-" + service);
            REQUIRE(replay.is_object());
            CHECK(replay["lost_events"].get<double>() == sum("qscope_lost_events_total", service));
            // And on its stderr, which an operator reads (/metrics has the count alone).
            if (sum("qscope_lost_events_total", service) > 0) {
                bool said = false;
                std::istringstream lines(err);
                for (std::string l; std::getline(lines, l);)
                    said |= l.rfind("qscope [" + std::string(service) + "]: ", 0) == 0 &&
                            l.find(" events lost since attach (qscope_lost_events_total)") != std::string::npos;
                CHECK(said);
            }
            for (const auto& p : replay["partial"]) {
                const std::string line = p.get<std::string>();
                if (line.find(" events lost since attach") == std::string::npos) continue;
                std::printf("kernel-matrix: exporter of two (%s), service %s: %s\n", mode.c_str(), service,
                            line.c_str());
                CHECK(line.rfind("sched: ", 0) == 0);
            }
        }
        CHECK(sum("qscope_downstream_connections", "b") == 0);  // each per-request connection seen closed
        // The kernel's own list: each way in of reads, writes and arrivals holds the exporter's
        // one program, whatever this kernel and mode take, and neither target's own.
        const auto linked = linked_programs(block_text(c + ".linked"));
        const auto links_to = [&](const std::string& prog) {
            const auto it = linked.find(prog);
            return it == linked.end() ? 0 : it->second;
        };
        for (const std::string hook : {"sock_recv_length", "sock_send_length", "sk_data_ready"}) {
            const SharedWay way = shared_way(expected_attach(mode, hook));
            INFO(hook << " via " << expected_attach(mode, hook));
            for (const auto& p : way.shared) CHECK(links_to(p) == 1);
            for (const auto& p : way.own) CHECK(links_to(p) == 0);
        }
    }
}

TEST_CASE("kernel matrix: futex waiters at the pool gate vs the server's count and /proc", "[kernel-matrix]") {
    if (!booted()) return;
    constexpr int N = 8, K = 3, kFutex = 202;
    const json s = block_json("waits.snapshot");
    const json c0 = block_json("waits.counters0"), c1 = block_json("waits.counters1");
    const std::string t0 = block_text("waits.tasks0"), t1 = block_text("waits.tasks1");
    INFO("qscope stderr: " << block_text("waits.stderr") << "\ncounters " << c0.dump() << " / " << c1.dump()
                           << "\n/proc tasks before:\n" << t0 << "after:\n" << t1);
    CHECK(guest().notes.at("waits.qscope-exit") == "0");
    REQUIRE(s.is_object());
    REQUIRE(c0.is_object());
    REQUIRE(c1.is_object());
    json worker;
    for (const auto& g : s["thread_groups"])
        if (g["name"] == "qs-worker") worker = g;
    REQUIRE(worker.is_object());
    INFO("qs-worker: " << worker.dump());
    CHECK(worker["threads"] == N);
    const int by_futex = worker["blocked_by"].value("futex", 0);
    const int by_read = worker["blocked_by"].value("read", 0);
    // The server's own count of waiters at the gate, before and after the snapshot.
    const int w0 = c0["pool_waiters"], w1 = c1["pool_waiters"];
    // Workers caught between the gate and a read at the snapshot's instant: on a CPU, or
    // reading their client's next request (a read beyond the pool's K). Under TCG such a
    // hand-off lasts long enough to be caught (6.12, once: 3 in futex, 4 in read, 1 runnable),
    // so the gate may read fewer than N - K by as many; never more.
    const int on_cpu = worker.value("runnable", 0) + worker.value("running", 0);
    const int in_transit = on_cpu + std::max(0, by_read - K);
    INFO("in transit: " << in_transit);
    CHECK(by_futex <= N - K + 1);
    CHECK(by_futex + in_transit >= N - K - 1);
    CHECK(by_futex + in_transit >= std::min(w0, w1) - 1);
    CHECK(by_futex <= std::max(w0, w1) + 1);
    // /proc/PID/task/*/syscall, before and after.
    // A point sample, taken beside the snapshot rather than at its instant: under TCG a worker
    // returning its pool connection sits in the pool's futex long enough for /proc to catch
    // 7 or 8 "in futex" while the server counts 5 waiters (seen once in CI). Compared only
    // when the sample agrees with the server's own count at that moment.
    const int p0 = threads_in(t0, "qs-worker", kFutex), p1 = threads_in(t1, "qs-worker", kFutex);
    if (std::abs(p0 - w0) <= 1 && std::abs(p1 - w1) <= 1) {
        CHECK(by_futex + in_transit >= std::min(p0, p1) - 1);
        CHECK(by_futex <= std::max(p0, p1) + 1);
    } else {
        std::printf("kernel-matrix: /proc caught workers mid-hand-off (%d, %d in futex; server: %d, %d waiters): "
                    "not compared\n", p0, p1, w0, w1);
    }
    // The K readers of the peer: blocked in read, or between two reads. Under TCG a reply's
    // wakeup can leave two of them runnable or running at the snapshot's instant (6.12, once:
    // 1 in read, 1 runnable, 1 running, while /proc showed 3 in read before and after).
    CHECK(by_read <= K + 1);
    CHECK(by_read + on_cpu >= K - 1);
    int gate = 0;
    for (const auto& w : s["waits"])
        if (w["group"] == "qs-worker" && w["syscall"] == "futex") gate += w.value("waiters_now", 0);
    CHECK(gate <= N - K + 1);
    CHECK(gate + in_transit >= N - K - 1);
    // Every family's hooks in probe_attach, against the guest kernel's own tracefs listing.
    std::printf("kernel-matrix: waits snapshot, every hook:\n%s", attach_summary(s).c_str());
    for (const char* tp : {"sched_switch", "sched_wakeup", "sched_wakeup_new"})
        CHECK(attach_of(s, tp, "sched") == std::string("tp_btf ") + tp);
    CHECK(attach_of(s, "task", "sched") == "iterator iter.s/task");
    CHECK(attach_of(s, "sched_process_fork", "tree") == "tp_btf sched_process_fork");
    CHECK(attach_of(s, "sched_process_exit", "tree") == "tp_btf sched_process_exit");
    std::istringstream polls(block_text("poll-tracepoints"));
    int listed = 0;
    for (std::string ev; polls >> ev; listed++)
        CHECK(attach_of(s, ev, "sched") == "tracepoint syscalls/" + ev);
    CHECK(listed >= 12);  // epoll_wait, epoll_pwait, epoll_pwait2, poll, ppoll, select, pselect6 (and io_uring_enter where built in)
    CHECK(attach_of(s, "JVM_VirtualThreadPinnedEvent", "jvm") == "none ");  // qs_server is no JVM
}

TEST_CASE("kernel matrix: lockdown is named; integrity still runs, confidentiality cannot", "[kernel-matrix][lockdown]") {
    for (const std::string mode : {"integrity", "confidentiality"}) {
        const Guest g = boot("check_run.sh", mode);
        if (!booted(g)) continue;
        const auto text = [&](const std::string& b) { return g.blocks.count(b) ? g.blocks.at(b) : ""; };
        INFO(mode << "\ncheck:\n" << text("check") << "\nstderr: " << text("stderr"));
        // Oracle: the kernel's own lockdown file shows the mode in brackets.
        CHECK(g.notes.at("lockdown-file").find("[" + mode + "]") != std::string::npos);
        CHECK(text("check").find("kernel lockdown: " + mode) != std::string::npos);
        if (mode == "integrity") {
            CHECK(g.notes.at("check-exit") == "0");
            CHECK(g.notes.at("snapshot-exit") == "0");
            const json s = json::parse(text("snapshot"), nullptr, false);
            REQUIRE(s.is_object());
            bool named = false;
            for (const auto& w : s["warnings"]) named |= w.get<std::string>().find("kernel lockdown: integrity") == 0;
            CHECK(named);
        } else {
            CHECK(g.notes.at("check-exit") == "5");
            CHECK(g.notes.at("snapshot-exit") == "5");
            CHECK(text("stderr").find("kernel lockdown: confidentiality") != std::string::npos);
        }
    }
}

// Below the floor (Debian 11's 5.10, ctest kernel-matrix.debian11-5.10): the kernel's verifier
// refuses qscope's objects, and qscope must say so with the release it needs, in `check` and at
// start, never "can run" (a check that said so while every load failed was found here).
TEST_CASE("kernel matrix: below the BPF floor, check and a run name what the kernel lacks", "[floor]") {
    const Guest g = boot("check_run.sh", "");
    if (!booted(g)) return;
    const auto text = [&](const std::string& b) { return g.blocks.count(b) ? g.blocks.at(b) : ""; };
    INFO("check:\n" << text("check") << "\nstderr: " << text("stderr"));
    std::printf("kernel-matrix: guest %s\n%s\nsnapshot stderr:\n%s", g.notes.at("uname").c_str(),
                text("check").c_str(), text("stderr").c_str());
    // Oracle: the kernel's own verifier refused the tree's object on its atomics (libbpf's log).
    CHECK(text("stderr").find("BPF_STX uses reserved fields") != std::string::npos);
    CHECK(g.notes.at("snapshot-exit") == "5");
    CHECK(text("stderr").find("lacks atomic fetch-and-op and compare-exchange instructions (Linux 5.12+)") !=
          std::string::npos);
    CHECK(g.notes.at("check-exit") == "5");
    CHECK(text("check").find("Verdict: qscope cannot run here") != std::string::npos);
    for (const char* need : {"atomic fetch-and-op and compare-exchange instructions (Linux 5.12+): missing",
                             "bpf_task_pt_regs (Linux 5.15+): missing", "bpf_skc_to_unix_sock (Linux 5.16+): missing"})
        CHECK(text("check").find(need) != std::string::npos);
}
