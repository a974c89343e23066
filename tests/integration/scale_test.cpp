// Issue 9, load: 10,000 concurrent connections and ≥ 5,000 new connections/s tracked, and a
// connection table too small for the load counted, never silent. Oracles: `ss` (established
// sockets on the port), qs_server's own accepted/completed counters, qs_load's own tally, and
// the kernel's view of qscope's `conns` map (bpftool map dump).
// Ports 25100-25199.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <dirent.h>
#include <fstream>
#include <sstream>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

// 10,000 sockets in the load generator and as many in the server: raise the limit in this
// process, children inherit it. Root may raise the hard limit too.
void raise_nofile(rlim_t want) {
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur >= want) return;
    rlimit nl{want, std::max(want, rl.rlim_max)};
    if (setrlimit(RLIMIT_NOFILE, &nl) != 0) {
        nl = {rl.rlim_max, rl.rlim_max};
        setrlimit(RLIMIT_NOFILE, &nl);
    }
}

// Established sockets whose local port is `port`: the server's side of each connection.
long established(uint16_t port) {
    const std::string out =
        sh("ss -Htn state established '( sport = :" + std::to_string(port) + " )' | wc -l");
    return std::strtol(out.c_str(), nullptr, 10);
}

bool wait_established(uint16_t port, long want, double timeout) {
    const double until = now_s() + timeout;
    while (now_s() < until) {
        if (established(port) >= want) return true;
        sleep_s(0.1);
    }
    return false;
}

std::string shm_path(const std::string& name) {
    return "/dev/shm/qscope-scale-" + std::to_string(getpid()) + "-" + name + ".json";
}

long counter(const std::string& path, const char* name) {
    const json c = read_counters(path);
    return c.is_object() && c.contains(name) ? c[name].get<long>() : -1;
}

// A sample "name value" (no labels) from a Prometheus text exposition, or NaN.
double metric(const std::string& text, const std::string& name) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(name + " ", 0) == 0) return std::strtod(line.c_str() + name.size() + 1, nullptr);
    }
    return NAN;
}

// Entries in the `conns` map held by process `pid`: its fds' fdinfo name the map ids, bpftool
// names and dumps them. -1 when not found.
long conns_map_entries(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
    DIR* d = opendir(dir.c_str());
    if (!d) return -1;
    std::vector<long> ids;
    while (dirent* e = readdir(d)) {
        std::ifstream f(dir + "/" + e->d_name);
        std::string line;
        while (std::getline(f, line))
            if (line.rfind("map_id:", 0) == 0) ids.push_back(std::strtol(line.c_str() + 7, nullptr, 10));
    }
    closedir(d);
    for (long id : ids) {
        const json show = json::parse(sh("bpftool -j map show id " + std::to_string(id) + " 2>/dev/null"), nullptr, false);
        if (!show.is_object() || show.value("name", "") != "conns") continue;
        const json dump = json::parse(sh("bpftool -j map dump id " + std::to_string(id) + " 2>/dev/null"), nullptr, false);
        return dump.is_array() ? static_cast<long>(dump.size()) : -1;
    }
    return -1;
}

json listener_on(const json& snap, uint16_t port) {
    for (const auto& l : snap["listeners"])
        if (l["port"].get<int>() == port) return l;
    return json();
}

Proc start_snapshot(pid_t pid, double duration, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {qscope_bin(), "snapshot", "--pid", std::to_string(pid), "--duration",
                                     std::to_string(duration), "--json", "--no-threads"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return spawn(argv);
}

json finish_snapshot(Proc& p, double timeout) {
    const int rc = p.wait(timeout);
    INFO("qscope stderr: " << p.err());
    REQUIRE(rc == 0);
    return qscope_json(p.out());
}

std::string scrape(uint16_t port) { return http_get("127.0.0.1", port, "/metrics", 5); }

// /metrics once the exporter has taken a snapshot at least `ticks` refreshes after now.
std::string fresh_metrics(uint16_t port, double ticks_seconds) {
    sleep_s(ticks_seconds);
    return scrape(port);
}

}  // namespace

TEST_CASE("10000 concurrent connections: tracked live and seeded; equal to ss", "[scale][integration]") {
    if (!require_root()) return;
    raise_nofile(65536);
    const uint16_t port = 25110, mport = 25111;
    const int n = 10000;
    const ScratchFile counters_file(shm_path("conc"));
    const std::string& counters = counters_file.path;
    // 64 workers serve; the acceptor takes every connection regardless (they wait for a
    // worker in the server's own queue, accepted and open).
    require_free_port(port);
    auto srv = start_target("qs_server", {"--port", std::to_string(port), "--workers", "64", "--backlog", "4096",
                                          "--counters-file", counters});
    // Live: attached before the first connection, it sees every handshake.
    require_free_port(mport);
    auto exp = spawn({qscope_bin(), "export", "--pid", std::to_string(srv.proc.pid()), "--listen",
                      "127.0.0.1:" + std::to_string(mport), "--no-threads", "--interval", "0.5"});
    REQUIRE(wait_attached(exp.pid(), 20));
    REQUIRE(wait_for_port(mport, 10));

    auto load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(port),
                       "--connect-only", std::to_string(n), "--hold", "40"});
    INFO("load: " << load.out() << load.err());
    REQUIRE(wait_established(port, n, 30));
    const double until = now_s() + 10;
    while (counter(counters, "accepted") < n && now_s() < until) sleep_s(0.1);
    REQUIRE(counter(counters, "accepted") == n);

    const std::string m = fresh_metrics(mport, 1.5);
    const long ss_now = established(port);
    INFO("ss established " << ss_now << "\n" << m.substr(0, 2000));
    REQUIRE(ss_now == n);
    CHECK(metric(m, "qscope_server_connections") == Approx(ss_now).margin(ss_now / 100.0));
    CHECK(metric(m, "qscope_lost_events_total") == 0);
    // Every connection in the table, and nothing else (the target makes no outbound ones).
    const long entries = conns_map_entries(exp.pid());
    std::printf("concurrent: ss established %ld; qscope_server_connections %.0f, lost %.0f, conns map entries %ld\n",
                ss_now, metric(m, "qscope_server_connections"), metric(m, "qscope_lost_events_total"), entries);
    CHECK(std::labs(entries - ss_now) <= ss_now / 100);

    // Seeded: attached after the connections exist, it finds them in the fd table.
    auto snap = start_snapshot(srv.proc.pid(), 1);
    const json s = finish_snapshot(snap, 60);
    const long ss_after = established(port);
    INFO(s["requests"].dump() << "\npartial " << s["partial"].dump() << "\nss " << ss_after);
    std::printf("concurrent, seeded: ss %ld; snapshot connections %ld, lost_events %ld\n", ss_after,
                s["requests"]["connections"].get<long>(), s["lost_events"].get<long>());
    CHECK(std::abs(s["requests"]["connections"].get<long>() - ss_after) <= ss_after / 100);
    CHECK(s["lost_events"].get<uint64_t>() == 0);
    CHECK(s["partial"].empty());

    load.kill_and_wait();
    exp.signal(SIGTERM);
    CHECK(exp.wait(10) == 0);
}

TEST_CASE("5000+ new connections per second: accepted and completed equal the server's; no leak", "[scale][integration]") {
    if (!require_root()) return;
    raise_nofile(65536);
    const uint16_t port = 25120;
    const ScratchFile counters_file(shm_path("churn"));
    const std::string& counters = counters_file.path;
    auto srv = start_target("qs_server", {"--port", std::to_string(port), "--workers", "16", "--keepalive=0",
                                          "--backlog", "4096", "--counters-file", counters});
    const double load_s = 6;
    // Long enough to outlive the load: the table is checked with qscope still attached.
    auto snap = start_snapshot(srv.proc.pid(), load_s + 7);
    REQUIRE(wait_attached(snap.pid(), 20));
    REQUIRE(counter(counters, "accepted") == 0);

    // Connect, one request, close: 7,000/s offered, open loop, on 32 client threads.
    const double t0 = now_s();
    auto load = run({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(port), "--connections",
                     "32", "--new-conn-per-request", "--rate", "7000", "--duration", std::to_string(load_s)},
                    load_s + 30);
    const double wall = now_s() - t0;
    REQUIRE(load.rc == 0);
    const size_t last = load.out.rfind("\n{");
    const json l = json::parse(last == std::string::npos ? load.out : load.out.substr(last + 1), nullptr, false);
    INFO("qs_load: " << load.out << load.err);
    REQUIRE(l.is_object());
    sleep_s(0.5);  // the server's counters file is rewritten every 10 ms
    const long accepted = counter(counters, "accepted"), completed = counter(counters, "completed");
    const double rate_load = l["rps"].get<double>();
    const double rate_server = completed / l["elapsed_seconds"].get<double>();
    std::printf("churn: qs_load %.0f conn/s (%ld requests, %ld errors) over %.2f s; server accepted %ld, "
                "completed %ld (%.0f/s); wall %.2f s\n",
                rate_load, l["requests"].get<long>(), l["errors"].get<long>(), l["elapsed_seconds"].get<double>(),
                accepted, completed, rate_server, wall);
    INFO("load " << l.dump() << "\nserver accepted " << accepted << " completed " << completed);
    // The machine's limit, if this fails, is in the line above.
    REQUIRE(rate_load >= 5000);
    REQUIRE(rate_server >= 5000);

    // No leak: everything closed, so the table holds what ss holds (nothing on this port).
    sleep_s(1.0);
    const long entries = conns_map_entries(snap.pid());
    const long ss_now = established(port);
    CHECK(entries >= 0);
    CHECK(entries == ss_now);

    const json s = finish_snapshot(snap, 30);
    const json lst = listener_on(s, port);
    REQUIRE(lst.is_object());
    INFO("listener " << lst.dump() << "\nrequests " << s["requests"].dump() << "\npartial " << s["partial"].dump());
    CHECK(lst["accepted"].get<long>() == accepted);
    CHECK(s["requests"]["completed"].get<long>() == completed);
    CHECK(s["requests"]["status"]["2xx"].get<long>() == completed);
    const long ss_end = established(port);
    std::printf("churn, after: ss established %ld; snapshot connections %ld, conns map entries %ld\n", ss_end,
                s["requests"]["connections"].get<long>(), entries);
    CHECK(s["requests"]["connections"].get<long>() == ss_end);
    CHECK(s["requests"]["in_flight"].get<long>() == 0);
    CHECK(s["lost_events"].get<uint64_t>() == 0);
    CHECK(s["partial"].empty());
}

TEST_CASE("connection table smaller than the load: the excess is counted exactly and marked partial",
          "[scale][integration]") {
    if (!require_root()) return;
    raise_nofile(65536);
    const uint16_t port = 25130, mport = 25131;
    const int n = 2000, table = 500;
    const ScratchFile counters_file(shm_path("full"));
    const std::string& counters = counters_file.path;
    require_free_port(port);
    auto srv = start_target("qs_server", {"--port", std::to_string(port), "--workers", "64", "--backlog", "4096",
                                          "--counters-file", counters});
    const std::string pid = std::to_string(srv.proc.pid());
    require_free_port(mport);
    auto exp = spawn({qscope_bin(), "export", "--pid", pid, "--listen", "127.0.0.1:" + std::to_string(mport),
                      "--no-threads", "--interval", "0.5", "--max-connections", std::to_string(table)});
    auto snap = start_snapshot(srv.proc.pid(), 12, {"--max-connections", std::to_string(table)});
    REQUIRE(wait_attached(exp.pid(), 20));
    REQUIRE(wait_attached(snap.pid(), 20));
    REQUIRE(wait_for_port(mport, 10));

    auto load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(port),
                       "--connect-only", std::to_string(n), "--hold", "30"});
    REQUIRE(wait_established(port, n, 20));
    const double until = now_s() + 10;
    while (counter(counters, "accepted") < n && now_s() < until) sleep_s(0.1);
    REQUIRE(counter(counters, "accepted") == n);
    const long ss_now = established(port);
    REQUIRE(ss_now == n);

    // Export: the table holds `table` of them; the rest are lost, each counted once.
    const std::string m = fresh_metrics(mport, 1.5);
    INFO(m.substr(0, 2000));
    const double tracked = metric(m, "qscope_server_connections");
    std::printf("table %d: ss %ld; qscope_server_connections %.0f, qscope_lost_events_total %.0f\n", table, ss_now,
                tracked, metric(m, "qscope_lost_events_total"));
    CHECK(tracked == table);
    CHECK(metric(m, "qscope_lost_events_total") == ss_now - tracked);
    CHECK(conns_map_entries(exp.pid()) == table);

    // Snapshot, attached before the load: same count, and the section says it is partial.
    const json s = finish_snapshot(snap, 30);
    INFO("requests " << s["requests"].dump() << "\npartial " << s["partial"].dump());
    CHECK(s["requests"]["connections"].get<long>() == table);
    CHECK(s["lost_events"].get<long>() == ss_now - table);
    REQUIRE(s["partial"].is_array());
    REQUIRE(s["partial"].size() == 1);
    const std::string why = s["partial"][0].get<std::string>();
    CHECK(why.find(std::to_string(ss_now - table) + " connections not tracked") != std::string::npos);
    CHECK(why.find("--max-connections " + std::to_string(table)) != std::string::npos);
    // The listener's accepted figure is one of the affected numbers: below the server's.
    CHECK(listener_on(s, port)["accepted"].get<long>() == table);

    // Seeded: attached to the 2,000 already open, the walk fills the table and counts the rest.
    auto seeded = start_snapshot(srv.proc.pid(), 1, {"--max-connections", std::to_string(table)});
    const json s2 = finish_snapshot(seeded, 30);
    INFO("seeded requests " << s2["requests"].dump() << "\npartial " << s2["partial"].dump());
    CHECK(s2["requests"]["connections"].get<long>() == table);
    CHECK(s2["lost_events"].get<long>() == established(port) - table);
    CHECK(s2["partial"].size() == 1);

    load.kill_and_wait();
    exp.signal(SIGTERM);
    CHECK(exp.wait(10) == 0);
    // The exporter's operator reads the cause on its stderr (/metrics has the count alone).
    INFO("export stderr: " << exp.err());
    CHECK(exp.err().find("events lost since attach (qscope_lost_events_total), incomplete: sock: ") != std::string::npos);
    CHECK(exp.err().find("connections not tracked") != std::string::npos);
}
