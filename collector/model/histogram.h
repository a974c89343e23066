// User-space view of the kernel's log-linear histograms (bpf/hist.h).
#pragma once
#include <linux/types.h>
#ifndef __always_inline
#define __always_inline inline
#endif
extern "C" {
#include "hist.h"
}
#include <array>
#include <cstdint>
#include <vector>

namespace qscope {

struct Quantiles {
    double p50 = 0, p90 = 0, p99 = 0, max = 0;  // seconds
};

// Counts per slot plus count and sum, as the kernel keeps them. Cumulative since attach
// in the kernel; window values are a difference of two reads (see delta()).
class Histogram {
public:
    Histogram() : slots_(QS_HIST_SLOTS, 0) {}
    static Histogram from_kernel(const qs_hist& h);
    // From stored slots (a recording); false when `slots` is not QS_HIST_SLOTS long.
    static bool from_slots(const std::vector<uint64_t>& slots, uint64_t sum_ns, uint64_t max_ns, Histogram& out);

    void add(uint64_t value_ns, uint64_t n = 1);   // for user-space-fed histograms and tests
    void merge(const Histogram& o);
    // this − earlier, slot by slot; clamps at 0 so a map entry recycled between reads
    // cannot produce a negative count.
    Histogram delta(const Histogram& earlier) const;

    uint64_t count() const { return count_; }
    uint64_t sum_ns() const { return sum_ns_; }
    double sum_seconds() const { return sum_ns_ / 1e9; }
    bool empty() const { return count_ == 0; }
    // q in [0,1]; seconds; linear interpolation inside the slot that holds the rank.
    double quantile(double q) const;
    // Upper bound of the highest non-empty slot, capped by the exact max when known.
    double max_seconds() const;
    Quantiles quantiles() const;
    // Observations <= bound (seconds), interpolated inside the straddling slot: used for
    // Prometheus `le` buckets, whose bounds need not align with slots.
    double count_le(double bound_seconds) const;

    const std::vector<uint64_t>& slots() const { return slots_; }
    void set_max_ns(uint64_t m) { max_ns_ = m; }
    uint64_t max_ns() const { return max_ns_; }

private:
    std::vector<uint64_t> slots_;
    uint64_t count_ = 0;
    uint64_t sum_ns_ = 0;
    uint64_t max_ns_ = 0;  // exact max if the source knows it, else 0
};

}  // namespace qscope
