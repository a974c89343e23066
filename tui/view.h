// The dashboard's model/view layer: everything `qscope top` shows is computed here as a
// pure function of (Snapshot, terminal size, UI state). No curses, no clocks, no I/O — so
// unit tests render real-shaped snapshots to golden text, and the curses backend
// (dashboard.cpp) only paints the grid and turns key presses into handle_key() calls.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/snapshot.h"
#include "tui/screen.h"
#include "tui/sorting.h"
#include "tui/stages.h"
#include "tui/ui_state.h"

namespace qscope::tui {

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
