// Arrivals scoped to the target's cgroup (--scope, docs/kernel.md "Scoped to the target's
// cgroup"). Oracles: the kernel's own per-program run counts (bpf_stats, `bpftool prog show`)
// say which processes ran the arrival program; a second qscope on the global hook, attached to
// the same load at the same time, says what the numbers should be; /metrics and the JSON say
// which mode is active and why.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <memory>

#include "harness.h"
#include "sys/proc_table.h"

using namespace qs_test;
using nlohmann::json;

namespace {

constexpr uint16_t kExportPort = 26481;

// A cgroup v2 directory of the test's own, removed (once its processes are gone) at the end.
struct Cgroup {
    std::string path;  // as /proc/PID/cgroup names it
    std::string dir;   // on the cgroup2 mount
    explicit Cgroup(const std::string& name) {
        const auto mount = qscope::cgroup2_mount();
        if (!mount) return;
        const auto home = qscope::proc_cgroup_v2(getpid()).value_or("/");
        path = (home == "/" ? "" : home) + "/" + name + "-" + std::to_string(getpid());
        dir = *mount + path;
        if (mkdir(dir.c_str(), 0755) != 0) dir.clear();
    }
    ~Cgroup() {
        for (int i = 0; !dir.empty() && i < 40 && rmdir(dir.c_str()) != 0; ++i) sleep_s(0.05);
    }
    bool ok() const { return !dir.empty(); }
    void move(pid_t pid) const { std::ofstream(dir + "/cgroup.procs") << pid << std::flush; }
    // argv run in this cgroup from its first instruction, so every socket it makes is charged here.
    std::vector<std::string> wrap(const std::vector<std::string>& argv) const {
        std::vector<std::string> w = {"sh", "-c", "echo $$ > '" + dir + "/cgroup.procs' && exec \"$@\"", "sh"};
        w.insert(w.end(), argv.begin(), argv.end());
        return w;
    }
};

Server server_in(const Cgroup& cg, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {target_bin("qs_server"), "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    Server s;
    s.proc = spawn(cg.wrap(argv));
    const std::string line = s.proc.wait_for_output("READY port=", 10);
    if (line.empty()) throw std::runtime_error("qs_server did not become ready: " + s.proc.err());
    s.port = static_cast<uint16_t>(std::atoi(line.c_str() + line.find("port=") + 5));
    return s;
}

// The sock_scope info series of an exporter's /metrics, or "".
std::string scope_series() {
    for (const auto& [k, v] : parse_metrics(http_get("127.0.0.1", kExportPort, "/metrics")))
        if (k.rfind("qscope_sock_scope_info{", 0) == 0 && v == 1) return k;
    return "";
}

std::string wait_scope_series(const std::string& needle, double timeout) {
    std::string s;
    for (const double end = now_s() + timeout; now_s() < end; sleep_s(0.2)) {
        s = scope_series();
        if (s.find(needle) != std::string::npos) break;
    }
    return s;
}

// Run counts of the programs qscope (pid) holds, by name; bpf_stats must be on.
std::map<std::string, uint64_t> run_counts(pid_t pid) {
    std::set<long> ids;
    const std::string fdinfo = "/proc/" + std::to_string(pid) + "/fdinfo";
    for (const auto& e : std::filesystem::directory_iterator(fdinfo)) {
        const std::string t = read_text(e.path());
        if (const auto p = t.find("prog_id:"); p != std::string::npos) ids.insert(std::stol(t.substr(p + 8)));
    }
    std::map<std::string, uint64_t> out;
    const json all = json::parse(sh("bpftool prog show -j"), nullptr, false);
    for (const auto& p : all)
        if (p.is_object() && ids.count(p.value("id", -1L))) out[p.value("name", "")] += p.value("run_cnt", 0ull);
    return out;
}

// kernel.bpf_stats_enabled on for the test's life (programs count their runs), then as it was.
struct BpfStats {
    std::string was = read_text("/proc/sys/kernel/bpf_stats_enabled");
    BpfStats() { std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << "1"; }
    ~BpfStats() { std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << (was.empty() ? "0" : was.substr(0, 1)); }
};

}  // namespace

TEST_CASE("a server in a cgroup of its own: only its sockets run the arrival program", "[scope][integration]") {
    if (!require_root()) return;
    Cgroup cg("qs-scope");
    if (!cg.ok()) return skip("no cgroup v2 mount to make a cgroup in");
    BpfStats stats;
    Server target = server_in(cg, {"--workers", "4", "--service-ms", "20"});
    Server other = start_target("qs_server", {"--port", "0", "--workers", "4", "--service-ms", "1"});

    Proc exporter = spawn({qscope_bin(), "export", "--pid", std::to_string(target.proc.pid()), "--listen",
                           "127.0.0.1:" + std::to_string(kExportPort)});
    REQUIRE(wait_attached(exporter.pid(), 30));
    const std::string series = wait_scope_series("mode=\"cgroup\"", 10);
    INFO("exporter stderr: " << exporter.err());
    CHECK(series == "qscope_sock_scope_info{mode=\"cgroup\",cgroup=\"" + cg.path + "\",reason=\"\"}");

    // Traffic on the other server: the global read hook runs, the arrival program does not.
    const auto before = run_counts(exporter.pid());
    REQUIRE(before.count("qs_arrival_skb"));
    REQUIRE(run({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(other.port), "--connections",
                 "8", "--duration", "2"},
                20)
                .rc == 0);
    const auto other_load = run_counts(exporter.pid());
    INFO("run counts before " << json(before).dump() << " after the other server's load " << json(other_load).dump());
    CHECK(other_load.at("qs_recv") > before.at("qs_recv") + 1000);
    CHECK(other_load.at("qs_arrival_skb") == before.at("qs_arrival_skb"));

    // Traffic on the target: it does.
    REQUIRE(run({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(target.port), "--connections",
                 "8", "--duration", "1"},
                20)
                .rc == 0);
    const auto target_load = run_counts(exporter.pid());
    INFO("after the target's load " << json(target_load).dump());
    CHECK(target_load.at("qs_arrival_skb") > other_load.at("qs_arrival_skb") + 100);
}

// Two qscopes on the same load at the same time, one per mode, over `seconds`.
std::pair<json, json> both_modes(pid_t target, int seconds) {
    const auto snap = [&](const std::string& scope) {
        return spawn({qscope_bin(), "snapshot", "--pid", std::to_string(target), "--scope", scope, "--duration",
                      std::to_string(seconds), "--json"});
    };
    Proc scoped = snap("cgroup"), global = snap("global");
    REQUIRE(scoped.wait(40) == 0);
    REQUIRE(global.wait(40) == 0);
    std::pair<json, json> out{qscope_json(scoped.out(), false), qscope_json(global.out(), false)};
    REQUIRE(out.first.is_object());
    REQUIRE(out.second.is_object());
    return out;
}

TEST_CASE("the scoped and the global arrivals agree on the same load", "[scope][integration]") {
    if (!require_root()) return;
    Cgroup cg("qs-scope");
    if (!cg.ok()) return skip("no cgroup v2 mount to make a cgroup in");
    {
        // 24 clients, a new connection per request, on 4 workers: ~20 requests wait unread at any
        // moment, each an arrival in the window.
        Server target = server_in(cg, {"--workers", "4", "--service-ms", "30"});
        Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(target.port),
                           "--connections", "24", "--duration", "10", "--new-conn-per-request"});
        sleep_s(1);
        const auto [s, g] = both_modes(target.proc.pid(), 4);
        REQUIRE(sock_attach_row(s, "sk_data_ready"));
        CHECK((*sock_attach_row(s, "sk_data_ready"))["attach"] == "cgroup_skb");
        CHECK((*sock_attach_row(s, "sk_data_ready"))["via"] == cg.path);
        REQUIRE(sock_attach_row(g, "cgroup_skb/ingress"));
        CHECK((*sock_attach_row(g, "cgroup_skb/ingress"))["off"] == "--scope global");
        const json& sr = s["requests"];
        const json& gr = g["requests"];
        INFO("scoped " << sr.dump() << "\nglobal " << gr.dump());
        // The same events, seen from the segment or from the queue: the maxima of one window.
        CHECK(sr["waiting_unread_max"].get<int>() >= 12);
        CHECK(std::abs(sr["waiting_unread_max"].get<int>() - gr["waiting_unread_max"].get<int>()) <= 2);
        CHECK(sr["in_flight_max"] == gr["in_flight_max"]);
        // A request's wait unread starts at its arrival: both see the ~150 ms one waits here.
        CHECK(sr["oldest_unread_seconds"].get<double>() > 0.05);
        CHECK(sr["oldest_unread_seconds"].get<double>() < 1);
        CHECK(std::abs(sr["oldest_unread_seconds"].get<double>() - gr["oldest_unread_seconds"].get<double>()) < 0.1);
    }
    {
        // Workers that accept slowly: the accept queue fills, its peak seen from the handshake's
        // last segment or from the queue.
        Server target = server_in(cg, {"--workers", "4", "--service-ms", "30", "--accept-delay-ms", "10"});
        Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(target.port),
                           "--connections", "24", "--duration", "6", "--new-conn-per-request"});
        sleep_s(1);
        const auto [s, g] = both_modes(target.proc.pid(), 3);
        REQUIRE(s["listeners"].size() == 1);
        REQUIRE(g["listeners"].size() == 1);
        const int sq = s["listeners"][0]["accept_queue_max"], gq = g["listeners"][0]["accept_queue_max"];
        INFO("accept_queue_max scoped " << sq << ", global " << gq);
        CHECK(sq >= 12);
        CHECK(std::abs(sq - gq) <= 2);
    }
}

TEST_CASE("a listener made in another cgroup keeps arrivals global; --scope cgroup says why", "[scope][integration]") {
    if (!require_root()) return;
    Cgroup cg("qs-scope");
    if (!cg.ok()) return skip("no cgroup v2 mount to make a cgroup in");
    // Bound here, then moved: the listener stays charged to the cgroup it was made in, as with
    // systemd socket activation.
    Server target = start_target("qs_server", {"--port", "0", "--workers", "2"});
    cg.move(target.proc.pid());
    REQUIRE(qscope::proc_cgroup_v2(target.proc.pid()) == cg.path);

    const RunResult a = run_qscope({"snapshot", "--pid", std::to_string(target.proc.pid()), "-d", "1", "--json"}, 30);
    REQUIRE(a.rc == 0);
    REQUIRE(sock_attach_row(a.json, "sk_data_ready"));
    CHECK((*sock_attach_row(a.json, "sk_data_ready"))["attach"] == "tp_btf");
    REQUIRE(sock_attach_row(a.json, "cgroup_skb/ingress"));
    const std::string why = (*sock_attach_row(a.json, "cgroup_skb/ingress"))["off"];
    CHECK(why.find("listener 127.0.0.1:" + std::to_string(target.port) + " is charged to another cgroup") !=
          std::string::npos);

    const RunResult c = run_qscope({"snapshot", "--pid", std::to_string(target.proc.pid()), "-d", "1", "--scope", "cgroup"}, 30);
    CHECK(c.rc == 2);
    CHECK(c.err.find("--scope cgroup: the target's listener 127.0.0.1:" + std::to_string(target.port)) !=
          std::string::npos);
}

TEST_CASE("arrivals go back to the global hook when the target opens a Unix listener", "[scope][integration]") {
    if (!require_root()) return;
    Cgroup cg("qs-scope");
    if (!cg.ok()) return skip("no cgroup v2 mount to make a cgroup in");
    const std::string dir = temp_dir("qs-scope");
    // A TCP server that, on SIGUSR1, also listens on a Unix socket.
    const std::string py =
        "import socket, signal\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n"
        "keep = []\n"
        "def usr1(*a):\n"
        "    u = socket.socket(socket.AF_UNIX); u.bind('" + dir + "/u.sock'); u.listen(8); keep.append(u)\n"
        "    print('UNIX', flush=True)\n"
        "signal.signal(signal.SIGUSR1, usr1)\n"
        "print('READY port=%d' % s.getsockname()[1], flush=True)\n"
        "while True: keep.append(s.accept()[0])\n";
    Proc target = spawn(cg.wrap({"python3", "-c", py}));
    REQUIRE(!target.wait_for_output("READY port=", 10).empty());

    Proc exporter = spawn({qscope_bin(), "export", "--pid", std::to_string(target.pid()), "--listen",
                           "127.0.0.1:" + std::to_string(kExportPort)});
    REQUIRE(wait_attached(exporter.pid(), 30));
    INFO("exporter stderr: " << exporter.err());
    CHECK(wait_scope_series("mode=\"cgroup\"", 10).find(cg.path) != std::string::npos);
    target.signal(SIGUSR1);
    REQUIRE(!target.wait_for_output("UNIX", 5).empty());
    const std::string after = wait_scope_series("mode=\"global\"", 10);
    CHECK(after.find("reason=\"the target now listens on a Unix-domain socket\"") != std::string::npos);
}

TEST_CASE("a target moved out of its cgroup, and the cgroup removed, stays scoped and counted",
          "[scope][integration]") {
    if (!require_root()) return;
    auto first = std::make_unique<Cgroup>("qs-scope-a");
    Cgroup second("qs-scope-b");
    if (!first->ok() || !second.ok()) return skip("no cgroup v2 mount to make a cgroup in");
    const std::string scoped = first->path;
    Server target = server_in(*first, {"--workers", "4", "--service-ms", "30"});

    Proc exporter = spawn({qscope_bin(), "export", "--pid", std::to_string(target.proc.pid()), "--listen",
                           "127.0.0.1:" + std::to_string(kExportPort)});
    REQUIRE(wait_attached(exporter.pid(), 30));
    INFO("exporter stderr: " << exporter.err());
    REQUIRE(wait_scope_series("mode=\"cgroup\"", 10).find(scoped) != std::string::npos);

    // Moved, then its first cgroup removed: the listener, and every connection accepted from it,
    // stay charged to the cgroup they were made in, whose programs the kernel keeps while they live.
    second.move(target.proc.pid());
    REQUIRE(qscope::proc_cgroup_v2(target.proc.pid()) == second.path);
    first.reset();
    struct stat st {};
    REQUIRE(stat((qscope::cgroup2_mount().value_or("") + scoped).c_str(), &st) != 0);

    Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(target.port),
                       "--connections", "24", "--duration", "6", "--new-conn-per-request"});
    double unread_max = 0;
    for (const double end = now_s() + 5; now_s() < end; sleep_s(0.25))
        for (const auto& [k, v] : parse_metrics(http_get("127.0.0.1", kExportPort, "/metrics")))
            if (k.rfind("qscope_requests_waiting_unread{", 0) == 0) unread_max = std::max(unread_max, v);
    // Still scoped (no listener was made elsewhere), and arrivals still seen: ~20 requests wait.
    CHECK(scope_series().find("mode=\"cgroup\"") != std::string::npos);
    CHECK(unread_max >= 8);
}

TEST_CASE("a host with no cgroup2 mount (cgroup v1 only): arrivals stay global and counted; --scope cgroup says why",
          "[scope][integration]") {
    if (!require_root()) return;
    Cgroup cg("qs-scope");
    if (!cg.ok()) return skip("no cgroup v2 mount to make a cgroup in");
    // The target in a cgroup of its own, where auto would scope; qscope in a mount namespace of
    // its own with the cgroup2 mount taken away: what a v1-only host shows it (/proc/mounts
    // without cgroup2; hybrid hosts mount it beside v1, as this one does).
    Server target = server_in(cg, {"--workers", "4", "--service-ms", "30"});
    const std::string mount = qscope::cgroup2_mount().value_or("");
    const auto in_v1_host = [&](const std::vector<std::string>& args) {
        std::vector<std::string> argv = {"unshare", "-m", "--propagation", "private", "sh", "-c",
                                         "umount -l \"$0\" && exec \"$@\"", mount, qscope_bin()};
        argv.insert(argv.end(), args.begin(), args.end());
        return run(argv, 40);
    };
    const std::string why = "no cgroup v2 hierarchy is mounted (a cgroup v1-only host)";
    Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(target.port),
                       "--connections", "24", "--duration", "6", "--new-conn-per-request"});
    sleep_s(1);
    const RunResult a = in_v1_host({"snapshot", "--pid", std::to_string(target.proc.pid()), "-d", "2", "--json"});
    INFO("stderr: " << a.err);
    REQUIRE(a.rc == 0);
    REQUIRE(sock_attach_row(a.json, "sk_data_ready"));
    CHECK((*sock_attach_row(a.json, "sk_data_ready"))["attach"] == "tp_btf");
    REQUIRE(sock_attach_row(a.json, "cgroup_skb/ingress"));
    CHECK((*sock_attach_row(a.json, "cgroup_skb/ingress"))["off"] == why);
    // The fallback sees the arrivals: 24 clients on 4 workers keep ~20 requests waiting unread.
    CHECK(a.json["requests"]["waiting_unread_max"].get<int>() >= 12);

    const RunResult c = in_v1_host({"snapshot", "--pid", std::to_string(target.proc.pid()), "-d", "1", "--scope", "cgroup"});
    CHECK(c.rc == 2);
    CHECK(c.err.find(why) != std::string::npos);
}
