// Scrapes render the Collectable on one of the server's own worker threads, so a slow or
// stuck client only holds that worker until its timeout, and whatever produces the metrics
// never waits for a scrape.
#include "prom/pull/exposer.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace qscope::prom {

ListenAddress parse_listen_address(const std::string& spec) {
    auto bad = [](const std::string& why) { return std::invalid_argument(why); };
    ListenAddress a;
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

std::string ListenAddress::host_port(int p) const {
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(p);
}

namespace {

// httplib reports a failed bind as a bare false; redo the bind on a scratch socket to
// learn why, so the user reads "Address already in use" rather than a guess.
int bind_errno(const ListenAddress& a) {
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

struct Exposer::Impl {
    httplib::Server svr;
    std::thread thread;
    std::string url;
};

Exposer::Exposer(const ListenAddress& a, std::shared_ptr<const Collectable> metrics)
    : impl_(std::make_unique<Impl>()) {
    auto& svr = impl_->svr;
    // A few workers: Prometheus plus a curious human or two. Timeouts bound how long a
    // slow or silent client can hold one.
    svr.new_task_queue = [] { return new httplib::ThreadPool(4); };
    svr.set_read_timeout(5, 0);
    svr.set_write_timeout(5, 0);
    svr.set_keep_alive_timeout(5);
    svr.set_keep_alive_max_count(1000);
    svr.set_payload_max_length(64 * 1024);
    svr.Get("/metrics", [metrics](const httplib::Request&, httplib::Response& res) {
        res.set_content(serialize(metrics->collect()), kContentType);
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
    if (!ok) throw BindError(a.host_port(a.port), bind_errno(a));
    impl_->url = "http://" + a.host_port(port) + "/metrics";
    impl_->thread = std::thread([this] { impl_->svr.listen_after_bind(); });
    // stop() is a no-op until the accept loop runs; wait for it so the destructor can't
    // miss it and join a server that never stops.
    for (int i = 0; i < 2000 && !svr.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

Exposer::~Exposer() {
    while (impl_->thread.joinable() && !impl_->svr.is_running())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    impl_->svr.stop();
    if (impl_->thread.joinable()) impl_->thread.join();
}

std::string Exposer::url() const { return impl_->url; }

}  // namespace qscope::prom
