// The dashboard's model/view layer: everything `qscope top` shows is computed here as a
// pure function of (Snapshot, terminal size, UI state). No curses, no clocks, no I/O — so
// unit tests render real-shaped snapshots to golden text, and the curses backend
// (dashboard.cpp) only paints the grid and turns key presses into handle_key() calls.
//
// render() stacks the pieces, each in a file of its own: bars (header, verdict, footer),
// stages (the pipeline strip), panels (the six panels, laid out by table), overlays (key
// help, the attaching frame). This header re-exports what the backend and the tests use:
// UiState, History and the stage views, sorting, and the key bindings.
#pragma once
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
