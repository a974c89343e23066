// Symbolizer against live fixture processes built at test time. Oracle: `nm` of the
// fixture (or of its separate debug file) and of glibc's debug file from libc6-dbg.
#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <sys/stat.h>

#include "fixtures/blocker_fixture.h"
#include "sys/proc_maps.h"
#include "symbols/symbolizer.h"

using qscope::Symbolizer;

namespace {

std::string basename_of(const std::string& p) { return p.substr(p.rfind('/') + 1); }

// Resolves every fixture function at +0 and +5 and compares with nm.
void check_fixture_names(const std::string& exe, const std::string& nm_file) {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    blocker::Process proc(exe);
    REQUIRE(proc.wait_parked());
    auto syms = blocker::nm(nm_file);
    uint64_t base = blocker::load_base(proc.pid(), exe);
    REQUIRE(base != 0);

    Symbolizer sym(proc.pid());
    for (const char* fn : {"inner_fn", "middle_fn", "outer_fn", "cv_inner_fn", "jit_outer_fn", "main"}) {
        INFO(fn);
        REQUIRE(syms.count(fn) == 1);
        uint64_t addr = base + syms[fn];
        // Index 0 is an exact address (the sample's RIP): no return-address adjustment.
        auto out = sym.symbolize_user({addr + 5});
        REQUIRE(out.size() == 1);
        CHECK(out[0] == std::string(fn) + "+0x5 (" + basename_of(exe) + ")");
        // As a caller frame (return address), fn+0 belongs to whatever precedes fn: it must
        // NOT be reported as fn+0.
        auto pair = sym.symbolize_user({addr + 5, addr});
        CHECK(pair[1].rfind(std::string(fn) + "+0x0 ", 0) != 0);
        // Cached second lookup gives the same text.
        CHECK(sym.symbolize_user({addr + 5})[0] == out[0]);
    }
}

}  // namespace

TEST_CASE("symbolizer names functions of a frame-pointer build", "[symbolizer]") {
    check_fixture_names(blocker::variants().fp, blocker::variants().fp);
}

TEST_CASE("symbolizer names functions of a no-frame-pointer build", "[symbolizer]") {
    check_fixture_names(blocker::variants().nofp, blocker::variants().nofp);
}

TEST_CASE("symbolizer finds names in a .gnu_debuglink debug file of a stripped binary", "[symbolizer]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    // Precondition of the test itself: the stripped binary really has no symbols left.
    CHECK(blocker::nm(v.stripped).empty());
    check_fixture_names(v.stripped, v.debug);
}

TEST_CASE("symbolizer names glibc internals through the build-id debug file", "[symbolizer]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    blocker::Process proc(v.fp);
    REQUIRE(proc.wait_parked());
    std::string libc;
    for (const auto& m : qscope::parse_proc_maps(blocker::slurp("/proc/" + std::to_string(proc.pid()) + "/maps")))
        if (m.executable() && basename_of(m.path).rfind("libc.so", 0) == 0) libc = m.path;
    REQUIRE(!libc.empty());
    // Locate glibc's debug file by its build-id, as libc6-dbg installs it.
    std::string id;
    {
        FILE* p = popen(("readelf -n '" + libc + "' 2>/dev/null").c_str(), "r");
        REQUIRE(p);
        char line[512];
        while (std::fgets(line, sizeof line, p)) {
            const char* k = std::strstr(line, "Build ID: ");
            if (k) id = std::string(k + 10);
        }
        pclose(p);
        while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
    }
    REQUIRE(id.size() > 2);
    std::string dbg = "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug";
    struct stat st;
    INFO("needs libc6-dbg (.ci/setup installs it): " << dbg);
    REQUIRE(::stat(dbg.c_str(), &st) == 0);

    // A static function: absent from .dynsym, so only the debug file can name it.
    auto dsyms = blocker::nm(dbg);
    const char* fn = "__libc_start_call_main";
    REQUIRE(dsyms.count(fn) == 1);
    uint64_t base = blocker::load_base(proc.pid(), libc);
    REQUIRE(base != 0);
    Symbolizer sym(proc.pid());
    auto out = sym.symbolize_user({base + dsyms[fn] + 3});
    CHECK(out[0] == std::string(fn) + "+0x3 (" + basename_of(libc) + ")");
}

TEST_CASE("symbolizer reports unknown addresses as hex, JIT code from the perf map", "[symbolizer][perfmap]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    blocker::Process proc(v.fp);
    REQUIRE(proc.wait_parked());
    const int pid = proc.pid();
    // The fixture's "JIT" page: the only anonymous executable mapping.
    uint64_t jit = 0;
    for (const auto& m : qscope::parse_proc_maps(blocker::slurp("/proc/" + std::to_string(pid) + "/maps")))
        if (m.executable() && m.path.empty()) jit = m.start;
    REQUIRE(jit != 0);

    const std::string map_path = "/tmp/perf-" + std::to_string(pid) + ".map";
    struct Cleanup {
        std::string p;
        ~Cleanup() { ::unlink(p.c_str()); }
    } cleanup{map_path};
    ::unlink(map_path.c_str());

    Symbolizer sym(pid);
    CHECK(sym.symbolize_user({jit + 4})[0] == "0x" + [&] {
        char b[32];
        std::snprintf(b, sizeof b, "%llx", (unsigned long long)(jit + 4));
        return std::string(b);
    }());
    CHECK(sym.symbolize_user({0x10})[0] == "0x10");

    // Appears after the Symbolizer was created: picked up without refresh().
    {
        std::ofstream f(map_path);
        f << std::hex << jit << " 8 LFoo;::bar (compiled)\n";
    }
    CHECK(sym.symbolize_user({jit + 4})[0] == "LFoo;::bar (compiled)+0x4 (jit)");
    // Outside the entry's size: not attributed to it.
    CHECK(sym.symbolize_user({jit + 8})[0].find("LFoo") == std::string::npos);

    // Rewritten (code replaced at the same address): the new name wins.
    {
        std::ofstream f(map_path, std::ios::app);
        f << "0x" << std::hex << jit << " 0x10 Interpreter\n";
    }
    CHECK(sym.symbolize_user({jit + 8})[0] == "Interpreter+0x8 (jit)");
}

TEST_CASE("symbolizer reads a running binary that was deleted from disk", "[symbolizer]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    const std::string exe = v.dir + "/blocker_deleted";
    REQUIRE(blocker::sh("cp '" + v.fp + "' '" + exe + "'") == 0);
    auto syms = blocker::nm(exe);  // oracle taken before the file goes away
    blocker::Process proc(exe);
    REQUIRE(proc.wait_parked());
    uint64_t base = blocker::load_base(proc.pid(), exe);
    REQUIRE(base != 0);
    REQUIRE(::unlink(exe.c_str()) == 0);
    Symbolizer sym(proc.pid());
    auto out = sym.symbolize_user({base + syms["middle_fn"] + 2});
    if (geteuid() != 0) {
        // /proc/PID/map_files needs CAP_SYS_ADMIN: unprivileged, the module stays unnamed.
        WARN("not root: deleted-file symbolization not checked; got " << out[0]);
        return;
    }
    CHECK(out[0] == "middle_fn+0x2 (blocker_deleted)");
}

TEST_CASE("symbolizer reads a target in another mount namespace through /proc/PID/root", "[symbolizer]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    if (geteuid() != 0 || blocker::sh("unshare --mount --propagation private true >/dev/null 2>&1") != 0) {
        WARN("cannot create a mount namespace (needs root): not checked");
        return;
    }
    // The stripped binary and its debug file live on a tmpfs mounted only inside the
    // target's namespace: at the same path our namespace has an empty directory.
    const std::string dir = v.dir + "/ns";
    REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
    blocker::Process proc({"unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
                           "mount -t tmpfs qscope-test \"$1\" && cp \"$2\" \"$3\" \"$1/\" && "
                           "exec \"$1/blocker_stripped\"",
                           "sh", dir, v.stripped, v.debug});
    REQUIRE(proc.wait_parked());
    const std::string exe = dir + "/blocker_stripped";
    struct stat st;
    REQUIRE(::stat(exe.c_str(), &st) != 0);  // invisible from here
    uint64_t base = blocker::load_base(proc.pid(), exe);
    REQUIRE(base != 0);
    auto syms = blocker::nm(v.debug);
    Symbolizer sym(proc.pid());
    CHECK(sym.symbolize_user({base + syms["outer_fn"] + 3})[0] == "outer_fn+0x3 (blocker_stripped)");
    qs_ustack s;
    REQUIRE(blocker::capture(proc.pid(), proc.pid(), s) == "");
    auto frames = sym.symbolize_user(sym.unwind(s));
    std::string all;
    for (auto& f : frames) all += f + "\n";
    INFO(all);
    CHECK(all.find("inner_fn+0x") != std::string::npos);
    CHECK(all.find("middle_fn+0x") != std::string::npos);
    CHECK(all.find("outer_fn+0x") != std::string::npos);
}

TEST_CASE("symbolizer names vDSO functions", "[symbolizer]") {
    // Oracle: the dynamic linker's own view of the vDSO.
    void* h = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
        WARN("no vDSO link map in this process; not checked");
        return;
    }
    void* fn = dlsym(h, "__vdso_clock_gettime");
    dlclose(h);
    REQUIRE(fn);
    Symbolizer sym(getpid());
    auto out = sym.symbolize_user({reinterpret_cast<uint64_t>(fn) + 1});
    // The vDSO exports the function under both names at one address.
    CHECK((out[0] == "__vdso_clock_gettime+0x1 ([vdso])" || out[0] == "clock_gettime+0x1 ([vdso])"));
}

TEST_CASE("symbolizer picks up a library loaded after it started", "[symbolizer]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    auto syms = blocker::nm(v.plug);
    REQUIRE(syms.count("plug_fn") == 1);
    Symbolizer sym(getpid());
    // Refreshes on unknown addresses are rate-limited to one per second.
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    void* h = dlopen(v.plug.c_str(), RTLD_NOW | RTLD_LOCAL);
    REQUIRE(h);
    auto fn = reinterpret_cast<uint64_t>(dlsym(h, "plug_fn"));
    REQUIRE(fn);
    // No refresh() call: the unknown address triggers one.
    CHECK(sym.symbolize_user({fn + 1})[0] == "plug_fn+0x1 (libqsplug.so)");
    CHECK(sym.symbolize_user({fn + 2})[0] == "plug_fn+0x2 (libqsplug.so)");
    dlclose(h);
    // Unloaded: after an explicit refresh the cached name must not survive.
    sym.refresh();
    CHECK(sym.symbolize_user({fn + 1})[0].find("plug_fn") == std::string::npos);
}

TEST_CASE("symbolizer survives a vanished target", "[symbolizer]") {
    // A pid that cannot exist (above pid_max): every address is unknown, nothing throws.
    Symbolizer sym(1 << 30);
    CHECK(sym.symbolize_user({0x401000, 0x401234})[1] == "0x401234");
    qs_ustack s{};
    s.regs[QS_REG_RIP] = 0x401000;
    auto frames = sym.unwind(s);
    REQUIRE(frames.size() == 1);
    CHECK(frames[0] == 0x401000);
    sym.refresh();
}

TEST_CASE("kernel frames resolve through /proc/kallsyms", "[symbolizer][kallsyms]") {
    auto syms = qscope::parse_kallsyms(blocker::slurp("/proc/kallsyms"));
    if (syms.empty()) {
        WARN("kallsyms addresses hidden (kptr_restrict, not root): only the unknown path is checked");
        Symbolizer sym(getpid());
        CHECK(sym.symbolize_kernel({0xffffffff81000000ull})[0] == "0xffffffff81000000");
        return;
    }
    // Oracle: the raw file, looked up independently with grep-like scanning.
    std::string raw = blocker::slurp("/proc/kallsyms");
    size_t p = raw.find(" T schedule\n");
    REQUIRE(p != std::string::npos);
    uint64_t addr = std::stoull(raw.substr(p - 16, 16), nullptr, 16);
    Symbolizer sym(getpid());
    auto out = sym.symbolize_kernel({addr + 0x10, addr});
    CHECK(out[0] == "schedule+0x10 (kernel)");
    CHECK(out[1] == "schedule+0x0 (kernel)");
}

// Rust's legacy mangling, from qs_tokio (tests/apps/tokio, rustc 1.63). Oracle: `nm -C`,
// binutils' own Rust demangler, on the same symbols.
TEST_CASE("demangle: Rust legacy names lose their hash, escapes and LLVM's suffix; C++ as before", "[symbolizer]") {
    using qscope::demangle;
    CHECK(demangle("_ZN5tokio7runtime4park5Inner4park17h96ed1d0f37b0cd92E.llvm.3720632788608573848") ==
          "tokio::runtime::park::Inner::park");
    CHECK(demangle("_ZN5tokio7runtime4task4core17Core$LT$T$C$S$GT$4poll17h192d51691461e366E") ==
          "tokio::runtime::task::core::Core<T,S>::poll");
    CHECK(demangle("_ZN4core3ops8function6FnOnce40call_once$u7b$$u7b$vtable.shim$u7d$$u7d$17h0123456789abcdefE") ==
          "core::ops::function::FnOnce::call_once{{vtable.shim}}");
    CHECK(demangle("_ZN3std6thread5sleep17h5894ef2d541bc80bE") == "std::thread::sleep");
    // Not Rust: a C++ name whose last component merely looks like a hash is left alone.
    CHECK(demangle("_ZN2ns1hEv") == "ns::h()");
    CHECK(demangle("_ZNSt6vectorIiSaIiEE9push_backERKi") == "std::vector<int, std::allocator<int> >::push_back(int const&)");
    CHECK(demangle("pthread_cond_wait@@GLIBC_2.3.2") == "pthread_cond_wait");
}
