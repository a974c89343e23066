// waits on the real probes (issue 3): futex gates, blocked reads on a downstream peer, and
// their stacks unwound through Debian's frame-pointer-less glibc. Ports 19000-19999.
//
// Oracles and tolerances:
// - qs_server's own counters (pool_waiters: threads inside pool_borrow's condvar wait),
//   read right before and after the snapshot: futex waiters on the pool gate within ±1.
// - /proc/PID/task/*/syscall (read(2) and its fd argument) with /proc/PID/fd and ss (the
//   fd's peer): threads blocked reading the downstream, exactly.
// - Blocked seconds: waiters (constant under saturation) × window, within 20%.
// - Stacks: the server's own symbols (nm): the frame above libc's pthread_cond_wait is the
//   pool-borrow function (or the function it was inlined into, when the compiler inlined it).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>

#include "harness.h"
#include "sys/proc_tasks.h"
#include "sys/syscall_names.h"
#include "engine/target.h"

using namespace qs_test;
using nlohmann::json;

namespace {

std::string joined(const json& frames) {
    std::string s;
    for (const auto& f : frames) s += f.get<std::string>() + "\n";
    return s;
}

// Does the qs_server binary keep pool_borrow as a function of its own (not inlined away)?
bool has_function(const std::string& bin, const std::string& name) {
    int rc = 0;
    const std::string out = sh("nm -C " + bin + " 2>/dev/null | grep -c '" + name + "'", &rc);
    return std::atoi(out.c_str()) > 0;
}

// The frame right above libc in a stack that enters libc from the application.
std::string frame_above_libc(const json& frames) {
    bool in_libc = false;
    for (const auto& f : frames) {
        const std::string s = f.get<std::string>();
        const bool libc = s.find("(libc.so") != std::string::npos;
        if (libc) in_libc = true;
        else if (in_libc) return s;
    }
    return {};
}

// Threads of pid blocked in read(2) on a socket connected to 127.0.0.1:peer_port, per /proc.
int proc_readers_of_peer(int pid, uint16_t peer_port) {
    std::vector<qscope::TcpSocket> socks;
    std::string text;
    if (qscope::read_file("/proc/" + std::to_string(pid) + "/net/tcp", text)) socks = qscope::parse_proc_net_tcp(text, false);
    int n = 0;
    for (const auto& t : qscope::read_proc_tasks(pid)) {
        if (t.state == 'R' || !t.syscall_known || t.syscall.running || t.syscall.nr != 0) continue;
        auto ino = qscope::parse_socket_inode(qscope::read_fd_link(pid, static_cast<int>(t.syscall.args[0])));
        if (!ino) continue;
        for (const auto& s : socks)
            if (s.inode == *ino && s.remote_port == peer_port) n++;
    }
    return n;
}

}  // namespace

TEST_CASE("pool gate: N-K futex waiters with the pool-borrow stack, K readers on the peer", "[waits]") {
    if (!require_root()) return;
    constexpr int N = 8, K = 3;
    const ScratchFile counters_file("/dev/shm/qscope-sched-waits-" + std::to_string(getpid()) + ".json");
    const std::string& counters = counters_file.path;
    Server ds = start_target("qs_downstream", {"--port", "19210", "--delay-ms", "100"});
    Server srv = start_target("qs_server", {"--port", "19211", "--workers", std::to_string(N), "--pool",
                                            std::to_string(K), "--downstream",
                                            "127.0.0.1:" + std::to_string(ds.port), "--counters-file", counters});
    // More clients than workers: every worker busy, every pool connection busy.
    Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(srv.port),
                       "--connections", std::to_string(2 * N), "--duration", "12"});
    sleep_s(2.0);
    const json c0 = read_counters(counters);
    RunResult r = run_qscope({"snapshot", "--pid", std::to_string(srv.proc.pid()), "--duration", "4", "--json"}, 40);
    const json c1 = read_counters(counters);
    load.wait(15);
    unlink(counters.c_str());
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    REQUIRE(c0.is_object());
    REQUIRE(c1.is_object());
    const json& j = r.json;
    const int pool_waiters0 = c0["pool_waiters"], pool_waiters1 = c1["pool_waiters"];
    CHECK(c1["pool_busy_max"] == K);

    // thread_groups: the workers split between the gate and the downstream read.
    json worker;
    for (const auto& g : j["thread_groups"])
        if (g["name"] == "qs-worker") worker = g;
    REQUIRE(worker.is_object());
    INFO("qs-worker: " << worker.dump());
    CHECK(worker["threads"] == N);
    const int by_futex = worker["blocked_by"].value("futex", 0);
    const int by_read = worker["blocked_by"].value("read", 0);
    CHECK(std::abs(by_futex - (N - K)) <= 1);
    CHECK(std::abs(by_read - K) <= 1);

    // The gate: futex rows of qs-worker whose stack passes through the pool.
    const std::string bin = target_bin("qs_server");
    const bool borrow_kept = has_function(bin, "pool_borrow");
    int gate_waiters = 0;
    double gate_seconds = 0;
    json gate;
    for (const auto& w : j["waits"]) {
        if (w["group"] != "qs-worker" || w["syscall"] != "futex") continue;
        const std::string st = joined(w["stack"]);
        if (st.find("pthread_cond_wait") == std::string::npos) continue;
        gate_waiters += w["waiters_now"].get<int>();
        gate_seconds += w["blocked_seconds"].get<double>();
        if (!gate.is_object() || w["waiters_now"] > gate["waiters_now"]) gate = w;
    }
    INFO("waits: " << j["waits"].dump(1));
    REQUIRE(gate.is_object());
    std::printf("pool gate: waiters_now %d (server counter %d/%d), blocked %.2f s over %.2f s window, resource %s\n",
                gate_waiters, pool_waiters0, pool_waiters1, gate_seconds, j["window_seconds"].get<double>(),
                gate["resource"].get<std::string>().c_str());
    CHECK(std::abs(gate_waiters - (N - K)) <= 1);
    CHECK(std::abs(gate_waiters - pool_waiters1) <= 1);
    CHECK(gate_seconds == Approx((N - K) * j["window_seconds"].get<double>()).epsilon(0.2));
    CHECK(gate["kind"] == "futex");
    CHECK(gate["wait_seconds"]["p50"].get<double>() > 0.01);  // waits of ~100 ms, not spins

    // DWARF unwinding through glibc: the frame above libc is the application's.
    const std::string above = frame_above_libc(gate["stack"]);
    INFO("gate stack:\n" << joined(gate["stack"]) << "pool_borrow kept as a function: " << borrow_kept);
    CHECK(above.find("(qs_server)") != std::string::npos);
    if (borrow_kept)
        CHECK(above.find("pool_borrow") != std::string::npos);
    else
        CHECK(above.find("serve_connection") != std::string::npos);  // where -O2 inlined it
    CHECK(joined(gate["stack"]).find("worker_main") != std::string::npos);
    CHECK(joined(gate["kernel_stack"]).find("futex") != std::string::npos);

    // The K pool connections: workers blocked reading the downstream, named by its address.
    const std::string peer = "127.0.0.1:" + std::to_string(ds.port);
    json rd;
    for (const auto& w : j["waits"])
        if (w["group"] == "qs-worker" && w["syscall"] == "read" && w["resource"] == peer) rd = w;
    REQUIRE(rd.is_object());
    CHECK(std::abs(rd["threads_now"].get<int>() - K) <= 1);
    CHECK(rd["kind"] == "socket");
    CHECK(joined(rd["stack"]).find("downstream_call") != std::string::npos);
}

TEST_CASE("silent partner: W workers blocked reading the peer, with the worker's stack", "[waits]") {
    if (!require_root()) return;
    constexpr int W = 4;
    Server ds = start_target("qs_downstream", {"--port", "19220", "--silent"});
    Server srv = start_target("qs_server", {"--port", "19221", "--workers", "6", "--downstream",
                                            "127.0.0.1:" + std::to_string(ds.port), "--downstream-per-request"});
    Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(srv.port),
                       "--connections", std::to_string(W), "--duration", "10"});
    sleep_s(1.5);  // every call is in flight, and never returns: blocked before attach
    const int pid = srv.proc.pid();
    const int proc_before = proc_readers_of_peer(pid, ds.port);
    RunResult r = run_qscope({"snapshot", "--pid", std::to_string(pid), "--duration", "3", "--json"}, 40);
    const int proc_after = proc_readers_of_peer(pid, ds.port);
    load.kill_and_wait();
    INFO("stderr: " << r.err);
    REQUIRE(r.rc == 0);
    REQUIRE(proc_before == W);
    REQUIRE(proc_after == W);
    const json& j = r.json;
    const std::string peer = "127.0.0.1:" + std::to_string(ds.port);
    json rd;
    for (const auto& w : j["waits"])
        if (w["group"] == "qs-worker" && w["syscall"] == "read" && w["resource"] == peer) rd = w;
    INFO("waits: " << j["waits"].dump(1));
    REQUIRE(rd.is_object());
    std::printf("silent partner: %d threads reading %s (/proc: %d), blocked %.2f s over %.2f s window\n",
                rd["threads_now"].get<int>(), peer.c_str(), proc_after, rd["blocked_seconds"].get<double>(),
                j["window_seconds"].get<double>());
    CHECK(rd["threads_now"] == W);
    CHECK(rd["count"] == 0);  // none of these reads ever completed
    CHECK(rd["blocked_seconds"].get<double>() == Approx(W * j["window_seconds"].get<double>()).epsilon(0.2));
    const std::string st = joined(rd["stack"]);
    INFO("stack:\n" << st);
    CHECK(frame_above_libc(rd["stack"]).find("downstream_call") != std::string::npos);
    CHECK(st.find("worker_main") != std::string::npos);
    json worker;
    for (const auto& g : j["thread_groups"])
        if (g["name"] == "qs-worker") worker = g;
    REQUIRE(worker.is_object());
    CHECK(worker["blocked_by"].value("read", 0) == W);
}
