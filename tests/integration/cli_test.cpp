// The CLI contract without BPF: help texts teach, bad input is refused with one clear line.
#include <catch2/catch.hpp>

#include "harness.h"

using namespace qs_test;

TEST_CASE("every subcommand has --help that names its flags", "[cli]") {
    for (const std::string sub : {"top", "snapshot", "export"}) {
        auto r = run_qscope({sub, "--help"}, 10);
        INFO(sub << ": " << r.out << r.err);
        CHECK(r.rc == 0);
        CHECK(r.out.find("--pid") != std::string::npos);
    }
    auto r = run_qscope({"--help"}, 10);
    CHECK(r.rc == 0);
    CHECK(r.out.find("where is the queue") != std::string::npos);
}

TEST_CASE("a missing or non-existent PID is one clear line and exit 3", "[cli]") {
    auto r = run_qscope({"snapshot", "--pid", "999999999", "--duration", "1"}, 10);
    CHECK(r.rc == 3);
    CHECK(r.err.find("no process with PID 999999999") != std::string::npos);
    auto m = run_qscope({"snapshot", "--duration", "1"}, 10);
    CHECK(m.rc != 0);
    CHECK(m.err.find("--pid") != std::string::npos);
}

TEST_CASE("--no-requests with --no-threads is refused: nothing would be observed", "[cli]") {
    auto r = run_qscope({"snapshot", "--pid", "1", "--no-requests", "--no-threads"}, 10);
    CHECK(r.rc == 2);
    CHECK(r.err.find("nothing to observe") != std::string::npos);
}

TEST_CASE("a value outside an option's choices is named with the choices, exit 2", "[cli]") {
    auto r = run_qscope({"snapshot", "--pid", "1", "--scope", "container"}, 10);
    CHECK(r.rc == 2);
    CHECK(r.err.find("--scope: container not in {auto,cgroup,global}") != std::string::npos);
    auto h = run_qscope({"snapshot", "--help"}, 10);
    CHECK(h.out.find("--scope SCOPE:{auto,cgroup,global}=auto") != std::string::npos);
}
