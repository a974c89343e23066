// `qscope export` and the /metrics server it shares with `top --listen`.
//
// Scrapes render the collector's latest published snapshot (a shared_ptr copy), so a scrape
// never waits for the collector and the collector never waits for a scrape; slow or stuck
// clients only hold one of the server's own worker threads until their timeout.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <clocale>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cli/app.h"
#include "engine/collector.h"
#include "probes/probes.h"
#include "model/errors.h"
#include "cli/exporter.h"
#include "metrics/metrics.h"
#include "prom/prom.h"

namespace qscope {
namespace {

struct ListenAddr {
    std::string host;   // numeric, as given to bind(); IPv6 without brackets
    int port = 0;
    bool v6 = false;
    bool loopback = false;
};

ListenAddr parse_listen(const std::string& spec) {
    auto bad = [&](const std::string& why) {
        return Error(Exit::usage, "--listen " + spec + ": " + why + " (expected ADDR:PORT, e.g. 127.0.0.1:9464 or [::1]:9464)");
    };
    ListenAddr a;
    std::string host, port;
    if (!spec.empty() && spec[0] == '[') {
        const auto close = spec.find(']');
        if (close == std::string::npos || close + 1 >= spec.size() || spec[close + 1] != ':')
            throw bad("unterminated [IPv6] address");
        host = spec.substr(1, close - 1);
        port = spec.substr(close + 2);
    } else {
        const auto colon = spec.rfind(':');
        if (colon == std::string::npos) throw bad("no port");
        host = spec.substr(0, colon);
        port = spec.substr(colon + 1);
        if (host.find(':') != std::string::npos) throw bad("put an IPv6 address in brackets");
    }
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
        throw bad("port must be a number 0-65535");
    a.port = std::stoi(port);
    if (a.port > 65535) throw bad("port must be a number 0-65535");
    if (host.empty() || host == "localhost") host = "127.0.0.1";
    in_addr v4{};
    in6_addr v6{};
    if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
        a.loopback = (ntohl(v4.s_addr) >> 24) == 127;
    } else if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
        a.v6 = true;
        a.loopback = IN6_IS_ADDR_LOOPBACK(&v6) ||
                     (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    } else {
        throw bad("address must be numeric (or localhost)");
    }
    a.host = host;
    return a;
}

std::string host_port(const ListenAddr& a, int port) {
    return (a.v6 ? "[" + a.host + "]" : a.host) + ":" + std::to_string(port);
}

// httplib reports a failed bind as a bare false; redo the bind on a scratch socket to
// learn why, so the user reads "Address already in use" rather than a guess.
int bind_errno(const ListenAddr& a) {
    const int fd = socket(a.v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return errno;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int rc;
    if (a.v6) {
        sockaddr_in6 sa{};
        sa.sin6_family = AF_INET6;
        sa.sin6_port = htons(static_cast<uint16_t>(a.port));
        inet_pton(AF_INET6, a.host.c_str(), &sa.sin6_addr);
        rc = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    } else {
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(static_cast<uint16_t>(a.port));
        inet_pton(AF_INET, a.host.c_str(), &sa.sin_addr);
        rc = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    }
    const int err = rc < 0 ? errno : (listen(fd, 1) < 0 ? errno : 0);
    close(fd);
    return err;
}

const char* kIndexPage =
    "<!doctype html>\n<html><head><title>qscope</title></head><body>\n"
    "<h1>qscope</h1>\n<p>Prometheus metrics: <a href=\"/metrics\">/metrics</a></p>\n"
    "</body></html>\n";

}  // namespace

struct MetricsServer::Impl {
    httplib::Server svr;
    std::thread thread;
    std::shared_ptr<prom::Registry> registry = std::make_shared<prom::Registry>();
    std::string url;
};

MetricsServer::MetricsServer(const Collector& collector, const std::string& listen, bool allow_remote)
    : impl_(std::make_unique<Impl>()) {
    const ListenAddr a = parse_listen(listen);
    if (!a.loopback && !allow_remote)
        throw Error(Exit::usage, "--listen " + listen +
                                     " is not a loopback address: /metrics names the target's peers, ports and "
                                     "threads without authentication; pass --allow-remote to serve it there anyway");
    if (!a.loopback)
        std::fprintf(stderr,
                     "qscope: warning: serving /metrics on %s, reachable from other hosts without authentication "
                     "(--allow-remote)\n",
                     host_port(a, a.port).c_str());

    impl_->registry->add(std::make_shared<SnapshotCollectable>([&collector] { return collector.latest(); },
                                                               collector.config().label_cap));
    auto& svr = impl_->svr;
    // A few workers: Prometheus plus a curious human or two. Timeouts bound how long a
    // slow or silent client can hold one.
    svr.new_task_queue = [] { return new httplib::ThreadPool(4); };
    svr.set_read_timeout(5, 0);
    svr.set_write_timeout(5, 0);
    svr.set_keep_alive_timeout(5);
    svr.set_keep_alive_max_count(1000);
    svr.set_payload_max_length(64 * 1024);
    auto registry = impl_->registry;
    svr.Get("/metrics", [registry](const httplib::Request&, httplib::Response& res) {
        res.set_content(prom::serialize(registry->collect()), prom::kContentType);
    });
    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
        res.set_content(kIndexPage, "text/html; charset=utf-8");
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "unknown error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what = e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content("qscope: cannot render metrics: " + what + "\n", "text/plain; charset=utf-8");
    });

    int port = a.port;
    bool ok;
    if (a.port == 0) {
        port = svr.bind_to_any_port(a.host);
        ok = port > 0;
    } else {
        ok = svr.bind_to_port(a.host, a.port);
    }
    if (!ok) {
        const int err = bind_errno(a);
        throw Error(Exit::failure, "cannot listen on " + host_port(a, a.port) + ": " +
                                       (err ? errno_text(err) + " (errno " + std::to_string(err) + ")"
                                            : std::string("bind failed")));
    }
    impl_->url = "http://" + host_port(a, port) + "/metrics";
    impl_->thread = std::thread([this] { impl_->svr.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs; wait for it so the destructor can't
    // miss it and join a server that never stops.
    for (int i = 0; i < 2000 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

MetricsServer::~MetricsServer() {
    if (!impl_) return;
    while (impl_->thread.joinable() && !impl_->svr.is_running())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    impl_->svr.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
}

std::string MetricsServer::url() const { return impl_->url; }

int run_export(const Config& cfg, const ExportOptions& opt) {
    // Adopt the user's locale as `top --listen` does (ncurses needs it): the exposition
    // must come out byte-identical either way, and this keeps that property exercised.
    std::setlocale(LC_ALL, "");
    Collector col(cfg);
    // Bind before attaching: a bad or busy address fails in milliseconds, not after the
    // probes load.
    MetricsServer server(col, opt.listen, opt.allow_remote);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    col.start();
    col.tick();
    col.run_in_background();
    std::fprintf(stderr, "qscope: serving %s for PID %d\n", server.url().c_str(), cfg.pid);

    while (!g_stop_requested && col.target_alive()) sleep_unless_stopped(0.1);
    int rc = 0;
    if (!g_stop_requested && !col.target_alive()) {
        std::fprintf(stderr, "qscope: target PID %d exited; serving the last snapshot for 1 s, then exiting\n",
                     cfg.pid);
        // One more chance for Prometheus to see qscope_up 0 and the final counts.
        sleep_unless_stopped(1.0);
        rc = static_cast<int>(Exit::target_exited);
    }
    col.stop();
    return rc;
}

}  // namespace qscope
