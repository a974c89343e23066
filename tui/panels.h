// The six panels under the stage strip. Each panel is built as a PanelBody (a title
// summary, optional column labels, rows) and then boxed into the lines it is given:
// panels.cpp arranges and draws them, panels_socket.cpp builds the listeners, requests and
// downstream panels (socket probes), panels_thread.cpp the thread groups, waits and
// carriers panels (scheduler probes).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/snapshot.h"
#include "tui/screen.h"
#include "tui/table.h"
#include "tui/ui_state.h"

namespace qscope::tui {

// Draws every panel into the rows [y, bottom) of the grid: two columns on wide terminals,
// one otherwise; the focused panel gets the larger share of the lines.
void draw_panels(Grid& g, int y, int bottom, const Snapshot& s, const UiState& ui);

// ---- building a panel ----

struct PanelBody {
    Line title;                    // the summary after the panel's name
    Line columns;                  // column labels; empty for non-tables
    std::vector<Line> rows;
    std::vector<int> item_of_row;  // selectable item shown on that row, -1 for none
};

void add_text_row(PanelBody& b, Line l, int item = -1);
// A table as the panel's column labels and rows, row i showing item i.
void add_table(PanelBody& b, const Table& t);
// An open stack under the row of `item`, user frames then kernel frames.
void add_stack(PanelBody& b, const std::vector<std::string>& user, const std::vector<std::string>& kernel,
               int item);
inline Role count_role(uint64_t n, Role when_nonzero) { return n ? when_nonzero : Role::normal; }

// One per panel; `width` is what the body has to fit in.
PanelBody listeners_panel(const Snapshot& s, const UiState& ui, int width);
PanelBody requests_panel(const Snapshot& s, const UiState& ui, int width);
PanelBody downstream_panel(const Snapshot& s, const UiState& ui, int width);
PanelBody threads_panel(const Snapshot& s, const UiState& ui, int width);
PanelBody waits_panel(const Snapshot& s, const UiState& ui, int width);
PanelBody carriers_panel(const Snapshot& s, const UiState& ui, int width);

}  // namespace qscope::tui
