// Debian's nginx (1 worker, epoll, not our code) proxying to a slow upstream under wrk:
// qscope's in-flight count for the nginx WORKER against stub_status "Writing" (less the
// status request itself), sampled at the same moment. Tolerance 15% (issue 2).
// Ports 18300-18399.
#include <dirent.h>
#include <sys/stat.h>
#include <csignal>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

// stub_status "Writing" (requests whose response is being produced or written).
int stub_writing(uint16_t port) { return static_cast<int>(stub_status(port).writing); }

}  // namespace

TEST_CASE("nginx worker: in flight agrees with stub_status Writing", "[sock][integration][nginx]") {
    if (!require_root()) return;
    const std::string nginx = find_nginx();
    if (nginx.empty() || access("/usr/bin/wrk", X_OK) != 0) {
        skip("nginx or wrk not installed (.ci/setup installs both)");
        return;
    }
    // Slow upstream: 200 ms per request, enough workers that it never queues.
    auto upstream = start_target("qs_server", {"--port", "18311", "--workers", "64", "--service-ms", "200",
                                               "--backlog", "256"});
    const std::string prefix = temp_dir("qs-sock-nginx");
    write_nginx_conf(prefix, 1,
                     "  access_log off;\n"
                     "  upstream slow { server 127.0.0.1:18311; keepalive 64; }\n"
                     "  server {\n"
                     "    listen 127.0.0.1:18310 backlog=511;\n"
                     "    location = /nginx_status { stub_status; }\n"
                     "    location / { proxy_pass http://slow; proxy_http_version 1.1;\n"
                     "                 proxy_set_header Connection \"\"; }\n"
                     "  }\n");
    require_free_port(18310);
    Proc master = spawn({nginx, "-c", prefix + "/nginx.conf", "-p", prefix});
    REQUIRE(wait_for_port(18310, 10));
    const pid_t worker = nginx_worker(master.pid(), 5);
    REQUIRE(worker > 0);
    INFO("nginx worker " << worker);

    // Attached before the load: the window sees every request from its first byte.
    Proc snap = spawn({qscope_bin(), "snapshot", "--pid", std::to_string(worker), "--duration", "4", "--json",
                       "--no-threads"});
    REQUIRE(wait_attached(snap.pid(), 20));
    Proc wrk = spawn({"/usr/bin/wrk", "-t2", "-c32", "-d12s", "http://127.0.0.1:18310/"});
    REQUIRE(snap.wait(30) == 0);
    const json s = qscope_json(snap.out());
    const json& r = s["requests"];
    INFO(r.dump());
    CHECK(r["completed"].get<uint64_t>() > 0);
    CHECK(r["status"]["2xx"].get<uint64_t>() == r["completed"].get<uint64_t>());
    // nginx answers every request on wrk's keep-alive connections: no close drops one.
    CHECK(r["dropped"].get<uint64_t>() == 0);
    // wrk's 32 connections each carry one request at a time.
    CHECK(r["in_flight_max"].get<uint64_t>() <= 32);
    CHECK(r["in_flight_max"].get<uint64_t>() >= 28);
    // A 200 ms upstream: the worker's request latency is the upstream's service time.
    CHECK(r["latency_seconds"]["p50"].get<double>() == Approx(0.200).epsilon(0.10));
    REQUIRE(s["listeners"].size() == 1);
    CHECK(s["listeners"][0]["backlog"].get<int>() == 511);

    // Paired samples, each attached mid-spike (requests already in flight at the attach are
    // found from sequence numbers: nginx never blocks in read). The pair is not quite
    // simultaneous: stub_status is read just after qscope's last tick. wrk's connections
    // move in lockstep (same 200 ms upstream), so a tick that lands while the worker works
    // through a wave of upstream replies (milliseconds, longer on a loaded box) sees part of
    // the wave between response and next request; hence 4 of 5 pairs must agree.
    int agree = 0;
    std::string pairs;
    for (int i = 0; i < 5; ++i) {
        auto mid = run_qscope({"snapshot", "--pid", std::to_string(worker), "--duration", "0.3", "--json",
                               "--no-threads"},
                              30);
        const int writing = stub_writing(18310) - 1;   // less the status request itself
        REQUIRE(mid.rc == 0);
        REQUIRE(writing > 0);
        const double in_flight = mid.json["requests"]["in_flight"].get<double>();
        pairs += std::to_string(static_cast<int>(in_flight)) + "/" + std::to_string(writing) + " ";
        if (std::abs(in_flight - writing) <= 0.15 * writing) ++agree;
    }
    INFO("qscope in_flight / stub_status Writing (less itself): " << pairs);
    CHECK(agree >= 4);

    wrk.wait(20);
    master.signal(SIGQUIT);
    master.wait(10);
}
