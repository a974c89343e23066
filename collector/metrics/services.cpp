#include "metrics/services.h"

#include <chrono>
#include <map>

namespace qscope {

std::vector<prom::MetricFamily> service_families(const std::vector<ServiceSnapshot>& services, uint32_t cap,
                                                 int64_t now_unix_ms) {
    std::vector<prom::MetricFamily> out;
    std::map<std::string, size_t> index;  // family name → position in out
    for (const auto& svc : services) {
        for (auto& fam : snapshot_families(svc.snap.get(), cap, now_unix_ms)) {
            if (!svc.service.empty())
                for (auto& m : fam.metrics) m.labels.insert(m.labels.begin(), prom::Label{"service", svc.service});
            auto [it, fresh] = index.emplace(fam.name, out.size());
            if (fresh) {
                out.push_back(std::move(fam));
            } else {
                auto& into = out[it->second].metrics;
                into.insert(into.end(), std::make_move_iterator(fam.metrics.begin()),
                            std::make_move_iterator(fam.metrics.end()));
            }
        }
    }
    return out;
}

namespace {

// The processes a snapshot observes, by PID: its tree, or the root alone.
std::map<int, std::string> observed(const Snapshot& s) {
    std::map<int, std::string> out;
    for (const auto& p : s.target.processes) out.emplace(p.pid, p.comm);
    if (out.empty() && s.target.pid > 0) out.emplace(s.target.pid, s.target.comm);
    return out;
}

}  // namespace

std::vector<SharedProcess> shared_processes(const std::vector<ServiceSnapshot>& services) {
    std::vector<std::map<int, std::string>> trees;
    for (const auto& svc : services)
        trees.push_back(svc.snap && !svc.snap->target.exited ? observed(*svc.snap) : std::map<int, std::string>{});
    std::vector<SharedProcess> out;
    for (size_t i = 0; i < services.size(); ++i)
        for (size_t j = i + 1; j < services.size(); ++j)
            for (const auto& [pid, comm] : trees[i])
                if (trees[j].count(pid)) {
                    out.push_back({services[i].service, services[j].service, pid, comm});
                    break;  // the lowest: maps are ordered
                }
    return out;
}

std::vector<prom::MetricFamily> ServicesCollectable::collect() const {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    return service_families(latest_(), label_cap_, now);
}

}  // namespace qscope
