// The pipeline strip under the verdict: one column per stage a request passes through,
// each with its count now, its max, a detail line and a one-minute sparkline (History).
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <string>

#include "model/snapshot.h"
#include "tui/screen.h"

namespace qscope::tui {

// The pipeline, left to right, as the header row shows it.
enum class Stage : int { accept_queue, connector, in_flight, gates_downstream, carriers };
constexpr int kStageCount = 5;

struct StageView {
    std::string name, short_name;
    uint64_t now = 0;
    uint64_t max = 0;          // window max from the snapshot, or seen since the last reset
    std::string detail;        // one short line under the numbers
    std::string short_detail;  // the same for narrow columns (empty: cut `detail`)
    Role severity = Role::ok;  // ok / warn / critical; dim when the stage is not observed
    bool observed = true;
};

// Sparkline history: the last minute of each stage's count, fed once per snapshot, plus
// the largest value seen since the last reset (for stages whose snapshot has no window max).
struct History {
    explicit History(size_t capacity = 60) : capacity(capacity) {}
    size_t capacity;
    std::array<std::deque<double>, kStageCount> samples;
    std::array<uint64_t, kStageCount> max_seen{};
    uint64_t last_tick = UINT64_MAX;
    // Appends the snapshot's stage counts; a snapshot whose tick was already fed is ignored.
    void feed(const Snapshot& s);
    void reset_maxima() { max_seen.fill(0); }
};
// Samples that span one minute at this collector interval.
size_t history_capacity(double interval_seconds);

// Counts per stage from one snapshot (no history): what feed() records.
std::array<uint64_t, kStageCount> stage_counts(const Snapshot& s);
std::array<StageView, kStageCount> stage_views(const Snapshot& s, const History& h, bool unicode = true);

// The role a verdict severity is drawn in (stages and the verdict line agree).
Role severity_role(Severity sev);

// Four lines from `y`: per stage its name, count now and max, a detail, the sparkline of
// the last minute. `one_line` (short terminals) or a narrow grid: names and counts only.
void draw_stages(Grid& g, int y, const Snapshot& s, const History& h, bool one_line, bool unicode);

}  // namespace qscope::tui
