// Which processes pay for the socket arrivals (probes/sock/scope.h): every reason to stay on
// the global hook, in the order a user would want to hear it, and how the snapshot's
// probe_attach rows tell the mode back (model sock_scope, read by the TUI, -v and /metrics).
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "model/snapshot.h"
#include "probes/sock/scope.h"

using namespace qscope;

namespace {

ScopeFacts own_cgroup() {
    ScopeFacts f;
    f.mount = "/sys/fs/cgroup";
    f.cgroups = {"/system.slice/nginx.service"};
    return f;
}

}  // namespace

TEST_CASE("a target alone in a cgroup of its own is scoped to it") {
    const ScopeChoice c = choose_scope(own_cgroup());
    REQUIRE(c.cgroup);
    CHECK(*c.cgroup == "/system.slice/nginx.service");
    CHECK(c.why.empty());
}

TEST_CASE("each reason to stay global is named") {
    ScopeFacts f = own_cgroup();
    SECTION("asked") {
        f.asked = SockScope::global;
        CHECK(choose_scope(f).why == "--scope global");
    }
    SECTION("the kernel") {
        f.kernel_missing = "this kernel's cgroup_skb programs cannot call bpf_skc_to_tcp_sock (Linux 5.9)";
        CHECK(choose_scope(f).why == f.kernel_missing);
    }
    SECTION("a cgroup v1-only host") {
        f.mount.reset();
        CHECK(choose_scope(f).why.find("cgroup v1-only") != std::string::npos);
    }
    SECTION("the root cgroup, shared by every process") {
        f.cgroups = {"/"};
        CHECK(choose_scope(f).why.find("root cgroup") != std::string::npos);
    }
    SECTION("a tree across cgroups") {
        f.cgroups = {"/a", "/b"};
        CHECK(choose_scope(f).why == "the target's processes are in 2 cgroups");
    }
    SECTION("a Unix-domain listener: no packets to see") {
        f.unix_listener = true;
        CHECK(choose_scope(f).why.find("Unix-domain") != std::string::npos);
    }
    SECTION("a listener charged to another cgroup") {
        f.listeners_outside = {listener_outside("127.0.0.1:80", 7, {1, 2})};
        CHECK(choose_scope(f).why.find("127.0.0.1:80 is charged to another cgroup (id 7") != std::string::npos);
    }
    CHECK_FALSE(choose_scope(f).cgroup);
}

TEST_CASE("asking for the cgroup does not override a reason it cannot hold") {
    ScopeFacts f = own_cgroup();
    f.asked = SockScope::cgroup;
    f.cgroups = {"/"};
    CHECK_FALSE(choose_scope(f).cgroup);
}

TEST_CASE("a listener in the scoped cgroup or below it is inside") {
    CHECK(listener_outside("[::1]:8080", 42, {41, 42}).empty());
}

TEST_CASE("a cgroup's subtree ids are its directories' inodes") {
    // Any directory tree stands in for cgroupfs here: the ids are inode numbers.
    const std::string root = std::filesystem::temp_directory_path() / ("qs-scope-" + std::to_string(getpid()));
    std::filesystem::create_directories(root + "/a/b");
    std::filesystem::create_directories(root + "/c");
    struct stat st {};
    std::set<uint64_t> want;
    for (const std::string& d : {root, root + "/a", root + "/a/b", root + "/c"}) {
        REQUIRE(stat(d.c_str(), &st) == 0);
        want.insert(st.st_ino);
    }
    CHECK(cgroup_subtree_ids(root) == want);
    CHECK(cgroup_subtree_ids(root + "/missing").empty());
    std::filesystem::remove_all(root);
}

TEST_CASE("the snapshot's probe_attach rows tell the scope back") {
    std::vector<ProbeAttach> rows = {{ProbeFamily::sock, "sock_recv_length", AttachType::tp_btf, "sock_recv_length", ""}};
    CHECK_FALSE(sock_scope(rows));  // no arrivals row: the sock family did not say
    SECTION("scoped") {
        rows.push_back({ProbeFamily::sock, "sk_data_ready", AttachType::cgroup_skb, "/system.slice/x.service", ""});
        const auto v = sock_scope(rows);
        REQUIRE(v);
        CHECK(v->cgroup);
        CHECK(std::string(v->mode()) == "cgroup");
        CHECK(v->path == "/system.slice/x.service");
    }
    SECTION("global, and why") {
        rows.push_back({ProbeFamily::sock, "sk_data_ready", AttachType::tp_btf, "sk_data_ready", ""});
        rows.push_back({ProbeFamily::sock, kScopeHook, AttachType::none, "", "--scope global"});
        const auto v = sock_scope(rows);
        REQUIRE(v);
        CHECK_FALSE(v->cgroup);
        CHECK(std::string(v->mode()) == "global");
        CHECK(v->why == "--scope global");
    }
}
