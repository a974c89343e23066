// Downstream peers (issue 3, `downstream`) on the real probes. Oracles: qs_server's own pool
// counters (pool_busy_max, completed, in_flight), qs_load's per-status counts, and `ss`
// (connections from the target to the peer). Ports 18200-18299.
#include <dirent.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

Proc start_snapshot(pid_t pid, double duration) {
    return spawn({qscope_bin(), "snapshot", "--pid", std::to_string(pid), "--duration", std::to_string(duration),
                  "--json", "--no-threads"});
}

json finish(Proc& p, double timeout) {
    const int rc = p.wait(timeout);
    INFO("qscope stderr: " << p.err());
    REQUIRE(rc == 0);
    return qscope_json(p.out());
}

json peer_of(const json& snap, const std::string& label) {
    for (const auto& d : snap["downstream"])
        if (d["peer"].get<std::string>() == label) return d;
    return json();
}

size_t connections_to(pid_t pid, uint16_t dport) {
    size_t n = 0;
    for (const auto& s : ss("dport = :" + std::to_string(dport)))
        if (s.state == "ESTAB")
            for (int p : s.pids) n += p == pid;
    return n;
}

std::string shm_path(const std::string& name) {
    return "/dev/shm/qscope-sock-ds-" + std::to_string(getpid()) + "-" + name + ".json";
}

}  // namespace

TEST_CASE("a K-connection pool opened before the attach: busy max K, call time, calls", "[sock][integration]") {
    if (!require_root()) return;
    const ScratchFile counters_file(shm_path("pool"));
    const std::string& counters = counters_file.path;
    auto ds = start_target("qs_downstream", {"--port", "18210", "--delay-ms", "20"});
    // 8 workers share 3 connections, opened at startup (before qscope attaches).
    auto srv = start_target("qs_server", {"--port", "18200", "--workers", "8", "--downstream", "127.0.0.1:18210",
                                          "--pool", "3", "--counters-file", counters});
    auto snap = start_snapshot(srv.proc.pid(), 6);
    REQUIRE(wait_attached(snap.pid(), 20));
    auto load = run({target_bin("qs_load"), "--host", "127.0.0.1", "--port", "18200", "--connections", "12",
                     "--duration", "3"},
                    30);
    REQUIRE(load.rc == 0);
    const size_t ss_conns = connections_to(srv.proc.pid(), 18210);
    const json s = finish(snap, 30);
    const json c = read_counters(counters);
    REQUIRE(c.is_object());
    const json d = peer_of(s, "127.0.0.1:18210");
    INFO(s["downstream"].dump() << "\nserver " << c.dump() << "\nss connections " << ss_conns);
    REQUIRE(d.is_object());
    CHECK(d["connections"].get<size_t>() == 3);
    CHECK(ss_conns == 3);
    CHECK(d["busy_max"].get<uint64_t>() == 3);
    CHECK(d["busy_max"].get<uint64_t>() == c["pool_busy_max"].get<uint64_t>());
    CHECK(d["busy"].get<uint64_t>() == 0);
    // Every request made exactly one call, all inside the window.
    CHECK(d["calls"].get<uint64_t>() == c["completed"].get<uint64_t>());
    CHECK(d["call_seconds"]["p50"].get<double>() == Approx(0.020).epsilon(0.10));
    CHECK(d["connect_failures"].get<uint64_t>() == 0);
    CHECK(d["resets"].get<uint64_t>() == 0);
}

TEST_CASE("a silent partner: every worker busy on it, the oldest call ages with wall time", "[sock][integration]") {
    if (!require_root()) return;
    const ScratchFile counters_file(shm_path("silent"));
    const std::string& counters = counters_file.path;
    auto ds = start_target("qs_downstream", {"--port", "18211", "--silent"});
    auto srv = start_target("qs_server", {"--port", "18201", "--workers", "4", "--downstream", "127.0.0.1:18211",
                                          "--downstream-per-request", "--counters-file", counters});
    // Two observers attached before the load, ending 2 s apart.
    auto a = start_snapshot(srv.proc.pid(), 4);
    auto b = start_snapshot(srv.proc.pid(), 6);
    REQUIRE(wait_attached(a.pid(), 20));
    REQUIRE(wait_attached(b.pid(), 20));
    const double t_load = now_s();
    auto load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", "18201", "--connections", "6",
                       "--duration", "8"});
    const json sa = finish(a, 30);
    const double ta = now_s();
    const json c = read_counters(counters);
    const size_t ss_conns = connections_to(srv.proc.pid(), 18211);
    const json sb = finish(b, 30);
    const double tb = now_s();
    load.kill_and_wait();
    const json da = peer_of(sa, "127.0.0.1:18211"), db = peer_of(sb, "127.0.0.1:18211");
    INFO("a " << da.dump() << "\nb " << db.dump() << "\nserver " << c.dump() << "\nss " << ss_conns);
    REQUIRE(da.is_object());
    REQUIRE(db.is_object());
    // 4 workers, each holding one request whose call never returns.
    CHECK(da["busy"].get<uint64_t>() == 4);
    CHECK(da["busy"].get<uint64_t>() == c["in_flight"].get<uint64_t>());
    CHECK(ss_conns == 4);
    CHECK(db["busy"].get<uint64_t>() == 4);
    CHECK(da["calls"].get<uint64_t>() == 0);
    const double grew = db["oldest_busy_seconds"].get<double>() - da["oldest_busy_seconds"].get<double>();
    CHECK(grew == Approx(tb - ta).margin(0.5));
    // The first calls went out as the load started (after both attached).
    CHECK(da["oldest_busy_seconds"].get<double>() == Approx(ta - t_load).margin(0.5));
}

TEST_CASE("connect failures to a closed port, counted per peer, not as resets", "[sock][integration]") {
    if (!require_root()) return;
    // Nothing listens on 18212: every call's connect is refused and the request answers 502.
    auto srv = start_target("qs_server", {"--port", "18202", "--workers", "2", "--downstream", "127.0.0.1:18212",
                                          "--downstream-per-request"});
    auto snap = start_snapshot(srv.proc.pid(), 4);
    REQUIRE(wait_attached(snap.pid(), 20));
    auto load = run({target_bin("qs_load"), "--host", "127.0.0.1", "--port", "18202", "--connections", "2",
                     "--duration", "1"},
                    30);
    REQUIRE(load.rc == 0);
    const json s = finish(snap, 30);
    const json ld = json::parse(load.out);
    const json d = peer_of(s, "127.0.0.1:18212");
    INFO(s["downstream"].dump() << "\nload " << load.out);
    REQUIRE(d.is_object());
    const uint64_t failed = ld["status"]["5xx"].get<uint64_t>();
    CHECK(failed > 0);
    CHECK(d["connect_failures"].get<uint64_t>() >= failed);
    CHECK(d["connect_failures"].get<uint64_t>() <= failed + ld["abandoned"].get<uint64_t>());
    CHECK(d["resets"].get<uint64_t>() == 0);
    CHECK(d["connections"].get<uint64_t>() == 0);
    CHECK(d["busy"].get<uint64_t>() == 0);
}

namespace {

// Polls the target's own counters until `key` reaches `want`; the time it did.
double wait_counter(const std::string& counters, const char* key, uint64_t want, double timeout_seconds) {
    const double end = now_s() + timeout_seconds;
    while (now_s() < end) {
        const json c = read_counters(counters);
        if (c.is_object() && c.contains(key) && c[key].get<uint64_t>() >= want) return now_s();
        sleep_s(0.02);
    }
    return -1;
}

}  // namespace

// Ports 26200-26299 (the helper's range). Oracle: the wall clock around the target's own
// counters. Calls/requests begin between `t_load` and the moment the counters show them all
// in progress (`t_stuck`); qscope attaches `T` s later, so a true start makes the oldest age at
// least `t_attach - t_stuck` and at most `t_done - t_load`; an age counted from the attach
// (the lower bound seeding used to give) is about the 1 s window.
TEST_CASE("attaching mid-spike: calls stuck before the attach keep their true age", "[sock][integration]") {
    if (!require_root()) return;
    const ScratchFile counters_file(shm_path("late"));
    const std::string& counters = counters_file.path;
    auto ds = start_target("qs_downstream", {"--port", "26211", "--silent"});
    auto srv = start_target("qs_server", {"--port", "26201", "--workers", "4", "--downstream", "127.0.0.1:26211",
                                          "--downstream-per-request", "--counters-file", counters});
    const double t_load = now_s();
    auto load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", "26201", "--connections", "6",
                       "--duration", "15"});
    const double t_stuck = wait_counter(counters, "in_flight", 4, 10);
    REQUIRE(t_stuck > 0);
    sleep_s(3);
    const double t_attach = now_s();
    auto snap = start_snapshot(srv.proc.pid(), 1);
    const json s = finish(snap, 60);
    const double t_done = now_s();
    load.kill_and_wait();
    const json d = peer_of(s, "127.0.0.1:26211");
    INFO(d.dump() << "\nsent within [" << 0 << ", " << t_stuck - t_load << "] s of the load, attach at +"
                  << t_attach - t_load << " s, done at +" << t_done - t_load << " s");
    REQUIRE(d.is_object());
    CHECK(d["busy"].get<uint64_t>() == 4);
    const double oldest = d["oldest_busy_seconds"].get<double>();
    CHECK(oldest >= t_attach - t_stuck - 0.05);
    CHECK(oldest <= t_done - t_load + 0.05);
}

TEST_CASE("attaching mid-request: requests read before the attach keep their true age", "[sock][integration]") {
    if (!require_root()) return;
    const ScratchFile counters_file(shm_path("late-in"));
    const std::string& counters = counters_file.path;
    auto srv = start_target("qs_server", {"--port", "26202", "--workers", "4", "--service-ms", "8000",
                                          "--counters-file", counters});
    const double t_load = now_s();
    auto load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", "26202", "--connections", "2",
                       "--duration", "6"});
    const double t_stuck = wait_counter(counters, "in_flight", 2, 10);
    REQUIRE(t_stuck > 0);
    sleep_s(2);
    const double t_attach = now_s();
    auto snap = start_snapshot(srv.proc.pid(), 1);
    const json s = finish(snap, 60);
    const double t_done = now_s();
    load.kill_and_wait();
    const json r = s["requests"];
    INFO(r.dump() << "\nread within [" << 0 << ", " << t_stuck - t_load << "] s of the load, attach at +"
                  << t_attach - t_load << " s, done at +" << t_done - t_load << " s");
    REQUIRE(r.is_object());
    // The 8 s requests outlive the snapshot only if it finished in time; otherwise say so.
    REQUIRE(t_done - t_load < 8);
    CHECK(r["in_flight"].get<uint64_t>() == 2);
    const double oldest = r["oldest_in_flight_seconds"].get<double>();
    CHECK(oldest >= t_attach - t_stuck - 0.05);
    CHECK(oldest <= t_done - t_load + 0.05);
}
