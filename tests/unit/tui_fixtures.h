// Real-shaped snapshots for the TUI's golden tests: what the collector publishes for a
// qs_server in each situation the dashboard must make readable. Built by hand on purpose:
// the view is a pure function of the snapshot, so a snapshot is all a test needs.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "model/snapshot.h"
#include "tui/view.h"

namespace tui_fixtures {

using namespace qscope;

inline Quantiles q(double p50, double p90, double p99, double max) {
    Quantiles x;
    x.p50 = p50;
    x.p90 = p90;
    x.p99 = p99;
    x.max = max;
    return x;
}

inline Snapshot base(int pid = 4242, const std::string& comm = "qs_server") {
    Snapshot s;
    s.target.pid = pid;
    s.target.comm = comm;
    s.target.cmdline = "./qs_server --port 8080 --workers 8";
    s.target.threads = 11;
    s.window_seconds = 83.2;
    s.attached_seconds = 83.2;
    s.taken_at_unix_ms = 1764459667000;  // 2025-11-29 23:41:07 UTC
    s.tick = 83;
    s.probes = {ProbeFamily::sock, ProbeFamily::sched, ProbeFamily::jvm};
    return s;
}

inline Listener listener(uint16_t port, uint32_t backlog, uint32_t queue, uint32_t qmax, uint64_t accepted,
                         uint64_t overflows) {
    Listener l;
    l.port = port;
    l.addr = "127.0.0.1";
    l.backlog = backlog;
    l.accept_queue = queue;
    l.accept_queue_max = qmax;
    l.accepted = accepted;
    l.overflows = overflows;
    l.accept_wait = q(45e-6, 80e-6, 210e-6, 0.0012);
    return l;
}

inline ThreadGroup group(const std::string& name, int threads, int running, int runnable,
                         std::map<std::string, int> blocked_by) {
    ThreadGroup g;
    g.name = name;
    g.threads = threads;
    g.running = running;
    g.runnable = runnable;
    g.waiting_for_cpu = 0.7 * runnable;  // the last tick's average, beside the instant's count
    for (const auto& [k, n] : blocked_by) g.blocked += n;
    g.blocked_by = std::move(blocked_by);
    return g;
}

inline Wait wait(const std::string& group, const std::string& syscall, const std::string& resource,
                 WaitKind kind, int now, double blocked, uint64_t count, std::vector<std::string> stack) {
    Wait w;
    w.group = group;
    w.syscall = syscall;
    w.resource = resource;
    w.kind = kind;
    w.threads_now = now;
    w.blocked_seconds = blocked;
    w.count = count;
    if (count) w.wait = q(blocked / count, 0, blocked / count * 3, 0);
    w.stack = std::move(stack);
    return w;
}

inline DownstreamPeer peer(const std::string& name, uint64_t conns, uint64_t busy, uint64_t busy_max, uint64_t calls,
                           double p50, double p99, double oldest) {
    DownstreamPeer d;
    d.peer = name;
    d.connections = conns;
    d.busy = busy;
    d.busy_max = busy_max;
    d.calls = calls;
    d.call = q(p50, p99 * 0.8, p99, p99 * 1.2);
    d.oldest_busy_seconds = oldest;
    return d;
}

// Healthy: 52 requests/s, 8 idle workers parked on the connection queue's condvar.
inline Snapshot idle() {
    Snapshot s = base();
    s.listeners = {listener(8080, 128, 0, 1, 4318, 0)};
    s.listeners[0].protocols.http1 = 4318;
    auto& r = s.requests;
    r.in_flight = 1;
    r.in_flight_max = 3;
    r.completed = 4318;
    r.rate_per_second = 52;
    r.latency = q(0.0012, 0.0031, 0.0048, 0.0112);
    r.oldest_in_flight_seconds = 0.0009;
    r.status.c2xx = 4310;
    r.status.c4xx = 8;
    r.connections = 6;
    s.thread_groups = {group("qs_server", 2, 0, 0, {{"accept4", 1}, {"clock_nanosleep", 1}}),
                       group("qs-worker-", 8, 1, 0, {{"futex", 7}})};
    s.waits = {wait("qs-worker-", "futex", "0x55d0c8a3e0a8", WaitKind::futex, 7, 570.4, 4318,
                    {"__futex_abstimed_wait_common64+0x105", "pthread_cond_wait+0x1f4", "ConnQueue::pop+0x3c",
                     "worker_main+0x52", "start_thread+0x2f3"})};
    s.verdict.summary = "no queue: 1 requests in flight, none waiting";
    return s;
}

// The accept queue is full and overflowing: the acceptor is paused.
inline Snapshot accept_overflow() {
    Snapshot s = idle();
    s.listeners = {listener(8080, 128, 129, 129, 212, 342), listener(9090, 16, 0, 0, 3, 0)};
    s.listeners[0].accept_wait = q(0.84, 1.9, 2.7, 3.1);
    s.requests.rate_per_second = 3;
    s.requests.in_flight = 0;
    s.thread_groups[0] = group("qs_server", 2, 0, 0, {{"clock_nanosleep", 2}});
    s.verdict.stage = Stage::accept_queue;
    s.verdict.where = ":8080";
    s.verdict.waiting = 129;
    s.verdict.severity = Severity::critical;
    s.verdict.summary =
        "129 connections in the accept queue of :8080 (backlog 128); 342 connections overflowed the accept queue";
    s.verdict.ranking = {{Stage::accept_queue, ":8080", 129}};
    return s;
}

// Virtual-thread-style pile-up in front of a 10-connection DB pool, 10/10 busy.
inline Snapshot pool_saturated() {
    Snapshot s = base();
    s.target.threads = 214;
    s.listeners = {listener(8080, 1024, 0, 17, 9120, 0)};
    s.listeners[0].protocols = {9000, 96, 24, 0};  // HTTP/1.1, h2c, TLS
    auto& r = s.requests;
    r.in_flight = 200;
    r.in_flight_max = 200;
    r.waiting_unread = 1240;
    r.waiting_unread_max = 1302;
    r.oldest_unread_seconds = 4.2;
    r.completed = 3187;
    r.rate_per_second = 38.4;
    r.latency = q(2.61, 2.83, 2.94, 3.02);
    r.oldest_in_flight_seconds = 2.9;
    r.status.c2xx = 3150;
    r.status.c5xx = 37;
    r.dropped = 12;
    r.connections = 1440;
    s.downstream = {peer("127.0.0.1:6379", 4, 0, 2, 9104, 0.00021, 0.0009, 0),
                    peer("127.0.0.1:5432", 10, 10, 10, 3187, 0.251, 0.262, 0.26),
                    peer("10.0.0.7:443", 2, 1, 2, 212, 0.031, 0.090, 0.02)};
    s.downstream[0].protocols.other = 4;   // Redis
    s.downstream[1].protocols.other = 10;  // PostgreSQL
    s.downstream[2].protocols.tls = 2;
    s.thread_groups = {group("qs-worker-", 200, 0, 1, {{"futex", 189}, {"recvfrom", 10}}),
                       group("qs_server", 2, 0, 0, {{"accept4", 1}, {"clock_nanosleep", 1}}),
                       group("qs-pool-house", 1, 0, 0, {{"clock_nanosleep", 1}})};
    s.waits = {wait("qs-worker-", "recvfrom", "127.0.0.1:5432", WaitKind::socket, 10, 812.5, 3187,
                    {"__libc_recv+0x1c", "db_query+0x88", "handle_request+0x1a1", "worker_main+0x52"}),
               wait("qs-worker-", "futex", "0x7f3a5c001f40", WaitKind::futex, 189, 15630.2, 3187,
                    {"__futex_abstimed_wait_common64+0x105", "pthread_cond_timedwait+0x21d", "pool_borrow+0x71",
                     "handle_request+0x15e", "worker_main+0x52", "start_thread+0x2f3"}),
               wait("qs_server", "accept4", "listen :8080", WaitKind::socket, 1, 0.4, 9120, {})};
    s.waits[1].kernel_stack = {"futex_wait_queue+0x6b", "__futex_wait+0x146", "do_futex+0x106"};
    s.verdict.stage = Stage::gate;
    s.verdict.where = "pool to 127.0.0.1:5432";
    s.verdict.waiting = 199;
    s.verdict.severity = Severity::critical;
    s.verdict.summary =
        "requests queue at the pool to 127.0.0.1:5432: 10 of 10 connections busy, 189 threads waiting; 1,240 "
        "requests unread in the connector";
    s.verdict.ranking = {{Stage::connector, "connector :8080", 1240}, {Stage::gate, "pool to 127.0.0.1:5432", 199}};
    s.verdict.pool = PoolGate{"127.0.0.1:5432", 10, 10, 189};
    return s;
}

// A partner API that never answers: every worker blocked reading from it.
inline Snapshot silent_partner() {
    Snapshot s = base();
    s.listeners = {listener(8080, 128, 3, 9, 412, 0)};
    auto& r = s.requests;
    r.in_flight = 8;
    r.in_flight_max = 8;
    r.waiting_unread = 340;
    r.waiting_unread_max = 340;
    r.oldest_unread_seconds = 61.5;
    r.completed = 0;
    r.rate_per_second = 0;
    r.oldest_in_flight_seconds = 118.3;
    r.connections = 351;
    s.downstream = {peer("203.0.113.9:443", 8, 8, 8, 0, 0, 0, 118.3)};
    s.downstream[0].resets = 0;
    s.thread_groups = {group("qs-worker-", 8, 0, 0, {{"read", 8}}),
                       group("qs_server", 2, 0, 0, {{"accept4", 1}, {"clock_nanosleep", 1}})};
    s.waits = {wait("qs-worker-", "read", "203.0.113.9:443", WaitKind::socket, 8, 664.0, 0,
                    {"__libc_read+0x12", "partner_call+0x64", "handle_request+0x1a1", "worker_main+0x52"})};
    s.verdict.stage = Stage::downstream;
    s.verdict.where = "203.0.113.9:443";
    s.verdict.waiting = 8;
    s.verdict.severity = Severity::critical;
    s.verdict.summary = "requests wait on 203.0.113.9:443: 8 calls awaiting a reply, oldest 118.3s; 340 requests unread "
                        "in the connector";
    s.verdict.ranking = {{Stage::connector, "connector :8080", 340}, {Stage::downstream, "203.0.113.9:443", 8}};
    return s;
}

// A JVM whose virtual-thread carriers are pinned in native sleeps.
inline Snapshot carriers_stalled() {
    Snapshot s = base(5151, "java");
    s.target.cmdline = "java -jar app.jar";
    s.target.threads = 41;
    s.listeners = {listener(8080, 100, 0, 4, 1730, 0)};
    auto& r = s.requests;
    r.in_flight = 480;
    r.in_flight_max = 512;
    r.completed = 1730;
    r.rate_per_second = 21;
    r.latency = q(0.21, 1.4, 2.3, 2.6);
    r.oldest_in_flight_seconds = 2.4;
    r.status.c2xx = 1730;
    r.connections = 480;
    auto& c = s.carriers;
    c.detected = true;
    c.pattern = "ForkJoinPool-1-worker";
    c.runtime = CarrierRuntime::jvm;
    c.mount_state_known = true;
    c.threads = 4;
    c.running = 1;
    c.stalled = 3;
    c.stall_events = 97;
    c.per_carrier = {{6101, "ForkJoinPool-1-worker-1", CarrierState::stalled},
                     {6102, "ForkJoinPool-1-worker-2", CarrierState::running},
                     {6103, "ForkJoinPool-1-worker-3", CarrierState::stalled},
                     {6104, "ForkJoinPool-1-worker-4", CarrierState::stalled}};
    c.stalls = {{6103, "clock_nanosleep", "native call", 0.35, true, {"clock_nanosleep+0x6c", "usleep+0x2f",
                                                                        "Java_App_nativeSleep+0x11", "Interpreter"}},
                {6101, "futex", "pinned park", 1.2, true, {"Parker::park+0x12a", "Unsafe_Park+0x9c", "Interpreter"}},
                {6104, "clock_nanosleep", "native call", 0.12, false, {"clock_nanosleep+0x6c"}}};
    s.thread_groups = {group("ForkJoinPool-1-", 5, 1, 0, {{"futex", 2}, {"clock_nanosleep", 2}}),
                       group("java", 1, 0, 0, {{"futex", 1}}), group("C2 CompilerThre", 2, 0, 0, {{"futex", 2}}),
                       group("GC Thread#", 2, 0, 0, {{"futex", 2}})};
    s.parked_virtual_threads = {{{"SynchronousQueue.poll", "HikariPool.getConnection", "App.handle"}, 412}};
    s.verdict.stage = Stage::carriers;
    s.verdict.where = "ForkJoinPool-1-worker";
    s.verdict.waiting = 479;
    s.verdict.severity = Severity::critical;
    s.verdict.summary = "3 of 4 carrier threads stalled (pinned park in futex)";
    s.verdict.ranking = {{Stage::carriers, "ForkJoinPool-1-worker", 479}};
    return s;
}

// Node with a CPU-bound handler: its one event loop busy 96% of the window, requests piling
// up in the connector behind it, an idle V8 worker parked on its condvar. No runtime carriers.
inline Snapshot event_loop() {
    Snapshot s = base(3972, "node");
    s.target.cmdline = "node server.js";
    s.target.threads = 7;
    s.listeners = {listener(3000, 511, 12, 33, 40, 0)};
    auto& r = s.requests;
    r.in_flight = 11;
    r.in_flight_max = 21;
    r.waiting_unread = 29;
    r.waiting_unread_max = 39;
    r.completed = 298;
    r.rate_per_second = 50;
    r.latency = q(0.105, 0.188, 0.432, 0.436);
    r.oldest_in_flight_seconds = 0.106;
    r.status.c2xx = 298;
    r.connections = 40;
    EventLoop l;
    l.tid = l.pid = 3972;
    l.name = "node";
    l.poll = "epoll_pwait";
    l.state = CarrierState::stalled;
    l.utilization = 0.96;
    l.turns = 14;
    l.turns_per_second = 4.7;
    l.longest_turn_seconds = 0.2116;
    l.p99_turn_seconds = 0.2116;
    l.current_turn_seconds = 0.106;
    l.stalls = l.stalls_total = 14;
    l.connections = l.connections_max = 40;
    l.connections_served_total = 40;
    l.in_flight = 11;
    l.unread = 29;
    l.accept_queue = 12;
    l.recent_stalls = {{0.2116, 0.2116, 0, "", "", {"handle (/srv/server.js:12)", "uv__io_poll+0x3a1", "uv_run+0x114"}}};
    s.carriers.loops = {l};
    s.carriers.loop_stall_threshold_seconds = 0.02;
    s.thread_groups = {group("node", 7, 1, 0, {{"futex", 5}, {"epoll_wait", 1}})};
    s.waits = {wait("node", "futex", "0x7f00c0", WaitKind::futex, 5, 249.3, 0,
                    {"__futex_abstimed_wait_common+0x7c", "uv_cond_wait+0x9", "node::WorkerThreadsTaskRunner+0x61"})};
    s.verdict.stage = Stage::carriers;
    s.verdict.where = "event loop of node (tid 3972)";
    s.verdict.waiting = 51;
    s.verdict.severity = Severity::critical;
    s.verdict.summary =
        "requests queue behind the event loop of node (tid 3972): busy 96% of the window, longest turn 212 ms in "
        "handle, in a turn for 106 ms now; 10 requests read and waiting behind it; 29 requests unread in the "
        "connector; 12 connections in the accept queue of :3000 (backlog 511)";
    s.verdict.ranking = {{Stage::carriers, "event loop of node (tid 3972)", 51}};
    return s;
}

// Nested retries around a partner answering 503: requests wait on the partner, and each
// failing one turns into 27 calls. A cache called from a background thread cannot be tied to
// requests: its fan-out is unknown, with the reason.
inline Snapshot retry_storm() {
    Snapshot s = base(5120, "java");
    s.target.threads = 64;
    s.listeners = {listener(8080, 100, 0, 1, 1800, 0)};
    auto& r = s.requests;
    r.in_flight = 8;
    r.in_flight_max = 8;
    r.completed = 1800;
    r.rate_per_second = 360;
    r.latency = q(0.021, 0.026, 0.031, 0.044);
    r.status.c5xx = 1800;
    r.connections = 8;
    r.attribution = {1800, 0};
    r.attribution_total = {5400, 0};
    // Its front speaks gRPC (h2c): every answer :status 200, its own status UNAVAILABLE.
    r.h2.connections = r.h2.followed_connections = 8;
    r.h2.grpc_status = {{"UNAVAILABLE", 5400}};
    DownstreamPeer partner = peer("10.0.0.9:8443", 8, 6, 7, 48600, 0.0006, 0.0011, 0.001);
    FanOut& f = partner.fan_out;
    f.window = {1800, 48600, 46800, 1800, 48600, 46800, 48600, 48600, 0, 0};
    f.total = {5400, 145800, 140400, 5400, 145800, 140400, 145800, 145800, 0, 0};
    f.per_request_p50 = f.per_request_p99 = f.per_request_max = 27;
    f.known = true;
    DownstreamPeer cache = peer("127.0.0.1:6379", 1, 0, 1, 50, 0.0002, 0.0004, 0);
    cache.fan_out.window.calls_outside_requests = 50;
    cache.fan_out.total.calls_outside_requests = 150;
    cache.fan_out.unknown_reason =
        "50 of 50 calls were started by threads serving no request (an async client, a pool or a background task)";
    s.downstream = {partner, cache};
    s.thread_groups = {group("http-nio-8080-exec-", 200, 6, 0, {{"futex", 186}, {"read", 8}}),
                       group("java", 20, 0, 0, {{"futex", 20}})};
    s.verdict.stage = Stage::downstream;
    s.verdict.where = "10.0.0.9:8443";
    s.verdict.waiting = 6;
    s.verdict.severity = Severity::warn;
    s.verdict.summary =
        "requests wait on 10.0.0.9:8443: 6 calls awaiting a reply; each failing request makes 27 calls to "
        "10.0.0.9:8443 (26 retries)";
    s.verdict.ranking = {{Stage::downstream, "10.0.0.9:8443", 6}};
    return s;
}

inline Snapshot target_exited() {
    Snapshot s = idle();
    s.target.exited = true;
    s.target.exit_note = "target PID 4242 exited during the run; figures cover the time it was alive";
    s.verdict.summary = "(target exited) " + s.verdict.summary;
    return s;
}

// A minute of history leading up to `s`: the stage counts ramp up to the snapshot's.
inline qscope::tui::History history_for(const Snapshot& s, int ticks = 60) {
    qscope::tui::History h(60);
    for (int i = 0; i < ticks; ++i) {
        Snapshot x = s;
        x.tick = s.tick - ticks + 1 + i;
        const double f = static_cast<double>(i + 1) / ticks;
        for (auto& l : x.listeners) l.accept_queue = static_cast<uint32_t>(l.accept_queue * f);
        x.requests.waiting_unread = static_cast<uint64_t>(x.requests.waiting_unread * f);
        x.requests.in_flight = static_cast<uint64_t>(x.requests.in_flight * f);
        for (auto& d : x.downstream) d.busy = static_cast<uint64_t>(d.busy * f);
        for (auto& r : x.verdict.ranking) {
            const uint64_t waiting = static_cast<uint64_t>(r.waiting * f);
            // A pool gate's count is its waiters plus the pool's busy calls, scaled alike.
            if (r.stage == Stage::gate && x.verdict.pool) {
                auto& pool = *x.verdict.pool;
                pool.busy = static_cast<uint64_t>(pool.busy * f);
                pool.waiters = waiting - std::min(waiting, pool.busy);
            }
            r.waiting = waiting;
        }
        x.carriers.stalled = static_cast<int>(x.carriers.stalled * f);
        h.feed(x);
    }
    return h;
}

}  // namespace tui_fixtures
