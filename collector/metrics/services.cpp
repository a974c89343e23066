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

std::vector<prom::MetricFamily> ServicesCollectable::collect() const {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    return service_families(latest_(), label_cap_, now);
}

}  // namespace qscope
