#include "record/window.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>

#include "model/verdict.h"

namespace qscope::record {
namespace {

uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
double minus(double a, double b) { return a > b ? a - b : 0; }

template <class T, class Key> const T* find(const std::vector<T>& v, const T& x, Key key) {
    for (const auto& y : v)
        if (key(y) == key(x)) return &y;
    return nullptr;
}

// Ticks (begin, end] of one recording, and what a maximum over them can know: a running
// maximum that rose after `begin` was reached inside the window, exactly; one that did not
// is bounded below by the gauges sampled at the ticks (and above by its value at `begin`).
class Span {
public:
    Span(const std::vector<Snapshot>& ticks, size_t begin, size_t end) : t_(ticks), b_(begin), e_(end) {}
    const Snapshot& begin() const { return t_[b_]; }
    const Snapshot& end() const { return t_[e_]; }
    // The tick `k` ticks before the end, or the begin when the span is shorter.
    const Snapshot& before_end(size_t k) const { return t_[e_ - std::min(k, e_ - b_)]; }

    // `get` reads (running max, gauge) from a tick, nullopt when the tick lacks the entity.
    uint64_t max_of(const std::function<std::optional<std::pair<uint64_t, uint64_t>>(const Snapshot&)>& get) {
        const auto at_begin = get(begin());
        const auto at_end = get(end());
        if (!at_end) return 0;
        if (!at_begin || at_end->first > at_begin->first) return at_end->first;
        uint64_t sampled = 0;
        for (size_t i = b_ + 1; i <= e_; ++i)
            if (auto v = get(t_[i])) sampled = std::max(sampled, v->second);
        if (sampled < at_begin->first) bounded_ = true;
        return sampled;
    }
    bool bounded() const { return bounded_; }

private:
    const std::vector<Snapshot>& t_;
    size_t b_, e_;
    bool bounded_ = false;
};

void requests_window(Span& sp, Snapshot& out) {
    const Requests& a = sp.begin().requests;
    Requests& r = out.requests;
    r.attribution = r.attribution_total.since(a.attribution_total);
    Histogram latency;
    StatusCounts st;
    uint64_t* by_class[5] = {&st.c2xx, &st.c3xx, &st.c4xx, &st.c5xx, &st.unknown};
    r.dropped = 0;
    for (const auto& p : r.ports) {
        const PortRequests* before = find(a.ports, p, [](const PortRequests& x) {
            return endpoint_name(x.port, x.unix_path);
        });
        r.dropped += before ? minus(p.dropped_total, before->dropped_total) : p.dropped_total;
        for (int c = 0; c < 5; ++c) {
            const Histogram d = before ? p.duration_total[c].delta(before->duration_total[c]) : p.duration_total[c];
            latency.merge(d);
            *by_class[c] += d.count();
        }
    }
    r.latency = latency.quantiles();
    r.status = st;
    r.completed = st.total();
    r.in_flight_max = sp.max_of([](const Snapshot& s) {
        return std::optional<std::pair<uint64_t, uint64_t>>({s.requests.in_flight_max, s.requests.in_flight});
    });
    r.waiting_unread_max = sp.max_of([](const Snapshot& s) {
        return std::optional<std::pair<uint64_t, uint64_t>>({s.requests.waiting_unread_max, s.requests.waiting_unread});
    });
}

void listeners_window(Span& sp, Snapshot& out) {
    auto key = [](const Listener& l) { return endpoint_name(l.port, l.unix_path); };
    for (auto& l : out.listeners) {
        const Listener* before = find(sp.begin().listeners, l, key);
        if (!before) continue;
        l.accepted = minus(l.accepted_total, before->accepted_total);
        l.overflows = minus(l.overflows_total, before->overflows_total);
        l.accept_wait = l.accept_wait_total.delta(before->accept_wait_total).quantiles();
        const std::string k = key(l);
        l.accept_queue_max = static_cast<uint32_t>(sp.max_of([&](const Snapshot& s) {
            std::optional<std::pair<uint64_t, uint64_t>> v;
            for (const auto& x : s.listeners)
                if (key(x) == k) v = {{x.accept_queue_max, x.accept_queue}};
            return v;
        }));
    }
}

void downstream_window(Span& sp, Snapshot& out) {
    auto key = [](const DownstreamPeer& p) { return p.peer; };
    for (auto& p : out.downstream) {
        const DownstreamPeer* before = find(sp.begin().downstream, p, key);
        if (!before) continue;
        p.calls = minus(p.calls_total, before->calls_total);
        p.connect_failures = minus(p.connect_failures_total, before->connect_failures_total);
        p.resets = minus(p.resets_total, before->resets_total);
        p.call = p.call_total.delta(before->call_total).quantiles();
        p.fan_out.window = p.fan_out.total.since(before->fan_out.total);
        fill_per_request(p.fan_out, p.fan_out.per_request_total.delta(before->fan_out.per_request_total));
        judge_fan_out(p.fan_out, out.requests.attribution);
        p.busy_max = sp.max_of([&](const Snapshot& s) {
            std::optional<std::pair<uint64_t, uint64_t>> v;
            for (const auto& x : s.downstream)
                if (x.peer == p.peer) v = {{x.busy_max, x.busy}};
            return v;
        });
    }
}

void threads_window(const Snapshot& a, Snapshot& out) {
    for (auto& g : out.thread_groups)
        if (auto* before = find(a.thread_groups, g, [](const ThreadGroup& x) { return x.name; }))
            g.runqueue_wait_seconds = minus(g.runqueue_wait_seconds, before->runqueue_wait_seconds);
    for (auto& w : out.waits)
        if (auto* before = find(a.waits, w, [](const Wait& x) { return x.group + '\0' + x.syscall + '\0' + x.resource; })) {
            w.blocked_seconds = minus(w.blocked_seconds, before->blocked_seconds);
            w.count = minus(w.count, before->count);
        }
}

// The serving threads' waiting samples over the window's last kWaitingAveragedTicks ticks, as
// the live collector averages them (a thread first seen later: all of its own).
void serving_window(const Span& sp, Snapshot& out) {
    static const ThreadServing none;
    const Snapshot& a = sp.before_end(kWaitingAveragedTicks);
    for (auto& t : out.serving) {
        const ThreadServing* before = find(a.serving, t, [](const ThreadServing& x) { return x.tid; });
        t.waiting_average = t.waiting_average_since(before ? *before : none);
        t.waiting_average_seconds =
            before ? std::max<int64_t>(0, out.taken_at_unix_ms - a.taken_at_unix_ms) / 1e3 : out.window_seconds;
    }
}

void carriers_window(Span& sp, Snapshot& out) {
    const Carriers& a = sp.begin().carriers;
    Carriers& c = out.carriers;
    c.stall_events = minus(c.stall_events, a.stall_events);
    c.vm_waits = minus(c.vm_waits, a.vm_waits);
    for (auto& l : c.loops) {
        const EventLoop* before = find(a.loops, l, [](const EventLoop& x) { return x.tid; });
        if (!before) continue;
        l.turns = minus(l.turns_total, before->turns_total);
        l.stalls = minus(l.stalls_total, before->stalls_total);
        l.stalls_runqueue = minus(l.stalls_runqueue_total, before->stalls_runqueue_total);
        l.turns_per_second = out.window_seconds > 0 ? l.turns / out.window_seconds : 0;
        l.utilization = out.window_seconds > 0
                            ? std::min(1.0, minus(l.busy_seconds_total, before->busy_seconds_total) / out.window_seconds)
                            : 0;
        l.runqueue_share =
            out.window_seconds > 0
                ? std::min(1.0, minus(l.runqueue_seconds_total, before->runqueue_seconds_total) / out.window_seconds)
                : 0;
        const Histogram turns = l.turn_total.delta(before->turn_total);
        const int tid = l.tid;
        // The longest turn is a running maximum like any other (Span::max_of), in µs.
        const uint64_t longest_us = sp.max_of([&](const Snapshot& s) {
            std::optional<std::pair<uint64_t, uint64_t>> v;
            for (const auto& x : s.carriers.loops)
                if (x.tid == tid)
                    v = {{static_cast<uint64_t>(std::llround(x.longest_turn_seconds * 1e6)),
                          static_cast<uint64_t>(std::llround(x.current_turn_seconds * 1e6))}};
            return v;
        });
        l.longest_turn_seconds = longest_us / 1e6;
        l.p99_turn_seconds = turns.empty() ? 0 : std::min(turns.quantile(0.99), l.longest_turn_seconds);
    }
}

}  // namespace

WindowResult window(const std::vector<Snapshot>& ticks, const WindowBounds& b) {
    WindowResult res;
    if (ticks.empty()) {
        res.error = "the recording holds no tick";
        return res;
    }
    auto last_at_or_before = [&](int64_t ms) -> std::optional<size_t> {
        std::optional<size_t> at;
        for (size_t i = 0; i < ticks.size(); ++i)
            if (ticks[i].taken_at_unix_ms <= ms) at = i;
        return at;
    };
    const std::optional<size_t> end = b.to_unix_ms ? last_at_or_before(*b.to_unix_ms) : ticks.size() - 1;
    if (!end) {
        res.error = "--to is before the recording's first tick";
        return res;
    }
    const std::optional<size_t> begin = b.from_unix_ms ? last_at_or_before(*b.from_unix_ms) : std::nullopt;
    // From the attach: the tick itself is the live collector's window, computed live.
    if (!begin || (*begin == 0 && ticks[0].window_seconds == 0)) {
        res.snap = ticks[*end];
        return res;
    }
    if (*begin >= *end) {
        res.error = "the window holds no tick: --from and --to fall within one interval";
        return res;
    }
    Span sp(ticks, *begin, *end);
    Snapshot out = sp.end();
    out.window_seconds = minus(out.window_seconds, sp.begin().window_seconds);
    requests_window(sp, out);
    listeners_window(sp, out);
    downstream_window(sp, out);
    threads_window(sp.begin(), out);
    serving_window(sp, out);
    carriers_window(sp, out);
    if (!out.downstream.empty() || !out.thread_groups.empty() || !out.waits.empty())
        out.partial.push_back(
        "replay: peers' connect times, run-queue waits and waits' durations are quantiles since the recording's "
        "start (the recording keeps no cumulative histogram of them)");
    if (sp.bounded())
        out.partial.push_back(
            "replay: some maxima are the largest values sampled at the window's ticks: the peak in the window did "
            "not exceed the one before it, whose time the recording does not keep");
    out.verdict = Verdict{};
    compute_verdict(out);
    res.snap = std::move(out);
    return res;
}

std::optional<int64_t> parse_time(const std::string& text, int64_t start_unix_ms) {
    if (text.empty()) return std::nullopt;
    char* rest = nullptr;
    if (text[0] == '@') {
        const double s = std::strtod(text.c_str() + 1, &rest);
        if (rest == text.c_str() + 1 || *rest || !std::isfinite(s)) return std::nullopt;
        return static_cast<int64_t>(std::llround(s * 1000));
    }
    int h = 0, m = 0, sec = 0;
    char tail = 0;
    if (std::sscanf(text.c_str(), "%d:%d:%d%c", &h, &m, &sec, &tail) == 3) {
        if (h < 0 || h > 23 || m < 0 || m > 59 || sec < 0 || sec > 60) return std::nullopt;
        const int64_t day_ms = 86400000;
        const int64_t day = start_unix_ms - start_unix_ms % day_ms;
        return day + (h * 3600 + m * 60 + sec) * 1000LL;
    }
    const double s = std::strtod(text.c_str(), &rest);
    if (rest == text.c_str() || *rest || !std::isfinite(s) || s < 0) return std::nullopt;
    return start_unix_ms + static_cast<int64_t>(std::llround(s * 1000));
}

}  // namespace qscope::record
