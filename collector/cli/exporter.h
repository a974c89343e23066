// Prometheus /metrics over HTTP, rendered at scrape time from the collector's latest
// snapshot. Used by `qscope export` and `qscope top --listen`.
#pragma once
#include <memory>
#include <string>

namespace qscope {

class Collector;

class MetricsServer {
public:
    // Throws Error(usage) for a non-loopback address without allow_remote, and
    // Error(failure) when the address cannot be bound (naming it and the errno).
    MetricsServer(const Collector& collector, const std::string& listen, bool allow_remote);
    ~MetricsServer();
    std::string url() const;  // http://ADDR:PORT/metrics

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace qscope
