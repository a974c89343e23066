// Every error path of the real binary: one clear line on stderr naming the problem, and the
// exit code from collector/errors.h. Oracles: /proc (what a PID really is), setpriv (a real
// unprivileged user), a real target that really exits.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>

#include "harness.h"

using namespace qs_test;

namespace {

constexpr int kUsage = 2, kNoTarget = 3, kPermission = 4, kTargetExited = 6;

bool contains(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// Exactly one line on stderr: an operator reads it during an incident.
int stderr_lines(const std::string& err) {
    int n = 0;
    std::istringstream in(err);
    std::string line;
    while (std::getline(in, line))
        if (!line.empty()) ++n;
    return n;
}

// A kernel thread: PID 2 (kthreadd) on a normal host; otherwise any PF_KTHREAD process.
int find_kernel_thread() {
    auto is_kthread = [](int pid) {
        std::string st = read_text("/proc/" + std::to_string(pid) + "/stat");
        auto close = st.rfind(')');
        if (close == std::string::npos) return false;
        std::istringstream rest(st.substr(close + 2));
        std::string f;
        for (int i = 0; i < 7 && rest >> f; ++i) {
        }  // field 9 (flags) is the 7th after the comm
        return (std::stoul(f) & 0x00200000u) != 0;
    };
    if (is_kthread(2)) return 2;
    for (int pid = 3; pid < 200; ++pid)
        if (is_kthread(pid)) return pid;
    return -1;
}

std::vector<std::string> as_nobody(std::vector<std::string> argv) {
    std::vector<std::string> out{"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"};
    out.insert(out.end(), argv.begin(), argv.end());
    return out;
}

}  // namespace

TEST_CASE("no such PID: exit 3, names the PID", "[errors]") {
    // A PID above pid_max can never exist.
    auto r = run_qscope({"snapshot", "--pid", "999999999", "--duration", "1", "--json"}, 30);
    INFO(r.err);
    CHECK(r.rc == kNoTarget);
    CHECK(contains(r.err, "no process with PID 999999999"));
    CHECK(stderr_lines(r.err) == 1);
    CHECK(r.out.empty());

    // And one that was real a moment ago.
    pid_t child = fork();
    if (child == 0) _exit(0);
    waitpid(child, nullptr, 0);
    auto g = run_qscope({"snapshot", "--pid", std::to_string(child), "--duration", "1"}, 30);
    INFO(g.err);
    CHECK(g.rc == kNoTarget);
    CHECK(contains(g.err, "no process with PID " + std::to_string(child)));
}

TEST_CASE("PID 0 and negative PIDs are refused, not treated as 'every process'", "[errors]") {
    for (const std::string pid : {"0", "-1"}) {
        auto r = run_qscope({"snapshot", "--pid=" + pid, "--duration", "1"}, 30);
        INFO(pid << ": rc " << r.rc << " " << r.err);
        CHECK((r.rc == kNoTarget || r.rc == kUsage));
        CHECK(contains(r.err, "PID"));
        CHECK(r.out.empty());
    }
}

TEST_CASE("a kernel thread: exit 3, says kernel thread", "[errors]") {
    const int kt = find_kernel_thread();
    if (kt < 0) return skip("no kernel thread visible in /proc (PID namespace?)");
    const std::string comm = read_text("/proc/" + std::to_string(kt) + "/comm");
    auto r = run_qscope({"snapshot", "--pid", std::to_string(kt), "--duration", "1", "--json"}, 30);
    INFO("pid " << kt << " comm " << comm << ": " << r.err);
    CHECK(r.rc == kNoTarget);
    CHECK(contains(r.err, "kernel thread"));
    CHECK(contains(r.err, std::to_string(kt)));
    CHECK(stderr_lines(r.err) == 1);
}

TEST_CASE("a thread id, not a process: exit 3, names the owning process", "[errors]") {
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "2"});
    int tid = 0;
    for (const auto& t : proc_tasks(srv.proc.pid()))
        if (t.tid != srv.proc.pid() && t.comm.rfind("qs-worker", 0) == 0) tid = t.tid;
    REQUIRE(tid > 0);
    auto r = run_qscope({"snapshot", "--pid", std::to_string(tid), "--duration", "1", "--json"}, 30);
    INFO(r.err);
    CHECK(r.rc == kNoTarget);
    CHECK(contains(r.err, "thread of process " + std::to_string(srv.proc.pid())));
    CHECK(stderr_lines(r.err) == 1);
}

TEST_CASE("a zombie: exit 3, says it has exited", "[errors]") {
    pid_t child = fork();
    if (child == 0) _exit(0);
    // Not reaped yet: /proc/PID still exists, in state Z.
    for (int i = 0; i < 200; ++i) {
        std::string st = read_text("/proc/" + std::to_string(child) + "/stat");
        if (st.find(") Z") != std::string::npos) break;
        sleep_s(0.01);
    }
    auto r = run_qscope({"snapshot", "--pid", std::to_string(child), "--duration", "1"}, 30);
    waitpid(child, nullptr, 0);
    INFO(r.err);
    CHECK(r.rc == kNoTarget);
    CHECK(contains(r.err, "zombie"));
}

TEST_CASE("a main thread that exited while its threads run on: observed, not called a zombie", "[errors][tree]") {
    if (!require_root()) return;
    // pthread_exit from the main thread: /proc/PID/stat says Z (ps: "Zl"), the process serves on.
    Proc p = spawn({"python3", "-c",
                    "import threading, time, ctypes\n"
                    "threading.Thread(target=lambda: time.sleep(60), name='survivor').start()\n"
                    "ctypes.CDLL(None).pthread_exit(None)\n"});
    bool zombie_leader = false;
    for (int i = 0; i < 200 && !zombie_leader; ++i) {
        zombie_leader = read_text("/proc/" + std::to_string(p.pid()) + "/stat").find(") Z") != std::string::npos;
        if (!zombie_leader) sleep_s(0.02);
    }
    REQUIRE(zombie_leader);
    REQUIRE(proc_tasks(p.pid()).size() == 2);  // the oracle: the leader (Z) and the survivor
    auto r = run_qscope({"snapshot", "--pid", std::to_string(p.pid()), "--duration", "1", "--json"}, 30);
    INFO(r.err << r.out.substr(0, 2000));
    REQUIRE(r.rc == 0);
    CHECK(r.json["target"]["exited"] == false);
    CHECK(r.json["target"]["processes"]["count"].get<int>() == 1);
    int threads = 0;
    for (const auto& g : r.json["thread_groups"]) threads += g["threads"].get<int>();
    CHECK(threads >= 1);
}

TEST_CASE("bad flags: exit 2 with a message naming the flag", "[errors]") {
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "1"});
    const std::string pid = std::to_string(srv.proc.pid());
    struct Case {
        std::vector<std::string> args;
        std::string mention;
    };
    const std::vector<Case> cases = {
        {{"snapshot", "--pid", pid, "--no-such-flag"}, "--no-such-flag"},
        {{"snapshot", "--pid", "abc"}, "abc"},
        {{"snapshot", "--pid", pid, "--duration", "0"}, "duration"},
        {{"snapshot", "--pid", pid, "--duration", "-3"}, "duration"},
        {{"snapshot", "--pid", pid, "--interval", "1000"}, "interval"},
        {{"snapshot", "--duration", "1"}, "--pid"},
        {{"frobnicate", "--pid", pid}, "frobnicate"},
        {{"export", "--pid", pid, "--listen", "not-an-address"}, "not-an-address"},
        // one qscope, two targets: refused with what to do instead
        {{"snapshot", "--pid", pid, "--pid", "1"}, "run one qscope per PID"},
    };
    for (const auto& c : cases) {
        auto r = run_qscope(c.args, 30);
        std::string cmd;
        for (const auto& a : c.args) cmd += a + " ";
        INFO("qscope " << cmd << "→ rc " << r.rc << "\nstderr: " << r.err << "\nstdout: " << r.out.substr(0, 300));
        CHECK(r.rc == kUsage);
        CHECK(contains(r.err, c.mention));
    }
}

TEST_CASE("export on a non-loopback address without --allow-remote: exit 2, explains why", "[errors]") {
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "1"});
    auto r = run_qscope({"export", "--pid", std::to_string(srv.proc.pid()), "--listen", "0.0.0.0:24990"}, 30);
    INFO(r.err);
    CHECK(r.rc == kUsage);
    CHECK(contains(r.err, "loopback"));
    CHECK(contains(r.err, "--allow-remote"));
    // Refused before anything listened.
    CHECK(ss("sport = :24990", true).empty());
}

TEST_CASE("not permitted: an unprivileged user gets exit 4 naming root and CAP_BPF", "[errors]") {
    if (!require_root()) return;  // setpriv needs root to switch user
    int rc = 0;
    sh("command -v setpriv >/dev/null", &rc);
    if (rc != 0) return skip("setpriv (util-linux) not installed");
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "1"});
    auto r = run(as_nobody({qscope_bin(), "snapshot", "--pid", std::to_string(srv.proc.pid()), "--duration", "1",
                            "--json"}),
                 30);
    INFO("rc " << r.rc << " stderr: " << r.err << " stdout: " << r.out.substr(0, 300));
    CHECK(r.rc == kPermission);
    CHECK(contains(r.err, "root"));
    CHECK(contains(r.err, "CAP_BPF"));
    CHECK(stderr_lines(r.err) == 1);
    CHECK(r.out.empty());
    // The target was not touched.
    CHECK(srv.proc.running());
}

TEST_CASE("partial privileges on another user's target: refused or marked, never misreported", "[errors]") {
    // CAP_BPF+CAP_PERFMON load the probes, but /proc/PID/fd of a root-owned target needs
    // CAP_SYS_PTRACE+CAP_DAC_READ_SEARCH (docs/security.md). Without the fd table qscope
    // cannot tell the target's listeners from its outbound sockets: it must say so (exit 4,
    // or warnings/partial naming what is missing), not report clients as downstream peers.
    if (!require_root()) return;
    int rc = 0;
    sh("setpriv --help 2>&1 | grep -q -- --ambient-caps", &rc);
    if (rc != 0) return skip("setpriv without --ambient-caps");
    auto ds = start_target("qs_downstream", {"--port", "0", "--delay-ms", "20"});
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "4", "--downstream",
                                          "127.0.0.1:" + std::to_string(ds.port), "--pool", "2"});
    Proc load = spawn({target_bin("qs_load"), "--host", "127.0.0.1", "--port", std::to_string(srv.port),
                       "--connections", "8", "--duration", "30"});
    sleep_s(0.5);
    auto r = run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=+bpf,+perfmon",
                  "--ambient-caps=+bpf,+perfmon", qscope_bin(), "snapshot", "--pid", std::to_string(srv.proc.pid()),
                  "--duration", "3", "--json"},
                 60);
    INFO("rc " << r.rc << " stderr: " << r.err << "\nstdout: " << r.out.substr(0, 1500));
    if (r.rc == kPermission) {
        CHECK((contains(r.err, "CAP_SYS_PTRACE") || contains(r.err, "CAP_DAC_READ_SEARCH")));
        return;
    }
    REQUIRE(r.rc == 0);
    REQUIRE(r.json.is_object());
    const std::string marks = r.json.value("warnings", nlohmann::json::array()).dump() +
                              r.json.value("partial", nlohmann::json::array()).dump();
    CHECK((contains(marks, "/proc") || contains(marks, "CAP_SYS_PTRACE") || contains(marks, "CAP_DAC_READ_SEARCH")));
    // The only downstream peer is qs_downstream; qs_load's client sockets are inbound.
    const std::string peer = "127.0.0.1:" + std::to_string(ds.port);
    for (const auto& d : r.json.value("downstream", nlohmann::json::array())) {
        INFO("downstream peer " << d.value("peer", std::string("?")));
        CHECK(d.value("peer", std::string()) == peer);
    }
}

TEST_CASE("setuid: refused with exit 4 before doing anything", "[errors]") {
    if (!require_root()) return;
    int rc = 0;
    sh("command -v setpriv >/dev/null", &rc);
    if (rc != 0) return skip("setpriv (util-linux) not installed");
    const std::string dir = temp_dir("qs-setuid");
    chmod(dir.c_str(), 0755);
    const std::string copy = dir + "/qscope";
    sh("cp " + qscope_bin() + " " + copy + " && chown root:root " + copy + " && chmod 4755 " + copy, &rc);
    REQUIRE(rc == 0);
    // A nosuid mount would make the bit inert and prove nothing.
    std::string opts = sh("findmnt -n -o OPTIONS --target " + dir);
    if (contains(opts, "nosuid")) return skip(dir + " is on a nosuid mount");
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "1"});
    auto r = run(as_nobody({copy, "snapshot", "--pid", std::to_string(srv.proc.pid()), "--duration", "1"}), 30);
    sh("rm -rf " + dir);
    INFO("rc " << r.rc << " stderr: " << r.err);
    CHECK(r.rc == kPermission);
    CHECK(contains(r.err, "setuid"));
    CHECK(stderr_lines(r.err) == 1);
    CHECK(r.out.empty());
}

TEST_CASE("a hostile thread name (invalid UTF-8, quote, newline) is escaped, never fatal", "[errors]") {
    if (!require_root()) return;
    // The target chooses its comm and thread names; qscope prints them in JSON, the report
    // and Prometheus labels. Bytes: "bad", 0xff, 0xfe, '"', '\\', '\n'.
    const std::string hostile = std::string("bad\xff\xfe\"\\\n", 8);
    auto t = start_target("qs_churn", {"--rate", "20", "--duration", "60", "--spawners", "2", "--comm", hostile});
    REQUIRE(read_text("/proc/" + std::to_string(t.proc.pid()) + "/comm").rfind("bad\xff", 0) == 0);
    for (const bool json : {true, false}) {
        std::vector<std::string> args{"snapshot", "--pid", std::to_string(t.proc.pid()), "--duration", "2"};
        if (json) args.push_back("--json");
        auto r = run_qscope(args, 60);
        INFO((json ? "json" : "report") << ": rc " << r.rc << " stderr: " << r.err);
        CHECK(r.rc == 0);
        CHECK(contains(r.out, "bad"));
        if (json) CHECK(r.json.is_object());
        if (json && r.json.is_object()) {
            const std::string comm = r.json["target"]["comm"];
            CHECK(comm.rfind("bad", 0) == 0);
            CHECK(comm.find('\n') == std::string::npos);  // JSON-escaped or replaced, never raw
        }
    }
}

TEST_CASE("target exits mid-run: exit 6, JSON still printed and marked exited", "[errors]") {
    if (!require_root()) return;
    auto srv = start_target("qs_server", {"--port", "0", "--workers", "2"});
    const int pid = srv.proc.pid();
    Proc q = spawn({qscope_bin(), "snapshot", "--pid", std::to_string(pid), "--duration", "10", "--json"});
    // Let the window open before the target dies: on a busy, sanitized box the sources can
    // still be attaching well after the first BPF program loaded, and a target that dies then
    // is one qscope never observed.
    const double t0 = now_s();
    while (now_s() - t0 < 20 && q.running() && !contains(q.err(), "observing PID")) sleep_s(0.1);
    REQUIRE(contains(q.err(), "observing PID"));
    sleep_s(0.5);
    REQUIRE(q.running());
    srv.proc.kill_and_wait();
    const double killed_at = now_s();
    const int rc = q.wait(60);
    const double noticed = now_s() - killed_at;
    INFO("rc " << rc << " after " << noticed << " s; stderr: " << q.err() << "\nstdout: " << q.out().substr(0, 500));
    CHECK(rc == kTargetExited);
    nlohmann::json j;
    REQUIRE_NOTHROW(j = qscope_json(q.out()));
    CHECK(j["target"]["pid"] == pid);
    CHECK(j["target"]["exited"] == true);
    CHECK(contains(q.err(), "exited"));
    // It stops observing a dead process rather than sitting out the full window.
    CHECK(noticed < 4.0);
    CHECK(j["window_seconds"].get<double>() < 9.5);
}
