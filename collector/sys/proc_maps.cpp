#include "sys/proc_maps.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace qscope {
namespace {


// Next whitespace-delimited field of `line` starting at `pos`.
std::string_view next_field(std::string_view line, size_t& pos) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    size_t b = pos;
    while (pos < line.size() && line[pos] != ' ' && line[pos] != '\t') ++pos;
    return line.substr(b, pos - b);
}

}  // namespace

// Bare hex, at most 16 digits (a u64): the form /proc/PID/maps uses.
bool parse_hex(std::string_view s, uint64_t& out) {
    if (s.empty() || s.size() > 16) return false;
    uint64_t v = 0;
    for (char c : s) {
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return false;
        v = (v << 4) | uint64_t(d);
    }
    out = v;
    return true;
}

std::vector<MapEntry> parse_proc_maps(const std::string& text) {
    std::vector<MapEntry> out;
    // A line per mapping: 10,000 threads map 20,000 stacks and guard pages, and growing the
    // vector moved them ~15 times over on the way to the first frame.
    out.reserve(static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
    std::string_view all(text);
    size_t lb = 0;
    while (lb < all.size()) {
        size_t le = all.find('\n', lb);
        if (le == std::string_view::npos) le = all.size();
        std::string_view line = all.substr(lb, le - lb);
        lb = le + 1;

        size_t pos = 0;
        std::string_view range = next_field(line, pos);
        std::string_view perms = next_field(line, pos);
        std::string_view off = next_field(line, pos);
        std::string_view dev = next_field(line, pos);
        std::string_view inode = next_field(line, pos);
        size_t dash = range.find('-');
        MapEntry e;
        if (dash == std::string_view::npos || !parse_hex(range.substr(0, dash), e.start) ||
            !parse_hex(range.substr(dash + 1), e.end) || e.end <= e.start)
            continue;
        if (perms.size() != 4 || !parse_hex(off, e.offset) || dev.empty() || inode.empty())
            continue;
        uint64_t ino = 0;
        for (char c : inode) {
            if (c < '0' || c > '9') { ino = UINT64_MAX; break; }
            ino = ino * 10 + uint64_t(c - '0');
        }
        if (ino == UINT64_MAX) continue;
        e.inode = ino;
        e.perms = std::string(perms);
        e.dev = std::string(dev);
        // The path is the rest of the line after the padding; it may contain spaces.
        while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
        std::string_view path = line.substr(pos);
        constexpr std::string_view kDeleted = " (deleted)";
        if (path.size() > kDeleted.size() &&
            path.substr(path.size() - kDeleted.size()) == kDeleted) {
            e.deleted = true;
            path.remove_suffix(kDeleted.size());
        }
        e.path = std::string(path);
        out.push_back(std::move(e));
    }
    return out;
}

}  // namespace qscope
