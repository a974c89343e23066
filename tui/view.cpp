#include "tui/view.h"

#include "tui/bars.h"
#include "tui/overlays.h"
#include "tui/panels.h"

namespace qscope::tui {

Grid render(const Snapshot* snap, int width, int height, const UiState& ui, const History& history) {
    Grid g(width, height);
    if (width <= 0 || height <= 0) return g;
    if (!snap) {
        draw_attaching(g, ui);
        if (height >= 3) draw_footer(g, height - 1, nullptr, ui);
        if (ui.help) draw_help(g, ui);
        return g;
    }
    const Snapshot& s = *snap;
    draw_header(g, s, ui);
    int y = 1;
    if (height >= 2) y += draw_verdict(g, y, s, ui, height >= 20 ? 2 : 1);
    const bool footer = height >= 4;
    const int bottom = footer ? height - 1 : height;
    if (height >= 14) {
        draw_stages(g, y, s, history, false, ui.unicode);
        y += 4;
    } else if (height >= 3) {
        draw_stages(g, y, s, history, true, ui.unicode);  // short terminals: one line, no detail
        ++y;
    }
    draw_panels(g, y, bottom, s, ui);
    if (footer) draw_footer(g, height - 1, &s, ui);
    if (ui.help) draw_help(g, ui);
    return g;
}

}  // namespace qscope::tui
