// The dashboard's model/view layer: everything `qscope top` shows is computed here as a
// pure function of (Snapshot, terminal size, UI state). No curses, no clocks, no I/O — so
// unit tests render real-shaped snapshots to golden text, and the curses backend
// (dashboard.cpp) only paints the grid and turns key presses into handle_key() calls.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "model/snapshot.h"
#include "tui/bindings.h"
#include "tui/screen.h"
#include "tui/sorting.h"
#include "tui/stages.h"
#include "tui/ui_state.h"

namespace qscope::tui {

// The whole screen: exactly width × height cells. `snap` null: the "attaching" frame.
Grid render(const Snapshot* snap, int width, int height, const UiState& ui, const History& history);

}  // namespace qscope::tui
