// The dashboard's model/view layer: everything `qscope top` shows is computed here as a
// pure function of (Snapshot, terminal size, UI state). No curses, no clocks, no I/O — so
// unit tests render real-shaped snapshots to golden text, and the curses backend
// (dashboard.cpp) only paints the grid and turns key presses into handle_key() calls.
#pragma once
#include <array>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "tui/screen.h"
#include "model/snapshot.h"

namespace qscope::tui {

enum class Panel : int { listeners, requests, downstream, threads, waits, carriers };
constexpr int kPanelCount = 6;
const char* panel_name(Panel p);

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

struct UiState {
    int pid = 0;                     // shown while attaching
    Panel focus = Panel::downstream;
    std::array<int, kPanelCount> row{};   // selected item per panel
    std::array<int, kPanelCount> sort{};  // index into sort_keys(panel)
    std::string expanded_wait;       // wait_key() of the wait whose stack is open
    int expanded_stall_tid = 0;      // carrier stall whose stack is open
    bool paused = false;
    bool help = false;
    bool unicode = true;             // false: ASCII glyphs only (non-UTF-8 locale)
    double interval_seconds = 1.0;
    std::string flash;               // a transient one-line message in the footer
    // While attaching: each probe family (collector source name) and whether it is loaded.
    std::vector<std::pair<std::string, bool>> attach_progress;
};

// Sort orders a panel can cycle through with `s` (first = default); empty: not sortable.
const std::vector<std::string>& sort_keys(Panel p);
// Item indices of the panel's list (listeners, peers, groups, waits, carrier stalls) in
// display order for the sort key.
std::vector<size_t> sorted_order(const Snapshot& s, Panel p, int sort);
int panel_items(const Snapshot& s, Panel p);
std::string wait_key(const Wait& w);
bool is_jvm(const Snapshot& s);

// Keys the view understands beyond plain characters (the backend maps curses codes).
enum Key : int {
    kKeyUp = 0x110000, kKeyDown, kKeyLeft, kKeyRight, kKeyPgUp, kKeyPgDn, kKeyHome, kKeyEnd,
    kKeyTab, kKeyBackTab, kKeyEnter, kKeyEscape
};
enum class Action { none, redraw, quit, reset_window, jvm_dump, pause_toggled };
// Applies one key press to the UI state; the returned action is for the backend to carry
// out (quit, tell the collector to reset or dump). `shown` is the snapshot on screen.
Action handle_key(UiState& ui, int key, const Snapshot* shown);

// Every key and what it does: the help overlay lists exactly these.
std::vector<std::pair<std::string, std::string>> key_help(bool unicode = true);

// The whole screen: exactly width × height cells. `snap` null: the "attaching" frame.
Grid render(const Snapshot* snap, int width, int height, const UiState& ui, const History& history);

}  // namespace qscope::tui
