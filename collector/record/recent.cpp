#include "record/recent.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "record/window.h"

namespace qscope::record {

RecentVerdict::RecentVerdict(double horizon_seconds)
    : horizon_ms_(std::max<int64_t>(1, std::llround(horizon_seconds * 1e3))) {}

std::shared_ptr<const Snapshot> RecentVerdict::apply(std::shared_ptr<const Snapshot> now) {
    if (!now) return now;
    // A window shorter than the last kept one's: a new attach, whose counters start again.
    if (!kept_.empty() && now->window_seconds < kept_.back().window_seconds) kept_.clear();
    if (kept_.empty() || now->taken_at_unix_ms - kept_.back().taken_at_unix_ms >= horizon_ms_ / 4)
        kept_.push_back(*now);
    // The newest kept tick at least a horizon old is where the window starts; older ones
    // are no longer needed.
    const auto old_enough = [&](const Snapshot& k) { return now->taken_at_unix_ms - k.taken_at_unix_ms >= horizon_ms_; };
    while (kept_.size() > 1 && old_enough(kept_[1])) kept_.pop_front();
    if (!old_enough(kept_.front())) return now;
    const std::vector<Snapshot> ticks{kept_.front(), *now};
    const WindowResult w = window(ticks, {kept_.front().taken_at_unix_ms, now->taken_at_unix_ms});
    if (!w.snap) return now;
    auto out = std::make_shared<Snapshot>(*now);
    out->verdict = w.snap->verdict;
    out->verdict.window_seconds = w.snap->window_seconds;
    return out;
}

}  // namespace qscope::record
