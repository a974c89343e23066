// The pull side of the Prometheus client (prometheus-cpp's Exposer): an HTTP server that
// renders a Collectable at each scrape of /metrics. It knows HTTP and the exposition format,
// nothing of what is measured.
#pragma once
#include <memory>
#include <stdexcept>
#include <string>

#include "prom/prom.h"

namespace qscope::prom {

// Where to listen: "127.0.0.1:9464", "[::1]:9464", "localhost:0" (port 0: any free one).
struct ListenAddress {
    std::string host;  // numeric, as given to bind(); IPv6 without brackets
    int port = 0;
    bool v6 = false;
    bool loopback = false;
    std::string host_port(int port) const;  // "127.0.0.1:9464", "[::1]:9464"
};
// Throws std::invalid_argument saying what is wrong with `spec` ("no port", ...).
ListenAddress parse_listen_address(const std::string& spec);

// The address could not be bound: `err` is the errno, 0 when it cannot be told.
class BindError : public std::runtime_error {
public:
    BindError(const std::string& address, int err)
        : std::runtime_error("cannot listen on " + address), address(address), err(err) {}
    std::string address;
    int err;
};

// Serves GET /metrics (text format 0.0.4, rendered from `metrics` at each scrape) and a
// small index page at /, from worker threads of its own, until destroyed. A scrape that
// throws gets a 500 naming the error.
class Exposer {
public:
    // Binds before returning (throws BindError), so a bad or busy address fails at once.
    Exposer(const ListenAddress& at, std::shared_ptr<const Collectable> metrics);
    ~Exposer();
    Exposer(const Exposer&) = delete;
    Exposer& operator=(const Exposer&) = delete;
    std::string url() const;  // http://ADDR:PORT/metrics, with the port bound

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace qscope::prom
