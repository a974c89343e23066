// The panels fed by the scheduler probes: thread groups, waits, carriers.
#include <algorithm>
#include <cstdio>
#include <utility>

#include "model/loops.h"
#include "tui/format.h"
#include "tui/panels.h"
#include "tui/sorting.h"

namespace qscope::tui {
namespace {

// Most threads first: "futex 190, read 3".
std::string blocked_by_text(const ThreadGroup& g) {
    std::vector<std::pair<std::string, int>> by(g.blocked_by.begin(), g.blocked_by.end());
    std::stable_sort(by.begin(), by.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    std::string text;
    for (const auto& [sc, n] : by) text += (text.empty() ? "" : ", ") + sc + " " + std::to_string(n);
    return text;
}

// One row per wait, in the chosen order, the open wait's stack under its row.
void add_wait_table(PanelBody& b, const Snapshot& s, const UiState& ui, int width) {
    const std::vector<Col> cols = {
        {"group", "group", 8, false, 0}, {"syscall", "syscall", 12, false, 0}, {"now", "now", 4, true, 0},
        {"blocked", "blk", 7, true, 1},  {"count", "cnt", 6, true, 2},          {"p99", "p99", 7, true, 3},
        {"resource", "resource", 8, false, 1, true},
    };
    std::vector<Row> rows;
    const std::vector<size_t> order = sorted_order(s, Panel::waits, ui.sort[static_cast<int>(Panel::waits)]);
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

// The last JVM thread dump: how many virtual threads park at each of the top frames.
void add_parked_threads(PanelBody& b, const Snapshot& s, bool unicode) {
    add_text_row(b, {{"parked virtual threads (thread dump):", Role::header}});
    for (const auto& p : s.parked_virtual_threads) {
        std::string frames;
        for (size_t i = 0; i < p.frames.size() && i < 3; ++i)
            frames += (i ? (unicode ? " ← " : " <- ") : "") + p.frames[i];
        add_text_row(b, {{"  " + fmt_count(p.count) + " ", Role::warn}, {frames, Role::normal}});
    }
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

// One letter per carrier; wraps onto a second line, then elides.
void add_state_strip(PanelBody& b, const Carriers& c, int width, bool unicode) {
    const std::string lead = "state ";
    const int per_line = std::max(width - cell_width(lead) - 1, 1);
    const int total = static_cast<int>(c.per_carrier.size());
    for (int start = 0, line = 0; start < total && line < 2; start += per_line, ++line) {
        Line l = {{line == 0 ? lead : std::string(lead.size(), ' '), Role::dim}};
        const int end = std::min(total, start + per_line);
        for (int i = start; i < end; ++i) {
            if (line == 1 && i == end - 1 && end < total) {
                l.push_back({unicode ? "…" : "+", Role::dim});
                break;
            }
            l.push_back({carrier_letter(c.per_carrier[i].state), carrier_role(c.per_carrier[i].state)});
        }
        add_text_row(b, l);
    }
    add_text_row(b, {{"      R running  I idle  Q runnable  B blocked  S stalled", Role::dim}});
}

// One row per stall, in the chosen order, the open stall's stack under its row. The
// labels are a row of their own: the panel's rows above are not part of the table.
void add_stall_table(PanelBody& b, const Snapshot& s, const UiState& ui, int width) {
    const auto& c = s.carriers;
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

// Event loops (model/loops.h): one row each, busiest first, with the carriers' state letters
// and colours; a loop's busy share and longest turn take the stall colours.
void add_loop_table(PanelBody& b, const Snapshot& s, const UiState& ui, int width) {
    const auto& c = s.carriers;
    const double stall = c.loop_stall_threshold_seconds;
    const std::vector<Col> cols = {
        {"loop", "loop", 10, false, 0},     {"tid", "tid", 7, true, 0},       {"st", "st", 2, false, 0},
        {"busy", "busy", 5, true, 0},       {"turns/s", "t/s", 7, true, 1},   {"longest", "max", 7, true, 0},
        {"p99", "p99", 7, true, 1},         {"stalls", "stl", 6, true, 0},    {"waiting", "wait", 7, true, 0},
        {"where", "where", 8, false, 2, true},
    };
    std::vector<Row> rows;
    for (const auto& l : c.loops) {
        char busy[16], tps[16];
        std::snprintf(busy, sizeof busy, "%.0f%%", l.utilization * 100);
        std::snprintf(tps, sizeof tps, "%.0f", l.turns_per_second);
        const Role busy_role = loop_saturated(l) ? Role::critical : l.utilization >= 0.5 ? Role::warn : Role::normal;
        const Role turn_role = l.longest_turn_seconds >= 1 ? Role::critical
                               : l.longest_turn_seconds >= stall ? Role::warn
                                                                 : Role::normal;
        std::string where;
        if (!l.recent_stalls.empty() && !l.recent_stalls.front().stack.empty())
            where = l.recent_stalls.front().stack.front();
        else if (!l.blocked_in.empty())
            where = "blocked in " + l.blocked_in;
        const uint64_t waiting = loop_waiting(l);
        rows.push_back({{l.name, Role::normal},
                        {std::to_string(l.tid), Role::normal},
                        {carrier_letter(l.state), carrier_role(l.state)},
                        {busy, busy_role},
                        {tps, Role::normal},
                        {fmt_secs(l.longest_turn_seconds, ui.unicode), turn_role},
                        {fmt_secs(l.p99_turn_seconds, ui.unicode), Role::normal},
                        {fmt_count(l.stalls), count_role(l.stalls, Role::warn)},
                        {fmt_count(waiting), waiting ? Role::warn : Role::normal},
                        {where, Role::dim}});
    }
    add_table(b, layout_table(cols, rows, width, ui.unicode));
}

}  // namespace

PanelBody threads_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    if (s.thread_groups.empty()) {
        b.title = {{"no thread data", Role::dim}};
        add_text_row(b, {{"no thread groups (scheduler probes not running?)", Role::dim}});
        return b;
    }
    int threads = 0, running = 0, blocked = 0;
    double waiting_for_cpu = 0;
    for (const auto& g : s.thread_groups) {
        threads += g.threads;
        running += g.running;
        waiting_for_cpu += g.waiting_for_cpu;
        blocked += g.blocked;
    }
    // runq: threads waiting for a CPU on average over the last tick, not the instant's count,
    // which flickers on any busy host; warned as the verdict judges it.
    const auto runq_role = [](double w) { return w >= kCpuStarvedThreads ? Role::warn : Role::normal; };
    const std::string d = dot(ui.unicode);
    b.title = {{std::to_string(s.thread_groups.size()) + " groups" + d + std::to_string(threads) + " threads" + d,
                Role::normal},
               {std::to_string(running) + " run ", Role::normal},
               {fmt_average(waiting_for_cpu) + " runq ", runq_role(waiting_for_cpu)},
               {std::to_string(blocked) + " blocked", Role::normal}};
    const std::vector<Col> cols = {
        {"group", "group", 10, false, 0}, {"threads", "thr", 7, true, 0}, {"run", "run", 4, true, 1},
        {"runq", "runq", 4, true, 1},     {"blocked", "blk", 7, true, 0}, {"blocked by", "by", 10, false, 2, true},
    };
    std::vector<Row> rows;
    for (size_t k : sorted_order(s, Panel::threads, ui.sort[static_cast<int>(Panel::threads)])) {
        const auto& g = s.thread_groups[k];
        rows.push_back({{g.name, Role::normal},
                        {std::to_string(g.threads), Role::normal},
                        {std::to_string(g.running), Role::normal},
                        {fmt_average(g.waiting_for_cpu), runq_role(g.waiting_for_cpu)},
                        {std::to_string(g.blocked), Role::normal},
                        {blocked_by_text(g), Role::dim}});
    }
    add_table(b, layout_table(cols, rows, width, ui.unicode));
    return b;
}

PanelBody waits_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    if (s.waits.empty()) {
        b.title = {{"nothing blocked long enough to record", Role::dim}};
        add_text_row(b, {{"no waits", Role::dim}});
    } else {
        int now = 0;
        for (const auto& w : s.waits) now += std::max(w.threads_now, w.waiters_now);
        const auto& keys = sort_keys(Panel::waits);
        const int sk = ui.sort[static_cast<int>(Panel::waits)];
        b.title = {{std::to_string(s.waits.size()) + " waits" + dot(ui.unicode) + std::to_string(now) + " threads now",
                    Role::normal},
                   {dot(ui.unicode) + "by " + keys[sk % keys.size()] + dot(ui.unicode) + "Enter: stack", Role::dim}};
        add_wait_table(b, s, ui, width);
    }
    if (!s.parked_virtual_threads.empty()) add_parked_threads(b, s, ui.unicode);
    return b;
}

PanelBody carriers_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    const auto& c = s.carriers;
    const std::string d = dot(ui.unicode);
    if (!c.detected && !c.loops.empty()) {
        uint64_t stalled = 0;
        for (const auto& l : c.loops) stalled += l.state == CarrierState::stalled;
        b.title = {{std::to_string(c.loops.size()) + " event loops" + d, Role::normal},
                   {std::to_string(stalled) + " stalled", count_role(stalled, Role::critical)}};
        add_loop_table(b, s, ui, width);
        return b;
    }
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
                          (c.runtime == CarrierRuntime::none ? "" : std::string(" (") + contract_name(c.runtime) + ")") + ": ",
                      Role::dim},
                     {std::to_string(c.running) + " running", Role::ok},
                     {d + std::to_string(c.idle) + " idle", Role::normal},
                     {d + std::to_string(c.runnable) + " runnable", count_role(c.runnable, Role::warn)},
                     {d + std::to_string(c.stalled) + " stalled", count_role(c.stalled, Role::critical)}});
    if (c.procs > 0) {
        // Go, Tokio: how many of the Ps (workers) the carriers kept busy; all of them is the
        // scheduler's limit.
        char busy[32];
        std::snprintf(busy, sizeof busy, "%.2f", c.busy);
        add_text_row(b, {{procs_label(c) + ": ", Role::dim},
                         {std::string("busy ") + busy + " of " + std::to_string(c.procs) + " " + procs_unit(c),
                          carriers_saturated(c) ? Role::critical : Role::normal}});
    }
    if (!c.per_carrier.empty()) add_state_strip(b, c, width, ui.unicode);
    if (!c.stalls.empty()) add_stall_table(b, s, ui, width);
    if (!c.loops.empty()) add_loop_table(b, s, ui, width);
    return b;
}

}  // namespace qscope::tui
