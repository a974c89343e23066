#include "model/histogram.h"

#include <algorithm>
#include <cmath>

namespace qscope {

Histogram Histogram::from_kernel(const qs_hist& h) {
    Histogram out;
    uint64_t total = 0;
    for (int i = 0; i < QS_HIST_SLOTS; ++i) {
        out.slots_[i] = h.slots[i];
        total += h.slots[i];
    }
    // count is bumped after the slot, so a concurrent read may see them disagree by a few:
    // the slots are what quantiles use, so trust them.
    out.count_ = total;
    out.sum_ns_ = h.sum_ns;
    return out;
}

bool Histogram::from_slots(const std::vector<uint64_t>& slots, uint64_t sum_ns, uint64_t max_ns, Histogram& out) {
    if (slots.size() != QS_HIST_SLOTS) return false;
    out.slots_ = slots;
    out.count_ = 0;
    for (uint64_t s : slots) out.count_ += s;
    out.sum_ns_ = sum_ns;
    out.max_ns_ = max_ns;
    return true;
}

void Histogram::add(uint64_t v, uint64_t n) {
    slots_[qs_hist_slot(v)] += n;
    count_ += n;
    sum_ns_ += v * n;
    max_ns_ = std::max(max_ns_, v);
}

void Histogram::merge(const Histogram& o) {
    for (size_t i = 0; i < slots_.size(); ++i) slots_[i] += o.slots_[i];
    count_ += o.count_;
    sum_ns_ += o.sum_ns_;
    max_ns_ = std::max(max_ns_, o.max_ns_);
}

Histogram Histogram::delta(const Histogram& earlier) const {
    Histogram out;
    uint64_t total = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
        out.slots_[i] = slots_[i] > earlier.slots_[i] ? slots_[i] - earlier.slots_[i] : 0;
        total += out.slots_[i];
    }
    out.count_ = total;
    out.sum_ns_ = sum_ns_ > earlier.sum_ns_ ? sum_ns_ - earlier.sum_ns_ : 0;
    return out;
}

static double slot_low(size_t i) { return static_cast<double>(qs_hist_slot_low(static_cast<__u32>(i))); }
static double slot_high(size_t i) {
    return i + 1 < QS_HIST_SLOTS ? slot_low(i + 1) : slot_low(i) * 2;
}

double Histogram::quantile(double q) const {
    if (count_ == 0) return 0;
    q = std::clamp(q, 0.0, 1.0);
    const double rank = q * static_cast<double>(count_);
    double seen = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i] == 0) continue;
        const double next = seen + static_cast<double>(slots_[i]);
        if (next >= rank) {
            const double frac = (rank - seen) / static_cast<double>(slots_[i]);
            double v = slot_low(i) + frac * (slot_high(i) - slot_low(i));
            if (max_ns_ && v > static_cast<double>(max_ns_)) v = static_cast<double>(max_ns_);
            return v / 1e9;
        }
        seen = next;
    }
    return max_seconds();
}

double Histogram::max_seconds() const {
    if (max_ns_) return max_ns_ / 1e9;
    for (size_t i = slots_.size(); i-- > 0;)
        if (slots_[i]) return slot_high(i) / 1e9;
    return 0;
}

Quantiles Histogram::quantiles() const {
    return Quantiles{quantile(0.50), quantile(0.90), quantile(0.99), max_seconds()};
}

double Histogram::count_le(double bound_seconds) const {
    const double b = bound_seconds * 1e9;
    double n = 0;
    for (size_t i = 0; i < slots_.size(); ++i) {
        if (!slots_[i]) continue;
        const double lo = slot_low(i), hi = slot_high(i);
        if (hi <= b) {
            n += static_cast<double>(slots_[i]);
        } else if (lo < b) {
            n += static_cast<double>(slots_[i]) * (b - lo) / (hi - lo);
        }
    }
    return n;
}

}  // namespace qscope
