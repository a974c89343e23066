// The fleet view: per-instance limits add up across replicas. Two instances of a service
// (qs_server), each with a pool of 3 connections to one provider (qs_downstream), each under
// more load than its pool serves; one `qscope export` with a target per instance; a real
// Prometheus (Debian's) scraping it and evaluating dashboards/alerts.yml plus a budget rule.
// Oracles: the provider's own count of requests in progress (its --counters-file, sampled when
// Prometheus is queried) against the recording rule qscope:downstream_busy:sum_by_peer,
// within 10% in the median of the samples; the instances' own pool counters (3 busy each);
// Prometheus's /api/v1/alerts for QscopeFleetPeerOverBudget (budget 4 < 6 in use), with
// `for:` shortened to 3 s as alerts_test does.
// Ports 24500-24599 belong to this test.
#include <catch2/catch.hpp>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <regex>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

constexpr uint16_t kProvider = 24500, kWeb1 = 24501, kWeb2 = 24502, kExport = 24564, kProm = 24590;
constexpr int kPool = 3, kBudget = 4;

struct ScratchDir {
    std::string path;
    ~ScratchDir() { sh("rm -rf " + path); }
};

// Both services attached: each serves qscope_up 1 under its service label.
bool both_up(double timeout) {
    for (const double end = now_s() + timeout; now_s() < end; sleep_s(0.2)) {
        const std::string m = http_get("127.0.0.1", kExport, "/metrics", 2);
        if (m.find("qscope_up{service=\"web1\"} 1") != std::string::npos &&
            m.find("qscope_up{service=\"web2\"} 1") != std::string::npos)
            return true;
    }
    return false;
}

}  // namespace

TEST_CASE("fleet: concurrent calls to one provider summed over two instances, and the budget alert",
          "[fleet]") {
    if (!require_root()) return;
    if (!have_prometheus()) {
        skip("prometheus not installed (Debian package prometheus)");
        return;
    }
    ScratchDir scratch{temp_dir("qs-fleet")};
    const std::string& dir = scratch.path;
    const std::string peer = "127.0.0.1:" + std::to_string(kProvider);
    {
        const std::string rules = read_text(source_dir() + "/dashboards/alerts.yml");
        const std::regex for_line(R"(\n( +)for: \S+)");
        std::ofstream(dir + "/alerts.yml") << std::regex_replace(rules, for_line, std::string("\n$1for: 3s"));
        std::ofstream(dir + "/budget.yml") << "groups:\n  - name: budgets\n    rules:\n      - record: qscope_peer_budget\n"
                                               "        expr: vector("
                                            << kBudget << ")\n        labels: {peer: \"" << peer << "\"}\n";
    }

    const std::string provider_counters = "/dev/shm/qs-fleet-provider-" + std::to_string(getpid()) + ".json";
    const std::string web_counters[2] = {"/dev/shm/qs-fleet-web1-" + std::to_string(getpid()) + ".json",
                                         "/dev/shm/qs-fleet-web2-" + std::to_string(getpid()) + ".json"};
    ScratchFile f0(provider_counters), f1(web_counters[0]), f2(web_counters[1]);
    auto provider = start_target("qs_downstream", {"--port", std::to_string(kProvider), "--delay-ms", "40",
                                                   "--counters-file", provider_counters});
    std::vector<Server> webs;
    std::vector<Proc> loads;
    const uint16_t ports[2] = {kWeb1, kWeb2};
    for (int i = 0; i < 2; ++i) {
        webs.push_back(start_target("qs_server", {"--port", std::to_string(ports[i]), "--workers", "6", "--downstream",
                                                  peer, "--pool", std::to_string(kPool), "--counters-file",
                                                  web_counters[i]}));
        loads.push_back(spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(ports[i]),
                               "--connections", "6", "--duration", "40"}));
    }
    require_free_port(kExport);
    Proc exporter = spawn({qscope_bin(), "export", "--target", "web1=port:" + std::to_string(kWeb1), "--target",
                           "web2=port:" + std::to_string(kWeb2), "--listen", "127.0.0.1:" + std::to_string(kExport)});
    REQUIRE(both_up(30));
    Prometheus prom(kProm, {"127.0.0.1:" + std::to_string(kExport)}, {dir + "/alerts.yml", dir + "/budget.yml"});
    REQUIRE(wait_for_port(kProm, 20));

    // ---- the sum against the provider's own count, sampled together ----------------------
    const std::string sum_expr = "qscope:downstream_busy:sum_by_peer{peer=\"" + peer + "\"}";
    std::vector<double> fleet, provider_now;
    const double t0 = now_s();
    while (now_s() - t0 < 25 && fleet.size() < 12) {
        sleep_s(0.5);
        const json r = prom.query(sum_expr);
        const json c = read_counters(provider_counters);
        if (r.empty() || c.is_null()) continue;
        const double v = std::stod(r[0]["value"][1].get<std::string>());
        fleet.push_back(v);
        provider_now.push_back(c.value("in_progress", -1.0));
    }
    INFO("prometheus stderr: " << prom.err());
    INFO("exporter stderr: " << exporter.err());
    const json w1 = read_counters(web_counters[0]), w2 = read_counters(web_counters[1]);
    std::printf("fleet_test: fleet sum median %.1f (%zu samples), provider in progress median %.1f; instances' pools "
                "busy max %s and %s, waiters max %s and %s\n",
                median(fleet), fleet.size(), median(provider_now), w1.value("pool_busy_max", json()).dump().c_str(),
                w2.value("pool_busy_max", json()).dump().c_str(), w1.value("pool_waiters_max", json()).dump().c_str(),
                w2.value("pool_waiters_max", json()).dump().c_str());
    std::fflush(stdout);
    // The scenario: both pools saturated, with waiters (each instance at its own limit).
    REQUIRE(w1.value("pool_busy_max", 0) == kPool);
    REQUIRE(w2.value("pool_busy_max", 0) == kPool);
    REQUIRE(w1.value("pool_waiters_max", 0) >= 1);
    REQUIRE(w2.value("pool_waiters_max", 0) >= 1);
    REQUIRE(fleet.size() >= 6);
    CHECK(median(provider_now) >= 2 * kPool - 1);
    CHECK(std::abs(median(fleet) - median(provider_now)) <= 0.1 * median(provider_now));

    // ---- over the budget: the alert fires, with the peer's labels and the fleet's sum --------
    json fired;
    for (const double end = now_s() + 20; now_s() < end && fired.is_null(); sleep_s(0.5)) {
        const json r = prom.get("alerts", {});
        if (!r.is_object()) continue;
        for (const auto& a : r["data"]["alerts"])
            if (a["labels"].value("alertname", "") == "QscopeFleetPeerOverBudget" && a.value("state", "") == "firing")
                fired = a;
    }
    INFO("alerts: " << prom.get("alerts", {}).dump());
    REQUIRE(!fired.is_null());
    CHECK(fired["labels"].value("peer", "") == peer);
    CHECK(fired["labels"].value("severity", "") == "warning");
    CHECK(fired["annotations"].value("summary", "").find("concurrent calls to " + peer + ", over its budget") !=
          std::string::npos);
    std::printf("fleet_test: QscopeFleetPeerOverBudget firing after %.1f s: %s\n", now_s() - t0,
                fired["annotations"].value("summary", "").c_str());

    for (auto& l : loads) l.kill_and_wait();
    exporter.signal(SIGTERM);
    CHECK(exporter.wait(15) == 0);
}
