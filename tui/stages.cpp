#include "tui/stages.h"

#include <algorithm>
#include <cmath>

#include "model/loops.h"
#include "tui/format.h"

namespace qscope::tui {

Role severity_role(Severity sev) {
    switch (sev) {
        case Severity::critical: return Role::critical;
        case Severity::warn: return Role::warn;
        case Severity::ok: return Role::ok;
    }
    return Role::ok;
}

namespace {

Role worse(Role a, Role b) {
    auto rank = [](Role r) { return r == Role::critical ? 3 : r == Role::warn ? 2 : r == Role::ok ? 1 : 0; };
    return rank(a) >= rank(b) ? a : b;
}

// The header column of a verdict stage; -1 for stages the header has no column for.
int stage_of_verdict(qscope::Stage stage) {
    switch (stage) {
        case qscope::Stage::accept_queue: return static_cast<int>(Stage::accept_queue);
        case qscope::Stage::connector: return static_cast<int>(Stage::connector);
        case qscope::Stage::gate:
        case qscope::Stage::downstream: return static_cast<int>(Stage::gates_downstream);
        case qscope::Stage::carriers: return static_cast<int>(Stage::carriers);
        default: return -1;
    }
}

struct GateDownstream {
    uint64_t gate = 0, busy = 0, conns = 0;
    bool saturated = false;
};

// Requests waiting in "gates / downstream" as the verdict counted them (it knows which
// futex waiters are idle threads), split back into the gate and the peers' busy calls.
GateDownstream gate_downstream(const Snapshot& s) {
    GateDownstream g;
    for (const auto& d : s.downstream) {
        g.busy += d.busy;
        g.conns += d.connections;
        if (pool_saturated(d)) g.saturated = true;
    }
    // A pool gate counts the pool's busy calls too; they show under busy.
    for (const auto& r : s.verdict.ranking)
        if (r.stage == qscope::Stage::gate) g.gate += s.verdict.pool ? s.verdict.pool->waiters : r.waiting;
    return g;
}

// Event loops stalled or saturated (model/loops.h): the carriers an event-loop server has.
uint64_t loops_held(const Snapshot& s) {
    const auto& loops = s.carriers.loops;
    return static_cast<uint64_t>(std::count_if(loops.begin(), loops.end(), [&](const EventLoop& l) {
        return loop_saturated(l) || loop_stalled(l, s.carriers.loop_stall_threshold_seconds);
    }));
}

}  // namespace

std::array<uint64_t, kStageCount> stage_counts(const Snapshot& s) {
    std::array<uint64_t, kStageCount> c{};
    for (const auto& l : s.listeners) c[0] += l.accept_queue;
    c[1] = s.requests.waiting_unread;
    c[2] = s.requests.in_flight;
    const GateDownstream g = gate_downstream(s);
    c[3] = g.gate + g.busy;
    c[4] = (s.carriers.detected ? static_cast<uint64_t>(std::max(s.carriers.stalled, 0)) : 0) + loops_held(s);
    return c;
}

size_t history_capacity(double interval_seconds) {
    if (!(interval_seconds > 0)) return 60;
    return static_cast<size_t>(std::clamp(std::ceil(60.0 / interval_seconds), 2.0, 600.0));
}

void History::feed(const Snapshot& s) {
    if (s.tick == last_tick) return;
    last_tick = s.tick;
    const auto c = stage_counts(s);
    for (int i = 0; i < kStageCount; ++i) {
        samples[i].push_back(static_cast<double>(c[i]));
        while (samples[i].size() > capacity) samples[i].pop_front();
        max_seen[i] = std::max(max_seen[i], c[i]);
    }
}

namespace {

StageView accept_view(const Snapshot& s, uint64_t now, bool u) {
    StageView a;
    a.name = "accept queue";
    a.short_name = "accept q";
    uint64_t backlog = 0, overflows = 0, amax = 0;
    for (const auto& l : s.listeners) {
        backlog += l.backlog;
        overflows += l.overflows;
        amax += l.accept_queue_max;  // exact for one listener, an upper bound for several
    }
    a.now = now;
    a.max = amax;
    a.observed = !s.listeners.empty();
    a.detail = a.observed ? "of " + fmt_count(backlog) + (overflows ? dot(u) + "ovf " + fmt_count(overflows) : "")
                          : "no listeners";
    a.severity = overflows || (backlog && a.now >= backlog) ? Role::critical : a.now ? Role::warn : Role::ok;
    return a;
}

StageView connector_view(const Snapshot& s, uint64_t now, bool u) {
    StageView c;
    c.name = "connector";
    c.short_name = "connector";
    c.now = now;
    c.max = s.requests.waiting_unread_max;
    c.detail = c.now ? "oldest " + fmt_secs(s.requests.oldest_unread_seconds, u) : "unread";
    c.severity = c.now ? Role::warn : Role::ok;
    return c;
}

StageView in_flight_view(const Snapshot& s, uint64_t now, bool u) {
    StageView f;
    f.name = "in flight";
    f.short_name = "in flight";
    f.now = now;
    f.max = s.requests.in_flight_max;
    f.detail = f.now ? "oldest " + fmt_secs(s.requests.oldest_in_flight_seconds, u)
                     : "p99 " + fmt_secs(s.requests.latency.p99, u);
    f.severity = s.requests.oldest_in_flight_seconds >= 5 ? Role::warn : Role::ok;
    return f;
}

StageView gates_downstream_view(const Snapshot& s, uint64_t now, bool u) {
    StageView g;
    const GateDownstream gd = gate_downstream(s);
    g.name = "gates / downstream";
    g.short_name = "gates/dnstr";
    g.now = now;
    g.max = 0;
    for (const auto& d : s.downstream) g.max += d.busy_max;
    g.detail = "gate " + fmt_count(gd.gate) + dot(u) + "busy " + fmt_count(gd.busy) + "/" + fmt_count(gd.conns);
    g.short_detail = "g" + fmt_count(gd.gate) + " b" + fmt_count(gd.busy) + "/" + fmt_count(gd.conns);
    g.severity = gd.saturated && gd.busy ? Role::critical : g.now ? Role::warn : Role::ok;
    return g;
}

StageView carriers_view(const Snapshot& s, uint64_t now, bool u) {
    StageView k;
    k.name = "carriers";
    k.short_name = "carriers";
    const size_t loops = s.carriers.loops.size();
    k.observed = s.carriers.detected || loops > 0;
    k.now = now;
    k.max = 0;
    if (s.carriers.detected) {
        k.detail = "stalled of " + std::to_string(s.carriers.threads) +
                   (s.carriers.runnable ? dot(u) + "runq " + std::to_string(s.carriers.runnable) : "");
        if (loops) k.detail += dot(u) + std::to_string(loops) + (loops == 1 ? " loop" : " loops");
        k.severity = s.carriers.stalled || loops_held(s) ? Role::critical : s.carriers.runnable ? Role::warn : Role::ok;
    } else if (loops) {
        // Loops only (Node, nginx, Redis): how many of them hold requests up.
        k.detail = "held of " + std::to_string(loops) + (loops == 1 ? " loop" : " loops");
        k.severity = now ? Role::critical : Role::ok;
    } else {
        k.detail = "not detected";
    }
    return k;
}

}  // namespace

std::array<StageView, kStageCount> stage_views(const Snapshot& s, const History& h, bool u) {
    const auto now = stage_counts(s);
    std::array<StageView, kStageCount> v = {accept_view(s, now[0], u), connector_view(s, now[1], u),
                                            in_flight_view(s, now[2], u), gates_downstream_view(s, now[3], u),
                                            carriers_view(s, now[4], u)};
    // The verdict's stage is at least as severe as the verdict, while it holds requests.
    const int vs = stage_of_verdict(s.verdict.stage);
    if (vs >= 0 && v[vs].now > 0) v[vs].severity = worse(v[vs].severity, severity_role(s.verdict.severity));
    for (int i = 0; i < kStageCount; ++i) {
        v[i].max = std::max({v[i].max, h.max_seen[i], v[i].now});
        if (!v[i].observed) v[i].severity = Role::dim;
    }
    return v;
}

namespace {

std::string arrow(bool u) { return u ? " → " : " > "; }

// Names and counts on a single line: short terminals, or too narrow for columns.
void draw_stage_line(Grid& g, int y, const std::array<StageView, kStageCount>& v, bool u) {
    static const char* const tiny[] = {"acc", "conn", "fly", "gate", "carr"};
    static const char* const names[] = {"accept", "connector", "in flight", "gates/dn", "carriers"};
    const bool wide = g.width() >= 90;
    Line l;
    for (int i = 0; i < kStageCount; ++i) {
        if (i) l.push_back({arrow(u), Role::dim});
        l.push_back({std::string(wide ? names[i] : tiny[i]) + " ", Role::dim});
        l.push_back({v[i].observed ? fmt_count(v[i].now) : "-", v[i].severity});
    }
    put_line(g, 0, y, l, g.width(), u);
}

// One stage in four lines, `cw` cells wide from x: name, count now and max, detail, sparkline.
void draw_stage_column(Grid& g, int x, int y, int cw, const StageView& sv, const std::deque<double>& history,
                       bool u) {
    const std::string name = cell_width(sv.name) <= cw ? sv.name : sv.short_name;
    g.put(x, y, fit(name, cw, u), sv.severity == Role::dim ? Role::dim : Role::header, x + cw);
    if (sv.observed) {
        const Line nums = {{fmt_count(sv.now), sv.severity}, {" max " + fmt_count(sv.max), Role::dim}};
        put_line(g, x, y + 1, nums, cw, u);
    } else {
        g.put(x, y + 1, "-", Role::dim, x + cw);
    }
    const std::string& detail = cell_width(sv.detail) <= cw || sv.short_detail.empty() ? sv.detail : sv.short_detail;
    g.put(x, y + 2, fit(detail, cw, u), Role::dim, x + cw);
    const std::vector<double> samples(history.begin(), history.end());
    if (sv.observed) g.put(x, y + 3, sparkline(samples, cw, 1, u), sv.severity, x + cw);
}

}  // namespace

void draw_stages(Grid& g, int y, const Snapshot& s, const History& h, bool one_line, bool u) {
    const auto v = stage_views(s, h, u);
    const int w = g.width();
    const int col = (w - 3 * (kStageCount - 1)) / kStageCount;
    if (one_line || col < 8) {
        draw_stage_line(g, y, v, u);
        return;
    }
    for (int i = 0; i < kStageCount; ++i) {
        const int x = i * (col + 3);
        const int cw = i == kStageCount - 1 ? w - x : col;
        draw_stage_column(g, x, y, cw, v[i], h.samples[i], u);
        if (i < kStageCount - 1) g.put(x + col, y, arrow(u), Role::dim);
    }
}

}  // namespace qscope::tui
