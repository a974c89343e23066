// Prometheus /metrics over HTTP, rendered at scrape time from the latest snapshot. Used by
// `qscope export` and `qscope top --listen`; the HTTP server is prom/pull's.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "metrics/services.h"
#include "model/snapshot.h"

namespace qscope {

namespace prom {
class Collectable;
class Exposer;
}

class MetricsServer {
public:
    // What a scrape renders: the newest published snapshot (null before the first tick).
    using Latest = std::function<std::shared_ptr<const Snapshot>()>;
    // Throws Error(usage) for a bad --listen or a non-loopback address without allow_remote,
    // and Error(failure) when the address cannot be bound (naming it and the errno).
    MetricsServer(Latest latest, uint32_t label_cap, const std::string& listen, bool allow_remote);
    // Several targets, each with its `service` label (metrics/services.h).
    using LatestServices = std::function<std::vector<ServiceSnapshot>()>;
    MetricsServer(LatestServices latest, uint32_t label_cap, const std::string& listen, bool allow_remote);
    ~MetricsServer();
    std::string url() const;  // http://ADDR:PORT/metrics

private:
    MetricsServer(std::shared_ptr<const prom::Collectable> c, const std::string& listen, bool allow_remote);
    std::unique_ptr<prom::Exposer> exposer_;
};

}  // namespace qscope
