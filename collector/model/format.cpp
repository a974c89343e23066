#include "model/format.h"

#include <algorithm>

namespace qscope {

std::string fmt_count(uint64_t n) {
    std::string s = std::to_string(n), out;
    int c = 0;
    for (auto it = s.rbegin(); it != s.rend(); ++it) {
        if (c && c % 3 == 0) out.push_back(',');
        out.push_back(*it);
        ++c;
    }
    std::reverse(out.begin(), out.end());
    return out;
}

std::string counted(uint64_t n, const std::string& noun, const std::string& plural) {
    if (n == 1) return fmt_count(n) + " " + noun;
    return fmt_count(n) + " " + (plural.empty() ? noun + "s" : plural);
}

}  // namespace qscope
