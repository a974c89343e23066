// dashboards/alerts.yml against the real thing: the pool-gate scenario (qs_server, 4 workers
// and a pool of 2 connections to a 30 ms qs_downstream, under 12 keep-alive clients), `qscope
// export` on it, and a real Prometheus (Debian's) scraping it and evaluating the rules every
// second. The pool alert must fire, nothing else may; when the target exits, the target
// alert must fire and the pool alert must end. Oracles: Prometheus's /api/v1/alerts, and
// qs_server's own counters (workers really wait at the pool).
//
// Ports 18600-18699 belong to this test; Prometheus listens on 18690.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <set>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

constexpr uint16_t kServerPort = 18600, kDownstreamPort = 18601, kExportPort = 18664, kPrometheusPort = 18690;
// The production `for:` values (minutes) exceed this test's budget. The test's copy of the
// rules differs from dashboards/alerts.yml in those values only: every expression, label
// and annotation is the shipped one.
constexpr const char* kTestFor = "5s";

bool wait_for_metrics(uint16_t port, double timeout) {
    const double end = now_s() + timeout;
    while (now_s() < end) {
        if (http_get("127.0.0.1", port, "/metrics", 2).find("qscope_up 1") != std::string::npos) return true;
        sleep_s(0.2);
    }
    return false;
}

// Alerts by name: state ("pending"/"firing") and labels, from Prometheus's /api/v1/alerts.
struct Alert {
    std::string state;
    json labels, annotations;
};
std::map<std::string, Alert> alerts() {
    httplib::Client cli("127.0.0.1", kPrometheusPort);
    cli.set_connection_timeout(2, 0);
    cli.set_read_timeout(5, 0);
    std::map<std::string, Alert> out;
    auto res = cli.Get("/api/v1/alerts");
    if (!res || res->status != 200) return out;
    try {
        const json j = json::parse(res->body);
        for (const auto& a : j["data"]["alerts"])
            out[a["labels"]["alertname"].get<std::string>()] = {a["state"], a["labels"], a["annotations"]};
    } catch (...) {
    }
    return out;
}

std::set<std::string> firing(const std::map<std::string, Alert>& as) {
    std::set<std::string> out;
    for (const auto& [name, a] : as)
        if (a.state == "firing") out.insert(name);
    return out;
}

std::string names(const std::set<std::string>& s) {
    std::string out;
    for (const auto& n : s) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? "(none)" : out;
}

// Polls until `done(alerts)` holds or the timeout passes; returns the last answer.
template <class Pred>
std::map<std::string, Alert> wait_alerts(Pred done, double timeout) {
    const double end = now_s() + timeout;
    auto as = alerts();
    while (!done(as) && now_s() < end) {
        sleep_s(0.5);
        as = alerts();
    }
    return as;
}

}  // namespace

TEST_CASE("alerts: a real pool gate fires QscopePoolSaturated; the target's exit fires QscopeTargetDown",
          "[alerts]") {
    if (!require_root()) return;
    int rc = 0;
    sh("command -v prometheus >/dev/null", &rc);
    if (rc != 0) return skip("prometheus not installed (Debian package prometheus)");
    const double t0 = now_s();

    // ---- the rules, with short `for:` ---------------------------------------------------
    // Removed last, after every process below has stopped, also when a REQUIRE ends the test.
    struct ScratchDir {
        std::string path;
        ~ScratchDir() { sh("rm -rf " + path); }
    } scratch{temp_dir("qs-alerts")};
    const std::string& dir = scratch.path;
    {
        const std::string rules = read_text(source_dir() + "/dashboards/alerts.yml");
        const std::regex for_line(R"(\n( +)for: \S+)"), alert_line(R"(\n\s+- alert: )");
        auto count = [&](const std::regex& re) {
            return std::distance(std::sregex_iterator(rules.begin(), rules.end(), re), std::sregex_iterator());
        };
        REQUIRE(count(alert_line) >= 8);
        REQUIRE(count(for_line) == count(alert_line));  // every rule's `for:` is shortened
        std::ofstream(dir + "/alerts.yml") << std::regex_replace(rules, for_line, std::string("\n$1for: ") + kTestFor);
    }

    // ---- the pool-gate scenario -----------------------------------------------------------
    const std::string counters = "/dev/shm/qs-alerts-counters-" + std::to_string(getpid()) + ".json";
    ScratchFile counters_file(counters);
    auto downstream = start_target("qs_downstream", {"--port", std::to_string(kDownstreamPort), "--delay-ms", "30"});
    auto server = start_target("qs_server", {"--port", std::to_string(kServerPort), "--workers", "4", "--downstream",
                                             "127.0.0.1:" + std::to_string(kDownstreamPort), "--pool", "2",
                                             "--service-ms", "2", "--counters-file", counters});
    Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(kServerPort),
                       "--connections", "12", "--duration", "60"});
    {
        const json c = wait_for_pool_gate(counters, 10);
        INFO("qs_server counters: " << c.dump());
        REQUIRE(c.value("pool_waiters_max", 0) >= 1);  // workers really queue at the pool
    }

    // --verdict-window 2: the pool alert's 5 s `for:` then holds only if the verdict over the
    // last 2 s (record/recent.h, computed as a replay's window) names the pool at every scrape.
    Proc exporter = spawn({qscope_bin(), "export", "--pid", std::to_string(server.proc.pid()), "--listen",
                           "127.0.0.1:" + std::to_string(kExportPort), "--verdict-window", "2"});
    REQUIRE(wait_for_metrics(kExportPort, 20));

    {
        std::ofstream cfg(dir + "/prometheus.yml");
        cfg << "global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n  evaluation_interval: 1s\n"
               "rule_files: ['"
            << dir << "/alerts.yml']\n"
            << "scrape_configs:\n  - job_name: qscope\n    static_configs:\n      - targets: ['127.0.0.1:"
            << kExportPort << "']\n";
    }
    Proc prom = spawn({"prometheus", "--config.file=" + dir + "/prometheus.yml", "--storage.tsdb.path=" + dir + "/data",
                       "--web.listen-address=127.0.0.1:" + std::to_string(kPrometheusPort), "--log.level=warn"});

    // ---- the pool alert fires, and it is the only one ---------------------------------------
    const std::string instance = "127.0.0.1:" + std::to_string(kExportPort);
    const std::string pool = "pool to 127.0.0.1:" + std::to_string(kDownstreamPort);
    auto as = wait_alerts([](const auto& a) { return firing(a).count("QscopePoolSaturated"); }, 30);
    INFO("prometheus stderr: " << prom.err());
    INFO("exporter stderr: " << exporter.err());
    std::printf("alerts_test: firing after %.1f s: %s\n", now_s() - t0, names(firing(as)).c_str());
    std::fflush(stdout);
    REQUIRE(as.count("QscopePoolSaturated"));
    const Alert& a = as["QscopePoolSaturated"];
    CHECK(a.state == "firing");
    CHECK(a.labels.value("where", "") == pool);
    CHECK(a.labels.value("stage", "") == "gate");
    CHECK(a.labels.value("severity", "") == "critical");
    CHECK(a.labels.value("instance", "") == instance);
    CHECK(a.annotations.value("summary", "") == "Requests queue at the " + pool + " on " + instance);
    // No false alarm from the other rules on a healthy-but-queueing server: no overflows,
    // no 5xx, no carriers, no lost events, a live target.
    CHECK(firing(as) == std::set<std::string>{"QscopePoolSaturated"});

    // ---- the target exits: the exporter follows (status 6), the target alert fires ---------
    load.kill_and_wait();
    server.proc.signal(SIGTERM);
    REQUIRE(server.proc.wait(10) == 0);
    CHECK(exporter.wait(15) == 6);
    as = wait_alerts(
        [](const auto& a) { return firing(a).count("QscopeTargetDown") && !a.count("QscopePoolSaturated"); }, 25);
    std::printf("alerts_test: after the target exited, %.1f s: %s\n", now_s() - t0, names(firing(as)).c_str());
    std::fflush(stdout);
    REQUIRE(as.count("QscopeTargetDown"));
    CHECK(as["QscopeTargetDown"].state == "firing");
    CHECK(as["QscopeTargetDown"].labels.value("instance", "") == instance);
    CHECK(as["QscopeTargetDown"].labels.value("severity", "") == "warning");
    CHECK_FALSE(as.count("QscopePoolSaturated"));  // ended with the target, not 2 minutes later
    CHECK(firing(as) == std::set<std::string>{"QscopeTargetDown"});

    prom.signal(SIGTERM);
    prom.wait(15);
    const double took = now_s() - t0;
    std::printf("alerts_test: %.1f s in all\n", took);
    CHECK(took < 60);
}
