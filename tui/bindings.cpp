#include "tui/bindings.h"

#include <algorithm>

#include "tui/sorting.h"

namespace qscope::tui {

std::vector<std::pair<std::string, std::string>> replay_key_help() {
    return {
        {"Space", "replay: play / pause"},
        {", .", "replay: one tick back / forward (pauses)"},
        {"c", "replay: go to the next critical verdict"},
        {"g", "replay: go to a time (seconds since the start, @unix or HH:MM:SS UTC)"},
        {"+ -", "replay: play faster / slower"},
    };
}

std::vector<std::pair<std::string, std::string>> key_help(bool unicode, bool replay) {
    std::vector<std::pair<std::string, std::string>> keys = replay ? replay_key_help()
                                                                   : std::vector<std::pair<std::string, std::string>>{};
    const std::vector<std::pair<std::string, std::string>> common = {
        {"q", "quit (also Ctrl-C)"},
        {"p", "pause / resume the display (collection continues)"},
        {unicode ? "Tab ⇧Tab ← →" : "Tab S-Tab Left Right", "move between panels"},
        {unicode ? "↑ ↓ PgUp PgDn" : "Up Down PgUp PgDn", "move between rows of the panel"},
        {"Enter", "expand / collapse the selected wait's or stall's stack"},
        {"s", "cycle the sort order of the panel"},
        {"r", "reset maxima and start a new window"},
        {"j", "JVM targets: thread dump of parked virtual threads"},
        {"w", "write the always-on ring (--ring) to a file now"},
        {"Esc", "close open stacks and messages"},
        {"?", "this help (any key closes it)"},
    };
    for (const auto& k : common)
        if (!replay || (k.first != "p" && k.first != "r" && k.first != "j" && k.first != "w")) keys.push_back(k);
    return keys;
}

namespace {

int shown_items(const UiState& ui, const Snapshot* shown) { return shown ? panel_items(*shown, ui.focus) : 0; }

Action move_focus(UiState& ui, int delta) {
    ui.focus = static_cast<Panel>((static_cast<int>(ui.focus) + kPanelCount + delta) % kPanelCount);
    return Action::redraw;
}

Action move_row(UiState& ui, int delta, const Snapshot* shown) {
    int& r = ui.row[static_cast<int>(ui.focus)];
    r = std::clamp(r + delta, 0, std::max(shown_items(ui, shown) - 1, 0));
    return Action::redraw;
}

Action cycle_sort(UiState& ui) {
    const auto& keys = sort_keys(ui.focus);
    if (keys.empty()) {
        ui.flash = std::string("the ") + panel_name(ui.focus) + " panel has no sort order";
        return Action::redraw;
    }
    int& sort = ui.sort[static_cast<int>(ui.focus)];
    sort = (sort + 1) % static_cast<int>(keys.size());
    ui.flash = std::string(panel_name(ui.focus)) + " sorted by " + keys[sort];
    return Action::redraw;
}

Action request_jvm_dump(UiState& ui, const Snapshot* shown) {
    if (!shown || !is_jvm(*shown)) {
        ui.flash = "j: not a JVM target (thread dumps need a HotSpot JVM)";
        return Action::redraw;
    }
    ui.flash = "JVM thread dump requested; shown in the waits panel after the next tick";
    return Action::jvm_dump;
}

// Opens or closes the stack of the selected wait or carrier stall.
Action toggle_stack(UiState& ui, const Snapshot* shown) {
    const int items = shown_items(ui, shown);
    if (items == 0) return Action::none;
    const int focus = static_cast<int>(ui.focus);
    const auto order = sorted_order(*shown, ui.focus, ui.sort[focus]);
    const size_t sel = order[std::clamp(ui.row[focus], 0, items - 1)];
    if (ui.focus == Panel::waits) {
        const std::string k = wait_key(shown->waits[sel]);
        ui.expanded_wait = ui.expanded_wait == k ? std::string() : k;
        return Action::redraw;
    }
    if (ui.focus == Panel::carriers) {
        const int tid = shown->carriers.stalls[sel].tid;
        ui.expanded_stall_tid = ui.expanded_stall_tid == tid ? 0 : tid;
        return Action::redraw;
    }
    return Action::none;
}

// The replay's own keys; Action::none for a key the live bindings handle. A typed time
// (`g`) takes every key until Enter or Esc.
Action replay_key(UiState& ui, int key) {
    ReplayState& r = ui.replay;
    if (r.prompting) {
        if (key == kKeyEnter || key == '\n' || key == '\r') {
            r.prompting = false;
            return Action::seek_time;
        }
        if (key == kKeyEscape) {
            r.prompting = false;
            r.prompt.clear();
            return Action::redraw;
        }
        if (key == 127 || key == 8) {
            if (!r.prompt.empty()) r.prompt.pop_back();
        } else if (key >= 0x20 && key < 0x7f && r.prompt.size() < 40) {
            r.prompt.push_back(static_cast<char>(key));
        }
        return Action::redraw;
    }
    switch (key) {
        case ' ':
        case 'p':
            r.playing = !r.playing;
            return Action::redraw;
        case ',': r.playing = false; return Action::step_back;
        case '.': r.playing = false; return Action::step_forward;
        case 'c': return Action::seek_critical;
        case 'g':
            r.prompting = true;
            r.prompt.clear();
            return Action::redraw;
        case '+':
            r.speed = std::min(r.speed * 2, 64.0);
            return Action::redraw;
        case '-':
            r.speed = std::max(r.speed / 2, 0.25);
            return Action::redraw;
        case 'r':
        case 'j':
        case 'w':
            ui.flash = "a replay shows what was recorded: no window to reset, no JVM to ask, nothing to write";
            return Action::redraw;
        default: return Action::none;
    }
}

}  // namespace

// A flat table from key to command; commands longer than a line are the functions above.
Action handle_key(UiState& ui, int key, const Snapshot* shown) {
    if (key == 'q' && !ui.replay.prompting) return Action::quit;
    if (!ui.replay.live() && !ui.help)
        if (const Action a = replay_key(ui, key); a != Action::none) return a;
    if (ui.help) {  // any other key just closes the overlay
        ui.help = false;
        return Action::redraw;
    }
    switch (key) {
        case '?':
            ui.help = true;
            return Action::redraw;
        case 'p':
            ui.paused = !ui.paused;
            return Action::pause_toggled;
        case kKeyTab:
        case kKeyRight:
        case '\t': return move_focus(ui, 1);
        case kKeyBackTab:
        case kKeyLeft: return move_focus(ui, -1);
        case kKeyUp: return move_row(ui, -1, shown);
        case kKeyDown: return move_row(ui, 1, shown);
        case kKeyPgUp: return move_row(ui, -10, shown);
        case kKeyPgDn: return move_row(ui, 10, shown);
        case kKeyHome: return move_row(ui, -(1 << 20), shown);
        case kKeyEnd: return move_row(ui, 1 << 20, shown);
        case 's': return cycle_sort(ui);
        case 'r':
            ui.flash = "maxima reset; a new window starts at the next tick";
            return Action::reset_window;
        case 'j': return request_jvm_dump(ui, shown);
        case 'w': return Action::write_ring;
        case kKeyEnter:
        case '\n':
        case '\r': return toggle_stack(ui, shown);
        case kKeyEscape:
            ui.expanded_wait.clear();
            ui.expanded_stall_tid = 0;
            ui.flash.clear();
            return Action::redraw;
        default: return Action::none;
    }
}

}  // namespace qscope::tui
