// Event loops: which polling threads are loops, when one is the limit, and which futex
// waiters of a loop's process are idle workers (model/loops.h).
#include "model/loops.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "model/format.h"
#include "model/runtime_frames.h"

namespace qscope {

void settle_loops(Snapshot& s) {
    auto& loops = s.carriers.loops;
    std::map<int, const ThreadServing*> by_tid;
    for (const auto& t : s.serving) by_tid[t.tid] = &t;
    uint64_t accept_queue = 0;
    for (const auto& l : s.listeners) accept_queue += l.accept_queue;
    for (auto& l : loops) {
        auto it = by_tid.find(l.tid);
        if (it == by_tid.end()) continue;
        l.connections_served_total = std::max(l.connections_served_total, it->second->adopted_total);
        l.connections_max = std::max(l.connections_max, it->second->connections_max);
        l.connections = it->second->connections;
        l.in_flight = it->second->in_flight;
        l.unread = it->second->unread;
        l.calling = it->second->calling;
        l.waiting_average = it->second->waiting_average;
        l.waiting_average_seconds = it->second->waiting_average_seconds;
    }
    // A user-space scheduler's carriers (JVM virtual threads, Go's Ms) poll without waiting and
    // idle on a futex: between two polls they run other tasks or park, so their "turns" are the
    // scheduler's, not a loop's. The carriers section reads them (running, idle, stalled with a
    // task mounted); read as loops, an idle carrier was "busy 98%, stalled" with 370 requests
    // "behind" it in the JVM scenario.
    std::set<int> carrier_tids;
    for (const auto& c : s.carriers.per_carrier) carrier_tids.insert(c.tid);
    loops.erase(std::remove_if(loops.begin(), loops.end(),
                               [&](const EventLoop& l) {
                                   return l.connections_max < kLoopMinConnections || carrier_tids.count(l.tid);
                               }),
                loops.end());
    // Listeners are sockets, not processes: loops sharing one (nginx workers) each see its queue.
    for (auto& l : loops) l.accept_queue = accept_queue;
    const std::string unseen =
        "sock: an io_uring loop accepts through its ring, not accept(): its listeners' accept waits and accepted "
        "counts are not seen";
    if (accepts_unseen(s) && std::find(s.partial.begin(), s.partial.end(), unseen) == s.partial.end())
        s.partial.push_back(unseen);
    std::stable_sort(loops.begin(), loops.end(), [](const EventLoop& a, const EventLoop& b) {
        if (a.utilization != b.utilization) return a.utilization > b.utilization;
        return a.tid < b.tid;
    });
}

bool accepts_unseen(const Snapshot& s) {
    return std::any_of(s.carriers.loops.begin(), s.carriers.loops.end(),
                       [](const EventLoop& l) { return l.poll == "io_uring_enter"; });
}

namespace {
// A loop starved of a CPU is busy without working: its limit is the CPU's (the verdict's cpu
// stage), and naming the loop would send the reader to its code.
bool mostly_waiting_for_cpu(const EventLoop& l) {
    return l.runqueue_share * 2 > l.utilization && l.runqueue_share >= 0.05;
}
}  // namespace

bool loop_saturated(const EventLoop& l) { return l.utilization >= kLoopSaturated && !mostly_waiting_for_cpu(l); }

// Stalls a wait for a CPU made are not the loop's, for the same reason. Nor is a tenth of
// them: on a VM, a hypervisor's steal inside a turn reads as the turn's own time, so a loop
// starved of a CPU shows one stall "of its own" now and then (CI: 1 of 75, and the verdict
// blamed Redis's turns where schedstat showed it runnable 3.8 s of 5).
bool loop_stalled(const EventLoop& l, double stall_threshold_seconds) {
    const uint64_t own = l.stalls - std::min(l.stalls, l.stalls_runqueue);
    return own * 10 > l.stalls || current_turn_stalled(l, stall_threshold_seconds);
}

bool current_turn_stalled(const EventLoop& l, double stall_threshold_seconds) {
    return l.current_turn_seconds >= stall_threshold_seconds &&
           l.current_turn_seconds - l.current_turn_runqueue_seconds >= stall_threshold_seconds;
}

uint64_t loop_waiting(const EventLoop& l) {
    return l.unread + l.accept_queue + read_behind(l.in_flight, l.calling);
}

namespace {

std::string ms_text(double seconds) {
    char b[32];
    if (seconds >= 1)
        std::snprintf(b, sizeof b, "%.2f s", seconds);
    else
        std::snprintf(b, sizeof b, "%.0f ms", seconds * 1e3);
    return b;
}

// A span of ticks, whole seconds once it is a few of them ("10 s"): it is no measurement.
std::string span_text(double seconds) {
    if (seconds < 2) return ms_text(seconds);
    char b[32];
    std::snprintf(b, sizeof b, "%.0f s", seconds);
    return b;
}

// The first frame of a stall's stack that is neither the runtime nor the loop's own machinery.
std::string stall_frame(const std::vector<std::string>& stack) {
    for (const auto& f : stack)
        if (!is_runtime_frame(f) && !is_event_loop_frame(f)) return frame_function(f);
    return "";
}

// Where the longest recent stall spent its time: "in pbkdf2" (on a CPU) or "blocked in
// wait4 at spawnSync".
std::string stall_where(const EventLoop& l) {
    if (l.recent_stalls.empty()) return "";
    const LoopStall& st = l.recent_stalls.front();
    const std::string frame = stall_frame(st.stack);
    if (st.runqueue_seconds > st.on_cpu_seconds && st.runqueue_seconds > st.blocked_seconds)
        return " waiting for a CPU";
    if (st.blocked_seconds > st.on_cpu_seconds && !st.syscall.empty())
        return " blocked in " + st.syscall + (frame.empty() ? "" : " at " + frame);
    return frame.empty() ? " on a CPU" : " in " + frame;
}

// What waits behind a loop for the verdict: now, or when nothing does at this instant, the
// window's average. A busy loop writes every reply at its turn's end and the clients take a
// moment to send the next requests: an instant there reads an empty loop (CI caught Redis, busy
// 91% of the window with 228 stalls, that way, and the verdict said "no queue").
struct LoopLoad {
    uint64_t waiting = 0;
    bool averaged = false;
};
LoopLoad loop_load(const EventLoop& l) {
    if (const uint64_t now = loop_waiting(l)) return {now, false};
    return {static_cast<uint64_t>(std::llround(l.waiting_average)), true};
}

}  // namespace

std::optional<LoopLimit> loop_limit(const Snapshot& s) {
    const double threshold = s.carriers.loop_stall_threshold_seconds;
    const EventLoop* top = nullptr;
    LoopLoad top_load;
    for (const auto& l : s.carriers.loops) {
        const LoopLoad load = loop_load(l);
        if (!(loop_saturated(l) || loop_stalled(l, threshold)) || load.waiting == 0) continue;
        if (!top || load.waiting > top_load.waiting ||
            (load.waiting == top_load.waiting && l.utilization > top->utilization)) {
            top = &l;
            top_load = load;
        }
    }
    if (!top) return std::nullopt;
    const EventLoop& l = *top;
    LoopLimit out;
    out.where = "event loop of " + l.name + " (tid " + std::to_string(l.tid) + ")";
    char busy[32];
    std::snprintf(busy, sizeof busy, "%.0f%%", l.utilization * 100);
    out.detail = "requests queue behind the " + out.where + ": busy " + busy + " of the window";
    // A loop starved of a CPU is busy without working: say so, or the reader goes to its code.
    if (mostly_waiting_for_cpu(l)) {
        char rq[32];
        std::snprintf(rq, sizeof rq, "%.0f%%", l.runqueue_share * 100);
        out.detail += std::string(", most of it (") + rq + ") waiting for a CPU";
    }
    out.detail += ", longest turn " + ms_text(l.longest_turn_seconds) + stall_where(l);
    if (l.current_turn_seconds >= threshold) {
        out.detail += ", in a turn for " + ms_text(l.current_turn_seconds) + " now";
        if (l.current_turn_runqueue_seconds * 2 > l.current_turn_seconds)
            out.detail += " (" + ms_text(l.current_turn_runqueue_seconds) + " of it waiting for a CPU)";
    }
    if (const uint64_t behind = read_behind(l.in_flight, l.calling))
        out.detail += "; " + counted(behind, "request") + " read and waiting behind it";
    if (top_load.averaged)
        out.detail += "; " + counted(top_load.waiting, "request") + " waiting behind it on average over the last " +
                      span_text(l.waiting_average_seconds) + ", none at this instant";
    // A Tokio program whose workers (named by the program) were not found: a worker reads as a
    // loop, its run of tasks as one long turn. qscope cannot tell which this is, and says so.
    // Never a process's main thread: Tokio starts its workers, and main runs block_on (or a
    // current-thread runtime, a loop of its own).
    if (s.carriers.runtime == CarrierRuntime::tokio && !s.carriers.detected && l.tid != l.pid)
        out.detail += "; the program runs Tokio's multi-thread runtime, whose workers were not told apart yet: " +
                      l.name + " may be one of them, and the queue the runtime's";
    out.waiting = top_load.waiting;
    return out;
}

int idle_futex_waiters(const Snapshot& s, const ThreadGroup& g) {
    if (s.carriers.loops.empty() || g.futex_by_pid.empty()) return 0;
    std::set<int> loop_pids;
    std::map<int, int> loops_on_futex;  // per process: loop threads blocked on a futex now
    for (const auto& l : s.carriers.loops) {
        loop_pids.insert(l.pid);
        if (l.blocked_in == "futex") loops_on_futex[l.pid]++;
    }
    int idle = 0;
    for (const auto& [pid, n] : g.futex_by_pid) {
        if (!loop_pids.count(pid)) continue;
        auto it = loops_on_futex.find(pid);
        idle += std::max(0, n - (it == loops_on_futex.end() ? 0 : it->second));
    }
    return idle;
}

}  // namespace qscope
