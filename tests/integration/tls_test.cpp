// HTTPS: Debian's nginx (master and 2 workers, OpenSSL 3's libssl.so.3, a self-signed
// certificate made here with `openssl req -x509`) serving HTTP/1.1 over TLS on one port and
// HTTP/2 over TLS (ALPN h2) on another, 200 and 404 locations, driven by h2load with fixed
// request counts. qscope watches the master (its workers are children) from before the load.
// Oracle: nginx's own access log, one line per request: "$status $server_protocol $connection".
// Tolerance: none. With --tls, the 2xx and 4xx counts equal the log's HTTP/1.1 200s and 404s,
// every connection is counted as TLS with its plaintext seen, and the HTTP/2 ones as h2
// inside TLS (their streams' statuses stay unknown, which `partial` says). Without --tls, no
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
                     "  log_format oracle '$status $server_protocol $connection';\n"
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

LogCounts read_log(const std::string& path) {
    LogCounts c;
    std::istringstream in(read_text(path));
    std::string status, proto, conn;
    while (in >> status >> proto >> conn) {
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
// connections), 200 × 200 over HTTP/2 (2 connections, 10 streams each).
json observe(pid_t master, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {qscope_bin(), "snapshot", "--pid", std::to_string(master), "--duration", "30",
                                     "--json", "--no-threads"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Proc q = spawn(argv);
    REQUIRE(wait_attached(q.pid(), 20));
    const std::string h1 = "https://127.0.0.1:" + std::to_string(kH1), h2 = "https://127.0.0.1:" + std::to_string(kH2);
    h2load({"--h1", "-n", "300", "-c", "3", h1 + "/ok"});
    h2load({"--h1", "-n", "100", "-c", "2", h1 + "/missing"});
    h2load({"-n", "200", "-c", "2", "-m", "10", h2 + "/ok"});
    sleep_s(1.5);  // a tick after the last response
    q.signal(SIGINT);
    REQUIRE(q.wait(20) == 0);
    const json s = json::parse(q.out(), nullptr, false);
    REQUIRE(s.is_object());
    return s;
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
        REQUIRE(c.by["200 HTTP/2.0"] == 200);
        std::printf("tls_test --tls: 2xx %ld / log %ld, 4xx %ld / log %ld, unknown %ld, completed %ld; tls %s; "
                    "log connections h1 %zu h2 %zu\n",
                    r["status"]["2xx"].get<long>(), c.by["200 HTTP/1.1"], r["status"]["4xx"].get<long>(),
                    c.by["404 HTTP/1.1"], r["status"]["unknown"].get<long>(), r["completed"].get<long>(),
                    r["tls"].dump().c_str(), c.h1_conns.size(), c.h2_conns.size());
        CHECK(r["status"]["2xx"].get<long>() == c.by["200 HTTP/1.1"]);
        CHECK(r["status"]["4xx"].get<long>() == c.by["404 HTTP/1.1"]);
        CHECK(r["status"]["3xx"].get<long>() == 0);
        CHECK(r["status"]["5xx"].get<long>() == 0);
        const json& t = r["tls"];
        CHECK(t["probing"] == true);
        CHECK(t["libraries"] == json::array({"/usr/lib/x86_64-linux-gnu/libssl.so.3"}));
        const long conns = static_cast<long>(c.h1_conns.size() + c.h2_conns.size());
        CHECK(t["connections"].get<long>() == conns);
        CHECK(t["plaintext_connections"].get<long>() == conns);
        CHECK(t["h2_connections"].get<long>() == static_cast<long>(c.h2_conns.size()));
        CHECK(has_partial(s, "TLS connections carry HTTP/2"));
        CHECK_FALSE(has_partial(s, "run with --tls"));
        // Handshakes are no requests: besides the HTTP/1.1 ones, only HTTP/2's read/write
        // turns (per connection, unknown) complete.
        CHECK(r["completed"].get<long>() >= 400);
        CHECK(r["status"]["unknown"].get<long>() == r["completed"].get<long>() - 400);
        CHECK(r["status"]["unknown"].get<long>() <= 200);
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
        CHECK(has_partial(s, "connections are encrypted"));
        CHECK(has_partial(s, "run with --tls"));
    }
    master.signal(SIGQUIT);
    master.wait(10);
}
