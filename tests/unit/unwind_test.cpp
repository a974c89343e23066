// DWARF unwinding of REAL stack copies: a fixture thread parked inside glibc (read(),
// pthread_cond_wait — Debian's glibc has no frame pointers) is stopped with ptrace, its
// registers and top 8 KiB of stack copied exactly as the BPF side copies them, and the
// copy is unwound and symbolized. Oracle: the fixture's source structure (its call chains
// are fixed: outer_fn → middle_fn → inner_fn → libc) and `nm` for the names.
#include <catch2/catch.hpp>

#include <chrono>

#include "fixtures/blocker_fixture.h"
#include "symbols/symbolizer.h"

using qscope::Symbolizer;

namespace {

std::string basename_of(const std::string& p) { return p.substr(p.rfind('/') + 1); }

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& f : v) s += "  " + f + "\n";
    return s;
}

// Index of the first frame naming `fn` exactly (not cv_inner_fn for inner_fn), or -1.
int find_frame(const std::vector<std::string>& frames, const std::string& fn) {
    for (size_t i = 0; i < frames.size(); ++i)
        if (frames[i].rfind(fn + "+0x", 0) == 0) return int(i);
    return -1;
}

// Frames [0, first_app) must be glibc, then the chain must appear in order, adjacent.
void check_chain(const std::vector<std::string>& frames, const std::vector<std::string>& chain,
                 const std::string& exe) {
    INFO("unwound:\n" << join(frames));
    REQUIRE(!frames.empty());
    CHECK(frames[0].find("(libc.so.6)") != std::string::npos);
    int first = find_frame(frames, chain[0]);
    REQUIRE(first > 0);
    for (int i = 0; i < first; ++i) CHECK(frames[size_t(i)].find("(libc.so.6)") != std::string::npos);
    for (size_t k = 0; k < chain.size(); ++k) {
        INFO("expected " << chain[k] << " at frame " << first + int(k));
        REQUIRE(size_t(first) + k < frames.size());
        // The chain is either our own function or the perf-map-less JIT page (hex, no module).
        if (chain[k] == "<jit>") CHECK(frames[size_t(first) + k].rfind("0x", 0) == 0);
        else CHECK(frames[size_t(first) + k].rfind(chain[k] + "+0x", 0) == 0);
        if (chain[k] != "<jit>")
            CHECK(frames[size_t(first) + k].find("(" + basename_of(exe) + ")") != std::string::npos);
    }
}

void check_variant(const std::string& exe) {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    blocker::Process proc(exe);
    REQUIRE(proc.wait_parked());
    Symbolizer sym(proc.pid());

    SECTION("main thread in read()") {
        qs_ustack s;
        REQUIRE(blocker::capture(proc.pid(), proc.pid(), s) == "");
        auto ips = sym.unwind(s);
        REQUIRE(!ips.empty());
        CHECK(ips[0] == s.regs[QS_REG_RIP]);
        auto frames = sym.symbolize_user(ips);
        check_chain(frames, {"inner_fn", "middle_fn", "outer_fn", "main"}, exe);
        // Unwinding reached past main into glibc's start code.
        CHECK(find_frame(frames, "__libc_start_call_main") > find_frame(frames, "main"));
    }
    SECTION("cv thread in pthread_cond_wait()") {
        qs_ustack s;
        REQUIRE(blocker::capture(proc.pid(), proc.cv_tid, s) == "");
        auto frames = sym.symbolize_user(sym.unwind(s));
        check_chain(frames, {"cv_inner_fn", "cv_middle_fn", "cv_outer_fn", "cv_thread"}, exe);
        CHECK(find_frame(frames, "start_thread") > find_frame(frames, "cv_thread"));
    }
    SECTION("jit thread: through an anonymous page with no CFI, by frame pointer") {
        qs_ustack s;
        REQUIRE(blocker::capture(proc.pid(), proc.jit_tid, s) == "");
        auto frames = sym.symbolize_user(sym.unwind(s));
        check_chain(frames, {"jit_inner_fn", "<jit>", "jit_outer_fn", "jit_thread"}, exe);
    }
    SECTION("the copy bounds the walk: a truncated stack gives a shorter, still correct prefix") {
        qs_ustack s;
        REQUIRE(blocker::capture(proc.pid(), proc.pid(), s) == "");
        auto full = sym.symbolize_user(sym.unwind(s));
        s.size = 16;  // not even the caller's frame survives
        auto cut = sym.symbolize_user(sym.unwind(s));
        INFO("full:\n" << join(full) << "cut:\n" << join(cut));
        REQUIRE(cut.size() < full.size());
        for (size_t i = 0; i < cut.size(); ++i) CHECK(cut[i] == full[i]);
        CHECK(find_frame(cut, "outer_fn") < 0);
    }
}

}  // namespace

TEST_CASE("unwind a real stack copy: frame-pointer build", "[unwind]") {
    check_variant(blocker::variants().fp);
}

TEST_CASE("unwind a real stack copy: no-frame-pointer build", "[unwind]") {
    check_variant(blocker::variants().nofp);
}

TEST_CASE("unwind a real stack copy: stripped build with debuglink", "[unwind]") {
    check_variant(blocker::variants().stripped);
}

TEST_CASE("unwind a real stack copy: no CFI for the application, frame pointers only", "[unwind]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    // Precondition: the fixture really lacks CFI for its functions (so libdw must walk
    // frame pointers), while the fp build has it.
    auto syms = blocker::nm(v.nocfi);
    for (const char* fn : {"inner_fn", "middle_fn", "outer_fn", "cv_inner_fn", "jit_outer_fn"}) {
        INFO(fn);
        REQUIRE(syms.count(fn) == 1);
        CHECK_FALSE(blocker::has_cfi_for(v.nocfi, syms[fn] + 1));
    }
    CHECK(blocker::has_cfi_for(v.fp, blocker::nm(v.fp)["inner_fn"] + 1));
    check_variant(blocker::variants().nocfi);
}

// Not a test: prints the warm cost of one unwind and of unwind+symbolize. Run with
//   qscope_unit_tests "[.bench]"
TEST_CASE("unwind timing", "[.bench]") {
    const auto& v = blocker::variants();
    REQUIRE(v.error.empty());
    blocker::Process proc(v.nofp);
    REQUIRE(proc.wait_parked());
    qs_ustack s;
    REQUIRE(blocker::capture(proc.pid(), proc.cv_tid, s) == "");
    using clk = std::chrono::steady_clock;
    auto t0 = clk::now();
    Symbolizer sym(proc.pid());
    auto cold = sym.symbolize_user(sym.unwind(s));
    auto t1 = clk::now();
    constexpr int N = 2000;
    size_t frames = 0;
    for (int i = 0; i < N; ++i) frames += sym.unwind(s).size();
    auto t2 = clk::now();
    for (int i = 0; i < N; ++i) frames += sym.symbolize_user(sym.unwind(s)).size();
    auto t3 = clk::now();
    auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
    std::printf("cold (new Symbolizer + first unwind + symbolize): %.0f us, %zu frames\n", us(t1 - t0),
                cold.size());
    std::printf("warm unwind: %.1f us/sample\n", us(t2 - t1) / N);
    std::printf("warm unwind + symbolize (cached): %.1f us/sample\n", us(t3 - t2) / N);
    for (const auto& f : cold) std::printf("  %s\n", f.c_str());
    CHECK(frames > 0);
}
