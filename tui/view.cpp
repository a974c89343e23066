#include "tui/view.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>

#include "tui/format.h"
#include "tui/panels.h"

namespace qscope::tui {

namespace {

std::string clock_text(int64_t unix_ms) {
    if (unix_ms <= 0) return {};
    const time_t t = static_cast<time_t>(unix_ms / 1000);
    struct tm tm {};
    localtime_r(&t, &tm);
    char buf[16];
    std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
    return buf;
}

void draw_header(Grid& g, const Snapshot& s, const UiState& ui) {
    const int w = g.width();
    const std::string d = dot(ui.unicode);
    Line left = {{"qscope ", Role::header},
                 {"pid " + std::to_string(s.target.pid) + " ", Role::normal},
                 {s.target.comm, Role::header},
                 {d + std::to_string(s.target.threads) + " threads" + d + "attached " + fmt_elapsed(s.attached_seconds),
                  Role::normal}};
    if (std::abs(s.window_seconds - s.attached_seconds) > 0.5)
        left.push_back({d + "window " + fmt_elapsed(s.window_seconds), Role::normal});
    if (s.lost_events) left.push_back({d + "lost " + fmt_count(s.lost_events), Role::warn});
    Line right;
    if (s.target.exited) right.push_back({" EXITED ", Role::critical});
    if (ui.paused) right.push_back({" PAUSED ", Role::selected});
    const std::string clock = clock_text(s.taken_at_unix_ms);
    right.push_back({" tick " + std::to_string(s.tick) + (clock.empty() ? "" : d + clock), Role::dim});
    const int rw = line_width(right);
    // The badges matter more than the tail of the left side.
    if (rw + 10 <= w) {
        put_line(g, 0, 0, left, w - rw - 1, ui.unicode);
        g.put(w - rw, 0, right);
    } else {
        Line all = right;
        all.insert(all.end(), left.begin(), left.end());
        put_line(g, 0, 0, all, w, ui.unicode);
    }
}

// The verdict: a severity badge and the summary; with `lines` = 2 a long summary wraps at a
// word instead of being cut. Returns the lines used.
int draw_verdict(Grid& g, int y, const Snapshot& s, const UiState& ui, int lines) {
    const Role r = severity_role(s.verdict.severity);
    const std::string badge = r == Role::critical ? " CRITICAL " : r == Role::warn ? " WARN " : " OK ";
    const std::string summary = s.verdict.summary.empty() ? "no verdict yet" : s.verdict.summary;
    const Role text = r == Role::ok ? Role::normal : r;
    const int indent = cell_width(badge) + 1;
    const int room = g.width() - indent;
    const std::u32string cells = to_cells(summary);
    if (lines < 2 || room < 20 || static_cast<int>(cells.size()) <= room) {
        put_line(g, 0, y, {{badge, r}, {" ", Role::normal}, {summary, text}}, g.width(), ui.unicode);
        return 1;
    }
    size_t cut = cells.rfind(U' ', static_cast<size_t>(room));
    if (cut == std::u32string::npos || cut < static_cast<size_t>(room) / 2) cut = room;
    size_t rest_from = cut;
    while (rest_from < cells.size() && cells[rest_from] == U' ') ++rest_from;
    put_line(g, 0, y, {{badge, r}, {" ", Role::normal}, {to_utf8(cells.substr(0, cut)), text}}, g.width(), ui.unicode);
    put_line(g, indent, y + 1, {{to_utf8(cells.substr(rest_from)), text}}, room, ui.unicode);
    return 2;
}


void draw_footer(Grid& g, int y, const Snapshot* s, const UiState& ui) {
    const int w = g.width();
    const std::string help = " ? help ";
    Line l;
    if (!ui.flash.empty()) {
        l = {{ui.flash, Role::warn}};
    } else if (s && s->target.exited) {
        l = {{s->target.exit_note.empty() ? "target exited" : s->target.exit_note, Role::critical}};
    } else if (s && !s->partial.empty()) {
        l = {{"partial: " + s->partial.front(), Role::warn}};
    } else if (s && !s->warnings.empty()) {
        l = {{s->warnings.front(), Role::warn}};
    } else {
        const bool u = ui.unicode;
        l = {{"q", Role::header},     {" quit  ", Role::dim},  {"p", Role::header},
             {" pause  ", Role::dim}, {"Tab", Role::header},   {" panel  ", Role::dim},
             {u ? "↑↓" : "Up/Dn", Role::header}, {" row  ", Role::dim}, {"Enter", Role::header},
             {" stack  ", Role::dim}, {"s", Role::header},     {" sort  ", Role::dim},
             {"r", Role::header},     {" reset  ", Role::dim}};
        if (s && is_jvm(*s)) l.insert(l.end(), {{"j", Role::header}, {" thread dump  ", Role::dim}});
    }
    const int hw = cell_width(help);
    if (w > hw + 10) {
        put_line(g, 0, y, l, w - hw, ui.unicode);
        g.put(w - hw, y, help, Role::header);
    } else {
        put_line(g, 0, y, l, w, ui.unicode);
    }
}

void draw_help(Grid& g, const UiState& ui) {
    const auto keys = key_help(ui.unicode);
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
    auto view_of = [](const std::string& source) -> std::string {
        const auto family = probe_family_named(source);
        if (!family) return source;
        switch (*family) {
            case ProbeFamily::sock: return "requests";
            case ProbeFamily::sched: return "threads";
            case ProbeFamily::jvm: return "carriers";
        }
        return source;
    };
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

}  // namespace

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
