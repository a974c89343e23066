// The verdict: where the limit lives, in one sentence an operator can act on.
//
// Stages are counted by how many requests wait there now. The limit is not simply the
// biggest count: a connector queue of 6,800 forms *because* every worker is stuck at a
// pool gate further in. So we pick the deepest stage inside "in flight" that holds
// waiters (gate+downstream, syscall, carriers, cpu); only when nothing inside is waiting
// does the limit live at the door (connector, then accept queue) — a slow acceptor or too
// few workers. Upstream queues are then named as consequences.
#include <algorithm>
#include <cstdio>
#include <set>

#include <map>

#include "model/runtime_frames.h"
#include "model/syscall_table.h"
#include "model/verdict.h"
#include "model/thread_group.h"

namespace qscope {
namespace {

std::string fmt_count(uint64_t n) {
    // 6800 → "6,800": the summary is read at 3 a.m.
    std::string s = std::to_string(n), out;
    int c = 0;
    for (auto it = s.rbegin(); it != s.rend(); ++it) {
        if (c && c % 3 == 0) out.push_back(',');
        out.push_back(*it);
        ++c;
    }
    std::reverse(out.begin(), out.end());
    return out;
}

// A gate's name: its first application frame ("pool_borrow", "HikariPool.getConnection").
std::string gate_name(const Wait& w) {
    std::string name = first_app_frame(w.stack);
    if (!name.empty()) return name;
    return w.resource.empty() ? "a lock" : w.resource;
}

struct Candidate {
    std::string stage, where, detail;
    uint64_t waiting = 0;
};

const DownstreamPeer* busiest_peer(const Snapshot& s) {
    const DownstreamPeer* best = nullptr;
    for (const auto& d : s.downstream)
        if (!best || d.busy > best->busy || (d.busy == best->busy && d.oldest_busy_seconds > best->oldest_busy_seconds))
            best = &d;
    return best && best->busy > 0 ? best : nullptr;
}

// Every connection busy at some point in the window. "Busy now" alone flickers: between
// a reply and the next query a pooled connection is idle for microseconds, and a snapshot
// landing there must not lose the pool.
bool saturated(const DownstreamPeer& d) {
    return d.connections > 0 && (d.busy >= d.connections || (d.busy_max >= d.connections && d.busy > 0));
}

}  // namespace

void compute_verdict(Snapshot& s) {
    Verdict v;
    const auto& r = s.requests;
    std::vector<Candidate> stages;

    // --- at the door ---------------------------------------------------------------------
    uint64_t accept_q = 0, overflows = 0;
    const Listener* top_listener = nullptr;
    for (const auto& l : s.listeners) {
        accept_q += l.accept_queue;
        overflows += l.overflows;
        if (!top_listener || l.accept_queue > top_listener->accept_queue) top_listener = &l;
    }
    if (accept_q)
        stages.push_back({"accept_queue", ":" + std::to_string(top_listener->port),
                          fmt_count(accept_q) + " connections in the accept queue of :" +
                              std::to_string(top_listener->port) + " (backlog " +
                              std::to_string(top_listener->backlog) + ")",
                          accept_q});
    if (r.waiting_unread) {
        std::string where = "connector";
        if (s.listeners.size() == 1) where = "connector :" + std::to_string(s.listeners[0].port);
        stages.push_back({"connector", where, fmt_count(r.waiting_unread) + " requests unread in the connector",
                          r.waiting_unread});
    }

    // --- inside in flight ----------------------------------------------------------------
    // Futex waiters of the one group with the most of them: the request handlers. Other
    // groups (GC, housekeeping, idle carriers) park on futexes all the time.
    std::set<std::string> carrier_groups;
    for (const auto& c : s.carriers.per_carrier) carrier_groups.insert(thread_group_name(c.name));
    // Count from the live thread states (blocked_by, what /proc would say now): wait rows
    // split one gate across call sites and miss waits that began since the last tick.
    std::map<std::string, uint64_t> futex_by_group;
    for (const auto& g : s.thread_groups) {
        if (carrier_groups.count(g.name)) continue;
        auto it = g.blocked_by.find("futex");
        if (it != g.blocked_by.end() && it->second > 0) futex_by_group[g.name] += static_cast<uint64_t>(it->second);
    }
    if (futex_by_group.empty())  // no thread view (e.g. --no-threads tests): fall back to wait rows
        for (const auto& w : s.waits)
            if (w.kind == "futex" && !carrier_groups.count(w.group))
                futex_by_group[w.group] += static_cast<uint64_t>(std::max(w.threads_now, w.waiters_now));
    std::string gate_group;
    uint64_t futex_waiters = 0;
    for (const auto& [g, n] : futex_by_group)
        if (n > futex_waiters) {
            futex_waiters = n;
            gate_group = g;
        }
    const Wait* top_gate = nullptr;
    uint64_t syscall_waiters = 0;
    const Wait* top_syscall = nullptr;
    for (const auto& w : s.waits) {
        const int now = std::max(w.threads_now, w.waiters_now);
        if (now <= 0) continue;
        if (w.kind == "futex") {
            if (w.group == gate_group && (!top_gate || now > std::max(top_gate->threads_now, top_gate->waiters_now)))
                top_gate = &w;
        } else if (w.kind == "file" ||
                   (w.kind == "other" && !waiting_for_work_syscall(syscall_number(w.syscall)))) {
            // File I/O, or a syscall on no socket and no file that is not where idle threads
            // wait for work (model/syscall_table.h). Socket waits are downstream calls.
            syscall_waiters += static_cast<uint64_t>(now);
            if (!top_syscall || now > top_syscall->threads_now) top_syscall = &w;
        }
    }
    // Idle pool threads park on futexes too; only as many waiters as there are requests in
    // flight can be requests waiting (when the request path is visible at all).
    uint64_t downstream_busy = 0;
    for (const auto& d : s.downstream) downstream_busy += d.busy;
    if (r.in_flight > 0 || !s.listeners.empty()) {
        const uint64_t room = r.in_flight > downstream_busy ? r.in_flight - downstream_busy : 0;
        futex_waiters = std::min(futex_waiters, room);
    }

    // Virtual threads: a request parked in the runtime has no OS thread. What in flight
    // exceeds the threads, sockets and CPU that can account for it is parked there.
    if (s.carriers.detected && r.in_flight > 0) {
        uint64_t explained = downstream_busy + futex_waiters + syscall_waiters +
                             static_cast<uint64_t>(s.carriers.running + s.carriers.stalled + s.carriers.runnable);
        s.parked_in_runtime = r.in_flight > explained ? r.in_flight - explained : 0;
    }

    const DownstreamPeer* peer = busiest_peer(s);
    // Parked virtual threads wait for whatever is scarce: a saturated pool if there is one,
    // else the carriers when they are stalled, else an unnamed gate in the runtime.
    const bool carriers_stalled = s.carriers.detected && s.carriers.stalled > 0;
    const bool pool_saturated = peer && saturated(*peer);
    const uint64_t parked_at_gate = (carriers_stalled && !pool_saturated) ? 0 : s.parked_in_runtime;
    uint64_t gate_total = futex_waiters + parked_at_gate;
    if (pool_saturated && gate_total > 0) {
        // Waiters in front of a peer whose every connection is busy: that is a pool, and
        // its size is the limit.
        std::string waiting_how = futex_waiters ? fmt_count(futex_waiters) + " threads waiting"
                                                : fmt_count(s.parked_in_runtime) + " requests parked in the runtime";
        if (futex_waiters && s.parked_in_runtime)
            waiting_how += ", " + fmt_count(s.parked_in_runtime) + " parked in the runtime";
        stages.push_back({"gate", "pool to " + peer->peer,
                          "requests queue at the pool to " + peer->peer + ": " + fmt_count(peer->busy) + " of " +
                              fmt_count(peer->connections) + " connections busy, " + waiting_how,
                          gate_total + peer->busy});
    } else {
        if (gate_total > 0) {
            std::string where = top_gate ? gate_name(*top_gate) : "the runtime";
            std::string detail = futex_waiters
                                     ? "requests wait at a gate: " + fmt_count(futex_waiters) + " threads blocked in " +
                                           where + (top_gate ? " (" + top_gate->group + ")" : "")
                                     : fmt_count(s.parked_in_runtime) + " requests parked in the runtime";
            stages.push_back({"gate", where, detail, gate_total});
        }
        if (peer) {
            char age[64];
            std::snprintf(age, sizeof age, "%.1fs", peer->oldest_busy_seconds);
            stages.push_back({"downstream", peer->peer,
                              "requests wait on " + peer->peer + ": " + fmt_count(peer->busy) + " calls awaiting a reply" +
                                  (peer->oldest_busy_seconds >= 1 ? std::string(", oldest ") + age : std::string()),
                              peer->busy});
        }
    }
    if (syscall_waiters && top_syscall)
        stages.push_back({"syscall", top_syscall->syscall + " " + top_syscall->resource,
                          fmt_count(syscall_waiters) + " threads blocked in " + top_syscall->syscall +
                              (top_syscall->resource.empty() ? "" : " on " + top_syscall->resource),
                          syscall_waiters});
    if (s.carriers.detected && s.carriers.stalled > 0)
        stages.push_back({"carriers", s.carriers.pattern,
                          std::to_string(s.carriers.stalled) + " of " + std::to_string(s.carriers.threads) +
                              " carrier threads stalled" +
                              (s.carriers.stalls.empty() ? "" : " (" + s.carriers.stalls.front().reason + " in " +
                                                                    s.carriers.stalls.front().syscall + ")"),
                          static_cast<uint64_t>(s.carriers.stalled) + (s.parked_in_runtime - parked_at_gate)});
    uint64_t runnable = 0;
    const ThreadGroup* hungry = nullptr;
    for (const auto& g : s.thread_groups) {
        runnable += static_cast<uint64_t>(g.runnable);
        if (!hungry || g.runnable > hungry->runnable) hungry = &g;
    }
    if (runnable >= 2 && hungry)  // one runnable thread is scheduling noise, not starvation
        stages.push_back({"cpu", hungry->name,
                          fmt_count(runnable) + " threads runnable, waiting for a CPU (most in " + hungry->name + ")",
                          runnable});

    // --- rank and choose -----------------------------------------------------------------
    std::vector<Candidate> ranked = stages;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const Candidate& a, const Candidate& b) { return a.waiting > b.waiting; });
    for (const auto& c : ranked) v.ranking.push_back({c.stage, c.where, c.waiting});

    const Candidate* limit = nullptr;
    for (const auto& c : ranked)
        if (c.stage != "accept_queue" && c.stage != "connector") {
            limit = &c;
            break;
        }
    if (!limit)
        for (const char* door : {"connector", "accept_queue"})
            for (const auto& c : ranked)
                if (c.stage == door && !limit) limit = &c;

    if (!limit) {
        v.stage = "none";
        v.summary = r.in_flight ? "no queue: " + fmt_count(r.in_flight) + " requests in flight, none waiting"
                                : "no queue: nothing is waiting";
        if (overflows) {
            v.summary += "; but " + fmt_count(overflows) + " connections overflowed the accept queue in this window";
            v.severity = "warn";
        }
    } else {
        v.stage = limit->stage;
        v.where = limit->where;
        v.waiting = limit->waiting;
        v.summary = limit->detail;
        // Name what the limit backs up into.
        for (const char* door : {"connector", "accept_queue"})
            for (const auto& c : stages)
                if (c.stage == door && &c != limit && c.stage != limit->stage) v.summary += "; " + c.detail;
        if (overflows) v.summary += "; " + fmt_count(overflows) + " connections overflowed the accept queue";
        v.severity = (overflows || pool_saturated || limit->waiting >= 10) ? "critical" : "warn";
    }
    if (s.target.exited) v.summary = "(target exited) " + v.summary;
    s.verdict = v;
}

}  // namespace qscope
