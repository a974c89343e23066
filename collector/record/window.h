// A window of a recording, computed the way the live collector computes one
// (docs/recording.md "Windows"). Pure.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/snapshot.h"

namespace qscope::record {

// The ticks' times, unix ms, as the window's bounds are matched against them: a window
// [from, to] ends at the last tick at or before `to` and starts at the last tick at or before
// `from`; a `from` before the first tick (or none) starts at the recording's attach.
struct WindowBounds {
    std::optional<int64_t> from_unix_ms, to_unix_ms;
};

struct WindowResult {
    std::optional<Snapshot> snap;  // nullopt: no tick in the bounds
    std::string error;             // why not
};

// The recording's ticks are the live collector's snapshots, one window since its attach:
// counters are cumulative, so a later window is a difference of two ticks; quantiles come
// from differences of cumulative histograms where the snapshot carries them; gauges are the
// last tick's; the verdict is computed again on the result.
WindowResult window(const std::vector<Snapshot>& ticks, const WindowBounds& b);

// "12.5" (seconds since `start_unix_ms`), "@1764619200.250" (unix seconds) or "20:31:05"
// (UTC time of day on the date of `start_unix_ms`); nullopt when it is none of these.
std::optional<int64_t> parse_time(const std::string& text, int64_t start_unix_ms);

}  // namespace qscope::record
