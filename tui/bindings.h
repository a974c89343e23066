// What each key does on the dashboard: handle_key() turns one key press into a change of
// UiState and, when the backend must act (quit, reset the window, ask for a JVM dump), an
// Action. tui/input.h is the other half: it decodes curses input into these Key codes.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/snapshot.h"
#include "tui/ui_state.h"

namespace qscope::tui {

// Keys the view understands beyond plain characters (the backend maps curses codes).
enum Key : int {
    kKeyUp = 0x110000, kKeyDown, kKeyLeft, kKeyRight, kKeyPgUp, kKeyPgDn, kKeyHome, kKeyEnd,
    kKeyTab, kKeyBackTab, kKeyEnter, kKeyEscape
};
enum class Action {
    none, redraw, quit, reset_window, jvm_dump, write_ring, pause_toggled,
    // `top --replay`: move the time cursor (the backend holds the ticks)
    step_back, step_forward, seek_critical, seek_time
};
// Applies one key press to the UI state; the returned action is for the backend to carry
// out (quit, tell the collector to reset or dump). `shown` is the snapshot on screen.
Action handle_key(UiState& ui, int key, const Snapshot* shown);

// Every key and what it does: the help overlay lists exactly these (a replay's own keys
// first when `replay`).
std::vector<std::pair<std::string, std::string>> key_help(bool unicode = true, bool replay = false);

}  // namespace qscope::tui
