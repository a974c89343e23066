#include "model/fan_out.h"

#include <algorithm>
#include <cmath>

#include "model/format.h"

namespace qscope {
namespace {

uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// Every field of FanOutCounts, once: since() and add() cannot forget one.
template <class F> void each(FanOutCounts& a, const FanOutCounts& b, F f) {
    f(a.requests, b.requests);
    f(a.calls, b.calls);
    f(a.retries, b.retries);
    f(a.failing_requests, b.failing_requests);
    f(a.failing_calls, b.failing_calls);
    f(a.failing_retries, b.failing_retries);
    f(a.failed_calls, b.failed_calls);
    f(a.calls_in_requests, b.calls_in_requests);
    f(a.calls_outside_requests, b.calls_outside_requests);
    f(a.calls_moved, b.calls_moved);
}

// The count at quantile q: the lower bound of the slot holding the rank-th request. Slots are
// one wide below 32, so there it is the count itself (interpolating inside a slot would not be).
uint64_t count_at(const Histogram& h, double q) {
    const double rank = std::max(1.0, std::ceil(q * static_cast<double>(h.count())));
    const auto& slots = h.slots();
    double seen = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
        seen += static_cast<double>(slots[i]);
        if (slots[i] && seen >= rank) return qs_hist_slot_low(static_cast<uint32_t>(i));
    }
    return 0;
}

std::string share(uint64_t part, uint64_t whole) { return fmt_count(part) + " of " + fmt_count(whole); }

}  // namespace

FanOutCounts FanOutCounts::since(const FanOutCounts& before) const {
    FanOutCounts d = *this;
    each(d, before, [](uint64_t& x, uint64_t y) { x = minus(x, y); });
    return d;
}

void FanOutCounts::add(const FanOutCounts& o) {
    each(*this, o, [](uint64_t& x, uint64_t y) { x += y; });
}

RequestAttribution RequestAttribution::since(const RequestAttribution& before) const {
    return {minus(attributed, before.attributed), minus(across_threads, before.across_threads)};
}

void fill_per_request(FanOut& f, const Histogram& window) {
    if (window.empty()) {
        f.per_request_p50 = f.per_request_p99 = f.per_request_max = 0;
        return;
    }
    f.per_request_p50 = count_at(window, 0.5);
    f.per_request_p99 = count_at(window, 0.99);
    f.per_request_max = count_at(window, 1.0);
}

void judge_fan_out(FanOut& f, const RequestAttribution& a) {
    const FanOutCounts& w = f.window;
    const uint64_t started = w.calls_in_requests + w.calls_outside_requests;
    const uint64_t answered = a.attributed + a.across_threads;
    f.known = false;
    f.unknown_reason.clear();
    if (started == 0 && w.requests == 0) return;  // nothing to tie: no reason to give either
    if (answered && a.across_threads > kMaxAcrossThreads * answered) {
        f.unknown_reason = share(a.across_threads, answered) +
                           " requests answered crossed threads or overlapped another on one thread (an event loop "
                           "or virtual threads): calls cannot be tied to one request";
    } else if (w.calls_moved > kMaxCallsMoved * started) {
        f.unknown_reason = share(w.calls_moved, started) +
                           " calls had their reply read by another thread than sent them (virtual threads or an "
                           "async client): calls cannot be tied to one request";
    } else if (w.calls_outside_requests > kMaxCallsOutside * started) {
        f.unknown_reason = share(w.calls_outside_requests, started) +
                           " calls were started by threads serving no request (an async client, a pool or a "
                           "background task)";
    } else {
        f.known = true;
    }
}

bool retry_amplification(const FanOut& f, RetryAmplification& out) {
    const FanOutCounts& w = f.window;
    if (!f.known || w.failing_requests < 3 || w.failing_retries == 0 || w.failing_calls < 2 * w.failing_requests)
        return false;
    const double n = static_cast<double>(w.failing_requests);
    out.calls_per_failing_request = static_cast<uint64_t>(std::llround(w.failing_calls / n));
    out.retries_per_failing_request = static_cast<uint64_t>(std::llround(w.failing_retries / n));
    return true;
}

}  // namespace qscope
