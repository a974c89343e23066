// The lines around the panels: the header (target, badges, clock) and the verdict under
// it at the top, the footer (the most urgent message, else key hints) at the bottom.
#pragma once
#include "model/snapshot.h"
#include "tui/screen.h"
#include "tui/ui_state.h"

namespace qscope::tui {

void draw_header(Grid& g, const Snapshot& s, const UiState& ui);
// The verdict: a severity badge and the summary; with `lines` = 2 a long summary wraps at a
// word instead of being cut. Returns the lines used.
int draw_verdict(Grid& g, int y, const Snapshot& s, const UiState& ui, int lines);
// `s` null: the attaching frame's footer.
void draw_footer(Grid& g, int y, const Snapshot* s, const UiState& ui);

}  // namespace qscope::tui
