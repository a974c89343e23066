// Compact number, duration and sparkline formatting for the dashboard: every string is
// short and of predictable width, so columns line up and narrow terminals still fit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace qscope::tui {

// 0..9999 exact, then 12.3k, 123k, 1.23M, 12.3M, ...
std::string fmt_count(uint64_t n);
// Seconds as 0, 850µs, 1.20ms, 12.3ms, 123ms, 1.23s, 12.3s, 2m05s, 1h02m, 3d04h.
std::string fmt_secs(double s, bool unicode = true);
// Elapsed wall time: 45s, 1m23s, 2h03m, 3d04h.
std::string fmt_elapsed(double s);
// Per second: 0/s, 0.5/s, 12/s, 1234/s, 12.3k/s.
std::string fmt_rate(double per_second);
// An average count, one decimal: 0.0, 0.7, 13.6.
std::string fmt_average(double n);
// The separator between facts on one line: " · " (" - " in ASCII).
std::string dot(bool unicode);

// The samples (oldest first) as `width` glyphs, newest at the right edge. More samples than
// cells: each cell shows the max of its bucket (peaks are what an operator looks for).
// Fewer: padded with blanks on the left. Zero is blank, any positive value at least the
// lowest bar, `scale_max` (or the largest sample if bigger) the full bar.
std::string sparkline(const std::vector<double>& samples, int width, double scale_max = 0, bool unicode = true);
// The level (0 blank .. 8 full) sparkline() uses for one value.
int spark_level(double v, double scale_max);

}  // namespace qscope::tui
