// Golden-file comparison shared by the unit tests that pin rendered output (TUI frames,
// JSON, report, /metrics). QSCOPE_UPDATE_GOLDEN=1 rewrites the files; review the diff.
#pragma once
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace golden {

// Compares `got` with tests/unit/golden/<file>, naming the first differing line.
inline void check(const std::string& file, const std::string& got) {
    const std::string path = std::string(QSCOPE_SOURCE_DIR) + "/tests/unit/golden/" + file;
    const char* upd = std::getenv("QSCOPE_UPDATE_GOLDEN");
    if (upd && std::string(upd) == "1") {
        std::ofstream(path) << got;
        WARN("rewrote " << path);
        return;
    }
    std::ifstream in(path);
    INFO("golden file " << path << " (QSCOPE_UPDATE_GOLDEN=1 to create or update)");
    REQUIRE(in.good());
    std::stringstream want;
    want << in.rdbuf();
    if (want.str() == got) return;
    std::istringstream a(want.str()), b(got);
    std::string la, lb;
    for (int line = 1;; ++line) {
        const bool ea = !std::getline(a, la), eb = !std::getline(b, lb);
        if (ea && eb) break;
        if (la != lb || ea != eb) {
            INFO("first difference at line " << line << "\nwant: [" << la << "]\ngot:  [" << lb << "]");
            CHECK(false);
            break;
        }
    }
    FAIL("output differs from " << path << "; full output:\n" << got);
}

}  // namespace golden
