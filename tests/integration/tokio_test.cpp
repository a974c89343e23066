// Tokio, Rust's work-stealing runtime: an HTTP/1.1 server (tests/apps/tokio, built with
// Debian's cargo from its packaged crates into build/targets/qs_tokio) with 2 workers, found
// as Tokio by its threads' name, its workers as carriers. Before, its workers were taken for
// event loops: a worker parked on its condvar read as a loop in a 100 ms turn "blocked in
// futex", and 25 requests awaiting their timers as "waiting behind it". Oracle: the program's
// own counts of its handlers in each state (awaiting a timer, blocking their worker, in the
// blocking pool), written every 10 ms by a thread outside the runtime and sampled every 10 ms
// across qscope's window; the worker threads' schedstat.
//  - sleep: handlers awaiting a 100 ms timer. Parked in the Tokio runtime, as many as the
//    program counts at the window's end (within 3); no worker stalled, no loop, no gate.
//  - block: handlers sleeping 30 ms on their worker (std::thread::sleep). Both workers
//    stalled in clock_nanosleep, as the program counts 2 blocking; stall events at least the
//    handlers the program completed in the window (each one is a stall).
//  - pool: handlers awaiting a 100 ms job on the blocking pool (spawn_blocking), whose 32
//    threads share the workers' name. Still 2 workers, none stalled; parked as counted.
//  - spin: handlers spinning 5 ms on their worker. Busy 2 of 2 (schedstat's CPU + runqueue
//    share of the two workers within 0.3), the verdict the workers' limit.
//  - lock: handlers computing 200 ms while they hold a std::sync::Mutex: the other worker's
//    handler blocks on it in futex, where a parked worker waits too. Stalled 1, as the program
//    counts 1 waiting for the lock; the verdict the stalled worker.
//  - renamed: the pool case with the program naming its runtime's threads qs-api-0, qs-api-1,
//    ... (Builder::thread_name_fn): no thread named as Tokio's, the workers found by a
//    worker's stack; still 2 workers beside the pool's threads of the same names.
//  - renamed, busy at attach: the renamed workers all spinning on handlers while qscope
//    attaches, so none is found then: a Tokio program with no workers found, a verdict on a
//    worker read as a loop hedged; once the load stops and they park, found by a later look
//    (a note says when), both idle, and neither read as an event loop.
//  - current-thread: the runtime on main alone, with no thread named as a worker, is an
//    event loop, read as one: stalled in the handlers' sleep, as the program counts one.
// Ports 27150-27159.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <catch2/catch.hpp>
#include <cstdio>
#include <mutex>
#include <thread>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

bool have_tokio_app() { return access(target_bin("qs_tokio").c_str(), X_OK) == 0; }

// The program's counters file, read every 10 ms on a thread of its own, each read kept with
// its moment (now_s()).
class Counts {
public:
    explicit Counts(std::string path) : path_(std::move(path)), th_([this] {
          while (!stop_) {
              json c = read_counters(path_);
              if (!c.is_null()) {
                  std::lock_guard<std::mutex> g(mu_);
                  rows_.emplace_back(now_s(), std::move(c));
              }
              sleep_s(0.01);
          }
      }) {}
    ~Counts() { finish(); }
    void finish() {
        stop_ = true;
        if (th_.joinable()) th_.join();
    }
    // {min, max} of `key` over the reads in [t0, t1]; {1, 0} when there is none.
    std::pair<long, long> range(const std::string& key, double t0, double t1) {
        finish();
        std::pair<long, long> r{LONG_MAX, LONG_MIN};
        for (const auto& [t, c] : rows_)
            if (t >= t0 && t <= t1) r = {std::min(r.first, c[key].get<long>()), std::max(r.second, c[key].get<long>())};
        return r.first > r.second ? std::pair<long, long>{1, 0} : r;
    }
    // `key` at the last read at or before t; -1 when there is none.
    long at(const std::string& key, double t) {
        finish();
        long v = -1;
        for (const auto& [ts, c] : rows_)
            if (ts <= t) v = c[key].get<long>();
        return v;
    }

private:
    std::string path_;
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::vector<std::pair<double, json>> rows_;
    std::thread th_;
};

struct Run {
    json snap;
    double start_s = 0, end_s = 0;  // qscope's window on now_s()'s clock
    std::string load_out;
};

// qs_tokio with 2 workers (0: a current-thread runtime) on `port`, writing its counters file;
// with `thread_name`, its runtime's threads are named thread_name-0, thread_name-1, ...
struct TokioApp {
    ScratchFile counters, counters_tmp;  // before the process: it is stopped first
    Proc app;
    explicit TokioApp(uint16_t port, int workers = 2, const std::string& thread_name = "")
        : counters("/tmp/qs-tokio-" + std::to_string(port) + ".json"), counters_tmp(counters.path + ".tmp") {
        require_free_port(port);
        std::map<std::string, std::string> env;
        if (!thread_name.empty()) env["QS_TOKIO_THREAD_NAME"] = thread_name;
        app = spawn({target_bin("qs_tokio"), std::to_string(port), std::to_string(workers), counters.path}, env);
        REQUIRE(wait_for_port(port, 10));
    }
};

// `clients` wrk connections on `path` for the whole run, and one `qscope snapshot` of 3 s
// once the load is steady.
Run observe(TokioApp& t, uint16_t port, const std::string& path, int clients) {
    Run r;
    Proc wrk = spawn({"/usr/bin/wrk", "-t1", "-c" + std::to_string(clients), "-d40s", "--timeout", "20s",
                      "http://127.0.0.1:" + std::to_string(port) + path});
    // Steady: every client has had an answer once.
    for (double until = now_s() + 15; now_s() < until; sleep_s(0.1)) {
        const json c = read_counters(t.counters.path);
        if (!c.is_null() && c["completed"].get<long>() >= clients) break;
    }
    sleep_s(1.0);
    Proc snap = spawn({qscope_bin(), "snapshot", "--pid", std::to_string(t.app.pid()), "--duration", "3", "--json"});
    REQUIRE(wait_attached(snap.pid(), 30));
    REQUIRE(snap.wait(40) == 0);
    const double exited = now_s();
    const auto wall_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
    wrk.kill_and_wait();
    r.load_out = wrk.out() + wrk.err();
    r.snap = qscope_json(snap.out());
    r.end_s = exited - static_cast<double>(wall_ms - r.snap["taken_at_unix_ms"].get<int64_t>()) / 1e3;
    r.start_s = r.end_s - r.snap["window_seconds"].get<double>();
    return r;
}

bool skipped() {
    if (!require_root()) return true;
    if (!have_tokio_app()) {
        skip("build/targets/qs_tokio not built: no Debian cargo, rustc or librust-tokio-dev (.ci/setup installs them)");
        return true;
    }
    if (access("/usr/bin/wrk", X_OK) != 0) {
        skip("wrk not installed (.ci/setup installs it)");
        return true;
    }
    return false;
}

// What every Tokio case holds: found as Tokio, its 2 workers the carriers, no event loop.
void check_found_as_tokio(const json& s) {
    const json& c = s["carriers"];
    INFO("carriers: " << c.dump());
    REQUIRE(c["detected"] == true);
    CHECK(c["runtime"] == "tokio");
    CHECK(c["procs"].get<int>() == 2);
    CHECK(c["threads"].get<int>() == 2);
    CHECK(c["loops"].empty());
}

// Requests awaiting something inside the program have no thread: parked in the runtime, as
// many as the program counts (lo..hi at the window's end), no worker stalled.
void check_parked_as_counted(const json& s, long lo, long hi) {
    check_found_as_tokio(s);
    REQUIRE(lo <= hi);
    // The scenario holds: the clients' requests are in their handlers. Their waits began
    // together and take as long, so they end together, and the count dips while the next
    // requests come in (CI61: 13..32 in the pool around the window's end): its top.
    CHECK(hi >= 24);
    CHECK(s["carriers"]["stalled"].get<int>() == 0);
    CHECK(s["parked_in_runtime"].get<long>() >= lo - 3);
    CHECK(s["parked_in_runtime"].get<long>() <= hi + 3);
    CHECK(s["verdict"]["stage"] == "gate");
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    CHECK(summary.find("parked in the Tokio runtime") != std::string::npos);
    CHECK(summary.find("stalled") == std::string::npos);
}

}  // namespace

TEST_CASE("tokio sleep: handlers awaiting a timer are parked in the runtime, no worker stalls",
          "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27150);
    Counts counts(t.counters.path);
    const Run r = observe(t, 27150, "/sleep?ms=100", 32);
    const json& s = r.snap;
    const auto [lo, hi] = counts.range("sleeping", r.end_s - 0.05, r.end_s + 0.05);
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    INFO("verdict: " << s["verdict"].dump() << "\nwrk: " << r.load_out);
    std::printf("tokio sleep: parked %lld, program sleeping %ld..%ld at the window's end; stalled %d; %s\n",
                s["parked_in_runtime"].get<long long>(), lo, hi, s["carriers"]["stalled"].get<int>(), summary.c_str());
    check_parked_as_counted(s, lo, hi);
    CHECK(summary.find("thread") == std::string::npos);  // main, parked in block_on, is no gate
}

TEST_CASE("tokio block: handlers sleeping on their worker stall it, one stall a request", "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27151);
    Counts counts(t.counters.path);
    const Run r = observe(t, 27151, "/block?ms=30", 16);
    const json& s = r.snap;
    const json& c = s["carriers"];
    const auto [lo, hi] = counts.range("blocking", r.end_s - 0.05, r.end_s + 0.05);
    const long done = counts.at("completed", r.end_s) - counts.at("completed", r.start_s);
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    INFO("verdict: " << s["verdict"].dump() << "\nwrk: " << r.load_out);
    std::printf("tokio block: stalled %d, program blocking %ld..%ld; stall events %lld, program completed %ld in the "
                "window; %s\n",
                c["stalled"].get<int>(), lo, hi, c["stall_events"].get<long long>(), done, summary.c_str());
    check_found_as_tokio(s);
    REQUIRE(lo <= hi);
    CHECK(hi == 2);  // both workers in a handler's sleep
    // At the instant: each worker is in a 30 ms sleep but for the moments between two, which
    // the program's reads 10 ms apart can miss and qscope's one instant can meet (CI56: 1
    // stalled, the program 2..2 around it).
    CHECK(c["stalled"].get<int>() >= 1);
    CHECK(c["stalled"].get<int>() <= hi);
    REQUIRE(done >= 50);
    // Every request the window completed was a stall of its worker. The first window's stalls
    // count from the probes' attach, before the window's first tick (0.4 s here, more on a
    // busy machine), hence the looser bound above.
    const double events = c["stall_events"].get<double>();
    CHECK(events >= static_cast<double>(done) - 3);
    CHECK(events <= 1.5 * static_cast<double>(done));
    REQUIRE(!c["stalls"].empty());
    CHECK(c["stalls"][0]["syscall"] == "clock_nanosleep");
    CHECK(c["stalls"][0]["reason"] == "blocking call");
    CHECK(s["verdict"]["stage"] == "carriers");
    CHECK(summary.find("Tokio workers stalled (blocking call in clock_nanosleep)") != std::string::npos);
}

TEST_CASE("tokio pool: spawn_blocking's threads share the workers' name and are not counted as workers",
          "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27152);
    Counts counts(t.counters.path);
    const Run r = observe(t, 27152, "/pool?ms=100", 32);
    const json& s = r.snap;
    const auto [lo, hi] = counts.range("in_pool", r.end_s - 0.05, r.end_s + 0.05);
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    INFO("verdict: " << s["verdict"].dump() << "\nwrk: " << r.load_out);
    int named_like_workers = 0;
    for (const auto& task : proc_tasks(t.app.pid())) named_like_workers += task.comm == "tokio-runtime-w";
    std::printf("tokio pool: %d threads named tokio-runtime-w; carriers %d, stalled %d; parked %lld, program in the "
                "pool %ld..%ld; %s\n",
                named_like_workers, s["carriers"]["threads"].get<int>(), s["carriers"]["stalled"].get<int>(),
                s["parked_in_runtime"].get<long long>(), lo, hi, summary.c_str());
    REQUIRE(named_like_workers >= 2 + 24);  // the pool grew a thread a job
    check_parked_as_counted(s, lo, hi);
}

TEST_CASE("tokio renamed: workers the program names itself are found by a worker's stack, the pool's threads "
          "named alike still told apart",
          "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27155, 2, "qs-api");
    Counts counts(t.counters.path);
    const Run r = observe(t, 27155, "/pool?ms=100", 32);
    const json& s = r.snap;
    const auto [lo, hi] = counts.range("in_pool", r.end_s - 0.05, r.end_s + 0.05);
    INFO("verdict: " << s["verdict"].dump() << "\nwrk: " << r.load_out);
    int named = 0;
    for (const auto& task : proc_tasks(t.app.pid())) named += task.comm.rfind("qs-api-", 0) == 0;
    std::printf("tokio renamed: %d threads named qs-api-N; carriers %d (%s), stalled %d; parked %lld, program in "
                "the pool %ld..%ld\n",
                named, s["carriers"]["threads"].get<int>(), s["carriers"]["pattern"].get<std::string>().c_str(),
                s["carriers"]["stalled"].get<int>(), s["parked_in_runtime"].get<long long>(), lo, hi);
    REQUIRE(named >= 2 + 24);  // workers and the pool's threads share the program's names
    for (const auto& task : proc_tasks(t.app.pid())) REQUIRE(task.comm.rfind("tokio-runtime-w", 0) != 0);
    CHECK(s["carriers"]["pattern"] == "Tokio runtime workers (named qs-api-*, found by a worker's stack)");
    check_parked_as_counted(s, lo, hi);
}

TEST_CASE("tokio renamed, busy at attach: workers running when qscope looks are found when one first waits",
          "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27157, 2, "qs-api");
    // 8 clients on 300 ms spins: both workers run handlers back to back, and no thread shows a
    // worker's stack while qscope attaches.
    Proc wrk = spawn({"/usr/bin/wrk", "-t1", "-c8", "-d30s", "--timeout", "20s", "http://127.0.0.1:27157/spin?ms=300"});
    for (double until = now_s() + 15; now_s() < until; sleep_s(0.05)) {
        const json c = read_counters(t.counters.path);
        if (!c.is_null() && c["completed"].get<long>() >= 2) break;
    }
    {
        // While they spin: a Tokio program with no workers found. Its workers read as event
        // loops, and a verdict on one says it may be a worker (qscope cannot tell).
        const RunResult early = run_qscope({"snapshot", "--pid", std::to_string(t.app.pid()), "--duration", "1.5",
                                            "--json"}, 40);
        REQUIRE(early.rc == 0);
        const json& e = early.json;
        const std::string summary = e["verdict"]["summary"].get<std::string>();
        INFO("early verdict: " << e["verdict"].dump() << "\nwarnings: " << e["warnings"].dump());
        std::printf("tokio renamed, busy at attach: while they spin: %s\n", summary.c_str());
        CHECK(e["carriers"]["runtime"] == "tokio");
        CHECK(e["carriers"]["detected"] == false);
        bool warned = false;
        for (const auto& w : e["warnings"])
            warned |= w.get<std::string>().find("links Tokio's multi-thread runtime") != std::string::npos;
        CHECK(warned);
        // Both workers spin on handlers throughout, so the verdict is on one of them, read as an
        // event loop: a verdict elsewhere would leave the hedge unchecked, and pass unseen.
        REQUIRE(e["verdict"]["where"].get<std::string>().rfind("event loop of qs-api-", 0) == 0);
        CHECK(summary.find("may be one of them, and the queue the runtime's") != std::string::npos);
    }
    // Looked for again every 2 s: the window leaves room for two looks after the handlers end
    // (they end ~1.2 s after the load, 3.5-5 s after the family started).
    Proc snap = spawn({qscope_bin(), "snapshot", "--pid", std::to_string(t.app.pid()), "--duration", "8", "--json"});
    REQUIRE(wait_attached(snap.pid(), 30));
    sleep_s(0.5);
    wrk.kill_and_wait();  // the handlers queued end within ~1 s, and the workers park
    const double load_end = now_s();
    for (double until = now_s() + 5; now_s() < until; sleep_s(0.05)) {
        const json c = read_counters(t.counters.path);
        if (!c.is_null() && c["in_flight"].get<long>() == 0) break;
    }
    const json done = read_counters(t.counters.path);
    std::printf("tokio renamed, busy at attach: the program's handlers all done %.1f s after the load ended\n",
                now_s() - load_end);
    REQUIRE(done["in_flight"].get<long>() == 0);
    REQUIRE(snap.wait(40) == 0);
    const json s = qscope_json(snap.out());
    std::string found_note;
    for (const auto& w : s["warnings"])
        if (w.get<std::string>().find("Tokio workers (named qs-api-*) were found") != std::string::npos)
            found_note = w.get<std::string>();
    INFO("warnings: " << s["warnings"].dump() << "\nverdict: " << s["verdict"].dump());
    std::printf("tokio renamed, busy at attach: carriers %d (%s), idle %d; %s\n", s["carriers"]["threads"].get<int>(),
                s["carriers"]["pattern"].get<std::string>().c_str(), s["carriers"]["idle"].get<int>(),
                found_note.c_str());
    // Not found at attach (the scenario), found later: the note says when.
    CHECK(!found_note.empty());
    CHECK(s["carriers"]["pattern"] == "Tokio runtime workers (named qs-api-*, found by a worker's stack)");
    check_found_as_tokio(s);
    // At the end the program has no handler running: both workers idle, none read as a loop.
    CHECK(s["carriers"]["idle"].get<int>() == 2);
    CHECK(s["verdict"]["summary"].get<std::string>().find("event loop") == std::string::npos);
}

TEST_CASE("tokio spin: both workers busy on handlers, the requests wait for a worker", "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27153);
    std::vector<int> workers;
    for (const auto& task : proc_tasks(t.app.pid()))
        if (task.comm == "tokio-runtime-w") workers.push_back(task.tid);
    REQUIRE(workers.size() == 2);
    // The workers' CPU + runqueue seconds from before qscope's window to after it, under a
    // steady load: their share of the span, the window's own within the noise.
    double before = 0, after = 0, t0 = 0, t1 = 0;
    Run r;
    {
        Proc wrk = spawn({"/usr/bin/wrk", "-t1", "-c32", "-d40s", "--timeout", "20s", "http://127.0.0.1:27153/spin?ms=5"});
        sleep_s(2.0);
        t0 = now_s();
        for (int tid : workers) {
            const auto [cpu, rq] = thread_schedstat(t.app.pid(), tid);
            before += cpu + rq;
        }
        Proc snap = spawn({qscope_bin(), "snapshot", "--pid", std::to_string(t.app.pid()), "--duration", "3", "--json"});
        REQUIRE(wait_attached(snap.pid(), 30));
        REQUIRE(snap.wait(40) == 0);
        t1 = now_s();
        for (int tid : workers) {
            const auto [cpu, rq] = thread_schedstat(t.app.pid(), tid);
            after += cpu + rq;
        }
        wrk.kill_and_wait();
        r.snap = qscope_json(snap.out());
        r.load_out = wrk.out() + wrk.err();
    }
    const json& s = r.snap;
    const double oracle = (after - before) / (t1 - t0), busy = s["carriers"]["busy"].get<double>();
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    INFO("verdict: " << s["verdict"].dump() << "\nwrk: " << r.load_out);
    std::printf("tokio spin: busy %.2f of 2, schedstat CPU + runqueue %.2f; %s\n", busy, oracle, summary.c_str());
    check_found_as_tokio(s);
    CHECK(std::abs(busy - oracle) <= 0.3);
    CHECK(busy >= 1.8);
    CHECK(s["verdict"]["stage"] == "carriers");
    CHECK(summary.find("requests queue for the Tokio runtime's 2 workers") != std::string::npos);
}

TEST_CASE("tokio lock: a worker blocked on a std Mutex in futex is stalled, not parked", "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27156);
    Counts counts(t.counters.path);
    const Run r = observe(t, 27156, "/lock?ms=200", 8);
    const json& s = r.snap;
    const json& c = s["carriers"];
    const auto [lo, hi] = counts.range("lock_waiting", r.end_s - 0.05, r.end_s + 0.05);
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    INFO("verdict: " << s["verdict"].dump() << "\ncarriers: " << c.dump() << "\nwrk: " << r.load_out);
    std::printf("tokio lock: stalled %d, program waiting for the lock %ld..%ld; %s\n", c["stalled"].get<int>(), lo,
                hi, summary.c_str());
    check_found_as_tokio(s);
    REQUIRE(lo <= hi);
    REQUIRE(hi == 1);  // one worker computes holding the lock, the other's handler waits for it
    // At the instant: the waiter is in futex but for its moments between two waits.
    CHECK(c["stalled"].get<int>() == 1);
    // Listed once its wait is 20 ms old (180 ms of each 200): with its stack, the Mutex's.
    if (!c["stalls"].empty()) {
        CHECK(c["stalls"][0]["reason"] == "lock wait");
        CHECK(c["stalls"][0]["syscall"] == "futex");
        bool mutex = false;
        for (const auto& f : c["stalls"][0]["stack"]) mutex |= f.get<std::string>().find("Mutex") != std::string::npos;
        CHECK(mutex);
    }
    CHECK(s["verdict"]["stage"] == "carriers");
    CHECK(summary.find("1 of 2 Tokio workers stalled") != std::string::npos);
}

TEST_CASE("tokio current-thread: the runtime is main's own event loop, stalled by a handler's sleep",
          "[tokio][integration]") {
    if (skipped()) return;
    TokioApp t(27154, 0);
    Counts counts(t.counters.path);
    const Run r = observe(t, 27154, "/block?ms=30", 16);
    const json& s = r.snap;
    const auto [lo, hi] = counts.range("blocking", r.end_s - 0.05, r.end_s + 0.05);
    const std::string summary = s["verdict"]["summary"].get<std::string>();
    INFO("verdict: " << s["verdict"].dump() << "\ncarriers: " << s["carriers"].dump());
    std::printf("tokio current-thread: program blocking %ld..%ld; %s\n", lo, hi, summary.c_str());
    REQUIRE(hi == 1);  // main, in a handler's sleep
    // No thread is named as a worker: no carriers, and main is the loop.
    CHECK(s["carriers"]["detected"] == false);
    const pid_t main_tid = t.app.pid();
    bool found = false;
    for (const auto& l : s["carriers"]["loops"])
        if (l["tid"].get<int>() == main_tid) {
            found = true;
            // A turn runs every ready task before the next poll: up to 16 handlers' sleeps (480 ms).
            CHECK(l["stalls"].get<int>() >= 2);
            CHECK(l["longest_turn_seconds"].get<double>() >= 0.03);
        }
    CHECK(found);
    CHECK(s["verdict"]["stage"] == "carriers");
    CHECK(s["verdict"]["where"] == "event loop of qs_tokio (tid " + std::to_string(main_tid) + ")");
    CHECK(summary.find("clock_nanosleep") != std::string::npos);
    CHECK(summary.find("not told apart") == std::string::npos);  // main's loop is no worker of Tokio's
}
