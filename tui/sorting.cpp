#include "tui/sorting.h"

#include <algorithm>

namespace qscope::tui {

const std::vector<std::string>& sort_keys(Panel p) {
    static const std::vector<std::string> none;
    static const std::vector<std::string> listeners = {"queue", "overflows", "port"};
    static const std::vector<std::string> downstream = {"busy", "calls", "p99", "peer"};
    static const std::vector<std::string> threads = {"blocked", "threads", "runnable", "name"};
    static const std::vector<std::string> waits = {"threads now", "blocked time", "count"};
    static const std::vector<std::string> carriers = {"longest", "tid"};
    switch (p) {
        case Panel::listeners: return listeners;
        case Panel::downstream: return downstream;
        case Panel::threads: return threads;
        case Panel::waits: return waits;
        case Panel::carriers: return carriers;
        default: return none;
    }
}

int panel_items(const Snapshot& s, Panel p) {
    switch (p) {
        case Panel::listeners: return static_cast<int>(s.listeners.size());
        case Panel::downstream: return static_cast<int>(s.downstream.size());
        case Panel::threads: return static_cast<int>(s.thread_groups.size());
        case Panel::waits: return static_cast<int>(s.waits.size());
        case Panel::carriers: return static_cast<int>(s.carriers.stalls.size());
        default: return 0;
    }
}

std::string wait_key(const Wait& w) { return w.group + '\x1f' + w.syscall + '\x1f' + w.resource; }

bool is_jvm(const Snapshot& s) { return s.carriers.runtime == CarrierRuntime::jvm || s.target.comm == "java"; }

template <class T, class Less>
static std::vector<size_t> order_by(const std::vector<T>& v, Less less) {
    std::vector<size_t> idx(v.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return less(v[a], v[b]); });
    return idx;
}

// One comparator per panel: the chosen key first, then identity (port, peer, name, tid).
std::vector<size_t> sorted_order(const Snapshot& s, Panel p, int sort) {
    const int n = static_cast<int>(sort_keys(p).size());
    const int k = n ? ((sort % n) + n) % n : 0;
    switch (p) {
        case Panel::listeners:
            return order_by(s.listeners, [k](const Listener& a, const Listener& b) {
                if (k == 0 && a.accept_queue != b.accept_queue) return a.accept_queue > b.accept_queue;
                if (k == 0 && a.accept_queue_max != b.accept_queue_max) return a.accept_queue_max > b.accept_queue_max;
                if (k == 1 && a.overflows != b.overflows) return a.overflows > b.overflows;
                return a.port < b.port;
            });
        case Panel::downstream:
            return order_by(s.downstream, [k](const DownstreamPeer& a, const DownstreamPeer& b) {
                if (k == 0 && a.busy != b.busy) return a.busy > b.busy;
                if (k == 0 && a.oldest_busy_seconds != b.oldest_busy_seconds)
                    return a.oldest_busy_seconds > b.oldest_busy_seconds;
                if (k == 1 && a.calls != b.calls) return a.calls > b.calls;
                if (k == 2 && a.call.p99 != b.call.p99) return a.call.p99 > b.call.p99;
                return a.peer < b.peer;
            });
        case Panel::threads:
            return order_by(s.thread_groups, [k](const ThreadGroup& a, const ThreadGroup& b) {
                if (k == 0 && a.blocked != b.blocked) return a.blocked > b.blocked;
                if (k <= 1 && a.threads != b.threads) return a.threads > b.threads;
                if (k == 2 && a.waiting_for_cpu != b.waiting_for_cpu) return a.waiting_for_cpu > b.waiting_for_cpu;
                return a.name < b.name;
            });
        case Panel::waits:
            return order_by(s.waits, [k](const Wait& a, const Wait& b) {
                const int an = std::max(a.threads_now, a.waiters_now), bn = std::max(b.threads_now, b.waiters_now);
                if (k == 0 && an != bn) return an > bn;
                if (k <= 1 && a.blocked_seconds != b.blocked_seconds) return a.blocked_seconds > b.blocked_seconds;
                if (k == 2 && a.count != b.count) return a.count > b.count;
                return wait_key(a) < wait_key(b);
            });
        case Panel::carriers:
            return order_by(s.carriers.stalls, [k](const CarrierStall& a, const CarrierStall& b) {
                if (k == 0 && a.seconds != b.seconds) return a.seconds > b.seconds;
                return a.tid < b.tid;
            });
        default: return {};
    }
}

}  // namespace qscope::tui
