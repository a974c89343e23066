#include "tui/panels.h"

#include <algorithm>
#include <utility>

#include "tui/sorting.h"

namespace qscope::tui {

const char* panel_name(Panel p) {
    switch (p) {
        case Panel::listeners: return "listeners";
        case Panel::requests: return "requests";
        case Panel::downstream: return "downstream";
        case Panel::threads: return "thread groups";
        case Panel::waits: return "waits";
        case Panel::carriers: return "carriers";
    }
    return "?";
}

void add_text_row(PanelBody& b, Line l, int item) {
    b.rows.push_back(std::move(l));
    b.item_of_row.push_back(item);
}

void add_table(PanelBody& b, const Table& t) {
    b.columns = t.columns;
    for (size_t i = 0; i < t.rows.size(); ++i) add_text_row(b, t.rows[i], static_cast<int>(i));
}

void add_stack(PanelBody& b, const std::vector<std::string>& user, const std::vector<std::string>& kernel,
               int item) {
    if (user.empty() && kernel.empty()) {
        add_text_row(b, {{"    (no stack captured)", Role::dim}}, item);
        return;
    }
    for (const auto& f : user) add_text_row(b, {{"    " + f, Role::normal}}, item);
    if (!kernel.empty()) {
        add_text_row(b, {{"    -- kernel --", Role::dim}}, item);
        for (const auto& f : kernel) add_text_row(b, {{"    " + f, Role::dim}}, item);
    }
}

namespace {

PanelBody build_panel(Panel p, const Snapshot& s, const UiState& ui, int width) {
    // A panel whose probe family was not loaded says so: its zeros would read as "no queue".
    // (A snapshot without any source list is a test's hand-built one: draw it as it is.)
    const bool sock_panel = p == Panel::listeners || p == Panel::requests || p == Panel::downstream;
    const ProbeFamily family = sock_panel ? ProbeFamily::sock : ProbeFamily::sched;
    if (!s.probes.empty() && !s.probes.has(family)) {
        PanelBody b;
        b.title = {{"not observed", Role::dim}};
        add_text_row(b, {{sock_panel ? "socket probes off (--no-requests)" : "scheduler probes off (--no-threads)",
                          Role::dim}});
        return b;
    }
    switch (p) {
        case Panel::listeners: return listeners_panel(s, ui, width);
        case Panel::requests: return requests_panel(s, ui, width);
        case Panel::downstream: return downstream_panel(s, ui, width);
        case Panel::threads: return threads_panel(s, ui, width);
        case Panel::waits: return waits_panel(s, ui, width);
        case Panel::carriers: return carriers_panel(s, ui, width);
    }
    return {};
}

int desired_lines(const PanelBody& b) {
    return 1 + (b.columns.empty() ? 0 : 1) + static_cast<int>(b.rows.size());
}

// The title line: a focus marker, the panel's name, its summary, a rule to the edge.
void draw_title(Grid& g, Panel p, const Line& title, int x, int y, int w, bool focused, bool u) {
    const Role title_role = focused ? Role::selected : Role::header;
    int cx = g.put(x, y, std::string(focused ? (u ? "▶ " : "> ") : "  "), title_role, x + w);
    cx = g.put(cx, y, panel_name(p), title_role, x + w);
    cx = g.put(cx, y, " ", title_role, x + w);
    cx = g.put(cx, y, " ", Role::normal, x + w);
    put_line(g, cx, y, title, x + w - cx, u);
    const int rule_from = cx + line_width(title) + 1;
    if (rule_from < x + w) g.fill(rule_from, y, x + w - rule_from, u ? U'─' : U'-', Role::dim);
}

struct Scroll {
    int first = 0;          // first row shown
    int selected_row = -1;  // the selected item's own row, -1 when none
};

// Scrolled so the selected item (and its open stack) stays visible in `lines` lines.
Scroll scroll_to(const PanelBody& b, int selected, int lines) {
    Scroll sc;
    int last_sel = -1;
    for (int r = 0; r < static_cast<int>(b.rows.size()); ++r)
        if (selected >= 0 && b.item_of_row[r] == selected) {
            if (sc.selected_row < 0) sc.selected_row = r;
            last_sel = r;
        }
    if (sc.selected_row >= 0) {
        if (last_sel - lines + 1 > sc.first) sc.first = last_sel - lines + 1;  // show the open stack
        if (sc.first > sc.selected_row) sc.first = sc.selected_row;            // but never lose the row
    }
    return sc;
}

// Draws one panel into a box of `h` lines: title; then column labels and as many rows as
// fit, scrolled to the selected item.
void draw_panel(Grid& g, Panel p, const PanelBody& b, int x, int y, int w, int h, const UiState& ui, int items) {
    if (h <= 0 || w <= 0) return;
    const bool focused = ui.focus == p;
    const bool u = ui.unicode;
    draw_title(g, p, b.title, x, y, w, focused, u);
    if (h == 1) return;

    const int selected = items ? std::clamp(ui.row[static_cast<int>(p)], 0, items - 1) : -1;
    // Body indented under the title's marker, so panel boundaries read at a glance.
    const int bx = x + std::min(2, w / 4), bw = w - (bx - x);
    int body_y = y + 1, body_h = h - 1;
    if (!b.columns.empty() && h >= 3) {
        put_line(g, bx, body_y, b.columns, bw, u);
        ++body_y;
        --body_h;
    }
    const int n = static_cast<int>(b.rows.size());
    const Scroll sc = scroll_to(b, selected, body_h);
    for (int i = 0; i < body_h && sc.first + i < n; ++i) {
        const int r = sc.first + i;
        put_line(g, bx, body_y + i, b.rows[r], bw, u);
        if (focused && r == sc.selected_row) g.set_role(x, body_y + i, w, Role::selected);
    }
    // Say so when rows are hidden below, on the last visible line's right edge.
    if (sc.first + body_h < n && body_h > 0) {
        const std::string more = (u ? " ↓" : " +") + std::to_string(n - sc.first - body_h) + " ";
        const int mw = cell_width(more);
        if (mw < w) g.put(x + w - mw, body_y + body_h - 1, more, Role::dim, x + w);
    }
}

// Splits `total` lines between panels: each visible panel gets its title line, then lines
// go round-robin to panels that want more, the focused panel taking two per round.
std::vector<int> allocate(const std::vector<int>& desired, int total, int focus) {
    const int n = static_cast<int>(desired.size());
    std::vector<int> got(n, 0);
    if (total <= 0 || n == 0) return got;
    if (total < n) {
        // Not even a title each: the focused panel first, then in order.
        got[focus] = 1;
        for (int i = 0, left = total - 1; i < n && left > 0; ++i)
            if (i != focus) {
                got[i] = 1;
                --left;
            }
        return got;
    }
    int left = total - n;
    got.assign(n, 1);
    bool progress = true;
    while (left > 0 && progress) {
        progress = false;
        for (int k = 0; k < n && left > 0; ++k) {
            const int i = (focus + k) % n;
            const int take = std::min({i == focus ? 2 : 1, desired[i] - got[i], left});
            if (take > 0) {
                got[i] += take;
                left -= take;
                progress = true;
            }
        }
    }
    return got;
}

// One column of panels stacked from `y`, sharing `h` lines.
void draw_column(Grid& g, const std::vector<Panel>& panels, int x, int y, int w, int h, const Snapshot& s,
                 const UiState& ui) {
    std::vector<PanelBody> bodies;
    std::vector<int> want;
    int focus_idx = 0;
    for (size_t i = 0; i < panels.size(); ++i) {
        bodies.push_back(build_panel(panels[i], s, ui, w - std::min(2, w / 4)));
        want.push_back(desired_lines(bodies.back()));
        if (panels[i] == ui.focus) focus_idx = static_cast<int>(i);
    }
    const auto got = allocate(want, h, focus_idx);
    int py = y;
    for (size_t i = 0; i < bodies.size(); ++i) {
        draw_panel(g, panels[i], bodies[i], x, py, w, got[i], ui, panel_items(s, panels[i]));
        py += got[i];
    }
}

}  // namespace

void draw_panels(Grid& g, int y, int bottom, const Snapshot& s, const UiState& ui) {
    const int area_h = bottom - y;
    if (area_h <= 0) return;
    const int width = g.width();
    std::vector<std::vector<Panel>> columns;
    if (width >= 160)
        columns = {{Panel::listeners, Panel::requests, Panel::downstream},
                   {Panel::threads, Panel::waits, Panel::carriers}};
    else
        columns = {{Panel::listeners, Panel::requests, Panel::downstream, Panel::threads, Panel::waits,
                    Panel::carriers}};
    const int ncol = static_cast<int>(columns.size());
    const int sep = ncol > 1 ? 1 : 0;
    const int colw = (width - sep * (ncol - 1)) / ncol;
    for (int c = 0; c < ncol; ++c) {
        const int x = c * (colw + sep);
        const int w = c == ncol - 1 ? width - x : colw;
        draw_column(g, columns[c], x, y, w, area_h, s, ui);
        if (c > 0)
            for (int yy = y; yy < bottom; ++yy) g.fill(x - 1, yy, 1, ui.unicode ? U'│' : U'|', Role::dim);
    }
}

}  // namespace qscope::tui
