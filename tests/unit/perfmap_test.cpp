// Parsers behind the symbolizer: /tmp/perf-PID.map, /proc/kallsyms, /proc/PID/maps.
// Inputs are in the exact shapes the JVM (jcmd Compiler.perfmap, -XX:+DumpPerfMapAtExit),
// the kernel and procfs write, plus the garbage a truncated or concurrent read produces.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>

#include "sys/proc_maps.h"
#include "symbols/symbolizer.h"

using namespace qscope;

TEST_CASE("perf map: JVM lines, bare and 0x hex, names with spaces", "[perfmap]") {
    const std::string text =
        "0x00007f1c3c000000 0x0000000000000080 Interpreter\n"
        "7f1c3c001000 40 LFoo;::bar (I)V [compiled, tier 4]\n"
        "0x00007f1c3c000100 0x20 StubRoutines::call_stub   \r\n"
        "7F1C3C002000 10 upper case hex";  // no final newline
    auto m = parse_perf_map(text);
    REQUIRE(m.size() == 4);
    CHECK(m[0].start == 0x7f1c3c000000);
    CHECK(m[0].size == 0x80);
    CHECK(m[0].name == "Interpreter");
    // Sorted by start.
    CHECK(m[1].start == 0x7f1c3c000100);
    CHECK(m[1].name == "StubRoutines::call_stub");  // trailing blanks and CR trimmed
    CHECK(m[2].name == "LFoo;::bar (I)V [compiled, tier 4]");
    CHECK(m[3].start == 0x7f1c3c002000);
    CHECK(m[3].name == "upper case hex");

    CHECK(find_perf_map_entry(m, 0x7f1c3c000000)->name == "Interpreter");
    CHECK(find_perf_map_entry(m, 0x7f1c3c00007f)->name == "Interpreter");
    CHECK(find_perf_map_entry(m, 0x7f1c3c000080) == nullptr);  // end is exclusive
    CHECK(find_perf_map_entry(m, 0x7f1c3c00011f)->name == "StubRoutines::call_stub");
    CHECK(find_perf_map_entry(m, 0x7f1c3c001040) == nullptr);
    CHECK(find_perf_map_entry(m, 0x1000) == nullptr);
    CHECK(find_perf_map_entry({}, 0x1000) == nullptr);
}

TEST_CASE("perf map: malformed lines are skipped, not fatal", "[perfmap]") {
    const std::string text =
        "\n"
        "   \n"
        "garbage\n"
        "0x1000\n"                      // no size
        "0x1000 0x10\n"                 // no name
        "0x1000 zz name\n"              // bad size
        "0xqq 10 name\n"                // bad start
        "0x 10 name\n"                  // empty hex
        "1000 0 zero-size\n"            // zero size covers nothing
        "ffffffffffffffff 10 wraps\n"   // end overflows
        "11112222333344445 10 toolong\n"
        "-1000 10 negative\n"
        "2000 10 good one\n"
        "\x01\x02\xff binary\n";
    auto m = parse_perf_map(text);
    REQUIRE(m.size() == 1);
    CHECK(m[0].start == 0x2000);
    CHECK(m[0].name == "good one");
    CHECK(parse_perf_map("").empty());
}

TEST_CASE("perf map: a later entry at the same start replaces the earlier one", "[perfmap]") {
    auto m = parse_perf_map("3000 10 old\n1000 10 a\n3000 20 new\n");
    REQUIRE(m.size() == 2);
    CHECK(m[1].name == "new");
    CHECK(m[1].size == 0x20);
    CHECK(find_perf_map_entry(m, 0x301f)->name == "new");
}

TEST_CASE("kallsyms: text symbols only, markers dropped, sorted, modules kept", "[kallsyms]") {
    const std::string text =
        "ffffffff81000000 T _stext\n"
        "ffffffff81000000 T startup_64\n"  // alias: the first listed name wins
        "ffffffff81001000 T __start_notes\n"  // marker aliasing the next function
        "ffffffff81001000 t do_one_initcall\n"
        "ffffffff82000000 D __stop___param\n"
        "ffffffff82000010 d some_data\n"
        "ffffffff81005000 W weak_fn\n"
        "ffffffff81002000 T __stop_sched_class\n"
        "ffffffff81002000 T schedule\n"
        "ffffffffc0a00000 t nft_do_chain\t[nf_tables]\n"
        "ffffffff81003000 A absolute_sym\n"
        "ffffffff8100 T short_addr\n"
        "zzzzzzzzzzzzzzzz T bad_hex\n"
        "ffffffff81004000 T\n"
        "garbage\n";
    auto k = parse_kallsyms(text);
    std::vector<std::string> names;
    for (size_t i = 0; i < k.size(); ++i) names.emplace_back(k[i].name);
    CHECK(names == std::vector<std::string>{"_stext", "do_one_initcall", "schedule", "weak_fn", "nft_do_chain"});
    for (size_t i = 1; i < k.size(); ++i) CHECK(k[i - 1].addr < k[i].addr);
    CHECK(k.back().module == "nf_tables");
    CHECK(k[0].module.empty());

    CHECK(symbolize_kernel_addr(k, 0xffffffff81002010) == "schedule+0x10 (kernel)");
    CHECK(symbolize_kernel_addr(k, 0xffffffff81001000) == "do_one_initcall+0x0 (kernel)");
    CHECK(symbolize_kernel_addr(k, 0xffffffffc0a00123) == "nft_do_chain+0x123 (nf_tables)");
    CHECK(symbolize_kernel_addr(k, 0xffffffff80000000) == "0xffffffff80000000");  // below all
    CHECK(symbolize_kernel_addr(k, 0xffffffffff000000) == "0xffffffffff000000");  // far past last
    CHECK(symbolize_kernel_addr({}, 0x1234) == "0x1234");
}

TEST_CASE("kallsyms: each symbol keeps its own module, however the modules' lines interleave", "[kallsyms]") {
    const auto k = parse_kallsyms(
        "ffffffffc0b00000 t xt_find\t[x_tables]\n"
        "ffffffffc0a00000 t nft_do_chain\t[nf_tables]\n"
        "ffffffffc0b00100 t xt_register\t[x_tables]\n"
        "ffffffff81000000 T _stext\n"
        "ffffffffc0a00200 t nft_lookup\t[nf_tables]\n");
    REQUIRE(k.size() == 5);
    CHECK(symbolize_kernel_addr(k, 0xffffffffc0b00008) == "xt_find+0x8 (x_tables)");
    CHECK(symbolize_kernel_addr(k, 0xffffffffc0b00100) == "xt_register+0x0 (x_tables)");
    CHECK(symbolize_kernel_addr(k, 0xffffffffc0a00010) == "nft_do_chain+0x10 (nf_tables)");
    CHECK(symbolize_kernel_addr(k, 0xffffffffc0a00201) == "nft_lookup+0x1 (nf_tables)");
    CHECK(symbolize_kernel_addr(k, 0xffffffff81000004) == "_stext+0x4 (kernel)");
}

TEST_CASE("kallsyms: a function's text runs to the next symbol, a module's included", "[kallsyms]") {
    const auto k = parse_kallsyms(
        "ffffffff8208ae40 T __pfx_tcp_v4_rcv\n"
        "ffffffff8208ae50 T tcp_v4_rcv\n"
        "ffffffff8208ae50 T tcp_v4_rcv_alias\n"   // an alias: the first listed name is the one kept
        "ffffffff82089690 T tcp_v4_do_rcv\n"       // listed out of order: sorted before the lookup
        "ffffffff8208c2a0 T __pfx_tcp_v4_err\n"
        "ffffffff8208c2b0 T tcp_v4_err\n"
        "ffffffff8208c000 D tcp_data_not_text\n"   // not text: no end of anything
        "ffffffffc0a00000 t tcp_v6_rcv\t[ipv6]\n"
        "ffffffffc0a01000 t tcp_v6_err\t[ipv6]\n"
        "ffffffffc0b00000 t last_one\t[x]\n");
    const auto v4 = k.text_of("tcp_v4_rcv");
    CHECK(v4.start == 0xffffffff8208ae50);
    CHECK(v4.end == 0xffffffff8208c2a0);  // the next function's padding is not tcp_v4_rcv's
    CHECK(v4.contains(0xffffffff8208ae50 + 0x99));
    CHECK_FALSE(v4.contains(0xffffffff8208c2a0));
    CHECK_FALSE(v4.contains(0xffffffff82089690 + 0x10));
    CHECK(k.text_of("tcp_v4_do_rcv").end == 0xffffffff8208ae40);
    const auto v6 = k.text_of("tcp_v6_rcv");
    CHECK(v6.start == 0xffffffffc0a00000);
    CHECK(v6.end == 0xffffffffc0a01000);
    // Absent, an alias dropped at its address, or the last symbol (no end known): empty.
    for (const char* name : {"tcp_v4_rcv_alias", "no_such_function", "last_one", "tcp_data_not_text"}) {
        INFO(name);
        CHECK(k.text_of(name).empty());
    }
    CHECK(parse_kallsyms("").text_of("tcp_v4_rcv").empty());
    CHECK_FALSE(v4.empty());
}

TEST_CASE("kallsyms: hidden addresses (kptr_restrict) resolve nothing", "[kallsyms]") {
    auto k = parse_kallsyms("0000000000000000 T _stext\n0000000000000000 T schedule\n");
    CHECK(k.empty());
}

TEST_CASE("kallsyms: the live file parses (when readable)", "[kallsyms]") {
    std::ifstream f("/proc/kallsyms");
    std::stringstream ss;
    ss << f.rdbuf();
    auto k = parse_kallsyms(ss.str());
    for (size_t i = 1; i < k.size(); ++i) REQUIRE(k[i - 1].addr < k[i].addr);
    for (size_t i = 0; i < k.size(); ++i) {
        REQUIRE(k[i].name.rfind("__start_", 0) != 0);
        REQUIRE(k[i].name.rfind("__stop_", 0) != 0);
    }
    if (geteuid() == 0) CHECK(k.size() > 10000);
}

TEST_CASE("proc maps: paths with spaces, deleted files, anonymous and special regions", "[symbolizer][maps]") {
    const std::string text =
        "55d4c0a00000-55d4c0a01000 r--p 00000000 fd:01 1234   /usr/bin/my app\n"
        "55d4c0a01000-55d4c0a02000 r-xp 00001000 fd:01 1234   /usr/bin/my app\n"
        "7f0000000000-7f0000001000 r-xp 00002000 08:02 99 /tmp/libgone.so (deleted)\n"
        "7f0000100000-7f0000200000 rwxp 00000000 00:00 0 \n"
        "7f0000300000-7f0000301000 r-xp 00000000 00:00 0\n"
        "7ffc00000000-7ffc00021000 rw-p 00000000 00:00 0                          [stack]\n"
        "7ffc00100000-7ffc00102000 r-xp 00000000 00:00 0                          [vdso]\n"
        "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]\n"
        "bogus line\n"
        "1000-0800 r-xp 00000000 00:00 0 backwards\n"
        "1000-2000 r-x 00000000 00:00 0 badperms\n";
    auto m = parse_proc_maps(text);
    REQUIRE(m.size() == 8);
    CHECK(m[0].path == "/usr/bin/my app");
    CHECK(!m[0].executable());
    CHECK(m[1].executable());
    CHECK(m[1].offset == 0x1000);
    CHECK(m[1].inode == 1234);
    CHECK(m[1].file_backed());
    CHECK(m[2].deleted);
    CHECK(m[2].path == "/tmp/libgone.so");
    CHECK(m[2].file_backed());
    CHECK(m[3].path.empty());
    CHECK(!m[3].file_backed());
    CHECK(m[4].executable());
    CHECK(m[6].path == "[vdso]");
    CHECK(!m[6].file_backed());
    CHECK(m[7].start == 0xffffffffff600000);
}
