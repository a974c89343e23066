// Snapshot → Prometheus metric families: the metric contract of docs/grafana.md "Metric reference".
// Pure functions of one snapshot, so unit tests feed real-shaped snapshots without root.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/histogram.h"
#include "prom/prom.h"
#include "model/snapshot.h"

namespace qscope {

// Classic histogram bounds (seconds), each suited to its quantity.
extern const std::vector<double> kAcceptWaitBuckets;   // 100 µs .. 10 s
extern const std::vector<double> kRequestBuckets;      // 1 ms .. 60 s
extern const std::vector<double> kDownstreamBuckets;   // 1 ms .. 60 s
extern const std::vector<double> kStallBuckets;        // 1 ms .. 60 s

// Cumulative `le` buckets from a log-linear histogram. A bucket counts every observation
// whose slot can hold a value <= the bound, so a value exactly on a bound is always in
// that bucket; counts are integers, monotonic in le, and +Inf (sample_count) == count.
prom::HistogramValue to_prom_histogram(const Histogram& h, const std::vector<double>& bounds);

// Which label value each key gets: the `cap` heaviest keep their own (ties by name), the
// rest fold into "other". Weights should be cumulative where possible so the kept set is
// stable from scrape to scrape.
struct LabelCapper {
    LabelCapper(std::vector<std::pair<std::string, double>> key_weights, uint32_t cap);
    const std::string& operator()(const std::string& key) const;

private:
    std::vector<std::string> kept_;  // sorted
    static const std::string kOther;
};

// Every family of the contract. `snap` may be null (no tick yet): then only qscope_up 0.
// `now_unix_ms` dates the snapshot (qscope_snapshot_age_seconds).
std::vector<prom::MetricFamily> snapshot_families(const Snapshot* snap, uint32_t label_cap, int64_t now_unix_ms);

// The exporter's one collectable: renders whatever snapshot `latest` returns at scrape time.
class SnapshotCollectable : public prom::Collectable {
public:
    SnapshotCollectable(std::function<std::shared_ptr<const Snapshot>()> latest, uint32_t label_cap)
        : latest_(std::move(latest)), label_cap_(label_cap) {}
    std::vector<prom::MetricFamily> collect() const override;

private:
    std::function<std::shared_ptr<const Snapshot>()> latest_;
    uint32_t label_cap_;
};

}  // namespace qscope
