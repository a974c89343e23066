// Issue 20: retry amplification. The Tomcat app of tests/apps (its /retry servlet, no
// PostgreSQL: -Dqs.pg=none) answers each inbound request by three nested layers that each
// retry up to 3 times, so a partner that fails every call gets 3 × 3 × 3 = 27 calls per
// request, 26 of them retries. The partner is Debian's nginx answering 503 on /fail, with
// keep-alive, logging every request with its time ($msec). Load: wrk, 8 connections.
//
// Oracles, checked first (the scenario shows its story): the app's own counters (requests,
// leaf_calls, leaf_retries in its stats file) give 27 and 26 per request, and nginx's access
// log holds one line per leaf call the app counted over the same interval (5%).
// Then qscope's downstream[].fan_out for the partner, over its own window: calls and retries
// per failing request as the app's (±1), total retries per failing request as the app's
// (5%), calls in the window as the access log's in the same window (5%), every call failed,
// and the verdict's sentence. With virtual threads (a request's reads and writes may run on
// different carrier threads), qscope must not claim a per-request number: known is false and
// says why, and the verdict makes no such claim.
// Ports: 23081 (the app; the scenarios use 23080), 23091 (the partner).
#include <sys/stat.h>
#include <csignal>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <tuple>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

constexpr uint16_t kApp = 23081, kPartner = 23091;
constexpr int kAttempts = 3;
constexpr double kWindow = 5;  // qscope snapshot --duration
const std::string kPeer = "127.0.0.1:" + std::to_string(kPartner);

struct ScratchDir {
    std::string path;
    ~ScratchDir() {
        const char* keep = std::getenv("QS_SCENARIO_KEEP");
        if (keep && std::string(keep) == "1")
            std::printf("retry_test files kept in %s\n", path.c_str());
        else
            sh("rm -rf " + path);
    }
};

// The app compiled once per test binary (tests/apps/tomcat/build.sh: Temurin 25's javac);
// java and classpath empty when it could not be built (then `why` says why).
struct AppBuild {
    std::string dir, java, classpath, why;
    AppBuild() {
        dir = temp_dir("qs-retry-app");
        int rc = 0;
        const std::string o = sh(source_dir() + "/tests/apps/tomcat/build.sh " + dir + " 2>&1", &rc);
        if (rc != 0) {
            why = "the Tomcat app does not build (tests/apps/tomcat/build.sh: JDK 25, Debian's Tomcat jars): " + o;
            return;
        }
        std::istringstream in(read_text(dir + "/app.env"));
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("JAVA_HOME=", 0) == 0) java = line.substr(10) + "/bin/java";
            if (line.rfind("CLASSPATH=", 0) == 0) classpath = line.substr(10);
        }
        if (java.empty() || classpath.empty()) why = "build.sh wrote no JAVA_HOME/CLASSPATH: " + o;
    }
    ~AppBuild() { sh("rm -rf " + dir); }
};

AppBuild& app_build() {
    static std::unique_ptr<AppBuild> b(new AppBuild);
    return *b;
}

// The partner: nginx, one worker, 503 on /fail, connections kept for as many requests as the
// app sends. Its access log has one line per request: "$msec $status $connection".
std::string write_partner_conf(const std::string& prefix) {
    write_nginx_conf(prefix, 1,
                     "  log_format oracle '$msec $status $connection';\n"
                     "  access_log " + prefix + "/logs/access.log oracle;\n"
                     "  keepalive_timeout 120s;\n"
                     "  keepalive_requests 10000000;\n"
                     "  server {\n"
                     "    listen 127.0.0.1:" + std::to_string(kPartner) + " backlog=511;\n"
                     "    location /fail { return 503; }\n"
                     "    location / { return 404; }\n"
                     "  }\n");
    return prefix + "/logs/access.log";
}

struct LogEntry {
    double ms;  // unix milliseconds
    int status;
};

std::vector<LogEntry> read_access_log(const std::string& path) {
    std::vector<LogEntry> v;
    std::istringstream in(read_text(path));
    std::string line;
    while (std::getline(in, line)) {
        double sec = 0;
        int status = 0;
        if (std::sscanf(line.c_str(), "%lf %d", &sec, &status) == 2) v.push_back({sec * 1000, status});
    }
    return v;
}

// Entries logged in (from, to] (unix ms), and how many of them are 503s.
std::pair<long, long> log_between(const std::vector<LogEntry>& log, double from, double to) {
    long n = 0, n503 = 0;
    for (const auto& e : log)
        if (e.ms > from && e.ms <= to) {
            ++n;
            n503 += e.status == 503;
        }
    return {n, n503};
}

// The app's counters sampled nearest to unix time `ms` (the file is rewritten every 250 ms).
const json& stats_at(const std::vector<json>& samples, double ms) {
    const json* best = &samples.front();
    for (const auto& s : samples)
        if (std::abs(s["time_ms"].get<double>() - ms) < std::abs((*best)["time_ms"].get<double>() - ms)) best = &s;
    INFO("app counters sampled " << std::abs((*best)["time_ms"].get<double>() - ms) << " ms from the moment wanted");
    CHECK(std::abs((*best)["time_ms"].get<double>() - ms) < 400);
    return *best;
}

double retry_delta(const json& a, const json& b, const char* k) {
    return b["retry"][k].get<double>() - a["retry"][k].get<double>();
}

struct Observed {
    json qs;                     // qscope's snapshot
    json fan_out, peer;          // its downstream entry for the partner, and that entry's fan_out
    json app_a, app_b;           // the app's counters nearest to qscope's window start and end
    double requests = 0, leaf_calls = 0, leaf_retries = 0;  // the app's deltas over the window
    long log_app_window = 0;     // access-log entries between app_a and app_b
    long log_qs_window = 0, log_qs_503 = 0;  // access-log entries in qscope's own window
};

// The partner, the app in `profile` under wrk, qscope over a 5 s window in the middle.
// Returns false (after skip()) when the machine lacks what the scenario needs.
bool observe(const std::string& profile, Observed& o) {
    if (!require_root()) return false;
    const std::string nginx = find_nginx();
    if (nginx.empty() || sh("command -v wrk").empty()) {
        skip("nginx or wrk not installed (.ci/setup installs both)");
        return false;
    }
    struct stat st;
    REQUIRE(stat(qscope_bin().c_str(), &st) == 0);
    AppBuild& app = app_build();
    if (!app.why.empty()) {
        skip(app.why);
        return false;
    }

    for (const uint16_t port : {kApp, kPartner}) require_free_port(port);

    ScratchDir scratch{temp_dir("qs-retry-" + profile)};
    const std::string& dir = scratch.path;
    const std::string log = write_partner_conf(dir);
    Proc partner = spawn({nginx, "-c", dir + "/nginx.conf", "-p", dir});
    REQUIRE(wait_for_port(kPartner, 10));
    REQUIRE(nginx_worker(partner.pid(), 5) > 0);

    const std::string stats = dir + "/stats.json";
    Proc jvm = spawn({app.java, "-Xms256m", "-Xmx256m", "-Dqs.profile=" + profile, "-Dqs.port=" + std::to_string(kApp),
                      "-Dqs.pg=none", "-Dqs.retryPartner=" + kPeer, "-Dqs.retryAttempts=" + std::to_string(kAttempts),
                      "-Dqs.stats=" + stats, "-Dqs.baseDir=" + dir + "/tomcat-base", "-cp", app.classpath,
                      "qscope.scenario.ScenarioApp"});
    if (!wait_for_port(kApp, 30)) FAIL("the app does not listen on " << kApp << ":\n" << jvm.out() << jvm.err());
    REQUIRE(http_get("127.0.0.1", kApp, "/ping", 5) == "pong\n");
    // One request alone: 27 calls, 26 of them retries, answered 503.
    REQUIRE(http_get("127.0.0.1", kApp, "/retry", 20) == "retries exhausted\n");
    json first;
    for (const double end = now_s() + 3; now_s() < end; sleep_s(0.1)) {
        first = read_counters(stats);
        if (!first.is_null() && first["retry"]["failed"].get<long>() == 1) break;
    }
    REQUIRE(!first.is_null());
    INFO("the app's counters after one request: " << first.dump());
    REQUIRE(first["retry"]["requests"].get<long>() == 1);
    REQUIRE(first["retry"]["leaf_calls"].get<long>() == 27);
    REQUIRE(first["retry"]["leaf_retries"].get<long>() == 26);
    REQUIRE(first["retry"]["failed"].get<long>() == 1);

    // Load for longer than qscope can take to attach and observe; stopped when it is done.
    Proc wrk = spawn({"wrk", "-t1", "-c8", "-d45s", "http://127.0.0.1:" + std::to_string(kApp) + "/retry"});
    sleep_s(2);  // the JIT warms up; requests are in progress when qscope attaches, as in production
    Proc snap = spawn({qscope_bin(), "snapshot", "--pid", std::to_string(jvm.pid()), "--duration",
                       std::to_string(kWindow), "--json"});
    std::vector<json> samples;
    const double t0 = now_s();
    while (snap.running() && now_s() - t0 < 50) {
        const json s = read_counters(stats);
        if (!s.is_null() && (samples.empty() || s["time_ms"] != samples.back()["time_ms"])) samples.push_back(s);
        sleep_s(0.1);
    }
    const int rc = snap.wait(10);
    INFO("qscope stderr: " << snap.err());
    REQUIRE(rc == 0);
    sleep_s(0.5);  // one more sample of the app's counters past the window's end
    if (const json s = read_counters(stats); !s.is_null()) samples.push_back(s);
    REQUIRE(wrk.running());  // the load covered the whole window
    wrk.kill_and_wait();
    REQUIRE(samples.size() >= 10);

    o.qs = qscope_json(snap.out(), false);
    REQUIRE(o.qs.is_object());
    const double end = o.qs["taken_at_unix_ms"].get<double>();
    const double start = end - 1000 * o.qs["window_seconds"].get<double>();
    o.app_a = stats_at(samples, start);
    o.app_b = stats_at(samples, end);
    o.requests = retry_delta(o.app_a, o.app_b, "requests");
    o.leaf_calls = retry_delta(o.app_a, o.app_b, "leaf_calls");
    o.leaf_retries = retry_delta(o.app_a, o.app_b, "leaf_retries");
    const std::vector<LogEntry> entries = read_access_log(log);
    o.log_app_window =
        log_between(entries, o.app_a["time_ms"].get<double>(), o.app_b["time_ms"].get<double>()).first;
    std::tie(o.log_qs_window, o.log_qs_503) = log_between(entries, start, end);
    for (const auto& d : o.qs["downstream"])
        if (d.value("peer", "") == kPeer) o.peer = d;
    o.fan_out = o.peer.is_object() ? o.peer.value("fan_out", json()) : json();

    std::printf("[%s] oracles over qscope's window (%.1f s): app requests %.0f (failed %.0f, ok %.0f), leaf_calls "
                "%.0f (%.2f per request), leaf_retries %.0f (%.2f per request); partner's access log %ld lines between "
                "the same two app samples (%zu in all), %ld in qscope's window (%ld of them 503)\n",
                profile.c_str(), (end - start) / 1000, o.requests, retry_delta(o.app_a, o.app_b, "failed"),
                retry_delta(o.app_a, o.app_b, "ok"), o.leaf_calls, o.requests > 0 ? o.leaf_calls / o.requests : -1,
                o.leaf_retries, o.requests > 0 ? o.leaf_retries / o.requests : -1, o.log_app_window, entries.size(),
                o.log_qs_window, o.log_qs_503);
    std::printf("[%s] qscope: downstream %s: calls %s busy_max %s; fan_out %s\n[%s] qscope verdict [%s] %s — %s\n",
                profile.c_str(), kPeer.c_str(), o.peer.value("calls", json()).dump().c_str(),
                o.peer.value("busy_max", json()).dump().c_str(), o.fan_out.dump().c_str(), profile.c_str(),
                o.qs["verdict"].value("stage", "").c_str(), o.qs["verdict"].value("where", "").c_str(),
                o.qs["verdict"].value("summary", "").c_str());
    std::fflush(stdout);

    // ---- the scenario shows its story (oracles only) ----------------------------------------
    REQUIRE(o.requests >= 50);
    REQUIRE(retry_delta(o.app_a, o.app_b, "ok") == 0);
    REQUIRE(std::abs(o.leaf_calls / o.requests - 27) <= 1);
    REQUIRE(std::abs(o.leaf_retries / o.requests - 26) <= 1);
    REQUIRE(std::abs(o.log_app_window - o.leaf_calls) <= 0.05 * o.leaf_calls);
    REQUIRE(o.log_qs_503 == o.log_qs_window);

    partner.signal(SIGQUIT);
    partner.wait(10);
    return true;
}

double num(const json& j, const char* k) {
    INFO("fan_out." << k << " in " << j.dump());
    REQUIRE(j.contains(k));
    REQUIRE(j[k].is_number());
    return j[k].get<double>();
}

}  // namespace

TEST_CASE("retry amplification: each failing request makes 27 calls to the partner, 26 of them retries",
          "[retry][integration][tomcat]") {
    Observed o;
    if (!observe("platform", o)) return;
    REQUIRE(o.peer.is_object());
    REQUIRE(o.fan_out.is_object());
    const json& f = o.fan_out;
    INFO("fan_out: " << f.dump());
    REQUIRE(f.value("known", false) == true);
    CHECK_FALSE(f.contains("unknown_reason"));

    const double app_calls = o.leaf_calls / o.requests, app_retries = o.leaf_retries / o.requests;
    const double failing = num(f, "failing_requests");
    REQUIRE(failing > 0);
    const double calls_per = num(f, "failing_calls") / failing, retries_per = num(f, "failing_retries") / failing;
    const double p50 = num(f["per_request"], "p50");
    std::printf("[platform] per failing request: qscope %.2f calls, %.2f retries (p50 %.0f, p99 %s, max %s); the app "
                "%.2f calls, %.2f retries. Calls in qscope's window: qscope %.0f in requests + %.0f outside (%.0f "
                "moved), the partner's log %ld\n",
                calls_per, retries_per, p50, f["per_request"].value("p99", json()).dump().c_str(),
                f["per_request"].value("max", json()).dump().c_str(), app_calls, app_retries, num(f, "calls"),
                num(f, "calls_outside_requests"), num(f, "calls_moved"), o.log_qs_window);
    std::fflush(stdout);
    CHECK(std::abs(calls_per - app_calls) <= 1);
    CHECK(std::abs(retries_per - app_retries) <= 1);
    CHECK(std::abs(num(f, "retries") / failing - app_retries) <= 0.05 * app_retries);
    CHECK(std::abs(p50 - 27) <= 1);
    CHECK(num(f["per_request"], "max") >= p50);
    // every call got a 503 from the partner
    REQUIRE(num(f, "calls") > 0);
    CHECK(num(f, "failed_calls") / num(f, "calls") >= 0.95);
    CHECK(num(f, "failing_calls") <= num(f, "calls"));
    // the calls qscope saw in its window, against the partner's own log over the same window
    // (requests in progress at either edge move a few calls across it)
    const double seen = num(f, "calls") + num(f, "calls_outside_requests");
    CHECK(std::abs(seen - o.log_qs_window) <= 0.05 * o.log_qs_window);
    CHECK(num(f, "requests") >= failing);

    const std::string summary = o.qs["verdict"].value("summary", "");
    INFO("verdict summary: " << summary);
    std::smatch m;
    const std::regex said(R"(each failing request makes (\d+) calls? to 127\.0\.0\.1:23091 \((\d+) retr(?:y|ies)\))");
    REQUIRE(std::regex_search(summary, m, said));
    CHECK(std::abs(std::stoi(m[1]) - 27) <= 1);
    CHECK(std::abs(std::stoi(m[2]) - 26) <= 1);
}

TEST_CASE("retry amplification on virtual threads: no confident per-request number", "[retry][integration][tomcat]") {
    Observed o;
    if (!observe("virtual", o)) return;
    REQUIRE(o.peer.is_object());
    REQUIRE(o.fan_out.is_object());
    const json& f = o.fan_out;
    INFO("fan_out: " << f.dump());
    const std::string reason = f.value("unknown_reason", "");
    std::printf("[virtual] fan_out known %s, reason: %s\n", f.value("known", json()).dump().c_str(), reason.c_str());
    std::fflush(stdout);
    CHECK(f.value("known", true) == false);
    CHECK(!reason.empty());
    const std::string summary = o.qs["verdict"].value("summary", "");
    INFO("verdict summary: " << summary);
    CHECK(summary.find("each failing request makes") == std::string::npos);
}
