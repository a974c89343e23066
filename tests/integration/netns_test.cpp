// A target in a network namespace of its own, as a container runs it, observed from the
// host's: the BPF probes are machine-wide, but listeners come from sock_diag, which answers
// per namespace. Oracles: qs_server's own counters, and `ss` run inside the target's
// namespace (nsenter), while the host's `ss` does not see the listener at all.
#include <signal.h>

#include <catch2/catch.hpp>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

TEST_CASE("a target in its own network namespace: listener, requests and backlog as inside it", "[netns][integration]") {
    if (!require_root()) return;
    int rc = 0;
    sh("unshare -n true", &rc);
    if (rc != 0) {
        skip("unshare -n fails here: no network namespaces to test with");
        return;
    }
    const uint16_t port = 26420;
    const ScratchFile counters_file("/dev/shm/qscope-netns-" + std::to_string(getpid()) + ".json");
    const std::string& counters = counters_file.path;
    // unshare and sh exec in place: the spawned PID is the server's.
    Proc srv = spawn({"unshare", "-n", "--", "sh", "-c",
                      "ip link set lo up && exec " + target_bin("qs_server") + " --port " + std::to_string(port) +
                          " --workers 4 --service-ms 5 --backlog 77 --counters-file " + counters});
    REQUIRE(!srv.wait_for_output("READY", 10).empty());
    const std::string ns = std::to_string(srv.pid());
    CHECK(sh("ss -Hlnt 'sport = :" + std::to_string(port) + "'").empty());  // not in the host's namespace
    const std::string inside = sh("nsenter -t " + ns + " -n ss -Hlnt 'sport = :" + std::to_string(port) + "'");
    REQUIRE(inside.find(":" + std::to_string(port)) != std::string::npos);

    Proc q = spawn({qscope_bin(), "snapshot", "--pid", ns, "--duration", "6", "--json", "--no-threads"});
    REQUIRE(wait_attached(q.pid(), 20));
    auto load = run({"nsenter", "-t", ns, "-n", target_bin("qs_load"), "--host", "127.0.0.1", "--port",
                     std::to_string(port), "--connections", "8", "--duration", "2"},
                    30);
    REQUIRE(load.rc == 0);
    REQUIRE(q.wait(30) == 0);
    const json s = qscope_json(q.out(), false);
    const json c = read_counters(counters);
    REQUIRE(s.is_object());
    REQUIRE(c.is_object());
    INFO(s["listeners"].dump() << "\nrequests " << s["requests"].dump() << "\nserver " << c.dump() << "\nss inside: "
                               << inside << "\nqscope stderr: " << q.err());
    REQUIRE(s["listeners"].size() == 1);
    const json& l = s["listeners"][0];
    CHECK(l["port"].get<int>() == port);
    CHECK(l["backlog"].get<int>() == 77);
    CHECK(inside.find(" 77 ") != std::string::npos);  // ss: Send-Q of a listener is its backlog
    CHECK(l["accepted"].get<uint64_t>() == c["accepted"].get<uint64_t>());
    CHECK(s["requests"]["completed"].get<uint64_t>() == c["completed"].get<uint64_t>());
    CHECK(c["completed"].get<uint64_t>() > 100);
    // 8 keep-alive clients on 4 workers: ~4 requests wait unread, each an arrival seen (in a
    // QSCOPE_TEST_CGROUP run, by the cgroup program: a container's shape, netns and cgroup).
    CHECK(s["requests"]["waiting_unread_max"].get<int>() >= 3);
}
