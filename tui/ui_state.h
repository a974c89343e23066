// What the operator has chosen on the dashboard: the focused panel, each panel's row and
// sort order, open stacks, pause and help. Key bindings change it; every drawing reads it.
#pragma once
#include <array>
#include <string>
#include <utility>
#include <vector>

namespace qscope::tui {

enum class Panel : int { listeners, requests, downstream, threads, waits, carriers };
constexpr int kPanelCount = 6;
const char* panel_name(Panel p);

// `top --replay`: the time cursor over a recording's ticks. `of` empty: live.
struct ReplayState {
    std::string of;                  // the recording: "spike.qsrec on web-1 from 20:31:05 UTC"
    size_t index = 0, count = 0;     // the tick shown, of how many
    double speed = 1;                // recorded seconds played per second
    bool playing = true;
    bool prompting = false;          // `g`: typing the time to go to
    std::string prompt;
    bool live() const { return of.empty(); }
};

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
    ReplayState replay;
};

}  // namespace qscope::tui
