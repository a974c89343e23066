// Several targets on one /metrics: each target's families with a `service` label, merged so
// each family appears once (the text format allows no repeat). A target without a service
// name (a lone --pid) adds no label, so its output is byte-identical to snapshot_families().
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "metrics/metrics.h"

namespace qscope {

struct ServiceSnapshot {
    std::string service;                    // "" → no service label
    std::shared_ptr<const Snapshot> snap;   // null → qscope_up 0 alone
};

std::vector<prom::MetricFamily> service_families(const std::vector<ServiceSnapshot>& services, uint32_t label_cap,
                                                 int64_t now_unix_ms);

// Two services whose latest snapshots share a process: one target named twice, or one inside
// the other's tree. Each is still observed in full, but at the cost of two, and a sum over
// services (the dashboard's service "All") counts that process twice.
struct SharedProcess {
    std::string a, b;   // the two services, in the order given
    int pid = 0;        // the lowest PID they share
    std::string comm;
};
std::vector<SharedProcess> shared_processes(const std::vector<ServiceSnapshot>& services);

// The exporter's collectable for any number of targets: renders at scrape time whatever
// `latest` returns (one entry per target, in a fixed order).
class ServicesCollectable : public prom::Collectable {
public:
    ServicesCollectable(std::function<std::vector<ServiceSnapshot>()> latest, uint32_t label_cap)
        : latest_(std::move(latest)), label_cap_(label_cap) {}
    std::vector<prom::MetricFamily> collect() const override;

private:
    std::function<std::vector<ServiceSnapshot>()> latest_;
    uint32_t label_cap_;
};

}  // namespace qscope
