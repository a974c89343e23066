// The TUI's pure layer: sparkline scaling, number formats, truncation, sort orders, keys,
// and the invariant that no frame ever overflows the terminal, whatever the data.
#include <catch2/catch.hpp>
#include <set>

#include "tui/format.h"
#include "tui/screen.h"
#include "tui_fixtures.h"
#include "tui/view.h"

using namespace qscope;
using namespace qscope::tui;
using namespace tui_fixtures;

TEST_CASE("sparkline scales to the largest value, zero is blank", "[tui]") {
    CHECK(sparkline({0, 1, 2, 3, 4, 5, 6, 7, 8}, 9) == " ▁▂▃▄▅▆▇█");
    CHECK(sparkline({0, 1, 2, 3, 4, 5, 6, 7, 8}, 9, 0, false) == " .,:-=+*#");
    // A fixed scale above the data keeps small values low.
    CHECK(sparkline({4, 8}, 2, 16) == "▂▄");
    // Any positive value is visible, however small next to the peak.
    CHECK(sparkline({0.001, 1000}, 2) == "▁█");
    // Constant non-zero load is a full bar, not nothing.
    CHECK(sparkline({5, 5, 5}, 3) == "███");
    CHECK(sparkline({0, 0, 0}, 3) == "   ");
    CHECK(spark_level(-1, 10) == 0);
    CHECK(spark_level(10, 0) == 8);
}

TEST_CASE("sparkline: newest at the right edge; more samples than cells keep the peaks", "[tui]") {
    // Fewer samples than cells: left padding.
    CHECK(sparkline({8, 8}, 5) == "   ██");
    // 120 samples into 60 cells: each cell is the max of two, so a one-tick spike survives.
    std::vector<double> v(120, 1.0);
    v[51] = 8;
    const std::u32string cells = to_cells(sparkline(v, 60));
    REQUIRE(cells.size() == 60);
    CHECK(cells[25] == U'█');
    int full = 0;
    for (char32_t c : cells) full += c == U'█';
    CHECK(full == 1);
    CHECK(cells[0] == U'▁');
    CHECK(sparkline(v, 0).empty());
}

TEST_CASE("number and duration formats stay short", "[tui]") {
    CHECK(fmt_count(0) == "0");
    CHECK(fmt_count(9999) == "9999");
    CHECK(fmt_count(12345) == "12k");
    CHECK(fmt_count(999499) == "999k");
    CHECK(fmt_count(999500) == "1.0M");
    CHECK(fmt_count(1234567) == "1.2M");
    CHECK(fmt_secs(0) == "0");
    CHECK(fmt_secs(45e-6) == "45µs");
    CHECK(fmt_secs(45e-6, false) == "45us");
    CHECK(fmt_secs(0.0012) == "1.20ms");
    CHECK(fmt_secs(0.0999) == "99.9ms");
    CHECK(fmt_secs(0.9999) == "1.00s");
    CHECK(fmt_secs(61) == "1m01s");
    CHECK(fmt_elapsed(3725) == "1h02m");
    CHECK(fmt_rate(0.5) == "0.5/s");
    CHECK(fmt_rate(38.4) == "38/s");
    CHECK(fmt_rate(12345) == "12k/s");
    for (double s : {1e-7, 3e-4, 0.0123, 0.5, 7.5, 59.96, 3599.0, 86400.0 * 3})
        CHECK(cell_width(fmt_secs(s)) <= 7);
}

TEST_CASE("fit and pad never exceed the width and mark the cut", "[tui]") {
    CHECK(fit("hello", 5) == "hello");
    CHECK(fit("hello world", 5) == "hell…");
    CHECK(fit("hello world", 5, false) == "hell~");
    CHECK(fit("hello", 0).empty());
    CHECK(pad("ab", 4) == "ab  ");
    CHECK(pad("ab", 4, true) == "  ab");
    // Untrusted bytes: escapes, invalid UTF-8, wide glyphs and combining marks all become '?'.
    const std::string hostile = "\x1b[2J\x07ok\xff\xc3(\xe4\xb8\xad" "e\xcc\x81";
    const std::u32string c = to_cells(hostile);
    for (char32_t ch : c) CHECK((ch >= 0x20 && ch != 0x7f));
    CHECK(to_utf8(c).find('\x1b') == std::string::npos);
    for (int w = 0; w < 20; ++w) {
        CHECK(cell_width(fit(hostile, w)) <= w);
        CHECK(cell_width(pad(hostile, w)) == w);
    }
}

namespace {

std::vector<Snapshot> all_shapes() {
    Snapshot hostile = pool_saturated();
    hostile.target.comm = "evil\x1b]0;pwned\x07\xe4\xb8\xad\xe6\x96\x87";
    hostile.downstream[0].peer = std::string(300, 'x') + "\n:5432";
    hostile.waits[0].stack.push_back(std::string("\t\r\x1b[31m") + std::string(500, 'f'));
    hostile.verdict.summary = std::string(1000, 'v') + " " + std::string(1000, 'w');
    hostile.thread_groups[0].name = "\xff\xfe\xfd";
    for (int i = 0; i < 300; ++i)
        hostile.carriers.per_carrier.push_back({i, "c", i % 2 ? CarrierState::running : CarrierState::stalled});
    hostile.carriers.detected = true;
    Snapshot many = idle();
    for (int i = 0; i < 500; ++i) many.downstream.push_back(peer("10.0.0." + std::to_string(i) + ":80", 1, i % 2, 1, i, 0, 0, 0));
    return {idle(), accept_overflow(), pool_saturated(), silent_partner(), carriers_stalled(), target_exited(),
            base(), hostile, many};
}

void check_frame(const Grid& g, int w, int h) {
    REQUIRE(g.width() == std::max(w, 0));
    REQUIRE(g.height() == std::max(h, 0));
    for (const std::string& row : g.rows()) {
        const std::u32string cells = to_cells(row);
        // Every row decodes to exactly the terminal width of single-width printable glyphs
        // (to_cells turns anything else into '?', so a round trip must be lossless).
        bool printable = true;
        for (char32_t c : cells) printable = printable && c >= 0x20 && c != 0x7f;
        const bool ok = static_cast<int>(cells.size()) == w && printable && to_utf8(cells) == row;
        if (!ok) FAIL("bad row at " << w << "x" << h << ": [" << row << "]");
    }
}

}  // namespace

TEST_CASE("no frame overflows or garbles, for any shape, size and UI state", "[tui]") {
    const auto shapes = all_shapes();
    const int widths[] = {0, 1, 2, 7, 20, 39, 40, 41, 60, 79, 80, 81, 100, 120, 159, 160, 161, 200, 301};
    const int heights[] = {0, 1, 2, 3, 4, 5, 8, 13, 14, 19, 20, 24, 40, 50, 80};
    for (const auto& s : shapes) {
        const History h = history_for(s);
        for (int focus = 0; focus < kPanelCount; ++focus)
            for (bool help : {false, true}) {
                UiState ui;
                ui.focus = static_cast<Panel>(focus);
                ui.help = help;
                ui.row[focus] = 1000;  // out of range on purpose: clamps, never crashes
                if (!s.waits.empty()) ui.expanded_wait = wait_key(s.waits[0]);
                ui.unicode = focus % 2 == 0;
                for (int w : widths)
                    for (int ht : heights) check_frame(render(&s, w, ht, ui, h), w, ht);
            }
    }
    UiState ui;
    for (int w : widths)
        for (int ht : heights) check_frame(render(nullptr, w, ht, ui, History()), w, ht);
    ui.attach_progress = {{"sock", true}, {"sched", false}, {"jvm", false}, {"future_source", true}};
    for (int w : widths)
        for (int ht : heights) check_frame(render(nullptr, w, ht, ui, History()), w, ht);
}

TEST_CASE("ASCII mode emits only ASCII", "[tui]") {
    UiState ui;
    ui.unicode = false;
    ui.help = true;
    for (const auto& s : {pool_saturated(), carriers_stalled(), idle()}) {
        const Grid g = render(&s, 120, 40, ui, history_for(s));
        for (const auto& row : g.rows())
            for (unsigned char c : row) REQUIRE(c < 0x80);
    }
}

TEST_CASE("sort orders: peers by busy, calls, p99, name", "[tui]") {
    const Snapshot s = pool_saturated();  // 6379 busy 0, 5432 busy 10, 10.0.0.7 busy 1
    auto names = [&](int k) {
        std::vector<std::string> out;
        for (size_t i : sorted_order(s, Panel::downstream, k)) out.push_back(s.downstream[i].peer);
        return out;
    };
    CHECK(names(0) == std::vector<std::string>{"127.0.0.1:5432", "10.0.0.7:443", "127.0.0.1:6379"});
    CHECK(names(1) == std::vector<std::string>{"127.0.0.1:6379", "127.0.0.1:5432", "10.0.0.7:443"});
    CHECK(names(2) == std::vector<std::string>{"127.0.0.1:5432", "10.0.0.7:443", "127.0.0.1:6379"});
    CHECK(names(3) == std::vector<std::string>{"10.0.0.7:443", "127.0.0.1:5432", "127.0.0.1:6379"});
    CHECK(names(4) == names(0));  // wraps

    // Equal busy: the one stuck longest first.
    Snapshot t = s;
    t.downstream[0].busy = 10;
    t.downstream[0].oldest_busy_seconds = 30;
    CHECK(t.downstream[sorted_order(t, Panel::downstream, 0)[0]].peer == "127.0.0.1:6379");

    auto waits = [&](int k) {
        std::vector<std::string> out;
        for (size_t i : sorted_order(s, Panel::waits, k)) out.push_back(s.waits[i].syscall);
        return out;
    };
    CHECK(waits(0) == std::vector<std::string>{"futex", "recvfrom", "accept4"});
    CHECK(waits(2) == std::vector<std::string>{"accept4", "futex", "recvfrom"});  // count, then key

    auto groups = [&](int k) {
        std::vector<std::string> out;
        for (size_t i : sorted_order(s, Panel::threads, k)) out.push_back(s.thread_groups[i].name);
        return out;
    };
    CHECK(groups(0) == std::vector<std::string>{"qs-worker-", "qs_server", "qs-pool-house"});
    CHECK(groups(3) == std::vector<std::string>{"qs-pool-house", "qs-worker-", "qs_server"});

    const Snapshot c = carriers_stalled();
    CHECK(c.carriers.stalls[sorted_order(c, Panel::carriers, 0)[0]].tid == 6101);  // longest stall
    CHECK(c.carriers.stalls[sorted_order(c, Panel::carriers, 1)[0]].tid == 6101);  // lowest tid
    CHECK(c.carriers.stalls[sorted_order(c, Panel::carriers, 1)[2]].tid == 6104);
}

TEST_CASE("the downstream panel shows peers in the chosen order", "[tui]") {
    const Snapshot s = pool_saturated();
    UiState ui;
    ui.focus = Panel::downstream;
    auto row_of = [&](const Grid& g, const std::string& text) {
        for (int y = 0; y < g.height(); ++y)
            if (g.row(y).find(text) != std::string::npos) return y;
        return -1;
    };
    Grid g = render(&s, 120, 40, ui, History());
    CHECK(row_of(g, "127.0.0.1:5432 ") < row_of(g, "10.0.0.7:443 "));
    CHECK(row_of(g, "10.0.0.7:443 ") < row_of(g, "127.0.0.1:6379 "));
    REQUIRE(handle_key(ui, 's', &s) == Action::redraw);  // busy → calls
    CHECK(ui.flash == "downstream sorted by calls");
    g = render(&s, 120, 40, ui, History());
    CHECK(row_of(g, "127.0.0.1:6379 ") < row_of(g, "127.0.0.1:5432 "));
}

TEST_CASE("the requests panel shows gRPC's own failures and the statuses it could not read", "[tui]") {
    Snapshot s = pool_saturated();
    s.requests.h2.connections = s.requests.h2.followed_connections = 1;
    s.requests.h2.grpc_status = {{"OK", 600}, {"UNAVAILABLE", 200}};
    s.requests.h2.grpc_status_unread = 40;
    const Grid g = render(&s, 160, 40, UiState(), History());
    std::string screen;
    for (int y = 0; y < g.height(); ++y) screen += g.row(y) + "\n";
    INFO(screen);
    CHECK(screen.find("gRPC failed 200/800  UNAVAILABLE 200  unread 40") != std::string::npos);
}

TEST_CASE("keys: every key in the help does something, and the overlay lists them all", "[tui]") {
    const Snapshot s = pool_saturated();
    const auto keys = key_help();
    std::set<std::string> listed;
    for (const auto& [k, d] : keys) listed.insert(k);
    for (const char* k : {"q", "p", "Enter", "s", "r", "j", "?", "Esc"}) CHECK(listed.count(k));
    bool tab = false, arrows = false;
    for (const auto& k : listed) {
        tab |= k.find("Tab") != std::string::npos;
        arrows |= k.find("↑") != std::string::npos;
    }
    CHECK(tab);
    CHECK(arrows);

    UiState ui;
    handle_key(ui, '?', &s);
    REQUIRE(ui.help);
    const Grid g = render(&s, 80, 24, ui, History());
    std::string screen = g.to_text();
    for (const auto& [k, d] : keys) {
        INFO(k);
        CHECK(screen.find(k) != std::string::npos);
        CHECK(screen.find(d.substr(0, 20)) != std::string::npos);
    }
    // Any key closes the overlay; q still quits from it.
    CHECK(handle_key(ui, 'x', &s) == Action::redraw);
    CHECK_FALSE(ui.help);
    handle_key(ui, '?', &s);
    CHECK(handle_key(ui, 'q', &s) == Action::quit);

    // Single-character keys from the help, each with an effect.
    UiState u2;
    u2.focus = Panel::waits;
    CHECK(handle_key(u2, 'p', &s) == Action::pause_toggled);
    CHECK(u2.paused);
    CHECK(handle_key(u2, 'p', &s) == Action::pause_toggled);
    CHECK_FALSE(u2.paused);
    CHECK(handle_key(u2, 'r', &s) == Action::reset_window);
    CHECK(handle_key(u2, 'j', &s) == Action::redraw);  // not a JVM: explains instead
    CHECK(u2.flash.find("not a JVM") != std::string::npos);
    const Snapshot jvm = carriers_stalled();
    CHECK(handle_key(u2, 'j', &jvm) == Action::jvm_dump);
    CHECK(handle_key(u2, 'x', &s) == Action::none);
}

TEST_CASE("keys: Tab visits every panel; arrows move and clamp the selection", "[tui]") {
    const Snapshot s = pool_saturated();
    UiState ui;
    std::set<int> seen;
    for (int i = 0; i < kPanelCount; ++i) {
        seen.insert(static_cast<int>(ui.focus));
        handle_key(ui, kKeyTab, &s);
    }
    CHECK(seen.size() == kPanelCount);
    CHECK(ui.focus == Panel::downstream);  // back to the start
    handle_key(ui, kKeyBackTab, &s);
    CHECK(ui.focus == Panel::requests);
    handle_key(ui, kKeyRight, &s);
    CHECK(ui.focus == Panel::downstream);

    handle_key(ui, kKeyDown, &s);
    handle_key(ui, kKeyDown, &s);
    handle_key(ui, kKeyDown, &s);
    CHECK(ui.row[static_cast<int>(Panel::downstream)] == 2);  // three peers
    handle_key(ui, kKeyUp, &s);
    CHECK(ui.row[static_cast<int>(Panel::downstream)] == 1);
    handle_key(ui, kKeyHome, &s);
    CHECK(ui.row[static_cast<int>(Panel::downstream)] == 0);
}

TEST_CASE("Enter expands the selected wait's stack; Enter or Esc collapses it", "[tui]") {
    const Snapshot s = pool_saturated();
    UiState ui;
    ui.focus = Panel::waits;
    handle_key(ui, kKeyDown, &s);  // second by threads now: recvfrom on the DB
    REQUIRE(handle_key(ui, kKeyEnter, &s) == Action::redraw);
    CHECK(ui.expanded_wait == wait_key(s.waits[0]));
    std::string screen = render(&s, 120, 40, ui, History()).to_text();
    CHECK(screen.find("db_query+0x88") != std::string::npos);
    CHECK(screen.find("pool_borrow+0x71") == std::string::npos);  // the other stack stays shut
    handle_key(ui, kKeyEnter, &s);
    CHECK(ui.expanded_wait.empty());
    handle_key(ui, kKeyUp, &s);
    handle_key(ui, kKeyEnter, &s);
    screen = render(&s, 120, 40, ui, History()).to_text();
    CHECK(screen.find("pool_borrow+0x71") != std::string::npos);
    CHECK(screen.find("-- kernel --") != std::string::npos);
    handle_key(ui, kKeyEscape, &s);
    CHECK(ui.expanded_wait.empty());

    // Carrier stalls expand the same way.
    const Snapshot c = carriers_stalled();
    UiState uc;
    uc.focus = Panel::carriers;
    handle_key(uc, kKeyEnter, &c);
    CHECK(uc.expanded_stall_tid == 6101);
    CHECK(render(&c, 120, 40, uc, History()).to_text().find("Unsafe_Park+0x9c") != std::string::npos);
}

TEST_CASE("history: one sample per tick, a minute deep, maxima reset", "[tui]") {
    CHECK(history_capacity(1.0) == 60);
    CHECK(history_capacity(0.5) == 120);
    CHECK(history_capacity(7) == 9);
    History h(3);
    Snapshot s = pool_saturated();
    for (int i = 0; i < 5; ++i) {
        s.tick = i;
        s.requests.waiting_unread = 100 * (i + 1);
        h.feed(s);
        h.feed(s);  // the same tick twice counts once
    }
    const auto& conn = h.samples[static_cast<int>(tui::Stage::connector)];
    REQUIRE(conn.size() == 3);
    CHECK(conn.front() == 300);
    CHECK(conn.back() == 500);
    CHECK(h.max_seen[static_cast<int>(tui::Stage::connector)] == 500);
    h.reset_maxima();
    CHECK(h.max_seen[static_cast<int>(tui::Stage::connector)] == 0);
}

TEST_CASE("stage row: counts, maxima and severity from the snapshot", "[tui]") {
    const auto p = stage_views(pool_saturated(), History());
    CHECK(p[0].now == 0);
    CHECK(p[0].max == 17);
    CHECK(p[1].now == 1240);
    CHECK(p[1].max == 1302);
    CHECK(p[1].severity == Role::warn);
    CHECK(p[2].now == 200);
    // 189 at the pool gate + 11 busy calls (10 on the DB, 1 on the partner).
    CHECK(p[3].now == 200);
    CHECK(p[3].detail == "gate 189 · busy 11/16");
    CHECK(p[3].severity == Role::critical);
    CHECK_FALSE(p[4].observed);
    CHECK(p[4].severity == Role::dim);

    const auto a = stage_views(accept_overflow(), History());
    CHECK(a[0].now == 129);
    CHECK(a[0].severity == Role::critical);
    CHECK(a[0].detail == "of 144 · ovf 342");

    const auto c = stage_views(carriers_stalled(), History());
    CHECK(c[4].observed);
    CHECK(c[4].now == 3);
    CHECK(c[4].severity == Role::critical);

    const auto i = stage_views(idle(), History());
    for (const auto& v : i) CHECK(v.severity != Role::critical);
    CHECK(i[3].now == 0);  // idle workers on a futex are not a gate: the verdict said so
}

TEST_CASE("the verdict line carries the severity role", "[tui]") {
    const Snapshot s = pool_saturated();
    const Grid g = render(&s, 120, 40, UiState(), History());
    CHECK(g.row(1).find("CRITICAL") != std::string::npos);
    CHECK(g.role_at(1, 1) == Role::critical);
    const Snapshot i = idle();
    const Grid gi = render(&i, 120, 40, UiState(), History());
    CHECK(gi.row(1).find(" OK ") == 0);
    CHECK(gi.role_at(1, 1) == Role::ok);
}

TEST_CASE("a Unix listener and a Unix peer are shown by their paths", "[tui][unix]") {
    Snapshot s = pool_saturated();
    Listener l = s.listeners[0];
    l.port = 0;
    l.addr.clear();
    l.unix_path = "/run/php/fpm.sock";
    s.listeners.push_back(l);
    s.downstream[0].peer = "unix:/var/run/postgresql/.s.PGSQL.5432";
    const Grid g = render(&s, 140, 40, UiState(), History());
    bool listener = false, peer = false;
    for (int y = 0; y < g.height(); ++y) {
        listener = listener || g.row(y).find("unix:/run/php/fpm.sock") != std::string::npos;
        peer = peer || g.row(y).find("unix:/var/run/postgresql/.s.PGSQL.5432") != std::string::npos;
    }
    CHECK(listener);
    CHECK(peer);
}
