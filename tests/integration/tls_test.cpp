// HTTPS: Debian's nginx (master and 2 workers, OpenSSL 3's libssl.so.3, a self-signed
// certificate made here with `openssl req -x509`) serving HTTP/1.1 over TLS on one port and
// HTTP/2 over TLS (ALPN h2) on another, 200 and 404 locations, driven by h2load with fixed
// request counts. qscope watches the master (its workers are children) from before the load.
// Oracle: nginx's own access log, one line per request: "$status $server_protocol $connection".
// Tolerance: none. With --tls, the 2xx and 4xx counts equal the log's HTTP/1.1 200s and 404s,
// every connection is counted as TLS with its plaintext seen, and the HTTP/2 ones as h2
// inside TLS, their streams followed per stream in the plaintext after a warm-up connection (the
// one `partial` names as per connection). Without --tls, no
// status class is claimed and `partial` says the connections are encrypted.
// Ports 31400-31499.
#include <sys/stat.h>
#include <csignal>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

constexpr uint16_t kH1 = 31410, kH2 = 31411;

void write_conf(const std::string& prefix) {
    write_nginx_conf(prefix, 2,
                     "  log_format oracle '$status $server_protocol $connection $msec';\n"
                     // h2load -D keeps its connections: nginx's default would close them at 1000
                     "  keepalive_requests 1000000;\n"
                     "  access_log " + prefix + "/logs/access.log oracle;\n"
                     "  ssl_certificate " + prefix + "/cert.pem;\n"
                     "  ssl_certificate_key " + prefix + "/key.pem;\n"
                     "  server {\n"
                     "    listen 127.0.0.1:" + std::to_string(kH1) + " ssl;\n"
                     "    listen 127.0.0.1:" + std::to_string(kH2) + " ssl http2;\n"
                     "    location = /ok { return 200 \"ok\\n\"; }\n"
                     "    location / { return 404; }\n"
                     "  }\n");
}

struct LogCounts {
    std::map<std::string, long> by;  // "200 HTTP/1.1" -> requests
    std::set<std::string> h1_conns, h2_conns;
};

// The access log's lines, or only those logged in (from_ms, to_ms] (unix milliseconds).
LogCounts read_log(const std::string& path, double from_ms = 0, double to_ms = 1e18) {
    LogCounts c;
    std::istringstream in(read_text(path));
    std::string status, proto, conn;
    double sec = 0;
    while (in >> status >> proto >> conn >> sec) {
        if (sec * 1000 <= from_ms || sec * 1000 > to_ms) continue;
        c.by[status + " " + proto]++;
        (proto == "HTTP/2.0" ? c.h2_conns : c.h1_conns).insert(conn);
    }
    return c;
}

void h2load(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {"/usr/bin/h2load"};
    argv.insert(argv.end(), args.begin(), args.end());
    const RunResult r = run(argv, 60);
    INFO(r.out << r.err);
    REQUIRE(r.rc == 0);  // the counts are checked against the access log
}

// One snapshot over a fixed mix of requests: 300 × 200 and 100 × 404 over HTTP/1.1 (3 and 2
// connections), then over HTTP/2 one warm-up stream (its own connection: the first HTTP/2
// answer over TLS is what makes qscope add the plaintext walk's probes, a tick later), and
// 200 × 200 and 100 × 404 (2 connections each, 10 streams at a time).
json observe(pid_t master, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {qscope_bin(), "snapshot", "--pid", std::to_string(master), "--duration", "30",
                                     "--json", "--no-threads"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Proc q = spawn(argv);
    REQUIRE(wait_attached(q.pid(), 20));
    const std::string h1 = "https://127.0.0.1:" + std::to_string(kH1), h2 = "https://127.0.0.1:" + std::to_string(kH2);
    h2load({"--h1", "-n", "300", "-c", "3", h1 + "/ok"});
    h2load({"--h1", "-n", "100", "-c", "2", h1 + "/missing"});
    h2load({"-n", "1", "-c", "1", h2 + "/ok"});
    sleep_s(2.5);  // two ticks: the walk's probes are attached at the first
    h2load({"-n", "200", "-c", "2", "-m", "10", h2 + "/ok"});
    h2load({"-n", "100", "-c", "2", "-m", "10", h2 + "/missing"});
    sleep_s(1.5);  // a tick after the last response
    q.signal(SIGINT);
    REQUIRE(q.wait(20) == 0);
    const json s = qscope_json(q.out(), false);
    REQUIRE(s.is_object());
    return s;
}

// The protocol mix qscope reports for listener `port` (null when the port is not listed).
json protocols_of(const json& s, int port) {
    for (const auto& l : s["listeners"])
        if (l["port"].get<int>() == port) return l["protocols"];
    return json();
}

bool has_partial(const json& s, const std::string& needle) {
    for (const auto& p : s["partial"])
        if (p.get<std::string>().find(needle) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("HTTPS nginx: --tls reads status classes through libssl; without it partial says encrypted",
          "[sock][integration][tls]") {
    if (!require_root()) return;
    const std::string nginx = find_nginx();
    if (nginx.empty() || access("/usr/bin/h2load", X_OK) != 0 || access("/usr/bin/openssl", X_OK) != 0) {
        skip("nginx, h2load (nghttp2-client) or openssl not installed (.ci/setup installs them)");
        return;
    }
    const std::string prefix = temp_dir("qs-tls-nginx");
    int rc = -1;
    sh("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost -keyout " + prefix + "/key.pem -out " +
           prefix + "/cert.pem 2>&1",
       &rc);
    REQUIRE(rc == 0);
    write_conf(prefix);
    require_free_port(kH1);
    require_free_port(kH2);
    Proc master = spawn({nginx, "-c", prefix + "/nginx.conf", "-p", prefix});
    REQUIRE(wait_for_port(kH1, 10));
    REQUIRE(wait_for_port(kH2, 10));
    REQUIRE(nginx_worker(master.pid(), 5) > 0);
    const std::string log = prefix + "/logs/access.log";

    SECTION("with --tls") {
        const json s = observe(master.pid(), {"--tls"});
        LogCounts c = read_log(log);
        const json& r = s["requests"];
        INFO(r.dump() << "\npartial: " << s["partial"].dump() << "\nwarnings: " << s["warnings"].dump());
        REQUIRE(c.by["200 HTTP/1.1"] == 300);
        REQUIRE(c.by["404 HTTP/1.1"] == 100);
        REQUIRE(c.by["200 HTTP/2.0"] == 201);
        REQUIRE(c.by["404 HTTP/2.0"] == 100);
        std::printf("tls_test --tls: 2xx %ld / log %ld + %ld, 4xx %ld / log %ld + %ld, unknown %ld, completed %ld; "
                    "tls %s; h2 %s; log connections h1 %zu h2 %zu\n",
                    r["status"]["2xx"].get<long>(), c.by["200 HTTP/1.1"], c.by["200 HTTP/2.0"],
                    r["status"]["4xx"].get<long>(), c.by["404 HTTP/1.1"], c.by["404 HTTP/2.0"],
                    r["status"]["unknown"].get<long>(), r["completed"].get<long>(), r["tls"].dump().c_str(),
                    r["h2"].dump().c_str(), c.h1_conns.size(), c.h2_conns.size());
        // Every HTTP/1.1 request and every HTTP/2 stream after the warm-up, each in its class;
        // the warm-up connection's one stream was answered before the walk and is counted in
        // its read/write turns (unknown), which partial says.
        CHECK(r["status"]["2xx"].get<long>() == c.by["200 HTTP/1.1"] + c.by["200 HTTP/2.0"] - 1);
        CHECK(r["status"]["4xx"].get<long>() == c.by["404 HTTP/1.1"] + c.by["404 HTTP/2.0"]);
        CHECK(r["status"]["3xx"].get<long>() == 0);
        CHECK(r["status"]["5xx"].get<long>() == 0);
        CHECK(r["in_flight"].get<long>() == 0);
        const json& t = r["tls"];
        CHECK(t["probing"] == true);
        CHECK(t["libraries"] == json::array({"/usr/lib/x86_64-linux-gnu/libssl.so.3"}));
        const long conns = static_cast<long>(c.h1_conns.size() + c.h2_conns.size());
        CHECK(t["connections"].get<long>() == conns);
        CHECK(t["plaintext_connections"].get<long>() == conns);
        CHECK(t["h2_connections"].get<long>() == static_cast<long>(c.h2_conns.size()));
        CHECK(t["h2_followed_connections"].get<long>() == static_cast<long>(c.h2_conns.size()) - 1);
        // Per listener, every connection began its answers with a TLS record.
        const long h1n = static_cast<long>(c.h1_conns.size()), h2n = static_cast<long>(c.h2_conns.size());
        CHECK(protocols_of(s, kH1) == json({{"http1", 0}, {"h2", 0}, {"tls", h1n}, {"other", 0}}));
        CHECK(protocols_of(s, kH2) == json({{"http1", 0}, {"h2", 0}, {"tls", h2n}, {"other", 0}}));
        CHECK(r["h2"]["followed_connections"].get<long>() == static_cast<long>(c.h2_conns.size()) - 1);
        CHECK(r["h2"]["lost_sync"].get<long>() == 0);
        CHECK(has_partial(s, "1 TLS connections carry HTTP/2"));
        CHECK_FALSE(has_partial(s, "run with --tls"));
        CHECK_FALSE(has_partial(s, "whose start was not seen"));
        // Handshakes are no requests: besides the classified ones, only the warm-up
        // connection's read/write turns (unknown) complete.
        CHECK(r["completed"].get<long>() >= 700);
        CHECK(r["status"]["unknown"].get<long>() == r["completed"].get<long>() - 700);
        CHECK(r["status"]["unknown"].get<long>() <= 3);
        // streams are whole responses: HEADERS in to END_STREAM out, well under a second here
        CHECK(r["latency_seconds"]["max"].get<double>() < 1.0);
    }
    SECTION("with --tls, attached mid-load: HTTP/2 connections joined at their next answer") {
        const std::string h2 = "https://127.0.0.1:" + std::to_string(kH2);
        Proc load = spawn({"/usr/bin/h2load", "-D", "9", "-c", "2", "-m", "10", h2 + "/ok"});
        sleep_s(2);
        // The first tick sees HTTP/2 answered over TLS and adds the walk's probes; the two
        // connections join at their next response, their streams open then unseen.
        const RunResult q = run_qscope({"snapshot", "--pid", std::to_string(master.pid()), "--duration", "4",
                                        "--json", "--no-threads", "--tls"},
                                       60);
        REQUIRE(load.wait(30) == 0);
        REQUIRE(q.rc == 0);
        const json& s = q.json;
        const json& r = s["requests"];
        const double end = s["taken_at_unix_ms"].get<double>(), start = end - 1000 * s["window_seconds"].get<double>();
        LogCounts c = read_log(log, start, end);
        INFO(r.dump() << "\npartial: " << s["partial"].dump() << "\nwarnings: " << s["warnings"].dump()
                      << "\nlog in the window: " << c.by["200 HTTP/2.0"] << " × 200 on " << c.h2_conns.size()
                      << " connections");
        std::printf("tls_test mid-load: 2xx %ld, unknown %ld / log %ld in the window; h2 %s\n",
                    r["status"]["2xx"].get<long>(), r["status"]["unknown"].get<long>(), c.by["200 HTTP/2.0"],
                    r["h2"].dump().c_str());
        REQUIRE(c.by["200 HTTP/2.0"] > 1000);
        CHECK(c.h2_conns.size() == 2);
        CHECK(r["h2"]["followed_connections"].get<long>() == 2);
        CHECK(r["h2"]["joined_connections"].get<long>() == 2);
        CHECK(r["h2"]["lost_sync"].get<long>() == 0);
        CHECK(r["tls"]["h2_followed_connections"].get<long>() == 2);
        CHECK_FALSE(has_partial(s, "TLS connections carry HTTP/2"));
        // Streams from the join on, each a 2xx: all of the window's when the walk's probes came
        // at the first tick (89,332 for the log's 89,330 here; nginx logs just after answering),
        // else from a tick later; before the join each connection's turns were unknown, far fewer.
        const long ok = r["status"]["2xx"].get<long>();
        CHECK(ok >= 0.4 * c.by["200 HTTP/2.0"]);
        CHECK(ok <= 1.01 * c.by["200 HTTP/2.0"] + 20);
        CHECK(r["status"]["unknown"].get<long>() * 10 <= ok);
        CHECK(r["status"]["4xx"].get<long>() + r["status"]["5xx"].get<long>() + r["status"]["3xx"].get<long>() == 0);
    }
    SECTION("without --tls") {
        const json s = observe(master.pid(), {});
        LogCounts c = read_log(log);
        const json& r = s["requests"];
        INFO(r.dump() << "\npartial: " << s["partial"].dump());
        REQUIRE(c.by["200 HTTP/1.1"] == 300);
        std::printf("tls_test without --tls: status %s, completed %ld; tls %s\n", r["status"].dump().c_str(),
                    r["completed"].get<long>(), r["tls"].dump().c_str());
        CHECK(r["status"]["2xx"].get<long>() == 0);
        CHECK(r["status"]["4xx"].get<long>() == 0);
        CHECK(r["completed"].get<long>() == r["status"]["unknown"].get<long>());
        const json& t = r["tls"];
        CHECK(t["probing"] == false);
        CHECK(t["connections"].get<long>() == static_cast<long>(c.h1_conns.size() + c.h2_conns.size()));
        CHECK(t["plaintext_connections"].get<long>() == 0);
        CHECK(protocols_of(s, kH1)["tls"].get<long>() == static_cast<long>(c.h1_conns.size()));
        CHECK(protocols_of(s, kH2)["tls"].get<long>() == static_cast<long>(c.h2_conns.size()));
        CHECK(has_partial(s, "connections are encrypted"));
        CHECK(has_partial(s, "run with --tls"));
    }
    master.signal(SIGQUIT);
    master.wait(10);
}
