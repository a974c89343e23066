#include "tui/view.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>

#include "tui/format.h"
#include "tui/table.h"

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

// ---- panels -----------------------------------------------------------------------------------

namespace {

struct PanelBody {
    Line title;                    // the summary after the panel's name
    Line columns;                  // column labels; empty for non-tables
    std::vector<Line> rows;
    std::vector<int> item_of_row;  // selectable item shown on that row, -1 for none
};

void add_text_row(PanelBody& b, Line l, int item = -1) {
    b.rows.push_back(std::move(l));
    b.item_of_row.push_back(item);
}

Role count_role(uint64_t n, Role when_nonzero) { return n ? when_nonzero : Role::normal; }

// A table as the panel's column labels and rows, row i showing item i.
void add_table(PanelBody& b, const Table& t) {
    b.columns = t.columns;
    for (size_t i = 0; i < t.rows.size(); ++i) add_text_row(b, t.rows[i], static_cast<int>(i));
}

PanelBody listeners_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    if (s.listeners.empty()) {
        b.title = {{"none found (is the target listening on TCP?)", Role::dim}};
        add_text_row(b, {{"no listeners", Role::dim}});
        return b;
    }
    uint64_t q = 0, backlog = 0, ovf = 0;
    for (const auto& l : s.listeners) {
        q += l.accept_queue;
        backlog += l.backlog;
        ovf += l.overflows;
    }
    b.title = {{std::to_string(s.listeners.size()) + (s.listeners.size() == 1 ? " port" : " ports"), Role::normal},
               {dot(ui.unicode) + "queue ", Role::normal},
               {fmt_count(q), count_role(q, Role::warn)},
               {"/" + fmt_count(backlog), Role::normal}};
    if (ovf) b.title.push_back({dot(ui.unicode) + "overflows " + fmt_count(ovf), Role::critical});
    const std::vector<Col> cols = {
        {"listener", "listener", 8, false, 0},  {"queue", "q", 6, true, 0},      {"max", "max", 6, true, 1},
        {"backlog", "blog", 7, true, 1},        {"accepted", "acc", 8, true, 3}, {"wait p50", "p50", 8, true, 4},
        {"wait p99", "p99", 8, true, 2},        {"overflows", "ovf", 9, true, 0},
    };
    std::vector<Row> rows;
    for (size_t k : sorted_order(s, Panel::listeners, ui.sort[static_cast<int>(Panel::listeners)])) {
        const auto& l = s.listeners[k];
        const bool full = l.backlog && l.accept_queue >= l.backlog;
        rows.push_back({{(l.addr.empty() ? std::string("*") : l.addr) + ":" + std::to_string(l.port), Role::normal},
                        {fmt_count(l.accept_queue), full ? Role::critical : count_role(l.accept_queue, Role::warn)},
                        {fmt_count(l.accept_queue_max), Role::normal},
                        {fmt_count(l.backlog), Role::normal},
                        {fmt_count(l.accepted), Role::normal},
                        {fmt_secs(l.accept_wait.p50, ui.unicode), Role::normal},
                        {fmt_secs(l.accept_wait.p99, ui.unicode), Role::normal},
                        {fmt_count(l.overflows), count_role(l.overflows, Role::critical)}});
    }
    add_table(b, layout_table(cols, rows, width, ui.unicode));
    return b;
}

PanelBody requests_panel(const Snapshot& s, const UiState& ui, int) {
    PanelBody b;
    const auto& r = s.requests;
    const std::string d = dot(ui.unicode);
    const bool u = ui.unicode;
    b.title = {{fmt_rate(r.rate_per_second), Role::normal},
               {d + "p99 " + fmt_secs(r.latency.p99, u), Role::normal},
               {d + "in flight " + fmt_count(r.in_flight), Role::normal}};
    if (r.status.c5xx) b.title.push_back({d + "5xx " + fmt_count(r.status.c5xx), Role::critical});
    add_text_row(b, {{"rate ", Role::dim},
                     {fmt_rate(r.rate_per_second), Role::normal},
                     {d + "in flight ", Role::dim},
                     {fmt_count(r.in_flight), Role::normal},
                     {" (max " + fmt_count(r.in_flight_max) + ")", Role::dim},
                     {d + "unread ", Role::dim},
                     {fmt_count(r.waiting_unread), count_role(r.waiting_unread, Role::warn)},
                     {" (max " + fmt_count(r.waiting_unread_max) + ")", Role::dim},
                     {d + "conns ", Role::dim},
                     {fmt_count(r.connections), Role::normal},
                     {d + "done ", Role::dim},
                     {fmt_count(r.completed), Role::normal}});
    add_text_row(b, {{"latency p50 ", Role::dim},
                     {fmt_secs(r.latency.p50, u), Role::normal},
                     {" p90 ", Role::dim},
                     {fmt_secs(r.latency.p90, u), Role::normal},
                     {" p99 ", Role::dim},
                     {fmt_secs(r.latency.p99, u), Role::normal},
                     {" max ", Role::dim},
                     {fmt_secs(r.latency.max, u), Role::normal},
                     {d + "oldest in flight ", Role::dim},
                     {fmt_secs(r.oldest_in_flight_seconds, u),
                      r.oldest_in_flight_seconds >= 5 ? Role::warn : Role::normal}});
    add_text_row(b, {{"status 2xx ", Role::dim},
                     {fmt_count(r.status.c2xx), Role::normal},
                     {"  3xx ", Role::dim},
                     {fmt_count(r.status.c3xx), Role::normal},
                     {"  4xx ", Role::dim},
                     {fmt_count(r.status.c4xx), count_role(r.status.c4xx, Role::warn)},
                     {"  5xx ", Role::dim},
                     {fmt_count(r.status.c5xx), count_role(r.status.c5xx, Role::critical)},
                     {"  other ", Role::dim},
                     {fmt_count(r.status.unknown), Role::normal}});
    if (r.ports.size() > 1)
        for (const auto& p : r.ports)
            add_text_row(b, {{":" + std::to_string(p.port), Role::normal},
                             {"  in flight ", Role::dim},
                             {fmt_count(p.in_flight), Role::normal},
                             {"  unread ", Role::dim},
                             {fmt_count(p.waiting_unread), count_role(p.waiting_unread, Role::warn)},
                             {"  completed ", Role::dim},
                             {fmt_count(p.completed_total), Role::normal}});
    return b;
}

PanelBody downstream_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    const int sk = ui.sort[static_cast<int>(Panel::downstream)];
    if (s.downstream.empty()) {
        b.title = {{"no outbound connections seen", Role::dim}};
        add_text_row(b, {{"no downstream peers", Role::dim}});
        return b;
    }
    uint64_t busy = 0, conns = 0;
    for (const auto& d : s.downstream) {
        busy += d.busy;
        conns += d.connections;
    }
    const auto& keys = sort_keys(Panel::downstream);
    b.title = {{std::to_string(s.downstream.size()) + (s.downstream.size() == 1 ? " peer" : " peers"), Role::normal},
               {dot(ui.unicode) + "busy ", Role::normal},
               {fmt_count(busy) + "/" + fmt_count(conns), count_role(busy, Role::warn)},
               {dot(ui.unicode) + "by " + keys[sk % keys.size()], Role::dim}};
    const std::vector<Col> cols = {
        {"peer", "peer", 10, false, 0}, {"conns", "conn", 5, true, 0},  {"busy", "busy", 5, true, 0},
        {"max", "max", 5, true, 2},     {"calls", "calls", 6, true, 1}, {"p50", "p50", 7, true, 4},
        {"p99", "p99", 7, true, 1},     {"oldest", "old", 7, true, 0},  {"fail", "fail", 5, true, 3},
        {"resets", "rst", 6, true, 3},
    };
    std::vector<Row> rows;
    for (size_t k : sorted_order(s, Panel::downstream, sk)) {
        const auto& d = s.downstream[k];
        rows.push_back({{d.peer, Role::normal},
                        {fmt_count(d.connections), Role::normal},
                        {fmt_count(d.busy), pool_saturated(d) ? Role::critical : count_role(d.busy, Role::warn)},
                        {fmt_count(d.busy_max), Role::normal},
                        {fmt_count(d.calls), Role::normal},
                        {fmt_secs(d.call.p50, ui.unicode), Role::normal},
                        {fmt_secs(d.call.p99, ui.unicode), Role::normal},
                        {fmt_secs(d.oldest_busy_seconds, ui.unicode),
                         d.oldest_busy_seconds >= 10 ? Role::critical
                         : d.oldest_busy_seconds >= 1 ? Role::warn
                                                      : Role::normal},
                        {fmt_count(d.connect_failures), count_role(d.connect_failures, Role::critical)},
                        {fmt_count(d.resets), count_role(d.resets, Role::warn)}});
    }
    add_table(b, layout_table(cols, rows, width, ui.unicode));
    return b;
}

PanelBody threads_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    if (s.thread_groups.empty()) {
        b.title = {{"no thread data", Role::dim}};
        add_text_row(b, {{"no thread groups (scheduler probes not running?)", Role::dim}});
        return b;
    }
    int threads = 0, running = 0, runnable = 0, blocked = 0;
    for (const auto& g : s.thread_groups) {
        threads += g.threads;
        running += g.running;
        runnable += g.runnable;
        blocked += g.blocked;
    }
    const std::string d = dot(ui.unicode);
    b.title = {{std::to_string(s.thread_groups.size()) + " groups" + d + std::to_string(threads) + " threads" + d,
                Role::normal},
               {std::to_string(running) + " run ", Role::normal},
               {std::to_string(runnable) + " runq ", runnable >= 2 ? Role::warn : Role::normal},
               {std::to_string(blocked) + " blocked", Role::normal}};
    const std::vector<Col> cols = {
        {"group", "group", 10, false, 0}, {"threads", "thr", 7, true, 0}, {"run", "run", 4, true, 1},
        {"runq", "runq", 4, true, 1},     {"blocked", "blk", 7, true, 0}, {"blocked by", "by", 10, false, 2, true},
    };
    std::vector<Row> rows;
    for (size_t k : sorted_order(s, Panel::threads, ui.sort[static_cast<int>(Panel::threads)])) {
        const auto& g = s.thread_groups[k];
        // Most threads first: "futex 190, read 3".
        std::vector<std::pair<std::string, int>> by(g.blocked_by.begin(), g.blocked_by.end());
        std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        std::string bys;
        for (const auto& [sc, n] : by) bys += (bys.empty() ? "" : ", ") + sc + " " + std::to_string(n);
        rows.push_back({{g.name, Role::normal},
                        {std::to_string(g.threads), Role::normal},
                        {std::to_string(g.running), Role::normal},
                        {std::to_string(g.runnable), g.runnable >= 2 ? Role::warn : Role::normal},
                        {std::to_string(g.blocked), Role::normal},
                        {bys, Role::dim}});
    }
    add_table(b, layout_table(cols, rows, width, ui.unicode));
    return b;
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

PanelBody waits_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    const int sk = ui.sort[static_cast<int>(Panel::waits)];
    if (s.waits.empty()) {
        b.title = {{"nothing blocked long enough to record", Role::dim}};
        add_text_row(b, {{"no waits", Role::dim}});
    } else {
        int now = 0;
        for (const auto& w : s.waits) now += std::max(w.threads_now, w.waiters_now);
        const auto& keys = sort_keys(Panel::waits);
        b.title = {{std::to_string(s.waits.size()) + " waits" + dot(ui.unicode) + std::to_string(now) + " threads now",
                    Role::normal},
                   {dot(ui.unicode) + "by " + keys[sk % keys.size()] + dot(ui.unicode) + "Enter: stack", Role::dim}};
        const std::vector<Col> cols = {
            {"group", "group", 8, false, 0}, {"syscall", "syscall", 12, false, 0}, {"now", "now", 4, true, 0},
            {"blocked", "blk", 7, true, 1},  {"count", "cnt", 6, true, 2},          {"p99", "p99", 7, true, 3},
            {"resource", "resource", 8, false, 1, true},
        };
        std::vector<Row> rows;
        const std::vector<size_t> order = sorted_order(s, Panel::waits, sk);
        for (size_t k : order) {
            const auto& w = s.waits[k];
            const int n = std::max(w.threads_now, w.waiters_now);
            rows.push_back({{w.group, Role::normal},
                            {w.syscall, Role::normal},
                            {std::to_string(n), n >= 10 ? Role::warn : Role::normal},
                            {fmt_secs(w.blocked_seconds, ui.unicode), Role::normal},
                            {fmt_count(w.count), Role::normal},
                            {fmt_secs(w.wait.p99, ui.unicode), Role::normal},
                            {w.resource.empty() ? std::string(contract_name(w.kind)) : w.resource, Role::normal}});
        }
        const Table t = layout_table(cols, rows, width, ui.unicode);
        b.columns = t.columns;
        for (size_t i = 0; i < t.rows.size(); ++i) {
            add_text_row(b, t.rows[i], static_cast<int>(i));
            const auto& w = s.waits[order[i]];
            if (!ui.expanded_wait.empty() && wait_key(w) == ui.expanded_wait)
                add_stack(b, w.stack, w.kernel_stack, static_cast<int>(i));
        }
    }
    if (!s.parked_virtual_threads.empty()) {
        add_text_row(b, {{"parked virtual threads (thread dump):", Role::header}});
        for (const auto& p : s.parked_virtual_threads) {
            std::string frames;
            for (size_t i = 0; i < p.frames.size() && i < 3; ++i)
                frames += (i ? (ui.unicode ? " ← " : " <- ") : "") + p.frames[i];
            add_text_row(b, {{"  " + fmt_count(p.count) + " ", Role::warn}, {frames, Role::normal}});
        }
    }
    return b;
}

Role carrier_role(CarrierState state) {
    switch (state) {
        case CarrierState::running: return Role::ok;
        case CarrierState::idle: return Role::dim;
        case CarrierState::stalled: return Role::critical;
        case CarrierState::runnable:
        case CarrierState::blocked: return Role::warn;
    }
    return Role::normal;
}

std::string carrier_letter(CarrierState state) {
    switch (state) {
        case CarrierState::running: return "R";
        case CarrierState::idle: return "I";
        case CarrierState::stalled: return "S";
        case CarrierState::runnable: return "Q";
        case CarrierState::blocked: return "B";
    }
    return "?";
}

PanelBody carriers_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    const auto& c = s.carriers;
    const std::string d = dot(ui.unicode);
    if (!c.detected) {
        b.title = {{"not detected", Role::dim}};
        add_text_row(b, {{"no carrier threads" +
                              (c.pattern.empty() ? std::string(" (no JVM virtual-thread pool; --carriers REGEX)")
                                                 : " match " + c.pattern),
                          Role::dim}});
        return b;
    }
    b.title = {{std::to_string(c.threads) + " carriers" + d, Role::normal},
               {std::to_string(c.stalled) + " stalled", count_role(c.stalled, Role::critical)},
               {d + fmt_count(c.stall_events) + " stall events", Role::normal}};
    add_text_row(b, {{std::to_string(c.threads) + " " + (c.pattern.empty() ? "carriers" : c.pattern) +
                          (c.runtime.empty() ? "" : " (" + c.runtime + ")") + ": ",
                      Role::dim},
                     {std::to_string(c.running) + " running", Role::ok},
                     {d + std::to_string(c.idle) + " idle", Role::normal},
                     {d + std::to_string(c.runnable) + " runnable", count_role(c.runnable, Role::warn)},
                     {d + std::to_string(c.stalled) + " stalled", count_role(c.stalled, Role::critical)}});
    if (!c.per_carrier.empty()) {
        // One letter per carrier; wraps onto a second line, then elides.
        const std::string lead = "state ";
        const int per_line = std::max(width - cell_width(lead) - 1, 1);
        const int total = static_cast<int>(c.per_carrier.size());
        for (int start = 0, line = 0; start < total && line < 2; start += per_line, ++line) {
            Line l = {{line == 0 ? lead : std::string(lead.size(), ' '), Role::dim}};
            const int end = std::min(total, start + per_line);
            for (int i = start; i < end; ++i) {
                if (line == 1 && i == end - 1 && end < total) {
                    l.push_back({ui.unicode ? "…" : "+", Role::dim});
                    break;
                }
                l.push_back({carrier_letter(c.per_carrier[i].state), carrier_role(c.per_carrier[i].state)});
            }
            add_text_row(b, l);
        }
        add_text_row(b, {{"      R running  I idle  Q runnable  B blocked  S stalled", Role::dim}});
    }
    if (!c.stalls.empty()) {
        const std::vector<Col> cols = {
            {"tid", "tid", 7, true, 0},  {"syscall", "syscall", 14, false, 0}, {"reason", "reason", 12, false, 1},
            {"for", "for", 7, true, 0},  {"", "", 3, false, 2},                 {"top frame", "frame", 8, false, 3, true},
        };
        std::vector<Row> rows;
        const auto order = sorted_order(s, Panel::carriers, ui.sort[static_cast<int>(Panel::carriers)]);
        for (size_t k : order) {
            const auto& st = c.stalls[k];
            rows.push_back({{std::to_string(st.tid), Role::normal},
                            {st.syscall, Role::normal},
                            {st.reason, Role::normal},
                            {fmt_secs(st.seconds, ui.unicode), st.seconds >= 1 ? Role::critical : Role::warn},
                            {st.ongoing ? "now" : "", Role::critical},
                            {st.stack.empty() ? std::string() : st.stack.front(), Role::dim}});
        }
        const Table t = layout_table(cols, rows, width, ui.unicode);
        add_text_row(b, t.columns);
        for (size_t i = 0; i < t.rows.size(); ++i) {
            add_text_row(b, t.rows[i], static_cast<int>(i));
            if (ui.expanded_stall_tid && c.stalls[order[i]].tid == ui.expanded_stall_tid)
                add_stack(b, c.stalls[order[i]].stack, {}, static_cast<int>(i));
        }
    }
    return b;
}

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

// Draws one panel into a box of `h` lines: title; then column labels and as many rows as
// fit, scrolled so the selected item (and its open stack) stays visible.
void draw_panel(Grid& g, Panel p, const PanelBody& b, int x, int y, int w, int h, const UiState& ui, int items) {
    if (h <= 0 || w <= 0) return;
    const bool focused = ui.focus == p;
    const bool u = ui.unicode;
    const Role title_role = focused ? Role::selected : Role::header;
    int cx = g.put(x, y, std::string(focused ? (u ? "▶ " : "> ") : "  "), title_role, x + w);
    cx = g.put(cx, y, panel_name(p), title_role, x + w);
    cx = g.put(cx, y, " ", title_role, x + w);
    cx = g.put(cx, y, " ", Role::normal, x + w);
    put_line(g, cx, y, b.title, x + w - cx, u);
    const int rule_from = cx + line_width(b.title) + 1;
    if (rule_from < x + w) g.fill(rule_from, y, x + w - rule_from, u ? U'─' : U'-', Role::dim);
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
    int first_sel = -1, last_sel = -1;
    for (int r = 0; r < n; ++r)
        if (selected >= 0 && b.item_of_row[r] == selected) {
            if (first_sel < 0) first_sel = r;
            last_sel = r;
        }
    int first = 0;
    if (first_sel >= 0) {
        if (last_sel - body_h + 1 > first) first = last_sel - body_h + 1;  // show the open stack
        if (first > first_sel) first = first_sel;                           // but never lose the row
    }
    for (int i = 0; i < body_h && first + i < n; ++i) {
        const int r = first + i;
        put_line(g, bx, body_y + i, b.rows[r], bw, u);
        if (focused && r == first_sel) g.set_role(x, body_y + i, w, Role::selected);
    }
    // Say so when rows are hidden below, on the last visible line's right edge.
    if (first + body_h < n && body_h > 0) {
        const std::string more = (u ? " ↓" : " +") + std::to_string(n - first - body_h) + " ";
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

    // Panels: two columns on wide terminals, one otherwise.
    const int area_h = bottom - y;
    if (area_h > 0) {
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
            std::vector<PanelBody> bodies;
            std::vector<int> want;
            int focus_idx = 0;
            for (size_t i = 0; i < columns[c].size(); ++i) {
                bodies.push_back(build_panel(columns[c][i], s, ui, w - std::min(2, w / 4)));
                want.push_back(desired_lines(bodies.back()));
                if (columns[c][i] == ui.focus) focus_idx = static_cast<int>(i);
            }
            const auto got = allocate(want, area_h, focus_idx);
            int py = y;
            for (size_t i = 0; i < bodies.size(); ++i) {
                draw_panel(g, columns[c][i], bodies[i], x, py, w, got[i], ui, panel_items(s, columns[c][i]));
                py += got[i];
            }
            if (c > 0)
                for (int yy = y; yy < bottom; ++yy) g.fill(x - 1, yy, 1, ui.unicode ? U'│' : U'|', Role::dim);
        }
    }
    if (footer) draw_footer(g, height - 1, &s, ui);
    if (ui.help) draw_help(g, ui);
    return g;
}

}  // namespace qscope::tui
