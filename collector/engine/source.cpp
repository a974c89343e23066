#include "engine/source.h"

namespace qscope {

void LostEvents::update(const char* source, const std::vector<LostCause>& causes, Snapshot& snap) {
    total_ = 0;
    std::string detail;
    for (const auto& c : causes) {
        if (!c.count) continue;
        total_ += c.count;
        detail += (detail.empty() ? "" : "; ") + std::to_string(c.count) + " " + c.what;
    }
    if (total_)
        snap.partial.push_back(std::string(source) + ": " + std::to_string(total_) + " events lost since attach: " +
                               detail);
}

}  // namespace qscope
