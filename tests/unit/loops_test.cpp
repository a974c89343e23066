// Event loops: which polling threads are loops, when one is the limit, and idle workers of a
// loop's process that must not read as a gate (model/loops.h), on the shapes measured on
// Node 20 (the CPU-bound case), plus the utilization arithmetic of the sched side.
#include <catch2/catch.hpp>

#include "model/loops.h"
#include "output/json_writer.h"
#include "model/verdict.h"
#include "probes/sched/loops.h"

using namespace qscope;

namespace {

EventLoop polling(int tid, int pid, const std::string& name, double util) {
    EventLoop l;
    l.tid = tid;
    l.pid = pid;
    l.name = name;
    l.poll = "epoll_pwait";
    l.utilization = util;
    l.turns = 10;
    l.longest_turn_seconds = 1.02;
    l.p99_turn_seconds = 1.0;
    l.state = CarrierState::running;
    return l;
}

ThreadServing serving(int tid, int pid, uint64_t adopted, uint64_t conns, uint64_t in_flight, uint64_t unread) {
    ThreadServing t;
    t.tid = tid;
    t.pid = pid;
    t.adopted_total = adopted;
    t.connections = conns;
    t.connections_max = conns;
    t.in_flight = in_flight;
    t.unread = unread;
    return t;
}

// The Node case: one loop on the CPU all the time, 27 in the accept queue, 22
// unread; an idle V8 platform worker in uv_cond_wait on a futex; two threads runnable.
Snapshot node_cpu_bound() {
    Snapshot s;
    Listener l;
    l.port = 3000;
    l.accept_queue = 27;
    l.backlog = 511;
    s.listeners.push_back(l);
    s.requests.in_flight = 1;
    s.requests.waiting_unread = 22;
    ThreadGroup g;
    g.name = "node";
    g.threads = 7;
    g.running = 1;
    g.runnable = 2;
    g.blocked = 4;
    g.blocked_by["futex"] = 1;
    g.blocked_by["epoll_pwait"] = 3;
    g.futex_by_pid[100] = 1;
    s.thread_groups.push_back(g);
    Wait w;
    w.group = "node";
    w.syscall = "futex";
    w.kind = WaitKind::futex;
    w.threads_now = 1;
    w.waiters_now = 1;
    w.stack = {"syscall+0x1d (libc.so.6)", "uv_cond_wait+0x9 (libuv.so.1)", "node::WorkerThreadsTaskRunner+0x80 (libnode.so.108)"};
    s.waits.push_back(w);
    s.carriers.loops.push_back(polling(100, 100, "node", 0.99));
    s.carriers.loops.push_back(polling(105, 100, "node", 0.0));  // a poll set that serves nothing
    s.serving.push_back(serving(100, 100, 50, 23, 1, 22));
    return s;
}

// A server on `port` with `in_flight` requests read, `busy` of its `connections` to `peer` in a
// call.
Snapshot calling_a_peer(uint16_t port, uint64_t in_flight, const std::string& peer, uint64_t connections,
                        uint64_t busy) {
    Snapshot s;
    s.window_seconds = 5;
    Listener l;
    l.port = port;
    l.backlog = 511;
    s.listeners.push_back(l);
    s.requests.in_flight = in_flight;
    DownstreamPeer d;
    d.peer = peer;
    d.connections = connections;
    d.busy = busy;
    d.busy_max = busy;
    s.downstream.push_back(d);
    return s;
}

}  // namespace

TEST_CASE("loops: a polling thread is a loop only when it serves connections", "[loops]") {
    Snapshot s = node_cpu_bound();
    settle_loops(s);
    REQUIRE(s.carriers.loops.size() == 1);
    const EventLoop& l = s.carriers.loops[0];
    CHECK(l.tid == 100);
    CHECK(l.connections_served_total == 50);
    CHECK(l.unread == 22);
    CHECK(l.accept_queue == 27);
    CHECK(loop_waiting(l) == 49);
    settle_loops(s);  // idempotent
    CHECK(s.carriers.loops.size() == 1);
}

TEST_CASE("loops: one connection is not a loop (thread per connection)", "[loops]") {
    Snapshot s;
    s.carriers.loops.push_back(polling(7, 7, "worker", 0.5));
    s.serving.push_back(serving(7, 7, 1, 1, 1, 0));
    settle_loops(s);
    CHECK(s.carriers.loops.empty());
}

TEST_CASE("loops: a worker that polls its one connection and serves many in turn is not a loop", "[loops]") {
    // php-fpm's children poll() the accepted connection before reading it and serve
    // thousands of requests, one connection at a time.
    Snapshot s;
    s.carriers.loops.push_back(polling(9, 9, "php-fpm8.2", 0.99));
    ThreadServing t = serving(9, 9, 5000, 1, 1, 0);
    s.serving.push_back(t);
    settle_loops(s);
    CHECK(s.carriers.loops.empty());
    s.carriers.loops.push_back(polling(9, 9, "php-fpm8.2", 0.99));
    s.serving[0].connections_max = 2;  // held two at once: it multiplexes
    settle_loops(s);
    CHECK(s.carriers.loops.size() == 1);
}

TEST_CASE("loops: a virtual-thread carrier that polls is a carrier, not a loop", "[loops]") {
    // JDK 25's pollers run on the carriers: a carrier polls without waiting, runs other virtual
    // threads, and parks on a futex when idle. Read as a loop, an idle carrier was "busy 98%,
    // stalled" with hundreds of requests "behind" it (docs/scenarios.md, the JVM scenario).
    Snapshot s;
    s.carriers.detected = true;
    CarrierThread c;
    c.tid = 31;
    c.name = "ForkJoinPool-1-worker-1";
    c.state = CarrierState::idle;
    s.carriers.per_carrier.push_back(c);
    s.carriers.loops.push_back(polling(31, 30, "ForkJoinPool-1-", 0.98));
    s.carriers.loops.push_back(polling(40, 30, "nioEventLoopGro", 0.5));  // a platform thread's loop
    s.serving.push_back(serving(31, 30, 400, 40, 30, 0));
    s.serving.push_back(serving(40, 30, 10, 4, 1, 0));
    settle_loops(s);
    REQUIRE(s.carriers.loops.size() == 1);
    CHECK(s.carriers.loops[0].tid == 40);
}

TEST_CASE("verdict: requests queue behind a saturated Node loop, not at uv_cond_wait", "[loops][verdict]") {
    Snapshot s = node_cpu_bound();
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::carriers);
    CHECK(s.verdict.where == "event loop of node (tid 100)");
    CHECK(s.verdict.summary.rfind("requests queue behind the event loop of node (tid 100): busy 99% of the window, "
                                  "longest turn 1.02 s",
                                  0) == 0);
    CHECK(s.verdict.summary.find("22 requests unread in the connector") != std::string::npos);
    CHECK(s.verdict.summary.find("27 connections in the accept queue") != std::string::npos);
    for (const auto& r : s.verdict.ranking) CHECK(r.stage != Stage::gate);
    CHECK(s.verdict.severity == Severity::critical);
    CHECK(s.verdict.summary.find("not told apart") == std::string::npos);
}

TEST_CASE("verdict: in a Tokio program whose workers were not found, a busy loop may be a worker, and it says so",
          "[loops][verdict]") {
    Snapshot s = node_cpu_bound();
    s.carriers.runtime = CarrierRuntime::tokio;  // links the multi-thread runtime, workers unfound
    // On main, the loop is main's own (a current-thread runtime): not a worker.
    compute_verdict(s);
    CHECK(s.verdict.where == "event loop of node (tid 100)");
    CHECK(s.verdict.summary.find("not told apart") == std::string::npos);
    s.carriers.loops[0].pid = s.serving[0].pid = 99;  // tid 100 another thread of process 99
    compute_verdict(s);
    CHECK(s.verdict.where == "event loop of node (tid 100)");
    CHECK(s.verdict.summary.find("; the program runs Tokio's multi-thread runtime, whose workers were not told "
                                 "apart yet: node may be one of them, and the queue the runtime's") != std::string::npos);
    // Found, the workers are carriers, and the loops left are not theirs: no hedge.
    s.carriers.detected = true;
    compute_verdict(s);
    CHECK(s.verdict.summary.find("not told apart") == std::string::npos);
}

// CI's Redis: busy 91% of the window with 228 stalls (a Lua script per turn, 20 PING clients),
// and the last tick's scan landed between two turns: every reply written, no PING sent yet.
// The window's ticks saw ~19 waiting on average; one quiet instant must not read "no queue".
Snapshot redis_between_turns(double waiting_average) {
    Snapshot s;
    s.window_seconds = 6;
    s.requests.in_flight = 16;  // the ports' counters, read a moment after the scan
    s.carriers.loops.push_back(polling(314, 314, "redis-server", 0.91));
    s.carriers.loops[0].stalls = 228;
    s.carriers.loops[0].longest_turn_seconds = 0.028;
    ThreadServing t = serving(314, 314, 24, 21, 0, 0);
    t.waiting_average = waiting_average;
    t.waiting_average_seconds = 6;  // the whole window's ticks
    s.serving.push_back(t);
    return s;
}

TEST_CASE("verdict: a busy loop read between two turns is still the limit, by the window's average", "[loops][verdict]") {
    Snapshot s = redis_between_turns(18.6);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::carriers);
    CHECK(s.verdict.where == "event loop of redis-server (tid 314)");
    CHECK(s.verdict.waiting == 19);
    CHECK(s.verdict.summary.find("19 requests waiting behind it on average over the last 6 s, none at this instant") !=
          std::string::npos);
    // Nothing waited at any tick: an idle stretch, not a queue.
    Snapshot quiet = redis_between_turns(0.4);
    compute_verdict(quiet);
    CHECK(quiet.verdict.stage == Stage::none);
}

// An nginx worker gzipping static files for a few clients (busy 97% of the window) while it
// proxies 40 others to a 200 ms upstream: 41 requests in flight on its connections, 36 of
// them in calls out whose replies have not come. Those wait on the upstream: counted behind
// the loop, they made it rank with the peer (session 29: downstream 40, carriers 39).
TEST_CASE("verdict: a proxy loop's requests waiting on its upstream are not behind the loop", "[loops][verdict]") {
    Snapshot s = calling_a_peer(8080, 41, "127.0.0.1:18311", 64, 36);
    s.carriers.loops.push_back(polling(200, 200, "nginx", 0.97));
    ThreadServing t = serving(200, 200, 44, 44, 41, 0);
    t.calling = 36;
    s.serving.push_back(t);
    for (int i = 0; i < 36; i++) s.calling_tids.push_back(200);
    CHECK(t.waiting() == 4);  // 41 in flight: one in hand, 36 on the upstream
    compute_verdict(s);
    REQUIRE(!s.carriers.loops.empty());
    CHECK(s.carriers.loops[0].calling == 36);
    CHECK(loop_waiting(s.carriers.loops[0]) == 4);
    CHECK(s.verdict.stage == Stage::downstream);
    for (const auto& r : s.verdict.ranking)
        if (r.stage == Stage::carriers) CHECK(r.waiting == 4);
    // The loop's own sentence counts only those behind it.
    Snapshot alone = s;
    alone.downstream.clear();
    alone.calling_tids.clear();
    compute_verdict(alone);
    CHECK(alone.verdict.stage == Stage::carriers);
    CHECK(alone.verdict.summary.find("; 4 requests read and waiting behind it") != std::string::npos);
    // The report names the calls.
    s.probes = {ProbeFamily::sock, ProbeFamily::sched};
    CHECK(render_report(s).find("; 36 calls out in progress") != std::string::npos);

    // A fast upstream and a loop in 170 ms turns: the replies have come, and wait for the loop
    // to read them. Busy calls still (their replies unread), but they wait on the loop: the
    // peer is no stage for them, and the loop holds them.
    Snapshot fast = calling_a_peer(8080, 41, "127.0.0.1:18311", 64, 36);
    fast.downstream[0].replied = 34;
    fast.carriers.loops.push_back(polling(200, 200, "nginx", 0.97));
    ThreadServing f = serving(200, 200, 44, 44, 41, 0);
    f.calling = 2;  // the sock scan counts only the calls whose reply has not come
    fast.serving.push_back(f);
    for (int i = 0; i < 36; i++) fast.calling_tids.push_back(200);
    compute_verdict(fast);
    CHECK(fast.verdict.stage == Stage::carriers);
    CHECK(fast.verdict.waiting == 38);
    for (const auto& r : fast.verdict.ranking)
        if (r.stage == Stage::downstream) CHECK(r.waiting == 2);
    // Every reply come: the peer waits for nothing, and is no stage at all.
    fast.downstream[0].replied = 36;
    compute_verdict(fast);
    for (const auto& r : fast.verdict.ranking) CHECK(r.stage != Stage::downstream);
}

TEST_CASE("loops: waiting on a serving thread, averaged over the window's ticks", "[loops]") {
    ThreadServing base;
    base.waiting_samples_total = 4;
    base.waiting_sum_total = 10;
    ThreadServing now = serving(1, 1, 0, 21, 3, 17);
    CHECK(now.waiting() == 19);  // the 17 unread and 2 read behind the one in hand
    now.waiting_samples_total = 7;
    now.waiting_sum_total = 10 + 19 + 0 + 20;
    CHECK(now.waiting_average_since(base) == Approx(13.0));
    CHECK(now.waiting_average_since(now) == 0);  // no tick since: nothing to average
    ThreadServing none;
    CHECK(now.waiting_average_since(none) == Approx(49.0 / 7));
}

TEST_CASE("verdict: a loop thread on a futex while it holds requests is a gate", "[loops][verdict]") {
    Snapshot s = node_cpu_bound();
    s.carriers.loops[0].blocked_in = "futex";
    s.carriers.loops[0].utilization = 0.5;  // not saturated, not stalled: no loop limit
    s.carriers.loops[0].longest_turn_seconds = 0.005;
    s.thread_groups[0].futex_by_pid[100] = 2;
    s.thread_groups[0].blocked_by["futex"] = 2;
    s.requests.in_flight = 5;
    settle_loops(s);
    CHECK(idle_futex_waiters(s, s.thread_groups[0]) == 1);
}

TEST_CASE("verdict: an idle loop with a queue at the door is not the limit", "[loops][verdict]") {
    Snapshot s = node_cpu_bound();
    s.carriers.loops[0].utilization = 0.2;
    s.carriers.loops[0].longest_turn_seconds = 0.004;
    compute_verdict(s);
    CHECK(s.verdict.where.find("event loop") == std::string::npos);
}

TEST_CASE("verdict: a stalled loop names where the turn blocked", "[loops][verdict]") {
    Snapshot s = node_cpu_bound();
    EventLoop& l = s.carriers.loops[0];
    l.utilization = 0.6;
    l.stalls = 3;
    LoopStall st;
    st.seconds = 1.02;
    st.blocked_seconds = 1.0;
    st.on_cpu_seconds = 0.02;
    st.syscall = "epoll_pwait";
    st.stack = {"epoll_pwait+0x1 (libc.so.6)", "uv_run+0x1 (node)", "node::SyncProcessRunner::Run+0x3 (libnode.so.108)"};
    l.recent_stalls.push_back(st);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::carriers);
    CHECK(s.verdict.summary.find("blocked in epoll_pwait at node::SyncProcessRunner::Run") != std::string::npos);
}

// memcached's 4 libevent workers on a 2-CPU host that Python clients keep busy: each loop
// ~20% busy with turns of ~0.3 ms at p99, but one turn took 24 ms, 21 of them runnable behind
// the clients' threads; a request unread at the instant; threads runnable on average.
static Snapshot loop_starved_of_cpu() {
    Snapshot s;
    s.window_seconds = 5;
    s.requests.waiting_unread = 1;
    s.carriers.loop_stall_threshold_seconds = 0.02;
    for (int tid = 101; tid <= 104; tid++) {
        s.carriers.loops.push_back(polling(tid, 100, "mc-worker", 0.2));
        s.serving.push_back(serving(tid, 100, 4, 4, 0, tid == 101 ? 1 : 0));
    }
    EventLoop& l = s.carriers.loops[0];
    l.longest_turn_seconds = 0.024;
    l.stalls = l.stalls_total = 1;
    l.stalls_runqueue = l.stalls_runqueue_total = 1;
    LoopStall st;
    st.seconds = 0.024;
    st.on_cpu_seconds = 0.003;
    st.runqueue_seconds = 0.021;
    l.recent_stalls.push_back(st);
    ThreadGroup g;
    g.name = "mc-worker";
    g.threads = 4;
    g.running = 1;
    g.runnable = 1;
    g.blocked = 2;
    g.blocked_by["epoll_wait"] = 2;
    g.waiting_for_cpu = 1.2;
    s.thread_groups.push_back(g);
    return s;
}

TEST_CASE("verdict: a loop whose stall was a wait for a CPU is the CPU's limit, not the loop's", "[loops][verdict]") {
    Snapshot s = loop_starved_of_cpu();
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::cpu);
    CHECK(s.verdict.where.find("event loop") == std::string::npos);

    // One stall of its own work among them: the loop is stalled, and its longest turn is
    // named for what it waited on.
    Snapshot own = loop_starved_of_cpu();
    own.carriers.loops[0].stalls = own.carriers.loops[0].stalls_total = 2;
    own.serving[0].unread = 3;
    own.requests.waiting_unread = 3;
    compute_verdict(own);
    CHECK(own.verdict.stage == Stage::carriers);
    CHECK(own.verdict.summary.find("longest turn 24 ms waiting for a CPU") != std::string::npos);
    // One of its own among 75 that were waits for a CPU: a steal inside a turn reads so on a VM
    // (CI, Redis beside ten hogs). Still the CPU's limit; ten of 75 are the loop's.
    Snapshot steal = loop_starved_of_cpu();
    steal.carriers.loops[0].stalls = 75;
    steal.carriers.loops[0].stalls_runqueue = 74;
    compute_verdict(steal);
    CHECK(steal.verdict.stage == Stage::cpu);
    steal.carriers.loops[0].stalls_runqueue = 65;
    steal.serving[0].unread = 3;
    steal.requests.waiting_unread = 3;
    compute_verdict(steal);
    CHECK(steal.verdict.stage == Stage::carriers);

    // The report gives each stall's parts, and the loop's share runnable, where there are any.
    s.probes = {ProbeFamily::sock, ProbeFamily::sched};
    const std::string report = render_report(s);
    CHECK(report.find("busy 20% (6% waiting for a CPU)") == std::string::npos);  // no share set
    CHECK(report.find("1 stalls (1 made by a wait for a CPU)") != std::string::npos);
    CHECK(report.find("stall 24.0ms: on CPU 3.0ms, waiting for a CPU 21.0ms, blocked 0.0ms") != std::string::npos);

    // Busy all the window, most of it runnable behind other threads: not saturated by its own
    // work, so the CPU's limit. Busy with its own stall as well, it is the loop's, and the
    // share waiting for a CPU is named.
    Snapshot busy = loop_starved_of_cpu();
    busy.carriers.loops[0].utilization = 0.95;
    busy.carriers.loops[0].runqueue_share = 0.6;
    busy.serving[0].unread = 3;
    busy.requests.waiting_unread = 3;
    Snapshot busy_own = busy;
    compute_verdict(busy);
    CHECK(busy.verdict.stage == Stage::cpu);
    busy_own.carriers.loops[0].stalls = busy_own.carriers.loops[0].stalls_total = 2;
    compute_verdict(busy_own);
    CHECK(busy_own.verdict.stage == Stage::carriers);
    CHECK(busy_own.verdict.summary.find("busy 95% of the window, most of it (60%) waiting for a CPU") !=
          std::string::npos);
    // Mostly working, a little runnable: saturated.
    busy.carriers.loops[0].runqueue_share = 0.2;
    compute_verdict(busy);
    CHECK(busy.verdict.stage == Stage::carriers);
}

// CI: Redis beside ten CPU hogs, a snapshot taken 23 ms into a turn the hogs had cut. The turn
// going on is judged as one that ended: by its time outside the run queue.
TEST_CASE("verdict: a turn going on now, most of it a wait for a CPU, is no stall of the loop's", "[loops][verdict]") {
    Snapshot s = loop_starved_of_cpu();
    EventLoop& l = s.carriers.loops[0];
    l.stalls = l.stalls_runqueue = 0;
    l.recent_stalls.clear();
    l.current_turn_seconds = 0.023;
    l.current_turn_runqueue_seconds = 0.018;
    s.serving[0].unread = 3;
    s.requests.waiting_unread = 3;
    CHECK(!current_turn_stalled(l, 0.02));
    CHECK(!loop_stalled(l, 0.02));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::cpu);

    // The same turn on a CPU is the loop's stall, and a stall mostly runnable says so.
    Snapshot own = s;
    own.carriers.loops[0].current_turn_runqueue_seconds = 0.001;
    CHECK(current_turn_stalled(own.carriers.loops[0], 0.02));
    compute_verdict(own);
    CHECK(own.verdict.stage == Stage::carriers);
    CHECK(own.verdict.summary.find("in a turn for 23 ms now;") != std::string::npos);
    Snapshot long_turn = s;
    long_turn.carriers.loops[0].current_turn_seconds = 0.060;
    long_turn.carriers.loops[0].current_turn_runqueue_seconds = 0.035;
    compute_verdict(long_turn);
    CHECK(long_turn.verdict.stage == Stage::carriers);
    CHECK(long_turn.verdict.summary.find("in a turn for 60 ms now (35 ms of it waiting for a CPU)") !=
          std::string::npos);
}

TEST_CASE("verdict: a queue at the door of a server short of a CPU names the CPU", "[loops][verdict]") {
    // Redis pinned beside CPU hogs: its one thread runnable 83% of every second, its turns
    // short, 20 PINGs unread.
    Snapshot s;
    s.window_seconds = 5;
    s.requests.waiting_unread = 20;
    ThreadGroup g;
    g.name = "redis-server";
    g.threads = 1;
    g.runnable = 1;
    g.waiting_for_cpu = 0.83;
    s.thread_groups.push_back(g);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::connector);
    CHECK(s.verdict.summary ==
          "20 requests unread in the connector; redis-server waits for a CPU: 0.83 threads runnable on average over "
          "the last second");

    // Its one thread an event loop: everything it serves waits behind that thread, the CPU's
    // stage though no whole thread's worth waits.
    Snapshot lone = s;
    lone.carriers.loops.push_back(polling(7, 7, "redis-server", 0.3));
    lone.serving.push_back(serving(7, 7, 20, 20, 0, 20));
    compute_verdict(lone);
    CHECK(lone.verdict.stage == Stage::cpu);
    CHECK(lone.verdict.summary == "1 thread runnable on average, waiting for a CPU (most in redis-server); 20 requests "
                                  "unread in the connector");

    // A host's ordinary noise (a fifth of a thread) is not named.
    s.thread_groups[0].waiting_for_cpu = 0.2;
    compute_verdict(s);
    CHECK(s.verdict.summary == "20 requests unread in the connector");
}

// Node behind a 4-socket http.Agent (loops_test's pool case): the loop idle in its poll, 32
// requests read on its connections, 4 in calls to the pool's peer, the other 28 queued in the
// agent; 4 idle platform workers in uv_cond_wait the whole window.
static Snapshot node_at_a_pool() {
    Snapshot s = calling_a_peer(3000, 32, "127.0.0.1:5432", 4, 4);
    ThreadGroup g;
    g.name = "node";
    g.threads = 7;
    g.blocked = 7;
    g.blocked_by["futex"] = 4;
    g.blocked_by["epoll_pwait"] = 3;
    g.futex_by_pid[100] = 4;
    s.thread_groups.push_back(g);
    Wait w;
    w.group = "node";
    w.syscall = "futex";
    w.kind = WaitKind::futex;
    w.threads_now = 4;
    w.waiters_now = 4;
    w.blocked_seconds = 4 * 5.0;
    w.stack = {"syscall+0x1d (libc.so.6)", "uv_cond_wait+0x9 (node)", "node::PlatformWorkerThread+0x10b (node)"};
    s.waits.push_back(w);
    EventLoop loop = polling(100, 100, "node", 0.2);
    loop.state = CarrierState::idle;
    loop.longest_turn_seconds = 0.004;
    s.carriers.loops.push_back(loop);
    s.serving.push_back(serving(100, 100, 32, 32, 32, 0));
    return s;
}

// The same shape for a process with no idle workers: `threads` threads, all in epoll_wait.
static Snapshot loop_process_at_a_pool(const std::string& name, int threads) {
    Snapshot s = node_at_a_pool();
    ThreadGroup& g = s.thread_groups[0];
    g.name = name;
    g.threads = g.blocked = threads;
    g.blocked_by = {{"epoll_wait", threads}};
    g.futex_by_pid.clear();
    s.waits.clear();
    s.carriers.loops[0].name = name;
    return s;
}

TEST_CASE("verdict: requests an idle loop holds for a saturated pool are the pool's waiters, not its idle workers",
          "[loops][verdict]") {
    Snapshot s = node_at_a_pool();
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:5432");
    // Before: "4 of 4 connections busy, 4 threads waiting on average" (the idle workers).
    CHECK(s.verdict.summary ==
          "requests queue at the pool to 127.0.0.1:5432: 4 of 4 connections busy, 28 requests waiting in node's event loop");
    REQUIRE(s.verdict.pool);
    CHECK(s.verdict.pool->waiters == 28);

    // Every request in a call: nothing waits inside, the peer is the limit.
    s = node_at_a_pool();
    s.serving[0].in_flight = 4;
    s.requests.in_flight = 4;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);

    // A loop in a turn holds the request it serves; threads on a CPU hold theirs.
    s = node_at_a_pool();
    s.carriers.loops[0].state = CarrierState::running;
    s.thread_groups[0].running = 1;
    s.thread_groups[0].blocked = 6;
    compute_verdict(s);
    REQUIRE(s.verdict.pool);
    CHECK(s.verdict.pool->waiters == 26);
}

TEST_CASE("verdict: a request a loop holds while a connection is free waits for no pool", "[loops][verdict]") {
    // h2_test's instant: nginx, 100 HTTP/2 streams, one upstream connection opened per stream
    // (each busy once: busy_max 100), 99 calls out and 1 stream between its reply and its next
    // call. The peer is the limit; there is no pool.
    // Every connection busy once in the window, `busy` of them now, `in_flight` requests read.
    const auto at = [](uint64_t connections, uint64_t busy, uint64_t in_flight) {
        Snapshot s = loop_process_at_a_pool("nginx", 1);
        s.downstream[0].connections = s.downstream[0].busy_max = connections;
        s.downstream[0].busy = busy;
        s.requests.in_flight = in_flight;
        s.serving = {serving(100, 100, 2, 2, in_flight, 0)};
        compute_verdict(s);
        return s;
    };
    Snapshot s = at(100, 99, 100);
    CHECK(s.verdict.stage == Stage::downstream);
    CHECK(s.verdict.where == "127.0.0.1:5432");
    CHECK_FALSE(s.verdict.pool);

    // More held than connections free: they wait for the pool, as in PgBouncer's hand-over.
    s = at(4, 3, 19);
    CHECK(s.verdict.where == "pool to 127.0.0.1:5432");
    REQUIRE(s.verdict.pool);
    CHECK(s.verdict.pool->waiters == 16);
}

TEST_CASE("verdict: requests two idle loops hold with no call out wait inside them, ahead of the peer's calls",
          "[loops][verdict]") {
    // HAProxy, 2 threads, a backend server with maxconn 8 and one more connection kept idle:
    // the pool is not seen as saturated (8 busy of 9), and 24 requests sit in its queue.
    Snapshot s = loop_process_at_a_pool("haproxy", 2);
    s.downstream[0].connections = 9;
    s.downstream[0].busy = 8;
    s.downstream[0].busy_max = 8;
    EventLoop second = s.carriers.loops[0];
    second.tid = 101;
    s.carriers.loops.push_back(second);
    s.serving = {serving(100, 100, 16, 16, 16, 0), serving(101, 100, 16, 16, 16, 0)};
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "haproxy's 2 event loops");
    CHECK(s.verdict.summary ==
          "requests wait inside haproxy's 2 event loops: 24 in flight with no call out and no turn running, beside 8 "
          "calls in progress to 127.0.0.1:5432 (a cap on them, as a pool's size or a connection limit sets; or "
          "another wait of the application)");
    REQUIRE(s.verdict.ranking.size() == 2);
    CHECK(s.verdict.ranking[1].stage == Stage::downstream);
    CHECK(s.verdict.ranking[1].waiting == 8);

    // Replies come and not yet read: the calls are still the loops' (in progress, counted
    // beside), but the peer waits on none of them; the peer's stage counts the others.
    s.downstream[0].replied = 3;
    compute_verdict(s);
    CHECK(s.verdict.summary.find("beside 8 calls in progress to 127.0.0.1:5432, 3 of them answered, the replies not "
                                 "yet read (a cap") != std::string::npos);
    REQUIRE(s.verdict.ranking.size() == 2);
    CHECK(s.verdict.ranking[1].waiting == 5);
    // CI's instant: every call answered. The sentence says so, and no stage blames the peer.
    s.downstream[0].busy = s.downstream[0].replied = 2;
    compute_verdict(s);
    CHECK(s.verdict.where == "haproxy's 2 event loops");
    CHECK(s.verdict.summary.find("beside 2 calls in progress to 127.0.0.1:5432, all answered, the replies not yet "
                                 "read (a cap") != std::string::npos);
    for (const auto& r : s.verdict.ranking) CHECK(r.stage != Stage::downstream);
    s.downstream[0].busy = 8;
    s.downstream[0].replied = 0;

    // CI's instant: both loops in their turns, on a CPU, 28 read and 8 in calls. Each loop
    // holds one request once, not once as a turn and again as a thread on a CPU: 18 wait.
    s.carriers.loops[0].state = CarrierState::running;
    s.carriers.loops[1].state = CarrierState::runnable;
    s.serving = {serving(100, 100, 16, 16, 12, 4), serving(101, 100, 16, 16, 16, 0)};
    s.requests.in_flight = 28;
    s.thread_groups[0].running = 1;
    s.thread_groups[0].runnable = 1;
    s.thread_groups[0].blocked = 0;
    s.thread_groups[0].blocked_by.clear();
    s.thread_groups[0].on_cpu_tids = {100, 101};
    compute_verdict(s);
    CHECK(s.verdict.where == "haproxy's 2 event loops");
    CHECK(s.verdict.waiting == 18);
    s.thread_groups[0].on_cpu_tids.clear();  // a recording without the tids: counted twice, a floor
    compute_verdict(s);
    CHECK(s.verdict.waiting == 16);

    // A saturated loop is its own stage: what waits behind it is not held in a queue.
    s.carriers.loops[0].utilization = 0.95;
    compute_verdict(s);
    for (const auto& r : s.verdict.ranking) CHECK(r.stage != Stage::gate);
}

TEST_CASE("verdict: long polls an idle loop holds with no call in progress are no queue", "[loops][verdict]") {
    // A server holding requests open until an event (long polling, a blocking pop): in flight,
    // no call out, nothing busy. Nothing says they wait for a limit.
    Snapshot s = node_at_a_pool();
    s.downstream.clear();
    s.waits.clear();
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::none);
    for (const auto& r : s.verdict.ranking) CHECK(r.stage != Stage::gate);
}

TEST_CASE("loop utilization: completed turns plus the one going on, clamped", "[loops]") {
    // 10 s window, 6 s of completed turns, a turn going on for the last 2 s: 80%.
    CHECK(loop_utilization(6'000'000'000, 18'000'000'000, 10'000'000'000, 20'000'000'000) == Approx(0.8));
    // A turn begun before the window counts from the window's start.
    CHECK(loop_utilization(0, 5'000'000'000, 10'000'000'000, 20'000'000'000) == Approx(1.0));
    CHECK(loop_utilization(30'000'000'000, 0, 10'000'000'000, 20'000'000'000) == Approx(1.0));
    CHECK(loop_utilization(0, 0, 10, 10) == 0);
}

TEST_CASE("an io_uring loop: accepts through the ring are named unseen, and no connection cap is read from them",
          "[loops][verdict]") {
    // qs_uring idle with a full accept queue: the sock family saw no accept() for seconds,
    // which for a thread-per-connection server would mean a cap; here it means nothing.
    Snapshot s;
    Listener l;
    l.port = 26041;
    l.accept_queue = 129;
    l.backlog = 128;
    l.connections = 20;
    l.seconds_since_accept = 6;
    s.listeners.push_back(l);
    s.requests.connections = 20;
    EventLoop loop = polling(300, 300, "qs_uring", 0.3);
    loop.poll = "io_uring_enter";
    s.carriers.loops.push_back(loop);
    s.serving.push_back(serving(300, 300, 20, 20, 0, 0));
    compute_verdict(s);
    REQUIRE(s.carriers.loops.size() == 1);
    CHECK(accepts_unseen(s));
    CHECK(s.verdict.stage == Stage::accept_queue);
    CHECK(s.verdict.summary.find("connection limit") == std::string::npos);
    const auto unseen = std::count_if(s.partial.begin(), s.partial.end(), [](const std::string& p) {
        return p.find("io_uring loop accepts through its ring") != std::string::npos;
    });
    CHECK(unseen == 1);
    compute_verdict(s);  // idempotent: a replayed window runs it again
    CHECK(std::count(s.partial.begin(), s.partial.end(), s.partial.back()) == 1);

    // The same listener behind an epoll loop: the cap is read as before.
    s.partial.clear();
    s.carriers.loops[0].poll = "epoll_wait";
    compute_verdict(s);
    CHECK_FALSE(accepts_unseen(s));
    CHECK(s.verdict.summary.find("connection limit reached on :26041") == 0);
}
