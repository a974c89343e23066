// Thread-dump aggregation and Thread.print parsing over real Temurin 25.0.3 output
// (fixtures captured from tests/apps/carriers/Carriers.java).
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "probes/jvm/jvm_dump.h"

using namespace qscope::jvm;

namespace {
std::string fixture(const std::string& name) {
    std::ifstream in(std::string(QSCOPE_SOURCE_DIR) + "/tests/unit/fixtures/" + name);
    REQUIRE(in);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}
}  // namespace

TEST_CASE("frame_method strips module and source position", "[jvm]") {
    CHECK(frame_method("java.base/java.util.concurrent.SynchronousQueue.poll(SynchronousQueue.java:338)") ==
          "java.util.concurrent.SynchronousQueue.poll");
    CHECK(frame_method("Carriers$Pool.getConnection(Carriers.java:63)") == "Carriers$Pool.getConnection");
    CHECK(frame_method("java.base@25.0.3/jdk.internal.misc.Unsafe.park(Native Method)") ==
          "jdk.internal.misc.Unsafe.park");
}

TEST_CASE("thread dump: virtual threads grouped by the call they wait in", "[jvm]") {
    // 30 virtual threads of `Carriers queue 30 20000` waiting in SynchronousQueue.poll
    // from Pool.getConnection, as HikariCP's waiters do.
    auto groups = aggregate_thread_dump(fixture("jvm_thread_dump_queue.json"));
    REQUIRE_FALSE(groups.empty());
    CHECK(groups[0].count == 30);
    REQUIRE(groups[0].frames.size() == 3);
    CHECK(groups[0].frames[0] == "java.util.concurrent.SynchronousQueue.poll");
    CHECK(groups[0].frames[1] == "Carriers$Pool.getConnection");
    uint64_t total = 0;
    for (const auto& g : groups) total += g.count;
    CHECK(total == 30);  // platform threads (main, Reference Handler...) are not counted

    auto shallow = aggregate_thread_dump(fixture("jvm_thread_dump_queue.json"), 1);
    REQUIRE(shallow.size() == 1);
    CHECK(shallow[0].frames == std::vector<std::string>{"java.util.concurrent.SynchronousQueue.poll"});
}

TEST_CASE("thread dump: bad input is an error, not a crash", "[jvm]") {
    CHECK_THROWS(aggregate_thread_dump("not json"));
    CHECK_THROWS(aggregate_thread_dump("{\"x\":1}"));
    CHECK(aggregate_thread_dump(R"({"threadDump":{"threadContainers":[]}})").empty());
    // A virtual thread with no stack still counts, under an empty key.
    auto g = aggregate_thread_dump(
        R"({"threadDump":{"threadContainers":[{"threads":[{"virtual":true,"state":"WAITING","stack":[]}]}]}})");
    REQUIRE(g.size() == 1);
    CHECK(g[0].count == 1);
}

TEST_CASE("Thread.print: names, OS tids and JavaThread addresses", "[jvm]") {
    auto threads = parse_thread_print(fixture("jvm_thread_print.txt"));
    int carriers = 0, sched = 0;
    for (const auto& t : threads) {
        if (is_carrier_name(t.name)) carriers++;
        if (t.name == "ForkJoinPool-1-delayScheduler") {
            sched++;
            CHECK(t.nid == 26368);
            CHECK(t.jt == 0x00007f36540018c0ULL);
            CHECK(t.is_daemon);
        }
        if (t.name == "main") CHECK_FALSE(t.is_daemon);
    }
    CHECK(carriers == 2);
    CHECK(sched == 1);
    CHECK(threads.size() == 15);  // JavaThreads only: "VM Thread", GC threads have no #N
    CHECK_FALSE(is_carrier_name("ForkJoinPool-1-delayScheduler"));
    CHECK_FALSE(is_carrier_name("ForkJoinPool.commonPool-worker-1"));
    CHECK(is_carrier_name("ForkJoinPool-12-worker-345"));
}

TEST_CASE("run_command: output, exit status and timeout", "[jvm]") {
    auto r = run_command({"/bin/echo", "hello"}, 5);
    CHECK(r.exit_status == 0);
    CHECK(r.out == "hello\n");
    CHECK(run_command({"/bin/false"}, 5).exit_status == 1);
    auto t = run_command({"/bin/sleep", "10"}, 0.3);
    CHECK(t.timed_out);
    CHECK(t.exit_status == -1);
    auto n = run_command({"/nonexistent/jcmd"}, 5);
    CHECK(n.exit_status == 127);
    CHECK_FALSE(n.error.empty());
}
