#include "tui/bars.h"

#include <cmath>
#include <cstdio>
#include <ctime>

#include "model/processes.h"
#include "tui/format.h"
#include "tui/sorting.h"
#include "tui/stages.h"

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

// The most used keys, for a footer with nothing more urgent to say.
Line key_hints(const Snapshot* s, bool u) {
    Line l = {{"q", Role::header},     {" quit  ", Role::dim},  {"p", Role::header},
              {" pause  ", Role::dim}, {"Tab", Role::header},   {" panel  ", Role::dim},
              {u ? "↑↓" : "Up/Dn", Role::header}, {" row  ", Role::dim}, {"Enter", Role::header},
              {" stack  ", Role::dim}, {"s", Role::header},     {" sort  ", Role::dim},
              {"r", Role::header},     {" reset  ", Role::dim}};
    if (s && is_jvm(*s)) l.insert(l.end(), {{"j", Role::header}, {" thread dump  ", Role::dim}});
    return l;
}

// A replay's footer: where the cursor is and the keys that move it.
Line replay_hints(const ReplayState& r) {
    if (r.prompting) return {{"go to: ", Role::header}, {r.prompt + "_", Role::normal},
                             {"  (12.5 s since the start, @unix, HH:MM:SS UTC; Enter, Esc)", Role::dim}};
    return {{"q", Role::header},     {" quit  ", Role::dim}, {"Space", Role::header}, {" play/pause  ", Role::dim},
            {", .", Role::header},   {" step  ", Role::dim}, {"c", Role::header},     {" next critical  ", Role::dim},
            {"g", Role::header},     {" go to  ", Role::dim}, {"+ -", Role::header},  {" speed  ", Role::dim}};
}

std::string speed_text(double speed) {
    char b[16];
    std::snprintf(b, sizeof b, speed < 1 ? "%.2gx" : "%.0fx", speed);
    return b;
}

}  // namespace

void draw_header(Grid& g, const Snapshot& s, const UiState& ui) {
    const int w = g.width();
    const std::string d = dot(ui.unicode);
    Line left = {{"qscope ", Role::header}};
    if (!ui.replay.live()) left.push_back({"replay ", Role::warn});
    left.insert(left.end(), {{"pid " + std::to_string(s.target.pid) + " ", Role::normal},
                 {s.target.comm, Role::header}});
    // A process tree: what is observed, "3 processes: master process, 2 worker process".
    if (const std::string procs = describe_processes(s.target); !procs.empty())
        left.push_back({d + procs, Role::normal});
    left.insert(left.end(), {{d + std::to_string(s.target.threads) + " threads" + d + "attached " + fmt_elapsed(s.attached_seconds),
                  Role::normal}});
    if (std::abs(s.window_seconds - s.attached_seconds) > 0.5)
        left.push_back({d + "window " + fmt_elapsed(s.window_seconds), Role::normal});
    if (s.lost_events) left.push_back({d + "lost " + fmt_count(s.lost_events), Role::warn});
    if (!ui.replay.live()) left.push_back({d + ui.replay.of, Role::normal});
    // Who pays for the socket arrivals: the target's cgroup, or every process (and why), last
    // because it is the first thing to give way on a narrow terminal.
    if (const auto scope = sock_scope(s.probe_attach))
        left.push_back({d + "sockets: " + (scope->cgroup ? "cgroup " + scope->path
                                                         : "global" + (scope->why.empty() ? "" : " (" + scope->why + ")")),
                        Role::dim});
    Line right;
    if (s.target.exited) right.push_back({" EXITED ", Role::critical});
    if (!ui.replay.live()) {
        const ReplayState& r = ui.replay;
        right.push_back({" REPLAY " + std::to_string(r.index + 1) + "/" + std::to_string(r.count) + " " +
                             (r.playing ? std::string(ui.unicode ? "▶ " : "> ") + speed_text(r.speed) : "PAUSED") + " ",
                         Role::selected});
    } else if (ui.paused) {
        right.push_back({" PAUSED ", Role::selected});
    }
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

int draw_verdict(Grid& g, int y, const Snapshot& s, const UiState& ui, int lines) {
    const Role r = severity_role(s.verdict.severity);
    const std::string badge = r == Role::critical ? " CRITICAL " : r == Role::warn ? " WARN " : " OK ";
    std::string summary = s.verdict.summary.empty() ? "no verdict yet" : s.verdict.summary;
    // Taken over the last --verdict-window, not the window the panels show (record/recent.h).
    if (s.verdict.window_seconds > 0 && !s.verdict.summary.empty()) {
        char span[48];
        std::snprintf(span, sizeof span, "over the last %.0f s: ", s.verdict.window_seconds);
        summary = span + summary;
    }
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

// The footer says the most urgent thing it has: a flash, the target's exit, a partial
// snapshot, a warning; otherwise the key hints.
void draw_footer(Grid& g, int y, const Snapshot* s, const UiState& ui) {
    const int w = g.width();
    const std::string help = " ? help ";
    Line l;
    if (!ui.flash.empty()) {
        l = {{ui.flash, Role::warn}};
    } else if (!ui.replay.live() && (ui.replay.prompting || !s || s->partial.empty())) {
        l = replay_hints(ui.replay);
    } else if (s && s->target.exited) {
        l = {{s->target.exit_note.empty() ? "target exited" : s->target.exit_note, Role::critical}};
    } else if (s && !s->partial.empty()) {
        l = {{"partial: " + s->partial.front(), Role::warn}};
    } else if (s && !s->warnings.empty()) {
        l = {{s->warnings.front(), Role::warn}};
    } else {
        l = key_hints(s, ui.unicode);
    }
    const int hw = cell_width(help);
    if (w > hw + 10) {
        put_line(g, 0, y, l, w - hw, ui.unicode);
        g.put(w - hw, y, help, Role::header);
    } else {
        put_line(g, 0, y, l, w, ui.unicode);
    }
}

}  // namespace qscope::tui
