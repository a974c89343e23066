// Target selectors (engine/selector.h): a process table in, the chosen root or the reason
// out; the --target / --config forms (cli/targets.h); and several services on one /metrics
// (metrics/services.h).
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/targets.h"
#include "engine/selector.h"
#include "metrics/services.h"
#include "prom/prom.h"
#include "sys/proc_table.h"

using namespace qscope;
using Outcome = Resolution::Outcome;

namespace {

ProcEntry proc(int pid, int ppid, const std::string& comm, const std::string& cmdline, char state = 'S') {
    ProcEntry e;
    e.pid = pid;
    e.ppid = ppid;
    e.comm = comm;
    e.cmdline = cmdline;
    e.state = state;
    return e;
}

// systemd → nginx master → 2 workers; a second, unrelated nginx; sudo → qscope; a postgres tree
// under a postmaster; a zombie; a kernel thread.
std::vector<ProcEntry> table() {
    std::vector<ProcEntry> t = {
        proc(1, 0, "systemd", "/sbin/init"),
        proc(100, 1, "nginx", "nginx: master process /usr/sbin/nginx"),
        proc(101, 100, "nginx", "nginx: worker process"),
        proc(102, 100, "nginx", "nginx: worker process"),
        proc(200, 1, "nginx", "nginx: master process nginx -c /srv/other.conf"),
        proc(201, 200, "nginx", "nginx: worker process"),
        proc(300, 1, "postgres", "/usr/lib/postgresql/15/bin/postgres -D /var/lib/pg"),
        proc(301, 300, "postgres", "postgres: checkpointer"),
        proc(302, 300, "postgres", "postgres: app db 127.0.0.1(5432) idle"),
        proc(400, 1, "sudo", "sudo qscope export --cmdline qs_server"),
        proc(401, 400, "qscope", "qscope export --cmdline qs_server"),
        proc(500, 1, "qs_server", "/build/targets/qs_server --port 29001"),
        proc(501, 1, "defunct", "", 'Z'),
    };
    ProcEntry k = proc(2, 0, "kthreadd", "");
    k.kernel_thread = true;
    t.push_back(k);
    return t;
}

}  // namespace

TEST_CASE("a master and the workers it forked are one target: the master", "[selector]") {
    const auto t = table();
    const auto r = choose_target(t, {101, 100, 102}, {}, "processes listening on TCP port 80");
    REQUIRE(r.outcome == Outcome::found);
    CHECK(r.pid == 100);
    // Matches further down a tree: the topmost match, even with a non-matching link between.
    const auto pg = choose_target(t, match_cmdline(t, "postgres"), {}, "x");
    REQUIRE(pg.outcome == Outcome::found);
    CHECK(pg.pid == 300);
}

TEST_CASE("several unrelated processes are an error that lists each one", "[selector]") {
    const auto t = table();
    const auto r = choose_target(t, match_comm(t, "nginx"), {}, "processes named nginx");
    REQUIRE(r.outcome == Outcome::ambiguous);
    INFO(r.reason);
    CHECK(r.reason.find("5 processes match processes named nginx, and they are not one process tree") != std::string::npos);
    for (const char* line : {"PID 100 (nginx): nginx: master process /usr/sbin/nginx",
                             "PID 200 (nginx): nginx: master process nginx -c /srv/other.conf",
                             "PID 201 (nginx): nginx: worker process"})
        CHECK(r.reason.find(line) != std::string::npos);
    // Two sibling workers without their master are not one tree either.
    CHECK(choose_target(t, {101, 102}, {}, "x").outcome == Outcome::ambiguous);
}

TEST_CASE("qscope, its ancestors, zombies and kernel threads never match", "[selector]") {
    const auto t = table();
    const auto m = match_cmdline(t, "qs_server");
    CHECK(m == std::vector<int>{400, 401, 500});
    const auto r = choose_target(t, m, {401, 400, 1}, "command lines matching /qs_server/");
    REQUIRE(r.outcome == Outcome::found);
    CHECK(r.pid == 500);
    CHECK(choose_target(t, {501}, {}, "x").outcome == Outcome::none);
    CHECK(choose_target(t, match_comm(t, "kthreadd"), {}, "x").outcome == Outcome::none);
    const auto none = choose_target(t, {}, {}, "processes named redis");
    CHECK(none.outcome == Outcome::none);
    CHECK(none.reason == "no process matches: processes named redis");
    // A PID that left the table between the match and the choice.
    CHECK(choose_target(t, {999}, {}, "x").outcome == Outcome::none);
}

TEST_CASE("--comm is exact, --cmdline a regex search", "[selector]") {
    const auto t = table();
    CHECK(match_comm(t, "postgre").empty());
    CHECK(match_comm(t, "qs_server") == std::vector<int>{500});
    CHECK(match_cmdline(t, "^nginx: worker") == std::vector<int>{101, 102, 201});
    CHECK(match_cmdline(t, "--port 2900[0-9]$") == std::vector<int>{500});
    // A JVM's command line with a classpath of hundreds of KiB: std::regex would recurse once
    // per character here and overflow the stack.
    std::vector<ProcEntry> jvm = {proc(600, 1, "java", "java -cp " + std::string(300000, 'x') + " -jar orders.jar")};
    CHECK(match_cmdline(jvm, "java .*orders\\.jar") == std::vector<int>{600});
    CHECK(match_cmdline(jvm, "stock\\.jar").empty());
}

TEST_CASE("cgroup paths: relative to the cgroup2 mount, subtrees included, siblings not", "[selector]") {
    const std::string hybrid = "sysfs /sys sysfs rw 0 0\n"
                               "tmpfs /sys/fs/cgroup tmpfs ro 0 0\n"
                               "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid 0 0\n"
                               "cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,cpu,cpuacct 0 0\n";
    CHECK(parse_cgroup2_mount(hybrid) == std::optional<std::string>("/sys/fs/cgroup/unified"));
    CHECK(parse_cgroup2_mount("cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n") == std::optional<std::string>("/sys/fs/cgroup"));
    CHECK_FALSE(parse_cgroup2_mount("cgroup /sys/fs/cgroup/cpu cgroup rw 0 0\n"));
    CHECK(parse_cgroup_v2_line("12:cpu,cpuacct:/user.slice\n0::/system.slice/nginx.service\n") ==
          std::optional<std::string>("/system.slice/nginx.service"));
    CHECK_FALSE(parse_cgroup_v2_line("12:cpu,cpuacct:/user.slice\n"));

    const std::string m = "/sys/fs/cgroup/unified";
    CHECK(normalize_cgroup_path("/sys/fs/cgroup/unified/system.slice/x.service/", m) == "/system.slice/x.service");
    CHECK(normalize_cgroup_path("system.slice/x.service", m) == "/system.slice/x.service");
    CHECK(normalize_cgroup_path("/system.slice/x.service", m) == "/system.slice/x.service");
    CHECK(normalize_cgroup_path("/sys/fs/cgroup/unifiedx", m) == "/sys/fs/cgroup/unifiedx");

    const std::vector<std::pair<int, std::string>> cg = {{10, "/system.slice/x.service"},
                                                         {11, "/system.slice/x.service/worker"},
                                                         {12, "/system.slice/x.service2"},
                                                         {13, "/user.slice"}};
    CHECK(match_cgroup(cg, "/system.slice/x.service") == std::vector<int>{10, 11});
    CHECK(match_cgroup(cg, "/") == std::vector<int>{10, 11, 12, 13});
}

TEST_CASE("pidfiles hold one positive number", "[selector]") {
    int pid = 0;
    CHECK(parse_pidfile("1234\n", pid));
    CHECK(pid == 1234);
    CHECK(parse_pidfile("  77 ", pid));
    CHECK(pid == 77);
    for (const char* bad : {"", "\n", "abc", "12 34", "-5", "0", "99999999999"}) {
        INFO(bad);
        CHECK_FALSE(parse_pidfile(bad, pid));
    }
}

TEST_CASE("selectors: KIND:VALUE, checked before anything runs", "[selector]") {
    const auto s = parse_selector("cmdline:java .*a=b\\.jar");
    CHECK(s.kind == SelectorKind::cmdline);
    CHECK(s.value == "java .*a=b\\.jar");
    CHECK(parse_selector("port:8080").text() == "port:8080");
    CHECK(parse_selector("cgroup:/system.slice/nginx.service").kind == SelectorKind::cgroup);
    CHECK(parse_selector("pidfile:/run/x.pid").follows_restarts());
    CHECK_FALSE(parse_selector("pid:42").follows_restarts());
    auto usage = [](const std::string& text, const std::string& says) {
        INFO(text);
        try {
            parse_selector(text);
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.code() == Exit::usage);
            CHECK(std::string(e.what()).find(says) != std::string::npos);
        }
    };
    usage("8080", "expected KIND:VALUE");
    usage("prot:8080", "unknown kind \"prot\"");
    usage("port:http", "not a TCP port");
    usage("port:70000", "not a TCP port");
    usage("pid:0", "not a PID");
    usage("comm:", "empty value");
    usage("comm:a-name-longer-than-15", "15 characters");
    usage("cmdline:(unclosed", "not a regular expression");
    // Patterns whose compiled form grows exponentially in glibc are refused up front.
    usage("cmdline:java.++", "a quantifier right after another");
    usage("cmdline:a{1,100}", "repetition bounds");
    usage("cmdline:((((((((((a)+)+)+)+)+)+)+)+)+)+", "more than 8 '+'");
    usage("cmdline:" + std::string(1100, 'a'), "longer than 1024 characters");
    CHECK(parse_selector("cmdline:[+{]x+ \\{1\\}").value == "[+{]x+ \\{1\\}");  // literals, one +
    CHECK_THROWS_AS(make_selector(SelectorKind::port, "0"), Error);
}

TEST_CASE("--target NAME=SELECTOR, or the selector alone as the name", "[selector]") {
    const auto a = parse_target_arg("web=port:8080");
    CHECK(a.service == "web");
    CHECK(a.selector.text() == "port:8080");
    const auto b = parse_target_arg("cmdline:x=y");
    CHECK(b.service == "cmdline:x=y");
    CHECK(b.selector.value == "x=y");
    CHECK_THROWS_AS(parse_target_arg("we b=port:1"), Error);
    CHECK_THROWS_AS(parse_target_arg("web=port"), Error);
    CHECK_THROWS_AS(check_unique_services({parse_target_arg("web=port:1"), parse_target_arg("web=port:2")}), Error);
    CHECK_NOTHROW(check_unique_services({parse_target_arg("web=port:1"), parse_target_arg("db=port:2")}));
}

TEST_CASE("--config: one NAME SELECTOR per line; a bad line is named with its reason", "[selector]") {
    const auto t = parse_targets_file("# qscope targets\n\nweb   port:8080\n  db comm:postgres\r\n"
                                      "api cmdline:java .*api\\.jar  \n",
                                      "targets.conf");
    REQUIRE(t.size() == 3);
    CHECK(t[0].service == "web");
    CHECK(t[1].selector.text() == "comm:postgres");
    CHECK(t[2].selector.value == "java .*api\\.jar");
    auto bad = [](const std::string& text, const std::string& says) {
        INFO(text);
        try {
            parse_targets_file(text, "t.conf");
            FAIL("accepted");
        } catch (const Error& e) {
            CHECK(e.code() == Exit::usage);
            CHECK(std::string(e.what()) == says);
        }
    };
    bad("web port:1\nlonely\n", "t.conf:2: expected NAME SELECTOR (e.g. `web port:8080`), got \"lonely\"");
    bad("web port:1\n# c\nweb comm:x\n", "t.conf:3: duplicate name \"web\" (first on line 1)");
    bad("web prt:1\n", "t.conf:1: selector \"prt:1\": unknown kind \"prt\" (one of pid, pidfile, comm, cmdline, port, cgroup)");
    bad("w/eb port:1\n", "t.conf:1: \"w/eb\" is not a service name (letters, digits, _ - ., at most 64)");
    bad("# nothing\n", "t.conf: no targets (one per line: NAME KIND:VALUE, e.g. `web port:8080`)");
}

TEST_CASE("several services on one /metrics: a service label each, every family once", "[selector]") {
    Snapshot a, b;
    a.target.pid = 10;
    a.target.comm = "web";
    a.lost_events = 3;
    b.target.pid = 20;
    b.target.comm = "db";
    const auto fams = service_families({{"web", std::make_shared<Snapshot>(a)},
                                        {"db", std::make_shared<Snapshot>(b)},
                                        {"cache", nullptr}},
                                       50, 0);
    std::set<std::string> names;
    for (const auto& f : fams) CHECK(names.insert(f.name).second);
    const std::string text = prom::serialize(fams);
    INFO(text);
    CHECK(text.find("qscope_up{service=\"web\"} 1\n") != std::string::npos);
    CHECK(text.find("qscope_up{service=\"db\"} 1\n") != std::string::npos);
    CHECK(text.find("qscope_up{service=\"cache\"} 0\n") != std::string::npos);
    CHECK(text.find("qscope_lost_events_total{service=\"web\"} 3\n") != std::string::npos);
    CHECK(text.find("qscope_target_info{service=\"db\",pid=\"20\",comm=\"db\"} 1\n") != std::string::npos);
    CHECK(text.find("service=\"cache\",") == std::string::npos);  // waiting: qscope_up alone
    // A lone --pid has no service: byte-identical to the single-target rendering.
    CHECK(prom::serialize(service_families({{"", std::make_shared<Snapshot>(a)}}, 50, 0)) ==
          prom::serialize(snapshot_families(&a, 50, 0)));
}

TEST_CASE("services that share a process are told, the lowest shared PID named once per pair", "[selector]") {
    auto snap = [](int root, std::vector<int> tree) {
        Snapshot s;
        s.target.pid = root;
        s.target.comm = "nginx";
        for (int p : tree) s.target.processes.push_back({p, p == root ? "nginx" : "nginx-w", "", 1});
        return std::make_shared<Snapshot>(s);
    };
    // web is nginx's tree, edge one of its workers, web2 the same tree again, db unrelated,
    // cache still waiting, old exited.
    auto exited = snap(30, {30});
    std::const_pointer_cast<Snapshot>(exited)->target.exited = true;
    const auto got = shared_processes({{"web", snap(10, {10, 11, 12})},
                                       {"edge", snap(12, {12})},
                                       {"db", snap(20, {})},
                                       {"web2", snap(10, {10, 11, 12})},
                                       {"cache", nullptr},
                                       {"old", exited},
                                       {"old2", snap(30, {30})}});
    std::vector<std::string> said;
    for (const auto& p : got) said.push_back(p.a + "+" + p.b + ":" + std::to_string(p.pid) + " " + p.comm);
    CHECK(said == std::vector<std::string>{"web+edge:12 nginx-w", "web+web2:10 nginx", "edge+web2:12 nginx"});
    CHECK(shared_processes({{"db", snap(20, {})}, {"db2", snap(20, {})}}).size() == 1);  // root alone, no tree
}

