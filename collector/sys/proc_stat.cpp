#include "sys/proc_stat.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

namespace qscope {

bool read_file(const std::string& path, std::string& out) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return false;
    std::ostringstream ss;
    ss << f.rdbuf();
    out = ss.str();
    return true;
}

bool parse_proc_stat(const std::string& text, ProcStat& out) {
    const auto open = text.find('(');
    const auto close = text.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open) return false;
    out.pid = std::atoi(text.c_str());
    out.comm = text.substr(open + 1, close - open - 1);
    std::istringstream rest(text.substr(close + 1));
    // fields from 3 (state) on; see proc(5)
    std::vector<std::string> f;
    std::string tok;
    while (rest >> tok) f.push_back(tok);
    if (f.size() < 20) return false;
    // Foreign input: strtoull saturates instead of throwing on out-of-range fields.
    auto num = [](const std::string& t) { return std::strtoull(t.c_str(), nullptr, 10); };
    out.state = f[0].empty() ? '?' : f[0][0];
    out.flags = static_cast<unsigned>(num(f[6]));
    out.utime = num(f[11]);
    out.stime = num(f[12]);
    out.num_threads = static_cast<int>(std::min<unsigned long long>(num(f[17]), 1u << 30));
    out.start_time = num(f[19]);
    return true;
}

}  // namespace qscope
