// Golden JSON, text reports and /metrics of the dashboard's fixture snapshots (tui_fixtures.h): the
// contract's bytes, so a refactor of the model or the renderers that changes one field or
// one word of the report fails here. Each fixture twice: with its hand-written verdict, and
// with the verdict compute_verdict() gives it (the verdict's own wording).
// QSCOPE_UPDATE_GOLDEN=1 rewrites the files; review the diff before committing it.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "golden.h"
#include "metrics/metrics.h"
#include "model/verdict.h"
#include "output/json_writer.h"
#include "tui_fixtures.h"

using namespace qscope;

namespace {

void check_fixture(const std::string& name, const Snapshot& s) {
    golden::check("json_" + name + ".json", render_json(s) + "\n");
    golden::check("report_" + name + ".txt", render_report(s));
    Snapshot c = s;
    compute_verdict(c);
    golden::check("json_" + name + "_computed.json", render_json(c) + "\n");
    golden::check("report_" + name + "_computed.txt", render_report(c));
    // /metrics as a scrape would render it, dated 5 s after the snapshot was taken.
    golden::check("metrics_" + name + "_computed.txt",
                 prom::serialize(snapshot_families(&c, 50, c.taken_at_unix_ms + 5000)));
}

}  // namespace

TEST_CASE("golden JSON, report and metrics of each fixture", "[output][golden]") {
    using namespace tui_fixtures;
    check_fixture("idle", idle());
    check_fixture("accept_overflow", accept_overflow());
    check_fixture("pool_saturated", pool_saturated());
    check_fixture("silent_partner", silent_partner());
    check_fixture("carriers_stalled", carriers_stalled());
    check_fixture("event_loop", event_loop());
    check_fixture("retry_storm", retry_storm());
    check_fixture("target_exited", target_exited());
}
