#include "model/processes.h"

#include <vector>

namespace qscope {

std::string describe_processes(const TargetInfo& t) {
    if (t.processes.size() <= 1) return "";
    std::vector<std::pair<std::string, int>> roles;
    for (const auto& p : t.processes) {
        auto it = roles.begin();
        while (it != roles.end() && it->first != p.role) ++it;
        if (it == roles.end())
            roles.emplace_back(p.role, 1);
        else
            it->second++;
    }
    std::string out = std::to_string(t.processes.size()) + " processes:";
    for (size_t i = 0; i < roles.size(); ++i) {
        out += i ? ", " : " ";
        if (roles[i].second > 1) out += std::to_string(roles[i].second) + " ";
        out += roles[i].first;
    }
    return out;
}

}  // namespace qscope
