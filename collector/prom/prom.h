// A small Prometheus client model, mirroring prometheus-cpp's (Registry of Collectables →
// MetricFamily → ClientMetric → TextSerializer), because prometheus-cpp is not packaged
// for Debian 12. Only what the exporter needs: counters, gauges and classic histograms,
// collected at scrape time and written in the text exposition format 0.0.4.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace qscope::prom {

enum class MetricType { counter, gauge, histogram, untyped };

struct Label {
    std::string name, value;
};

struct Bucket {
    double upper_bound = 0;          // the `le`; +Inf is written by the serializer
    uint64_t cumulative_count = 0;   // observations <= upper_bound
};

struct HistogramValue {
    uint64_t sample_count = 0;       // also the +Inf bucket
    double sample_sum = 0;
    std::vector<Bucket> buckets;     // ascending upper_bound, finite bounds only
};

struct Metric {
    std::vector<Label> labels;
    double value = 0;                // counter / gauge / untyped
    HistogramValue histogram;        // histogram
};

struct MetricFamily {
    std::string name, help;
    MetricType type = MetricType::untyped;
    std::vector<Metric> metrics;
};

// Something that produces families when scraped (prometheus-cpp's Collectable).
class Collectable {
public:
    virtual ~Collectable() = default;
    virtual std::vector<MetricFamily> collect() const = 0;
};

// The set of collectables one endpoint serves. Registration is rare and guarded; collect()
// holds the lock only to copy the list, so a slow collectable never blocks registration.
class Registry : public Collectable {
public:
    void add(std::shared_ptr<const Collectable> c);
    void remove(const std::shared_ptr<const Collectable>& c);
    std::vector<MetricFamily> collect() const override;

private:
    mutable std::mutex mu_;
    std::vector<std::shared_ptr<const Collectable>> collectables_;
};

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

// Text format 0.0.4. Throws std::invalid_argument for an invalid metric or label name
// (a programming error: names are constants); label values and HELP are escaped, and any
// invalid UTF-8 in them is replaced with U+FFFD so the output always parses.
std::string serialize(const std::vector<MetricFamily>& families);
void serialize(std::string& out, const MetricFamily& family);

// Locale-independent number formatting (std::to_chars): "NaN", "+Inf", "-Inf",
// otherwise the shortest text that round-trips.
void append_number(std::string& out, double v);
std::string format_number(double v);

std::string escape_label_value(std::string_view v);
std::string escape_help(std::string_view v);
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

}  // namespace qscope::prom
