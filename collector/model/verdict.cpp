// The verdict: where the limit lives, in one sentence an operator can act on.
//
// Stages are counted by how many requests wait there now. The limit is not simply the
// biggest count: a connector queue of 6,800 forms *because* every worker is stuck at a
// pool gate further in. So we pick the deepest stage inside "in flight" that holds
// waiters (gate+downstream, syscall, carriers, cpu); only when nothing inside is waiting
// does the limit live at the door (connector, then accept queue) — a slow acceptor or too
// few workers. Upstream queues are then named as consequences.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/loops.h"
#include "model/runtime_frames.h"
#include "model/syscall_table.h"
#include "model/fan_out.h"
#include "model/format.h"
#include "model/thread_group.h"
#include "model/verdict.h"

namespace qscope {
namespace {

// A wait at a gate: a futex, or a lock wait that looks like an idle poll (ProcSleep). A Go M
// parked under the runtime's idle frames (runtime.stopm), or a Tokio thread on its parker
// (main in block_on, a blocking-pool thread between jobs), waits for work, not at a gate.
bool at_a_gate(const Wait& w) {
    if (!go_idle_frame(w.stack).empty() || !tokio_idle_frame(w.stack).empty()) return false;
    return w.kind == WaitKind::futex || !lock_wait_frame(w.stack).empty();
}

// Where requests with no OS thread wait: "the Go runtime", "the Tokio runtime", "the runtime"
// (virtual threads).
std::string parked_where(const Snapshot& s) {
    if (s.carriers.runtime == CarrierRuntime::go) return "the Go runtime";
    if (s.carriers.runtime == CarrierRuntime::tokio) return "the Tokio runtime";
    return "the runtime";
}

// A gate's name: the lock-wait frame, else its first application frame ("pool_borrow",
// "HikariPool.getConnection").
std::string gate_name(const Wait& w) {
    std::string name = lock_wait_frame(w.stack);
    if (!name.empty()) return name;
    name = first_app_frame(w.stack);
    if (!name.empty()) return name;
    return w.resource.empty() ? "a lock" : w.resource;
}

int waiting_now(const Wait& w) { return std::max(w.threads_now, w.waiters_now); }

struct Candidate {
    Stage stage = Stage::none;
    std::string where, detail;
    uint64_t waiting = 0;
    // A door stage that is a limit of the server's own making (a connection cap): it comes
    // before the connector, whose few unread requests are then the traffic it does let in.
    bool own_limit = false;
};

bool at_the_door(Stage s) { return s == Stage::accept_queue || s == Stage::connector; }

// Who waits inside "in flight", counted once for the stages that share the counts.
struct Inside {
    uint64_t futex_waiters = 0;        // request threads at a gate, capped by what is in flight
    const Wait* top_gate = nullptr;    // the gate group's wait row with the most waiters
    uint64_t syscall_waiters = 0;      // threads blocked in a syscall holding a request
    const Wait* top_syscall = nullptr;
    uint64_t downstream_busy = 0;      // calls out whose reply the caller has not read
    uint64_t downstream_replied = 0;   // of them, answered: the reply waits unread
    uint64_t room = UINT64_MAX;        // in flight beyond the busy calls: what gate waiters can be
    double futex_average = 0;          // the gate group's futex waiters over the window, on average
    const Wait* window_gate = nullptr; // that group's wait row with the most futex time in the window
    bool averaged = false;             // futex_waiters is that average (none waits at this instant)
    uint64_t held_in_loops = 0;        // requests an idle event loop holds with no call, thread or turn
    std::string loops_of;              // whose loops: "node's event loop", "haproxy's 2 event loops"
};

// --- at the door ---------------------------------------------------------------------------

// A listener several workers of a process tree accept from (prefork: nginx, gunicorn,
// Apache): requests queue there when every worker is busy, so say how many share it and
// whether the requests in flight account for all of them.
std::string shared_accept_queue(const Snapshot& s, const Listener& l, const std::string& at, uint64_t accept_q) {
    const uint64_t workers = l.workers, in_flight = s.requests.in_flight;
    // A worker that serves several at once (Apache's event MPM: a process of threads) is not
    // "busy" at one request; how many it takes before it stops accepting is its own setting.
    const std::string load = in_flight == workers ? ", all " + fmt_count(workers) + " busy"
                             : in_flight > workers ? ", " + counted(in_flight, "request") + " in flight between them"
                                                   : std::string();
    return "requests queue in the accept queue of " + at + " shared by " + counted(workers, "worker") + load +
           ": " + counted(accept_q, "connection") + " waiting (backlog " + std::to_string(l.backlog) + ")";
}

// A server that caps its open connections (Tomcat's maxConnections, 8,192 by default) parks
// its acceptor at the cap: connections stop being accepted while the kernel's queue fills to
// the backlog and overflows. The queue is a consequence; the cap is the limit.
std::string connection_limit(const Listener& l, const std::string& at, uint64_t accept_q) {
    char idle[32];
    std::snprintf(idle, sizeof idle, "%.0f s", l.seconds_since_accept);
    return "connection limit reached on " + at + ": " + counted(l.connections, "connection") + " open, nothing accepted for " + idle +
           " (e.g. Tomcat maxConnections); " + counted(accept_q, "connection") + " in the accept queue (backlog " +
           std::to_string(l.backlog) + ")";
}

void door_stages(const Snapshot& s, std::vector<Candidate>& stages) {
    uint64_t accept_q = 0;
    const Listener* top = nullptr;
    for (const auto& l : s.listeners) {
        accept_q += l.accept_queue;
        if (!top || l.accept_queue > top->accept_queue) top = &l;
    }
    if (accept_q) {
        const std::string at = top->unix_path.empty() ? ":" + std::to_string(top->port) : "unix:" + top->unix_path;
        if (connection_limit_reached(*top) && !accepts_unseen(s))
            stages.push_back({Stage::accept_queue, at, connection_limit(*top, at, accept_q), accept_q, true});
        else if (top->workers >= 2)
            stages.push_back({Stage::accept_queue, at, shared_accept_queue(s, *top, at, accept_q), accept_q});
        else
            stages.push_back({Stage::accept_queue, at,
                              counted(accept_q, "connection") + " in the accept queue of " + at +
                                  " (backlog " + std::to_string(top->backlog) + ")",
                              accept_q});
    }
    const uint64_t unread = s.requests.waiting_unread;
    if (unread) {
        std::string where = "connector";
        if (s.listeners.size() == 1)
            where = "connector " + (s.listeners[0].unix_path.empty() ? ":" + std::to_string(s.listeners[0].port)
                                                                    : "unix:" + s.listeners[0].unix_path);
        stages.push_back({Stage::connector, where, counted(unread, "request") + " unread in the connector", unread});
    }
}

// --- inside in flight ----------------------------------------------------------------------

struct GateGroup {
    std::string name;
    uint64_t futex_waiters = 0;
    // Groups whose futex waiters are all a loop process's idle workers (Node's platform workers
    // in uv_cond_wait): they wait for work, not at a gate.
    std::set<std::string> idle;
};

// Futex waiters of a group whose stacks show a runtime's idle frames: a Tokio program's main
// thread in block_on, its blocking pool between jobs. They wait for work.
int idle_by_frames(const Snapshot& s, const std::string& group) {
    int n = 0;
    for (const auto& w : s.waits)
        if (w.group == group && w.kind == WaitKind::futex && !at_a_gate(w)) n += waiting_now(w);
    return n;
}

// Futex waiters of the one group with the most of them: the request handlers. Other groups
// (GC, housekeeping, idle carriers) park on futexes all the time.
GateGroup gate_group(const Snapshot& s, const std::set<std::string>& carrier_groups) {
    // Count from the live thread states (blocked_by, what /proc would say now): wait rows
    // split one gate across call sites and miss waits that began since the last tick.
    GateGroup top;
    std::map<std::string, uint64_t> futex_by_group;
    bool idle_workers = false;  // futex waiters set aside as a loop process's idle workers
    for (const auto& g : s.thread_groups) {
        if (carrier_groups.count(g.name)) continue;
        auto it = g.blocked_by.find("futex");
        const int idle = idle_futex_waiters(s, g) + idle_by_frames(s, g.name);
        idle_workers |= idle > 0;
        const int blocked = it == g.blocked_by.end() ? 0 : it->second;
        if (idle > 0 && idle >= blocked) top.idle.insert(g.name);
        if (blocked - idle > 0) futex_by_group[g.name] += static_cast<uint64_t>(blocked - idle);
    }
    if (futex_by_group.empty() && !idle_workers)  // no thread view (e.g. --no-threads tests): fall back to wait rows
        for (const auto& w : s.waits)
            if (w.kind == WaitKind::futex && !carrier_groups.count(w.group))
                futex_by_group[w.group] += static_cast<uint64_t>(waiting_now(w));
    // Lock waits in a poll (PostgreSQL backends in ProcSleep) are in no futex count.
    for (const auto& w : s.waits)
        if (w.kind != WaitKind::futex && at_a_gate(w) && !carrier_groups.count(w.group))
            futex_by_group[w.group] += static_cast<uint64_t>(waiting_now(w));
    for (const auto& [g, n] : futex_by_group)
        if (n > top.futex_waiters) {
            top.name = g;
            top.futex_waiters = n;
        }
    return top;
}

// A wait row that holds a request in a syscall: file I/O, or a syscall on no socket and no
// file that is not where idle threads wait for work (model/syscall_table.h says which). Socket
// waits are downstream calls, counted from the peers.
bool holds_request_in_syscall(const Wait& w) {
    if (w.kind == WaitKind::file) return true;
    return w.kind == WaitKind::other && !waiting_for_work_syscall(syscall_number(w.syscall));
}

// A group's threads on a CPU now, less those in `holding` (already holding their request
// elsewhere: a call in progress, a loop's turn). A snapshot without the tids subtracts none.
uint64_t on_cpu_besides(const ThreadGroup& g, const std::set<int>& holding) {
    const uint64_t on_cpu = static_cast<uint64_t>(g.running + g.runnable);
    uint64_t already = 0;
    for (int tid : g.on_cpu_tids) already += holding.count(tid);
    return on_cpu - std::min(already, on_cpu);
}

// Event loops hold requests without a thread: read, not yet answered, with no call out and
// no turn running on them. While calls to a peer are in progress, what the calls, the
// blocked threads and the threads on a CPU do not account for waits in the loop's own queue
// for them: a connection pool's waiters (Node's http.Agent, PgBouncer's pool, HAProxy's
// maxconn). With no call in progress nothing says they queue: a long poll waits for an event
// by design, and is not named. A loop that is busy or stalled is its own stage (loop_limit),
// and explains what waits behind it; so does a runtime that parks requests (virtual threads,
// goroutines: parked_in_runtime).
void held_in_loops(const Snapshot& s, Inside& in) {
    const auto& loops = s.carriers.loops;
    if (loops.empty() || s.carriers.detected || in.downstream_busy == 0) return;
    uint64_t in_flight = 0, in_turn = 0;
    std::set<int> turning;  // loop threads out of their poll: a turn holds one request
    for (const auto& l : loops) {
        if (loop_saturated(l) || loop_stalled(l, s.carriers.loop_stall_threshold_seconds)) return;
        in_flight += l.in_flight;
        if (l.state != CarrierState::idle) {
            in_turn++;
            turning.insert(l.tid);
        }
    }
    // Threads on a CPU hold one request each; a loop thread in its turn is already counted
    // there. Counted twice, HAProxy's two loops in their turns read 16 held against its
    // queue's 24 (CI).
    uint64_t on_cpu = 0;
    for (const auto& g : s.thread_groups) on_cpu += on_cpu_besides(g, turning);
    const uint64_t explained = in.downstream_busy + in.syscall_waiters + in.futex_waiters + on_cpu + in_turn;
    if (in_flight <= explained) return;
    in.held_in_loops = in_flight - explained;
    in.loops_of = loops.front().name + "'s " +
                  (loops.size() == 1 ? std::string("event loop") : std::to_string(loops.size()) + " event loops");
}

Inside count_inside(const Snapshot& s) {
    Inside in;
    std::set<std::string> carrier_groups;
    for (const auto& c : s.carriers.per_carrier) carrier_groups.insert(thread_group_name(c.name));
    const GateGroup gates = gate_group(s, carrier_groups);
    const std::string& group = gates.name;
    in.futex_waiters = gates.futex_waiters;
    for (const auto& w : s.waits) {
        const int now = waiting_now(w);
        if (now <= 0) continue;
        if (at_a_gate(w)) {
            if (w.group == group && (!in.top_gate || now > waiting_now(*in.top_gate))) in.top_gate = &w;
        } else if (holds_request_in_syscall(w)) {
            in.syscall_waiters += static_cast<uint64_t>(now);
            if (!in.top_syscall || now > in.top_syscall->threads_now) in.top_syscall = &w;
        }
    }
    for (const auto& d : s.downstream) {
        in.downstream_busy += d.busy;
        in.downstream_replied += std::min(d.busy, d.replied);
    }
    // Idle pool threads park on futexes too; only as many waiters as there are requests in
    // flight can be requests waiting (when the request path is visible at all). The gate
    // group's threads on a CPU, or runnable, hold their requests there, not at a gate: eight
    // workers calling a partner in a loop had two between calls at the instant, and their
    // idle colleagues' futexes read as "2 threads waiting" at a pool. A thread on a CPU whose
    // own call is in progress (it just wrote it, or its reply just woke it) holds one request,
    // not two: counted twice, four workers trading two connections left no room for the one
    // in the pool's futex (record_test: in flight 4, 2 calls, 2 workers runnable, one of them
    // a caller), and the verdict named the peer.
    const auto& r = s.requests;
    if (r.in_flight > 0 || !s.listeners.empty()) {
        const std::set<int> calling(s.calling_tids.begin(), s.calling_tids.end());
        uint64_t on_cpu = 0;
        for (const auto& g : s.thread_groups)
            if (g.name == group) on_cpu = on_cpu_besides(g, calling);
        const uint64_t held = in.downstream_busy + on_cpu;
        in.room = r.in_flight > held ? r.in_flight - held : 0;
        in.futex_waiters = std::min(in.futex_waiters, in.room);
    }
    held_in_loops(s, in);
    // The gate group's futex time over the window (that group, else the one with the most).
    // Idle groups' time would read as "5 threads waiting on average" in front of a saturated
    // pool the loop itself queues for.
    const std::set<std::string>& idle_groups = gates.idle;
    std::map<std::string, double> futex_seconds;
    for (const auto& w : s.waits)
        if (w.kind == WaitKind::futex && at_a_gate(w) && !carrier_groups.count(w.group) && !idle_groups.count(w.group))
            futex_seconds[w.group] += w.blocked_seconds;
    double most = 0;
    for (const auto& [g, secs] : futex_seconds) most = std::max(most, secs);
    const std::string gate = futex_seconds.count(group) ? group : "";
    const double gate_secs = gate.empty() ? most : futex_seconds[gate];
    if (s.window_seconds > 0) in.futex_average = gate_secs / s.window_seconds;
    for (const auto& w : s.waits)
        if (w.kind == WaitKind::futex && at_a_gate(w) && !carrier_groups.count(w.group) && !idle_groups.count(w.group) &&
            (gate.empty() ? futex_seconds[w.group] == most : w.group == gate) &&
            (!in.window_gate || w.blocked_seconds > in.window_gate->blocked_seconds))
            in.window_gate = &w;
    return in;
}

// Virtual threads: a request parked in the runtime has no OS thread. What in flight exceeds
// the threads, sockets and CPU that can account for it is parked there.
uint64_t parked_in_runtime(const Snapshot& s, const Inside& in) {
    const auto& c = s.carriers;
    if (!c.detected || s.requests.in_flight == 0) return 0;
    const uint64_t explained = in.downstream_busy + in.futex_waiters + in.syscall_waiters +
                               static_cast<uint64_t>(c.running + c.stalled + c.runnable);
    return s.requests.in_flight > explained ? s.requests.in_flight - explained : 0;
}

const DownstreamPeer* busiest_peer(const Snapshot& s) {
    const DownstreamPeer* best = nullptr;
    for (const auto& d : s.downstream)
        if (!best || d.busy > best->busy || (d.busy == best->busy && d.oldest_busy_seconds > best->oldest_busy_seconds))
            best = &d;
    return best && best->busy > 0 ? best : nullptr;
}

// The busiest peer is a pool its callers wait for. pool_saturated() allows a connection or
// more free at this instant, as a pool hands one over, when every one was busy once in the
// window. Requests loops hold, with no thread blocked and nothing parked, wait for no pool
// while at least as many connections are free (a stream read and not yet sent, a reply in
// hand): nginx's on-demand upstream connections, one per stream, were each busy once too.
bool pool_waited_on(const Snapshot& s, const Inside& in, const DownstreamPeer* peer) {
    if (!peer || !pool_saturated(*peer)) return false;
    const uint64_t free_connections = peer->connections > peer->busy ? peer->connections - peer->busy : 0;
    const bool only_loops_hold = in.held_in_loops > 0 && in.futex_waiters == 0 && s.parked_in_runtime == 0;
    return !(only_loops_hold && in.held_in_loops <= free_connections);
}

// Parked virtual threads and goroutines wait for whatever is scarce: a saturated pool if
// there is one, else the carriers when they are stalled or (Go) every P is busy (counted
// there), else an unnamed gate in the runtime.
uint64_t parked_at_gate(const Snapshot& s, bool pool_is_saturated) {
    const bool carriers_held = s.carriers.detected && (s.carriers.stalled > 0 || carriers_saturated(s.carriers));
    return (carriers_held && !pool_is_saturated) ? 0 : s.parked_in_runtime;
}

// Waiters in front of a peer whose every connection is busy: that is a pool, and its size
// is the limit.
Candidate pool_gate_stage(const Snapshot& s, const Inside& in, const PoolGate& pool) {
    std::vector<std::string> parts;
    if (in.futex_waiters)
        parts.push_back(counted(in.futex_waiters, "thread") + (in.averaged ? " waiting on average" : " waiting"));
    if (in.held_in_loops) parts.push_back(counted(in.held_in_loops, "request") + " waiting in " + in.loops_of);
    if (s.parked_in_runtime)
        parts.push_back((parts.empty() ? counted(s.parked_in_runtime, "request") : fmt_count(s.parked_in_runtime)) + " parked in " +
                        parked_where(s));
    std::string how;
    for (const auto& p : parts) how += (how.empty() ? "" : ", ") + p;
    return {Stage::gate, "pool to " + pool.peer,
            "requests queue at the pool to " + pool.peer + ": " + fmt_count(pool.busy) + " of " +
                counted(pool.connections, "connection") + " busy, " + how,
            pool.waiters + pool.busy};
}

// The calls in progress whose reply came and waits unread: a loop about to read it, so the
// peer's own stage (ranked apart) counts only the others and may be absent.
std::string answered_of(const Inside& in) {
    const uint64_t n = in.downstream_replied;
    if (n == 0) return "";
    const std::string replies = n == 1 ? "the reply" : "the replies";
    if (n == in.downstream_busy) return (n == 1 ? ", answered, " : ", all answered, ") + replies + " not yet read";
    return ", " + fmt_count(n) + " of them answered, " + replies + " not yet read";
}

Candidate plain_gate_stage(const Snapshot& s, const Inside& in, uint64_t gate_total) {
    if (!in.futex_waiters && in.held_in_loops) {
        const DownstreamPeer* peer = busiest_peer(s);
        return {Stage::gate, in.loops_of,
                "requests wait inside " + in.loops_of + ": " + fmt_count(in.held_in_loops) +
                    " in flight with no call out and no turn running, beside " + counted(in.downstream_busy, "call") +
                    " in progress" + (peer ? " to " + peer->peer : std::string()) + answered_of(in) +
                    " (a cap on them, as a pool's size or a connection limit sets; or another wait of the "
                    "application)",
                gate_total};
    }
    const std::string where = in.top_gate ? gate_name(*in.top_gate) : "the runtime";
    const bool lock = in.top_gate && in.top_gate->kind != WaitKind::futex;
    const std::string detail = in.futex_waiters ? std::string(lock ? "requests queue at a lock: " : "requests wait at a gate: ") +
                                                      (lock ? fmt_count(in.futex_waiters) + " waiting in "
                                                            : counted(in.futex_waiters, "thread") +
                                                                  (in.averaged ? " blocked on average in " : " blocked in ")) +
                                                      where +
                                                      (in.top_gate ? " (" + in.top_gate->group + ")" : "")
                                                : counted(s.parked_in_runtime, "request") + " parked in " + parked_where(s);
    return {Stage::gate, where, detail, gate_total};
}

// Calls to the peer whose reply has not come. A reply come and unread waits on its caller.
uint64_t awaiting_reply(const DownstreamPeer& peer) { return peer.busy - std::min(peer.busy, peer.replied); }

Candidate downstream_stage(const DownstreamPeer& peer) {
    char age[64];
    std::snprintf(age, sizeof age, "%.1fs", peer.oldest_busy_seconds);
    const uint64_t awaiting = awaiting_reply(peer);
    // Over HTTP/2 a busy connection carries any number of calls: the count is a floor.
    const std::string calls = peer.h2_per_connection() ? counted(awaiting, "HTTP/2 connection") + " with calls"
                                                  : counted(awaiting, "call");
    return {Stage::downstream, peer.peer,
            "requests wait on " + peer.peer + ": " + calls + " awaiting a reply" +
                (peer.oldest_busy_seconds >= 1 ? std::string(", oldest ") + age : std::string()) +
                (peer.replied ? "; " + fmt_count(peer.replied) + " more answered, the reply not yet read"
                              : std::string()),
            awaiting};
}

// The gate and downstream stages: one pool gate when the busiest peer is saturated and
// requests wait in front of it, else a plain gate and the peer's calls apart.
void gate_and_downstream_stages(const Snapshot& s, const Inside& now, const DownstreamPeer* peer, bool saturated,
                                std::vector<Candidate>& stages, Verdict& v) {
    Inside in = now;
    uint64_t gate_total = in.futex_waiters + in.held_in_loops + parked_at_gate(s, saturated);
    // A saturated pool whose waiters are, at this instant, all between their wake-up and
    // their next call (workers trading a pool's connections hand them over in microseconds)
    // would read as its peer's slowness, and the verdict would flicker between the two: then
    // the window's average number of waiters, while requests in flight are left to account for.
    // The thread view alone (no request path, so no pool to see) flickers the same way between
    // the gate and "no queue", and the same average stands in.
    const bool thread_view_only = !s.probes.empty() && !s.probes.has(ProbeFamily::sock);
    if ((saturated || thread_view_only) && gate_total == 0 && in.room > 0 && in.futex_average >= 0.5) {
        in.futex_waiters = std::min<uint64_t>(in.room, static_cast<uint64_t>(std::llround(in.futex_average)));
        in.averaged = true;
        if (!in.top_gate) in.top_gate = in.window_gate;
        gate_total = in.futex_waiters;
    }
    if (saturated && gate_total > 0) {
        v.pool = PoolGate{peer->peer, peer->busy, peer->connections, gate_total};
        stages.push_back(pool_gate_stage(s, in, *v.pool));
        return;
    }
    if (gate_total > 0) stages.push_back(plain_gate_stage(s, in, gate_total));
    if (peer && awaiting_reply(*peer) > 0) stages.push_back(downstream_stage(*peer));
}

std::optional<Candidate> syscall_stage(const Inside& in) {
    if (!in.syscall_waiters || !in.top_syscall) return std::nullopt;
    const Wait& w = *in.top_syscall;
    return Candidate{Stage::syscall, w.syscall + " " + w.resource,
                     counted(in.syscall_waiters, "thread") + " blocked in " + w.syscall +
                         (w.resource.empty() ? "" : " on " + w.resource),
                     in.syscall_waiters};
}

// What runs the runtime's tasks, for the saturated stage: "the Go scheduler's 2 Ps
// (GOMAXPROCS=2)", "the Tokio runtime's 2 workers".
std::string task_runners(const Carriers& c) {
    const std::string procs = std::to_string(c.procs);
    if (c.runtime == CarrierRuntime::tokio) return "the Tokio runtime's " + procs + " workers";
    return "the Go scheduler's " + procs + " Ps (GOMAXPROCS=" + procs + ")";
}

// Go with every P busy, Tokio with every worker: the requests no pool explains wait in the
// runtime's run queues, and those unread wait for a task runner to read them (said after, as
// the door queues are).
std::optional<Candidate> saturated_carriers_stage(const Snapshot& s, uint64_t parked_elsewhere) {
    const auto& c = s.carriers;
    char busy[32];
    std::snprintf(busy, sizeof busy, "%.2f", c.busy);
    return Candidate{Stage::carriers, c.pattern,
                     "requests queue for " + task_runners(c) + ": carriers busy " + busy + " of " +
                         std::to_string(c.procs) + " over the window" +
                         (parked_elsewhere ? ", " + counted(parked_elsewhere, "request") + " parked in " + parked_where(s)
                                           : std::string()),
                     parked_elsewhere + static_cast<uint64_t>(c.running + c.runnable)};
}

// Stalled carriers hold up their own virtual threads and the parked ones no pool explains.
std::optional<Candidate> carriers_stage(const Snapshot& s, uint64_t parked_elsewhere) {
    const auto& c = s.carriers;
    if (c.detected && c.stalled <= 0 && carriers_saturated(c) && (parked_elsewhere > 0 || s.requests.waiting_unread > 0))
        return saturated_carriers_stage(s, parked_elsewhere);
    if (!c.detected || c.stalled <= 0) return std::nullopt;
    return Candidate{Stage::carriers, c.pattern,
                     std::to_string(c.stalled) + " of " + std::to_string(c.threads) +
                         (c.runtime == CarrierRuntime::tokio ? " Tokio workers stalled" : " carrier threads stalled") +
                         (c.stalls.empty() ? ""
                                           : " (" + c.stalls.front().reason + " in " + c.stalls.front().syscall + ")"),
                     static_cast<uint64_t>(c.stalled) + parked_elsewhere};
}

// The group with the most threads waiting for a CPU on average; null when there is none.
const ThreadGroup* hungriest_group(const Snapshot& s) {
    const ThreadGroup* hungry = nullptr;
    for (const auto& g : s.thread_groups)
        if (!hungry || g.waiting_for_cpu > hungry->waiting_for_cpu) hungry = &g;
    return hungry;
}

// A single-threaded event loop (Redis, Node, PgBouncer) runnable half of every second: all it
// serves waits behind that thread, which a whole thread's worth of waiting summed over the
// process would never show. Loops only: a lone housekeeping thread (a JIT compiler) waiting on
// a busy host holds no request.
bool lone_loop_starved(const Snapshot& s, const ThreadGroup& g) {
    if (g.threads != 1 || g.waiting_for_cpu < kCpuShortThreads) return false;
    return std::any_of(s.carriers.loops.begin(), s.carriers.loops.end(),
                       [&](const EventLoop& l) { return l.name == g.name; });
}

// The last tick's average, not the threads runnable now: at one instant two runnable threads
// are a busy host's noise (CI: php-fpm's children, 100 ms sleeps, judged "cpu" beside wrk).
std::optional<Candidate> cpu_stage(const Snapshot& s) {
    double waiting = 0;
    for (const auto& g : s.thread_groups) waiting += g.waiting_for_cpu;
    const ThreadGroup* hungry = hungriest_group(s);
    if (!hungry || (waiting < kCpuStarvedThreads && !lone_loop_starved(s, *hungry))) return std::nullopt;
    const auto n = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(waiting)));
    return Candidate{Stage::cpu, hungry->name,
                     counted(n, "thread") + " runnable on average, waiting for a CPU (most in " + hungry->name + ")",
                     n};
}

// Requests queued at the door of a server whose threads wait for a CPU: the CPU stage needs a
// thread's worth of waiting, and a single-threaded loop (Redis) starved by other processes
// waits most of every second yet never reaches it. Its queue at the door is then the CPU's
// doing, and the door alone would send the reader to the server's configuration.
std::string short_of_cpu_clause(const Snapshot& s) {
    const ThreadGroup* hungry = hungriest_group(s);
    if (!hungry || hungry->waiting_for_cpu < kCpuShortThreads) return {};
    char n[32];
    std::snprintf(n, sizeof n, "%.2f", hungry->waiting_for_cpu);
    return hungry->name + " waits for a CPU: " + n + " threads runnable on average over the last second";
}

// --- rank and choose -----------------------------------------------------------------------

// The deepest stage with waiters inside in flight (most waiters first); else the door,
// connector before accept queue. A server's own connection cap (its queue full, nothing
// accepted for seconds) outranks a stage inside that holds a single waiter: one housekeeping
// thread caught parked while one request happened to be in flight is an instant's noise
// (CI: Tomcat's Catalina-utility thread in Unsafe_Park beside one /ping, at maxConnections),
// while a real gate behind a cap holds many (the cap fills because requests pile up there).
const Candidate* choose_limit(const std::vector<Candidate>& ranked) {
    const Candidate* cap = nullptr;
    for (const auto& c : ranked)
        if (c.own_limit) cap = &c;
    for (const auto& c : ranked)
        if (!at_the_door(c.stage) && (!cap || c.waiting >= 2)) return &c;
    if (cap) return cap;
    for (Stage door : {Stage::connector, Stage::accept_queue})
        for (const auto& c : ranked)
            if (c.stage == door) return &c;
    return nullptr;
}

void describe_no_limit(const Snapshot& s, uint64_t overflows, Verdict& v) {
    const uint64_t in_flight = s.requests.in_flight;
    v.stage = Stage::none;
    v.summary = in_flight ? "no queue: " + counted(in_flight, "request") + " in flight, none waiting"
                          : "no queue: nothing is waiting";
    if (overflows) {
        v.summary += "; but " + counted(overflows, "connection") + " overflowed the accept queue in this window";
        v.severity = Severity::warn;
    }
}

void describe_limit(const Candidate& limit, const std::vector<Candidate>& stages, uint64_t overflows,
                    bool pool_is_saturated, Verdict& v) {
    v.stage = limit.stage;
    v.where = limit.where;
    v.waiting = limit.waiting;
    v.summary = limit.detail;
    // Name what the limit backs up into.
    for (Stage door : {Stage::connector, Stage::accept_queue})
        for (const auto& c : stages)
            if (c.stage == door && c.stage != limit.stage) v.summary += "; " + c.detail;
    if (overflows) v.summary += "; " + counted(overflows, "connection") + " overflowed the accept queue";
    v.severity = (overflows || pool_is_saturated || limit.waiting >= 10) ? Severity::critical : Severity::warn;
}

// Retries multiply calls: the peer whose failing requests call it most, said when each one
// makes several calls of which some are retries (model/fan_out.h). Empty otherwise.
std::string retry_clause(const Snapshot& s) {
    const DownstreamPeer* worst = nullptr;
    RetryAmplification worst_r;
    for (const auto& d : s.downstream) {
        RetryAmplification r;
        if (retry_amplification(d.fan_out, r) && (!worst || r.calls_per_failing_request > worst_r.calls_per_failing_request)) {
            worst = &d;
            worst_r = r;
        }
    }
    if (!worst) return {};
    return "each failing request makes " + counted(worst_r.calls_per_failing_request, "call") + " to " + worst->peer +
           " (" + counted(worst_r.retries_per_failing_request, "retry", "retries") + ")";
}

constexpr const char* kInsideLater = "where requests wait inside shows after the first interval";

// The first look with nothing at the door: what is known, and that the inside is not yet.
void describe_first_look(const Snapshot& s, uint64_t overflows, Verdict& v) {
    const uint64_t in_flight = s.requests.in_flight;
    v.stage = Stage::none;
    v.summary = "first look: " + (in_flight ? counted(in_flight, "request") + " in flight, " : std::string()) +
                "none waiting at the door; " + kInsideLater;
    if (overflows) {
        v.summary += "; " + counted(overflows, "connection") + " overflowed the accept queue";
        v.severity = Severity::warn;
    }
}

}  // namespace

std::string dropped_text(uint64_t dropped) {
    return counted(dropped, "request") + " dropped unanswered at " +
           (dropped == 1 ? "its connection's close" : "their connections' close");
}

void compute_verdict(Snapshot& s, Seen seen) {
    settle_loops(s);
    Verdict v;
    std::vector<Candidate> stages;
    door_stages(s, stages);
    bool saturated = false;
    // At the first look only the door is ranked (Seen).
    if (seen == Seen::window) {
        const Inside in = count_inside(s);
        s.parked_in_runtime = parked_in_runtime(s, in);
        const DownstreamPeer* peer = busiest_peer(s);
        saturated = pool_waited_on(s, in, peer);
        gate_and_downstream_stages(s, in, peer, saturated, stages, v);
        if (auto c = syscall_stage(in)) stages.push_back(*c);
        if (auto c = carriers_stage(s, s.parked_in_runtime - parked_at_gate(s, saturated))) stages.push_back(*c);
        if (auto l = loop_limit(s)) stages.push_back({Stage::carriers, l->where, l->detail, l->waiting});
        if (auto c = cpu_stage(s)) stages.push_back(*c);
    }

    std::vector<Candidate> ranked = stages;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const Candidate& a, const Candidate& b) { return a.waiting > b.waiting; });
    for (const auto& c : ranked) v.ranking.push_back({c.stage, c.where, c.waiting});

    uint64_t overflows = 0;
    for (const auto& l : s.listeners) overflows += l.overflows;
    if (const Candidate* limit = choose_limit(ranked)) {
        describe_limit(*limit, stages, overflows, saturated, v);
        if (at_the_door(limit->stage))
            if (const std::string c = short_of_cpu_clause(s); !c.empty()) v.summary += "; " + c;
        if (seen == Seen::first_look) v.summary += std::string(" (first look: ") + kInsideLater + ")";
    } else if (seen == Seen::first_look) {
        describe_first_look(s, overflows, v);
    } else {
        describe_no_limit(s, overflows, v);
    }
    // Requests lost without an answer, whatever limits the rest: clients saw their
    // connections end (a lingering close while every worker is busy, Requests::dropped).
    if (s.requests.dropped) {
        v.summary += "; " + dropped_text(s.requests.dropped);
        v.severity = std::max(v.severity, v.stage == Stage::none ? Severity::warn : Severity::critical);
    }
    if (seen == Seen::window) {
        if (const std::string r = retry_clause(s); !r.empty()) {
            // Nothing queues when requests fail fast: then the amplification is the news.
            v.summary = v.stage == Stage::none ? r + "; " + v.summary : v.summary + "; " + r;
            v.severity = std::max(v.severity, Severity::warn);
        }
    }
    if (s.target.exited) v.summary = "(target exited) " + v.summary;
    s.verdict = v;
}

}  // namespace qscope
