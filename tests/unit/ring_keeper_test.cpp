// The always-on ring's writes (cli/ring_keeper.h) as `record`, `top` and `export` use it:
// on request, on SIGUSR1 and on a critical verdict with its cooldown, named by the time and
// the service, refused up front where the files cannot go. Oracle: the files themselves,
// parsed back by the recording reader.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "cli/ring_keeper.h"
#include "model/errors.h"
#include "record/format.h"
#include "tui_fixtures.h"

using namespace qscope;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    std::string path;
    TempDir() {
        char t[] = "/tmp/qs-ring-unit-XXXXXX";
        path = ::mkdtemp(t);
    }
    ~TempDir() { fs::remove_all(path); }
    std::vector<std::string> files() const {
        std::vector<std::string> out;
        for (const auto& e : fs::directory_iterator(path)) out.push_back(e.path().string());
        std::sort(out.begin(), out.end());
        return out;
    }
};

Snapshot tick(int i, Severity sev, int pid = 4242) {
    Snapshot s = tui_fixtures::pool_saturated();
    s.tick = i;
    s.taken_at_unix_ms = 1764459600000 + 1000 * i;  // 2025-11-29 23:40:00 UTC, one tick a second
    s.target.pid = pid;
    s.verdict.severity = sev;
    return s;
}

record::Recording read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return record::parse(std::string(std::istreambuf_iterator<char>(in), {}));
}

}  // namespace

TEST_CASE("ring keeper: `w` writes the kept ticks to OUTPUT-SERVICE-TIME, whole", "[record][ring]") {
    TempDir dir;
    RingKeeper ring({.seconds = 3.5, .output = dir.path + "/spike.qsrec"}, "port:8080", 1, "web");
    CHECK(ring.write("w") == "w: nothing kept yet (the first tick has not come)");
    for (int i = 0; i < 6; ++i) CHECK(ring.keep(tick(i, Severity::warn)).empty());
    const std::string said = ring.write("w");
    const std::string path = dir.path + "/spike-web-20251129-234005.qsrec";  // named by the newest tick
    CHECK(said.rfind("w: wrote the last 4 ticks (", 0) == 0);  // ticks 2..5: within 3.5 s of the newest
    CHECK(said.find(" to " + path) != std::string::npos);
    REQUIRE(dir.files() == std::vector<std::string>{path});
    CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
    const record::Recording r = read(path);
    REQUIRE_FALSE(r.stopped);
    REQUIRE(r.ticks.size() == 4);
    CHECK(r.ticks.front().tick == 2);
    CHECK(r.header.selector == "port:8080");
    CHECK(r.header.pid == 4242);
    CHECK(r.header.started_unix_ms == r.ticks.front().taken_at_unix_ms);

    // A followed service restarted: the header names the process whose ticks end the dump.
    ring.keep(tick(6, Severity::warn, 5151));
    ring.write("w");
    CHECK(read(dir.path + "/spike-web-20251129-234006.qsrec").header.pid == 5151);
}

TEST_CASE("ring keeper: a critical verdict writes once per cooldown; SIGUSR1 writes at the next tick",
          "[record][ring]") {
    TempDir dir;
    RingKeeper ring({.seconds = 60, .output = dir.path + "/r", .on_critical = true, .cooldown_seconds = 3}, "pid:4242", 1);
    CHECK(ring.keep(tick(0, Severity::warn)).empty());
    CHECK(ring.keep(tick(1, Severity::critical)).rfind("the verdict turned critical: wrote the last 2 ticks", 0) == 0);
    CHECK(ring.keep(tick(2, Severity::critical)).empty());  // within the cooldown
    CHECK(ring.keep(tick(3, Severity::critical)).empty());
    CHECK(ring.keep(tick(4, Severity::critical)).rfind("the verdict turned critical: wrote the last 5 ticks", 0) == 0);
    CHECK(dir.files() == std::vector<std::string>{dir.path + "/r-20251129-234001", dir.path + "/r-20251129-234004"});

    install_ring_signal();
    ::raise(SIGUSR1);
    CHECK(ring.keep(tick(5, Severity::warn)).rfind("SIGUSR1: wrote the last 6 ticks", 0) == 0);
    CHECK(ring.keep(tick(6, Severity::warn)).empty());  // one signal, one write
    CHECK(dir.files().size() == 3);
    signal(SIGUSR1, SIG_DFL);
}

TEST_CASE("ring keeper: a directory that cannot take the files is refused before anything attaches",
          "[record][ring]") {
    try {
        RingKeeper ring({.seconds = 60, .output = "/nonexistent-qscope-dir/spike.qsrec"}, "pid:1", 1);
        FAIL("no error for a missing directory");
    } catch (const Error& e) {
        CHECK(std::string(e.what()) ==
              "--output /nonexistent-qscope-dir/spike.qsrec: cannot write the ring's files in /nonexistent-qscope-dir: "
              "No such file or directory");
        CHECK(e.exit_code() == static_cast<int>(Exit::usage));
    }
}
