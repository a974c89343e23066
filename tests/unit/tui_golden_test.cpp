// Golden screens: the dashboard rendered from hand-built snapshots of each shape, at the
// sizes an operator actually has (80x24, 120x40, 200x50), text plus a colour-role layer.
// QSCOPE_UPDATE_GOLDEN=1 rewrites the files; review the diff before committing it.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "golden.h"
#include "tui_fixtures.h"
#include "tui/view.h"

using namespace qscope;
using namespace qscope::tui;
using namespace tui_fixtures;

namespace {

void fixed_clock() {
    // The header shows local time: pin the zone so the goldens do not depend on the host.
    setenv("TZ", "UTC", 1);
    tzset();
}

void check_golden(const std::string& name, const Snapshot* s, int w, int h, const UiState& ui,
                  const History& hist) {
    fixed_clock();
    const Grid g = render(s, w, h, ui, hist);
    golden::check("tui_" + name + ".txt", g.to_text(true));
}

UiState ui_at(Panel focus = Panel::downstream) {
    UiState ui;
    ui.pid = 4242;
    ui.focus = focus;
    return ui;
}

}  // namespace

TEST_CASE("golden: attaching frame", "[tui][golden]") {
    History h;
    check_golden("attaching_80x24", nullptr, 80, 24, ui_at(), h);
}

TEST_CASE("golden: attaching frame with probe families loading", "[tui][golden]") {
    History h;
    UiState ui = ui_at();
    ui.attach_progress = {{"sock", true}, {"sched", false}, {"jvm", true}};
    check_golden("attaching_progress_80x24", nullptr, 80, 24, ui, h);
    ui.unicode = false;
    check_golden("attaching_progress_ascii_80x24", nullptr, 80, 24, ui, h);
}

TEST_CASE("golden: idle server", "[tui][golden]") {
    const Snapshot s = idle();
    const History h = history_for(s);
    check_golden("idle_80x24", &s, 80, 24, ui_at(), h);
    check_golden("idle_120x40", &s, 120, 40, ui_at(), h);
    check_golden("idle_200x50", &s, 200, 50, ui_at(), h);
}

TEST_CASE("golden: a verdict taken over the last --verdict-window says its span", "[tui][golden]") {
    Snapshot s = accept_overflow();
    s.window_seconds = s.attached_seconds = 1860;  // top attached half an hour ago
    s.verdict.window_seconds = 62;
    const History h = history_for(s);
    check_golden("verdict_window_120x40", &s, 120, 40, ui_at(Panel::listeners), h);
}

TEST_CASE("golden: accept-queue overflow", "[tui][golden]") {
    const Snapshot s = accept_overflow();
    const History h = history_for(s);
    check_golden("accept_overflow_80x24", &s, 80, 24, ui_at(Panel::listeners), h);
    check_golden("accept_overflow_120x40", &s, 120, 40, ui_at(Panel::listeners), h);
}

TEST_CASE("golden: pool gate saturated, downstream 10/10 busy", "[tui][golden]") {
    const Snapshot s = pool_saturated();
    const History h = history_for(s);
    check_golden("pool_saturated_80x24", &s, 80, 24, ui_at(), h);
    check_golden("pool_saturated_120x40", &s, 120, 40, ui_at(), h);
    check_golden("pool_saturated_200x50", &s, 200, 50, ui_at(), h);

    // The operator selects the futex wait and opens its stack.
    UiState ui = ui_at(Panel::waits);
    REQUIRE(handle_key(ui, kKeyEnter, &s) == Action::redraw);
    check_golden("pool_saturated_stack_120x40", &s, 120, 40, ui, h);
}

TEST_CASE("golden: silent partner", "[tui][golden]") {
    const Snapshot s = silent_partner();
    const History h = history_for(s);
    check_golden("silent_partner_80x24", &s, 80, 24, ui_at(), h);
    check_golden("silent_partner_120x40", &s, 120, 40, ui_at(), h);
}

TEST_CASE("golden: carriers stalled", "[tui][golden]") {
    const Snapshot s = carriers_stalled();
    const History h = history_for(s);
    check_golden("carriers_stalled_80x24", &s, 80, 24, ui_at(Panel::carriers), h);
    check_golden("carriers_stalled_120x40", &s, 120, 40, ui_at(Panel::carriers), h);
    check_golden("carriers_stalled_200x50", &s, 200, 50, ui_at(Panel::carriers), h);
}

TEST_CASE("golden: an event loop is the limit", "[tui][golden][loops]") {
    const Snapshot s = event_loop();
    const History h = history_for(s);
    check_golden("event_loop_120x40", &s, 120, 40, ui_at(Panel::carriers), h);
}

TEST_CASE("golden: retries multiply calls to a failing partner", "[tui][golden][fan_out]") {
    const Snapshot s = retry_storm();
    const History h = history_for(s);
    check_golden("retry_storm_120x40", &s, 120, 40, ui_at(Panel::downstream), h);
}

TEST_CASE("golden: target exited", "[tui][golden]") {
    const Snapshot s = target_exited();
    const History h = history_for(s);
    check_golden("target_exited_120x40", &s, 120, 40, ui_at(), h);
}

TEST_CASE("golden: help overlay and pause", "[tui][golden]") {
    const Snapshot s = pool_saturated();
    const History h = history_for(s);
    UiState ui = ui_at();
    handle_key(ui, '?', &s);
    check_golden("help_80x24", &s, 80, 24, ui, h);
    UiState paused = ui_at();
    handle_key(paused, 'p', &s);
    check_golden("paused_120x40", &s, 120, 40, paused, h);
}

TEST_CASE("golden: empty snapshot (no probes landed) and monochrome ASCII", "[tui][golden]") {
    Snapshot s = base();
    s.listeners.clear();
    s.verdict.summary = "no queue: nothing is waiting";
    History h;
    h.feed(s);
    check_golden("empty_80x24", &s, 80, 24, ui_at(), h);
    UiState ascii = ui_at();
    ascii.unicode = false;
    const Snapshot p = pool_saturated();
    check_golden("pool_saturated_ascii_80x24", &p, 80, 24, ascii, history_for(p));
}

// `top --replay`: the header says it is a replay, of what, where the cursor is and how it
// plays; the footer gives the replay's keys, or the time being typed after `g`.
TEST_CASE("golden: replay header and cursor", "[tui][golden]") {
    const Snapshot s = pool_saturated();
    const History h = history_for(s);
    UiState ui = ui_at();
    ui.replay.of = "spike.qsrec on web-1 from 23:40:00 UTC";
    ui.replay.index = 67;
    ui.replay.count = 300;
    ui.replay.speed = 4;
    check_golden("replay_playing_120x40", &s, 120, 40, ui, h);
    ui.replay.playing = false;
    ui.replay.prompting = true;
    ui.replay.prompt = "23:41:0";
    check_golden("replay_paused_goto_80x24", &s, 80, 24, ui, h);
    ui.replay.prompting = false;
    ui.unicode = false;
    ui.replay.playing = true;
    ui.replay.speed = 0.5;
    check_golden("replay_ascii_80x24", &s, 80, 24, ui, h);
}

TEST_CASE("replay keys move the cursor and leave the live bindings alone", "[tui]") {
    UiState ui = ui_at();
    CHECK(handle_key(ui, ',', nullptr) == Action::none);  // live: not a key
    ui.replay.of = "x.qsrec";
    CHECK(handle_key(ui, ',', nullptr) == Action::step_back);
    CHECK_FALSE(ui.replay.playing);
    CHECK(handle_key(ui, ' ', nullptr) == Action::redraw);
    CHECK(ui.replay.playing);
    CHECK(handle_key(ui, '.', nullptr) == Action::step_forward);
    CHECK(handle_key(ui, 'c', nullptr) == Action::seek_critical);
    CHECK(handle_key(ui, '+', nullptr) == Action::redraw);
    CHECK(ui.replay.speed == 2);
    CHECK(handle_key(ui, 'g', nullptr) == Action::redraw);
    for (char c : std::string("12q")) handle_key(ui, c, nullptr);  // q is typed, not quit
    CHECK(ui.replay.prompt == "12q");
    CHECK(handle_key(ui, 127, nullptr) == Action::redraw);
    CHECK(handle_key(ui, kKeyEnter, nullptr) == Action::seek_time);
    CHECK(ui.replay.prompt == "12");
    CHECK(handle_key(ui, 'r', nullptr) == Action::redraw);  // nothing to reset in a recording
    CHECK(handle_key(ui, 'q', nullptr) == Action::quit);
}
