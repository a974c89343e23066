// `qscope diff`: the dashboard's fixtures (tui_fixtures.h) compared in pairs, as golden text,
// and the rules an operator reads it by, checked directly: A → B where they differ, one value
// where they agree, per-second counters over windows of different lengths, rows on one side
// only, unchanged rows counted rather than printed.
// QSCOPE_UPDATE_GOLDEN=1 rewrites the files; review the diff before committing it.
#include <catch2/catch.hpp>

#include "golden.h"
#include "model/verdict.h"
#include "output/diff.h"
#include "output/json_writer.h"
#include "tui_fixtures.h"

using namespace qscope;

namespace {

DiffSide side(const std::string& label, Snapshot s) {
    compute_verdict(s);
    return {label, to_json(s)};
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("diff: the fixtures compared in pairs, golden", "[output][golden][diff]") {
    using namespace tui_fixtures;
    golden::check("diff_idle_pool_saturated.txt",
                  render_diff(side("idle.json", idle()), side("pool.json", pool_saturated())));
    golden::check("diff_accept_overflow_carriers_stalled.txt",
                  render_diff(side("a.json", accept_overflow()), side("b.json", carriers_stalled())));
}

TEST_CASE("diff: what changed is A → B; what did not is one value or counted", "[output][diff]") {
    using namespace tui_fixtures;
    const std::string same = render_diff(side("a", idle()), side("b", idle()));
    CHECK(has(same, "verdict\n  unchanged  "));
    CHECK(!has(same, "→"));
    CHECK(has(same, "door\n  unchanged (1)\n"));

    // A window twice as long with the same counts ran at half the rate.
    Snapshot slow = idle();
    slow.window_seconds *= 2;
    const std::string rate = render_diff(side("a", idle()), side("b", slow));
    const Snapshot base = idle();
    char want[64];
    std::snprintf(want, sizeof want, "completed %.1f/s → %.1f/s", base.requests.completed / base.window_seconds,
                  base.requests.completed / slow.window_seconds);
    CHECK(has(rate, want));

    // The pool: the limit moved, and the peer exists on B's side only, shown with B's values.
    const std::string pool = render_diff(side("a", idle()), side("b", pool_saturated()));
    // idle's one request in flight runs on a CPU while its idle workers park: no queue there.
    CHECK(has(pool, "the limit moved: none → gate\n"));
    CHECK(has(render_diff(side("a", accept_overflow()), side("b", carriers_stalled())),
              "the limit moved: accept_queue → carriers\n"));
    CHECK(has(pool, "127.0.0.1:5432 (only in B)  busy 10, max 10, of connections 10"));
    CHECK(has(pool, "blocked in futex 7 → 189"));
}
