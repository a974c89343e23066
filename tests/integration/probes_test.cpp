// Which probe families a run loads follows its flags. Oracle: the kernel's own program list
// (`bpftool prog show`), restricted to the program ids qscope's fds hold.
#include <dirent.h>
#include <signal.h>

#include <catch2/catch.hpp>
#include <set>

#include "harness.h"

using namespace qs_test;
using nlohmann::json;

namespace {

std::set<std::string> held_programs(pid_t pid) {
    std::set<long> ids;
    const std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
    if (DIR* d = opendir(dir.c_str())) {
        while (auto* e = readdir(d)) {
            const std::string t = read_text(dir + "/" + e->d_name);
            const auto p = t.find("prog_id:");
            if (p != std::string::npos) ids.insert(std::stol(t.substr(p + 8)));
        }
        closedir(d);
    }
    std::set<std::string> names;
    const json all = json::parse(sh("bpftool prog show -j"), nullptr, false);
    if (!all.is_array()) return names;
    for (const auto& p : all)
        if (ids.count(p.value("id", -1L))) names.insert(p.value("name", std::string()));
    return names;
}

struct Run {
    std::set<std::string> programs;
    json snapshot;
};

// The families load concurrently (--json prints nothing until the end): the set is read
// once it has stayed the same for a second.
Run observe(pid_t target, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {qscope_bin(), "snapshot", "--pid", std::to_string(target), "--duration", "60",
                                     "--json"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    Proc q = spawn(argv);
    Run r;
    const double until = now_s() + 30;
    double stable_since = now_s();
    while (now_s() < until && q.running()) {
        sleep_s(0.1);
        auto now = held_programs(q.pid());
        if (now != r.programs) {
            r.programs = std::move(now);
            stable_since = now_s();
        } else if (!r.programs.empty() && now_s() - stable_since >= 1.0) {
            break;
        }
    }
    q.signal(SIGINT);
    REQUIRE(q.wait(20) == 0);
    r.snapshot = qscope_json(q.out(), false);
    return r;
}

}  // namespace

TEST_CASE("--no-requests loads no socket program, --no-threads no scheduler program", "[probes][integration]") {
    if (!require_root()) return;
    auto srv = start_target("qs_server", {"--port", "26410", "--workers", "2"});
    const std::set<std::string> sock = {"qs_recv", "qs_send", "qs_data_ready", "qs_set_state"};
    const std::set<std::string> sched = {"qs_sched_switch", "qs_sched_wakeup"};

    const Run all = observe(srv.proc.pid(), {});
    INFO("default: " << json(all.programs).dump());
    for (const auto& p : sock) CHECK(all.programs.count(p) == 1);
    for (const auto& p : sched) CHECK(all.programs.count(p) == 1);
    REQUIRE(all.snapshot.is_object());
    CHECK(all.snapshot["probes"] == json({"sock", "sched", "jvm"}));
    // The TLS uprobes' programs are loaded only with --tls (qs_server maps no libssl: loaded,
    // attached nowhere, and a warning says so).
    const std::set<std::string> tls = {"qs_ssl_write", "qs_ssl_write_ex"};
    for (const auto& p : tls) CHECK(all.programs.count(p) == 0);
    const Run with_tls = observe(srv.proc.pid(), {"--no-threads", "--tls"});
    INFO("--tls: " << json(with_tls.programs).dump());
    for (const auto& p : tls) CHECK(with_tls.programs.count(p) == 1);
    REQUIRE(with_tls.snapshot.is_object());
    CHECK(with_tls.snapshot["requests"]["tls"]["probing"] == true);
    CHECK(with_tls.snapshot["requests"]["tls"]["libraries"].empty());
    CHECK(with_tls.snapshot["warnings"].dump().find("maps OpenSSL's libssl") != std::string::npos);

    const Run threads = observe(srv.proc.pid(), {"--no-requests"});
    INFO("--no-requests: " << json(threads.programs).dump());
    for (const auto& p : sock) CHECK(threads.programs.count(p) == 0);
    for (const auto& p : sched) CHECK(threads.programs.count(p) == 1);
    REQUIRE(threads.snapshot.is_object());
    CHECK(threads.snapshot["probes"] == json({"sched", "jvm"}));
    CHECK(threads.snapshot["thread_groups"].size() > 0);

    const Run requests = observe(srv.proc.pid(), {"--no-threads"});
    INFO("--no-threads: " << json(requests.programs).dump());
    for (const auto& p : sock) CHECK(requests.programs.count(p) == 1);
    for (const auto& p : sched) CHECK(requests.programs.count(p) == 0);
    REQUIRE(requests.snapshot.is_object());
    CHECK(requests.snapshot["probes"] == json({"sock"}));
}
