// The verdict on snapshots of each shape an operator meets.
#include <catch2/catch.hpp>

#include "model/verdict.h"

using namespace qscope;

static Listener listener(uint16_t port, uint32_t q, uint32_t backlog, uint64_t overflows = 0) {
    Listener l;
    l.port = port;
    l.accept_queue = q;
    l.accept_queue_max = q;
    l.backlog = backlog;
    l.overflows = overflows;
    return l;
}

static Wait futex_wait(const std::string& group, int threads, std::vector<std::string> stack) {
    Wait w;
    w.group = group;
    w.syscall = "futex";
    w.kind = WaitKind::futex;
    w.resource = "futex:0x7f00";
    w.threads_now = threads;
    w.waiters_now = threads;
    w.stack = std::move(stack);
    return w;
}

static DownstreamPeer peer(const std::string& name, uint64_t conns, uint64_t busy, double oldest = 0.05) {
    DownstreamPeer d;
    d.peer = name;
    d.connections = conns;
    d.busy = busy;
    d.busy_max = busy;
    d.oldest_busy_seconds = oldest;
    return d;
}

TEST_CASE("idle server: no queue", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 128));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::none);
    CHECK(s.verdict.severity == Severity::ok);
    CHECK(s.verdict.summary == "no queue: nothing is waiting");
}

TEST_CASE("platform threads at a saturated pool: the pool is the limit, the connector a consequence", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 3, 100));
    s.requests.in_flight = 200;
    s.requests.waiting_unread = 6800;
    s.downstream.push_back(peer("127.0.0.1:5432", 10, 10));
    s.downstream.push_back(peer("127.0.0.1:6379", 4, 0));
    s.waits.push_back(futex_wait("http-nio-8080-exec", 190,
                                 {"__futex_abstimed_wait_common+0x7c (libc.so.6)", "Parker::park+0x1a (libjvm.so)",
                                  "HikariPool.getConnection (perf-map)"}));
    // GC threads park too; they must not count as requests.
    s.waits.push_back(futex_wait("GC Thread", 2, {"__futex_abstimed_wait_common (libc.so.6)"}));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:5432");
    CHECK(s.verdict.summary ==
          "requests queue at the pool to 127.0.0.1:5432: 10 of 10 connections busy, 190 threads waiting; "
          "6,800 requests unread in the connector; 3 connections in the accept queue of :8080 (backlog 100)");
    CHECK(s.verdict.severity == Severity::critical);
    REQUIRE(!s.verdict.ranking.empty());
    CHECK(s.verdict.ranking.front().stage == Stage::connector);  // most waiters, yet not the limit
}

TEST_CASE("futex waiters are capped by what is in flight", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 128));
    s.requests.in_flight = 3;
    s.waits.push_back(futex_wait("worker", 50, {"queue_pop+0x10 (server)"}));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.waiting == 3);
    CHECK(s.verdict.where == "queue_pop");
}

TEST_CASE("silent partner: every worker waits on one peer", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 128));
    s.requests.in_flight = 200;
    s.requests.waiting_unread = 40;
    s.downstream.push_back(peer("10.0.0.7:443", 200, 200, 31.5));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);
    CHECK(s.verdict.where == "10.0.0.7:443");
    CHECK(s.verdict.summary ==
          "requests wait on 10.0.0.7:443: 200 calls awaiting a reply, oldest 31.5s; 40 requests unread in the connector");
}

TEST_CASE("requests dropped at a close are named, with a queue or without", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 128));
    s.requests.dropped = 1;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::none);
    CHECK(s.verdict.summary == "no queue: nothing is waiting; 1 request dropped unanswered at its connection's close");
    CHECK(s.verdict.severity == Severity::warn);

    // Apache's event MPM with every worker busy: the accept queue backs up, and the lingering
    // closes of idle keep-alive connections drop the requests their clients had sent.
    Snapshot q;
    q.listeners.push_back(listener(9000, 16, 511));
    q.requests.dropped = 25;
    compute_verdict(q);
    CHECK(q.verdict.stage == Stage::accept_queue);
    CHECK(q.verdict.summary ==
          "16 connections in the accept queue of :9000 (backlog 511); 25 requests dropped unanswered at their "
          "connections' close");
    CHECK(q.verdict.severity == Severity::critical);
}

TEST_CASE("slow acceptor: the accept queue is the limit and overflows are named", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(9000, 129, 128, 57));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::accept_queue);
    CHECK(s.verdict.where == ":9000");
    CHECK(s.verdict.summary ==
          "129 connections in the accept queue of :9000 (backlog 128); 57 connections overflowed the accept queue");
    CHECK(s.verdict.severity == Severity::critical);
}

TEST_CASE("connection ceiling: a full queue behind a parked acceptor names the limit", "[verdict]") {
    // Tomcat at maxConnections 100, acceptCount 50: 100 kept-alive connections open, the
    // acceptor parked on its LimitLatch (a futex), the kernel's queue full and overflowing.
    Snapshot s;
    Listener l = listener(23080, 51, 50, 240);
    l.connections = 100;
    l.seconds_since_accept = 6.2;
    s.listeners.push_back(l);
    s.requests.connections = 100;
    compute_verdict(s);
    CHECK(connection_limit_reached(s.listeners[0]));
    CHECK(s.verdict.stage == Stage::accept_queue);
    CHECK(s.verdict.where == ":23080");
    CHECK(s.verdict.summary ==
          "connection limit reached on :23080: 100 connections open, nothing accepted for 6 s (e.g. Tomcat "
          "maxConnections); 51 connections in the accept queue (backlog 50); 240 connections overflowed the accept "
          "queue");
    CHECK(s.verdict.severity == Severity::critical);

    // The few requests the cap lets in, unread for a moment, do not make the connector the limit.
    s.requests.waiting_unread = 2;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::accept_queue);
    CHECK(s.verdict.summary.find("; 2 requests unread in the connector") != std::string::npos);
    s.requests.waiting_unread = 0;

    // Accepting within the last second: a slow acceptor, however full the queue, not a cap.
    s.listeners[0].seconds_since_accept = 0.3;
    compute_verdict(s);
    CHECK_FALSE(connection_limit_reached(s.listeners[0]));
    CHECK(s.verdict.summary.rfind("51 connections in the accept queue of :23080", 0) == 0);

    // A queue with room is no cap, wherever the acceptor is.
    Listener room = listener(23080, 3, 50);
    room.connections = 100;
    room.seconds_since_accept = 6.2;
    CHECK_FALSE(connection_limit_reached(room));
}

TEST_CASE("prefork workers all busy: the accept queue they share is the limit, counted once", "[verdict]") {
    Snapshot s;
    Listener l = listener(80, 12, 511);
    l.processes = 5;  // the master holds it too, and accepts nothing
    l.workers = 4;
    s.listeners.push_back(l);
    s.requests.in_flight = 4;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::accept_queue);
    CHECK(s.verdict.where == ":80");
    CHECK(s.verdict.waiting == 12);
    CHECK(s.verdict.summary ==
          "requests queue in the accept queue of :80 shared by 4 workers, all 4 busy: 12 connections waiting "
          "(backlog 511)");

    // More in flight than workers (Apache's event MPM: 2 processes of 4 threads): each holds
    // several, and how many before it stops accepting is not known here.
    s.requests.in_flight = 8;
    compute_verdict(s);
    CHECK(s.verdict.summary ==
          "requests queue in the accept queue of :80 shared by 4 workers, 8 requests in flight between them: 12 "
          "connections waiting (backlog 511)");

    // Fewer in flight than workers: no claim that all are busy.
    s.requests.in_flight = 2;
    compute_verdict(s);
    CHECK(s.verdict.summary ==
          "requests queue in the accept queue of :80 shared by 4 workers: 12 connections waiting (backlog 511)");
}

TEST_CASE("too few workers: requests unread in the connector", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 128));
    s.requests.in_flight = 8;
    s.requests.waiting_unread = 120;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::connector);
    CHECK(s.verdict.waiting == 120);
}

TEST_CASE("CPU starvation shows as cpu", "[verdict]") {
    Snapshot s;
    s.requests.in_flight = 16;
    ThreadGroup g;
    g.name = "qs-worker";
    g.threads = 16;
    g.running = 2;
    g.runnable = 14;
    g.waiting_for_cpu = 13.6;
    s.thread_groups.push_back(g);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::cpu);
    CHECK(s.verdict.where == "qs-worker");
    CHECK(s.verdict.waiting == 14);
    CHECK(s.verdict.summary.find("14 threads runnable on average, waiting for a CPU (most in qs-worker)") == 0);
}

TEST_CASE("threads caught runnable at one instant are not CPU starvation; a second's average is", "[verdict]") {
    Snapshot s;
    s.requests.in_flight = 4;
    ThreadGroup a, b;
    a.name = "php-fpm";
    a.threads = 20;
    a.runnable = 3;  // the instant the tick looked
    a.waiting_for_cpu = 0.4;
    b.name = "wrk";
    b.threads = 2;
    b.runnable = 1;
    b.waiting_for_cpu = 0.5;
    s.thread_groups = {a, b};
    compute_verdict(s);
    CHECK(s.verdict.stage != Stage::cpu);
    // Summed over groups: together they keep one thread waiting all the time.
    s.thread_groups[0].waiting_for_cpu = 0.7;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::cpu);
    CHECK(s.verdict.where == "php-fpm");
    CHECK(s.verdict.waiting == 1);
}

TEST_CASE("stalled carriers", "[verdict]") {
    Snapshot s;
    s.requests.in_flight = 4;
    s.carriers.detected = true;
    s.carriers.pattern = "ForkJoinPool-1-worker";
    s.carriers.threads = 2;
    s.carriers.stalled = 2;
    CarrierStall st;
    st.reason = "native call";
    st.syscall = "clock_nanosleep";
    s.carriers.stalls.push_back(st);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::carriers);
    CHECK(s.verdict.summary == "2 of 2 carrier threads stalled (native call in clock_nanosleep)");
}

TEST_CASE("virtual threads: hidden gate in front of a saturated pool", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 100));
    s.requests.in_flight = 1500;
    s.carriers.detected = true;
    s.carriers.threads = 2;
    s.carriers.running = 1;
    CarrierThread c1{101, "ForkJoinPool-1-worker-1", CarrierState::idle};
    s.carriers.per_carrier.push_back(c1);
    s.downstream.push_back(peer("127.0.0.1:5432", 10, 10));
    // an idle carrier's futex park is not a gate
    s.waits.push_back(futex_wait("ForkJoinPool-1-worker", 1, {"ForkJoinPool.awaitWork"}));
    compute_verdict(s);
    CHECK(s.parked_in_runtime == 1500 - 10 - 1);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:5432");
    CHECK(s.verdict.summary ==
          "requests queue at the pool to 127.0.0.1:5432: 10 of 10 connections busy, 1,489 requests parked in the runtime");
}

TEST_CASE("an exited target is marked in the summary", "[verdict]") {
    Snapshot s;
    s.target.exited = true;
    compute_verdict(s);
    CHECK(s.verdict.summary.rfind("(target exited)", 0) == 0);
}

TEST_CASE("gate waiters come from live thread states; a pool whose window peak filled it is saturated", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 100));
    s.requests.in_flight = 200;
    auto d = peer("127.0.0.1:5432", 10, 9);  // one connection between two queries right now
    d.busy_max = 10;
    s.downstream.push_back(d);
    ThreadGroup g;
    g.name = "http-nio-8080-exec";
    g.threads = 200;
    g.blocked = 200;
    g.blocked_by = {{"futex", 190}, {"read", 10}};
    s.thread_groups.push_back(g);
    // the wait rows see only part of it: split by call site, some without a stack yet
    s.waits.push_back(futex_wait("http-nio-8080-exec", 84, {"HikariPool.getConnection"}));
    Wait anon = futex_wait("http-nio-8080-exec", 3, {});
    anon.resource = "futex@0x7f1234";
    s.waits.push_back(anon);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:5432");
    CHECK(s.verdict.summary == "requests queue at the pool to 127.0.0.1:5432: 9 of 10 connections busy, 190 threads waiting");
}

// record_test's server, qs_server --workers 4 --pool 2, in the window: 4 requests in flight,
// both pooled connections busy; the workers' states are each case's.
static Snapshot pool_of_two_for_four_workers() {
    Snapshot s;
    s.window_seconds = 3;
    s.listeners.push_back(listener(18700, 0, 128));
    s.requests.in_flight = 4;
    s.downstream.push_back(peer("127.0.0.1:18701", 2, 2));
    ThreadGroup g;
    g.name = "qs-worker";
    g.threads = 4;
    s.thread_groups.push_back(g);
    return s;
}

TEST_CASE("a saturated pool whose waiters are all between calls at the instant is still the pool", "[verdict]") {
    // qs_server --workers 4 --pool 2 (record_test): two workers in the pool's calls, two
    // waiting for a connection most of the window, but at the snapshot's instant both of them
    // just woke (or sleep their 2 ms of service). The window's futex time says they wait.
    Snapshot s = pool_of_two_for_four_workers();
    ThreadGroup& g = s.thread_groups[0];
    g.blocked = 3;
    g.blocked_by = {{"read", 2}, {"clock_nanosleep", 1}};
    Wait w = futex_wait("qs-worker", 0, {"pool_borrow"});
    w.waiters_now = 0;
    w.blocked_seconds = 5.1;  // 1.7 waiters on average over the 3 s
    s.waits.push_back(w);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:18701");
    CHECK(s.verdict.summary ==
          "requests queue at the pool to 127.0.0.1:18701: 2 of 2 connections busy, 2 threads waiting on average");

    // Futex time that no request in flight is left to account for (idle workers parked for
    // work while every request is in a call) is no gate: the peer is the limit.
    s.requests.in_flight = 2;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);

    // A rare waiter (under half a thread on average) is not made one.
    s.requests.in_flight = 4;
    s.waits[0].blocked_seconds = 1.2;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);
}

TEST_CASE("a runnable worker with its own call in progress is counted once, leaving room for the pool's waiter",
          "[verdict]") {
    // record_test on a busy machine: qs_server --workers 4 --pool 2. In flight 4: one worker in
    // its call's read, one in the pool's futex, two runnable, one of which wrote the other call.
    Snapshot s = pool_of_two_for_four_workers();
    ThreadGroup& g = s.thread_groups[0];
    g.blocked = 2;
    g.runnable = 2;
    g.blocked_by = {{"futex", 1}, {"read", 1}};
    g.on_cpu_tids = {11, 12};
    s.calling_tids = {10, 12};  // 10 in its read, 12 runnable
    s.waits.push_back(futex_wait("qs-worker", 1, {"pool_borrow"}));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:18701");
    CHECK(s.verdict.summary == "requests queue at the pool to 127.0.0.1:18701: 2 of 2 connections busy, 1 thread waiting");

    // Neither runnable worker has a call: both hold requests on a CPU and the four are
    // accounted for; the futex waiter may be an idle one.
    s.calling_tids = {10, 13};
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);
}

TEST_CASE("connection ceiling: a lone parked thread beside one request in flight does not outrank the cap",
          "[verdict]") {
    // scenario_test's ceiling profile in CI: Tomcat at maxConnections 100 with virtual threads,
    // one /ping in flight at the instant and Catalina-utility parked in Unsafe_Park.
    Snapshot s;
    Listener l = listener(23080, 51, 50, 556);
    l.connections = 100;
    l.seconds_since_accept = 8;
    s.listeners.push_back(l);
    s.requests.connections = 100;
    s.requests.in_flight = 1;
    ThreadGroup g;
    g.name = "Catalina-utilit";
    g.threads = 2;
    g.blocked = 2;
    g.blocked_by = {{"futex", 1}, {"epoll_wait", 1}};
    s.thread_groups.push_back(g);
    s.waits.push_back(futex_wait("Catalina-utilit", 1, {"Unsafe_Park"}));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::accept_queue);
    CHECK(s.verdict.summary.rfind("connection limit reached on :23080: 100 connections open", 0) == 0);

    // Requests piling up at a gate behind the cap: the gate is the limit, the cap its consequence.
    s.requests.in_flight = 40;
    s.thread_groups[0].blocked_by["futex"] = 38;
    s.waits[0] = futex_wait("Catalina-utilit", 38, {"Unsafe_Park"});
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.summary.find("; connection limit reached on :23080") != std::string::npos);  // what it backs up into
}

TEST_CASE("the thread view alone: workers between two waits at the instant still wait at the gate", "[verdict]") {
    // record_test's thread view (--no-requests) of qs_server --workers 4 --pool 2: two workers
    // wait at the pool most of the window, and at the snapshot's instant neither is in its
    // futex (CI: a recording killed mid-run replayed "no queue").
    Snapshot s;
    s.probes = {ProbeFamily::sched, ProbeFamily::tree};
    s.window_seconds = 2;
    ThreadGroup g;
    g.name = "qs-worker";
    g.threads = 4;
    g.blocked = 4;
    g.blocked_by = {{"read", 2}, {"clock_nanosleep", 2}};
    s.thread_groups.push_back(g);
    Wait w = futex_wait("qs-worker", 0, {"pool_borrow"});
    w.waiters_now = 0;
    w.blocked_seconds = 3.6;  // 1.8 waiters on average over the 2 s
    s.waits.push_back(w);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.summary == "requests wait at a gate: 2 threads blocked on average in pool_borrow (qs-worker)");

    // Under half a thread on average is no gate.
    s.waits[0].blocked_seconds = 0.8;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::none);

    // With the request path observed, an idle instant stays what it is: only a saturated pool
    // (the case above) lets the average stand in.
    s.waits[0].blocked_seconds = 3.6;
    s.probes.add(ProbeFamily::sock);
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::none);
}

TEST_CASE("Unix sockets: nginx waits on php-fpm's socket; php-fpm's queue is named by its path", "[verdict][unix]") {
    Snapshot s;
    s.listeners.push_back(listener(80, 0, 511));
    s.requests.in_flight = 30;
    s.downstream.push_back(peer("unix:/run/php/php8.2-fpm.sock", 30, 30, 0.4));
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);
    CHECK(s.verdict.where == "unix:/run/php/php8.2-fpm.sock");
    CHECK(s.verdict.summary == "requests wait on unix:/run/php/php8.2-fpm.sock: 30 calls awaiting a reply");

    Snapshot fpm;
    Listener l = listener(0, 26, 511);
    l.unix_path = "/run/php/php8.2-fpm.sock";
    fpm.listeners.push_back(l);
    fpm.requests.in_flight = 4;
    compute_verdict(fpm);
    CHECK(fpm.verdict.stage == Stage::accept_queue);
    CHECK(fpm.verdict.where == "unix:/run/php/php8.2-fpm.sock");
    CHECK(fpm.verdict.summary == "26 connections in the accept queue of unix:/run/php/php8.2-fpm.sock (backlog 511)");
}

// Go: goroutines have no OS thread; the Ms are the carriers (every thread of the program).
static Snapshot go_snapshot(uint64_t in_flight) {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 4096));
    s.requests.in_flight = in_flight;
    s.carriers.detected = true;
    s.carriers.runtime = CarrierRuntime::go;
    s.carriers.pattern = "Go scheduler threads (Ms, go1.19.8)";
    s.carriers.procs = 2;
    for (int i = 0; i < 6; i++) s.carriers.per_carrier.push_back({100 + i, "qs_gopool", CarrierState::idle});
    s.carriers.threads = 6;
    ThreadGroup g;
    g.name = "qs_gopool";
    g.threads = 6;
    g.blocked = 5;
    g.blocked_by["futex"] = 4;  // idle Ms parked on their notes
    g.blocked_by["epoll_pwait"] = 1;
    s.thread_groups.push_back(g);
    return s;
}

TEST_CASE("go: goroutines parked at a saturated pool, idle Ms not waiting", "[verdict][go]") {
    Snapshot s = go_snapshot(100);
    s.carriers.idle = 5;
    s.carriers.running = 1;
    s.carriers.busy = 0.2;
    s.downstream.push_back(peer("127.0.0.1:5432", 4, 4));
    s.waits.push_back(futex_wait("qs_gopool", 4,
                                 {"runtime.futex.abi0+0x23 (qs_gopool)", "runtime.futexsleep+0x3c (qs_gopool)",
                                  "runtime.notesleep+0x87 (qs_gopool)", "runtime.stopm+0x95 (qs_gopool)"}));
    compute_verdict(s);
    CHECK(s.parked_in_runtime == 100 - 4 - 1);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.where == "pool to 127.0.0.1:5432");
    CHECK(s.verdict.summary ==
          "requests queue at the pool to 127.0.0.1:5432: 4 of 4 connections busy, 95 requests parked in the Go runtime");
    for (const auto& r : s.verdict.ranking) CHECK(!(r.stage == Stage::gate && r.where.rfind("pool to ", 0) != 0));
}

TEST_CASE("go: every P busy, goroutines wait for one", "[verdict][go]") {
    Snapshot s = go_snapshot(100);
    s.carriers.running = 2;
    s.carriers.idle = 4;
    s.carriers.busy = 1.97;
    compute_verdict(s);
    CHECK(s.parked_in_runtime == 98);
    CHECK(s.verdict.stage == Stage::carriers);
    CHECK(s.verdict.summary ==
          "requests queue for the Go scheduler's 2 Ps (GOMAXPROCS=2): carriers busy 1.97 of 2 over the window, 98 "
          "requests parked in the Go runtime");
    CHECK(s.verdict.waiting == 100);
    // Not saturated (an app that waits on something qscope does not see): an unnamed gate in
    // the runtime, as for virtual threads.
    Snapshot t = go_snapshot(100);
    t.carriers.running = 1;
    t.carriers.busy = 0.5;
    compute_verdict(t);
    CHECK(t.verdict.stage == Stage::gate);
    CHECK(t.verdict.summary == "99 requests parked in the Go runtime");
}

// Tokio (tests/apps/tokio as qscope saw it): 2 workers, the carriers; main parked in block_on,
// a futex waiter of its own group that is no gate.
static Snapshot tokio_snapshot(uint64_t in_flight) {
    Snapshot s;
    s.listeners.push_back(listener(26080, 0, 1024));
    s.requests.in_flight = in_flight;
    s.carriers.detected = true;
    s.carriers.runtime = CarrierRuntime::tokio;
    s.carriers.pattern = "Tokio runtime workers (tokio-runtime-worker)";
    s.carriers.procs = 2;
    for (int i = 0; i < 2; i++) s.carriers.per_carrier.push_back({101 + i, "tokio-runtime-w", CarrierState::idle});
    s.carriers.threads = 2;
    s.carriers.idle = 2;
    ThreadGroup workers;
    workers.name = "tokio-runtime-w";
    workers.threads = 2;
    workers.blocked = 2;
    workers.blocked_by["futex"] = 1;
    workers.blocked_by["epoll_wait"] = 1;
    ThreadGroup main_thread;
    main_thread.name = "qs_tokio";
    main_thread.threads = 1;
    main_thread.blocked = 1;
    main_thread.blocked_by["futex"] = 1;
    s.thread_groups = {workers, main_thread};
    s.waits.push_back(futex_wait("qs_tokio", 1,
                                 {"syscall+0x19 (libc.so.6)", "std::sys::unix::futex::futex_wait+0xd5 (qs_tokio)",
                                  "std::sys::unix::locks::futex::Condvar::wait+0x57 (qs_tokio)",
                                  "tokio::runtime::park::Inner::park+0xb4 (qs_tokio)",
                                  "tokio::runtime::park::CachedParkThread::block_on+0xeb (qs_tokio)"}));
    return s;
}

TEST_CASE("tokio: handlers awaiting a timer are parked in the runtime; main in block_on is no gate",
          "[verdict][tokio]") {
    Snapshot s = tokio_snapshot(32);
    s.carriers.busy = 0.02;
    compute_verdict(s);
    CHECK(s.parked_in_runtime == 32);
    CHECK(s.verdict.stage == Stage::gate);
    CHECK(s.verdict.summary == "32 requests parked in the Tokio runtime");
}

TEST_CASE("tokio: every worker busy, the requests unread wait for one", "[verdict][tokio]") {
    // /spin handlers, 32 clients: 2 requests on the workers, 30 unread on their connections.
    Snapshot s = tokio_snapshot(2);
    s.requests.waiting_unread = 30;
    s.carriers.running = 1;
    s.carriers.runnable = 1;
    s.carriers.idle = 0;
    s.carriers.busy = 2.0;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::carriers);
    CHECK(s.verdict.summary ==
          "requests queue for the Tokio runtime's 2 workers: carriers busy 2.00 of 2 over the window; 30 requests "
          "unread in the connector");
    // Not busy: the door is the stage, as before.
    s.carriers.busy = 1.0;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::connector);
}

// The first tick is the instant of attach: a loop is told from its turns and none has been
// seen. Node under load, attached mid-spike: one V8 worker parked in uv_cond_wait while the
// loop thread is busy and requests pile up at the door.
static Snapshot node_at_attach() {
    Snapshot s;
    s.listeners.push_back(listener(28080, 33, 511));
    s.requests.in_flight = 1;
    s.requests.waiting_unread = 16;
    ThreadGroup g;
    g.name = "node";
    g.threads = 7;
    g.blocked_by["futex"] = 1;
    s.thread_groups.push_back(g);
    s.waits.push_back(futex_wait("node", 1, {"__futex_abstimed_wait_common (libc.so.6)",
                                             "uv_cond_wait (node)", "node::WorkerThreadsTaskRunner (node)"}));
    return s;
}

TEST_CASE("first look: the door is ranked, nothing inside is guessed", "[verdict][loops]") {
    Snapshot guessed = node_at_attach();
    compute_verdict(guessed);  // as a window would read it, with no loop seen: the wrong gate
    REQUIRE(guessed.verdict.stage == Stage::gate);

    Snapshot s = node_at_attach();
    compute_verdict(s, Seen::first_look);
    CHECK(s.verdict.stage == Stage::connector);
    CHECK(s.verdict.severity == Severity::critical);
    CHECK(s.verdict.summary ==
          "16 requests unread in the connector; 33 connections in the accept queue of :28080 (backlog 511) "
          "(first look: where requests wait inside shows after the first interval)");
    for (const auto& r : s.verdict.ranking) CHECK(r.stage != Stage::gate);
}

TEST_CASE("first look with nothing at the door says so, not 'no queue'", "[verdict]") {
    Snapshot s;
    s.listeners.push_back(listener(8080, 0, 128));
    s.requests.in_flight = 40;
    s.waits.push_back(futex_wait("http-nio-8080-exec", 40, {"Parker::park+0x1a (libjvm.so)",
                                                             "HikariPool.getConnection (perf-map)"}));
    compute_verdict(s, Seen::first_look);
    CHECK(s.verdict.stage == Stage::none);
    CHECK(s.verdict.summary ==
          "first look: 40 requests in flight, none waiting at the door; where requests wait inside shows after the "
          "first interval");
    CHECK(s.verdict.ranking.empty());
}
