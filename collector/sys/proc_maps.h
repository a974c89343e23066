// /proc/PID/maps parsing, shared by the symbolizer (module layout) and anything else that
// needs to know what is mapped where in a target.
#pragma once
#include <string_view>
#include <cstdint>
#include <string>
#include <vector>

namespace qscope {

// Bare hexadecimal (no 0x), at most 16 digits; false on anything else.
bool parse_hex(std::string_view s, uint64_t& out);

struct MapEntry {
    uint64_t start = 0, end = 0;  // [start, end)
    uint64_t offset = 0;          // file offset of start
    uint64_t inode = 0;
    std::string dev;              // "fd:01"
    std::string perms;            // "r-xp"
    std::string path;             // without the " (deleted)" suffix; "" for anonymous
    bool deleted = false;

    bool executable() const { return perms.size() >= 3 && perms[2] == 'x'; }
    // Backed by a real file (not "[heap]", "[vdso]", anonymous or "//anon" JIT regions).
    bool file_backed() const { return !path.empty() && path[0] == '/' && inode != 0; }
};

// Tolerant: malformed lines are skipped, never fatal (the text may come from a fuzzer or a
// truncated read of a process that is exiting).
std::vector<MapEntry> parse_proc_maps(const std::string& text);

}  // namespace qscope
