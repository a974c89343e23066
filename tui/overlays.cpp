#include "tui/overlays.h"

#include <algorithm>

#include "model/snapshot.h"
#include "tui/bindings.h"

namespace qscope::tui {
namespace {

// A blank box with a frame, over whatever was drawn there.
void draw_box(Grid& g, int x0, int y0, int bw, int bh, bool u) {
    for (int y = y0; y < y0 + bh; ++y) g.fill(x0, y, bw, U' ', Role::normal);
    g.fill(x0, y0, bw, u ? U'─' : U'-', Role::header);
    g.fill(x0, y0 + bh - 1, bw, u ? U'─' : U'-', Role::header);
    for (int y = y0; y < y0 + bh; ++y) {
        g.fill(x0, y, 1, u ? U'│' : U'|', Role::header);
        g.fill(x0 + bw - 1, y, 1, u ? U'│' : U'|', Role::header);
    }
    g.fill(x0, y0, 1, u ? U'┌' : U'+', Role::header);
    g.fill(x0 + bw - 1, y0, 1, u ? U'┐' : U'+', Role::header);
    g.fill(x0, y0 + bh - 1, 1, u ? U'└' : U'+', Role::header);
    g.fill(x0 + bw - 1, y0 + bh - 1, 1, u ? U'┘' : U'+', Role::header);
}

// The part of the dashboard a probe family (collector source name) feeds.
std::string view_of(const std::string& source) {
    const auto family = probe_family_named(source);
    if (!family) return source;
    switch (*family) {
        case ProbeFamily::sock: return "requests";
        case ProbeFamily::sched: return "threads";
        case ProbeFamily::jvm: return "carriers";
        case ProbeFamily::tree: return "processes";
    }
    return source;
}

}  // namespace

void draw_help(Grid& g, const UiState& ui) {
    const auto keys = key_help(ui.unicode, !ui.replay.live());
    int kw = 0, dw = 0;
    for (const auto& [k, d] : keys) {
        kw = std::max(kw, cell_width(k));
        dw = std::max(dw, cell_width(d));
    }
    const int bw = std::min(g.width(), kw + dw + 7);
    const int bh = std::min(g.height(), static_cast<int>(keys.size()) + 4);
    if (bw < 4 || bh < 3) return;
    const int x0 = (g.width() - bw) / 2, y0 = (g.height() - bh) / 2;
    const bool u = ui.unicode;
    draw_box(g, x0, y0, bw, bh, u);
    g.put(x0 + 2, y0, fit(" keys ", bw - 4, u), Role::header, x0 + bw - 1);
    const int inner = bw - 4;
    int y = y0 + 2;
    for (const auto& [k, d] : keys) {
        if (y >= y0 + bh - 1) break;
        const Line l = {{pad(k, kw, false, u), Role::header}, {"  " + d, Role::normal}};
        put_line(g, x0 + 2, y++, l, inner, u);
    }
}

void draw_attaching(Grid& g, const UiState& ui) {
    const int w = g.width();
    put_line(g, 0, 0,
             {{"qscope ", Role::header},
              {"attaching to pid " + std::to_string(ui.pid) + (ui.unicode ? "…" : "..."), Role::normal}},
             w, ui.unicode);
    if (g.height() <= 2) return;
    if (ui.attach_progress.empty()) {
        put_line(g, 0, 1, {{"loading probes; the first snapshot follows", Role::dim}}, w, ui.unicode);
        return;
    }
    // Which views are still attaching, so a slow probe family is visible as such.
    Line l = {{"loading probes: ", Role::dim}};
    for (size_t i = 0; i < ui.attach_progress.size(); ++i) {
        const auto& [source, ready] = ui.attach_progress[i];
        if (i) l.push_back({ui.unicode ? " · " : ", ", Role::dim});
        l.push_back({view_of(source) + " ", Role::normal});
        if (ready)
            l.push_back({ui.unicode ? "✓" : "ok", Role::ok});
        else
            l.push_back({ui.unicode ? "…" : "...", Role::dim});
    }
    put_line(g, 0, 1, l, w, ui.unicode);
}

}  // namespace qscope::tui
