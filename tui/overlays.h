// What is drawn over the dashboard, or instead of it: the key help box and the
// "attaching" frame shown before the first snapshot.
#pragma once
#include "tui/screen.h"
#include "tui/ui_state.h"

namespace qscope::tui {

// A centred box listing key_help(); any key closes it.
void draw_help(Grid& g, const UiState& ui);
// The first line says whom qscope attaches to; the second which probe families are loaded.
void draw_attaching(Grid& g, const UiState& ui);

}  // namespace qscope::tui
