// The verdict of a collector whose window runs from its attach for weeks (`qscope export`),
// taken over its last minute instead: a stall, an overflow or a busy hour long gone must not
// read as the limit now. The window is computed as a replay computes one (record/window.h),
// from a tick kept about a minute ago to the newest.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>

#include "model/snapshot.h"

namespace qscope::record {

class RecentVerdict {
public:
    // `horizon_seconds`: how far back the verdict looks. Ticks are kept a quarter of it apart,
    // so the window spans between one and one and a quarter horizons.
    explicit RecentVerdict(double horizon_seconds);
    // `now` with its verdict computed over the recent window, once the attach is more than a
    // horizon old; `now` itself before that, and after a re-attach (its window restarts).
    std::shared_ptr<const Snapshot> apply(std::shared_ptr<const Snapshot> now);
    double horizon_seconds() const { return horizon_ms_ / 1e3; }

private:
    int64_t horizon_ms_;
    std::deque<Snapshot> kept_;  // oldest first, each a quarter horizon after the one before
};

}  // namespace qscope::record
