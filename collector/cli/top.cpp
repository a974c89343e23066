// `qscope top`: wires the collector (and --listen's /metrics) to the dashboard in tui/,
// which owns the terminal, the keys and the drawing. Without a terminal, --iterations N
// prints the last frame as text.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>

#include "cli/app.h"
#include "cli/exporter.h"
#include "cli/follower.h"
#include "cli/ring_keeper.h"
#include "engine/collector.h"
#include "model/errors.h"
#include "probes/probes.h"
#include "tui/dashboard.h"

namespace qscope {
namespace {

std::unique_ptr<MetricsServer> maybe_listen(const Collector& col, const TopOptions& opt) {
    if (opt.listen.empty()) return nullptr;
    return std::make_unique<MetricsServer>([&col] { return col.latest(); }, col.config().label_cap, opt.listen,
                                           opt.allow_remote);
}

int exit_status(const std::shared_ptr<const Snapshot>& s) {
    if (s && s->target.exited) {
        std::fprintf(stderr, "qscope: %s\n", s->target.exit_note.c_str());
        return static_cast<int>(Exit::target_exited);
    }
    return 0;
}

// --iterations N with stdout not a terminal: tick N times, print the last frame as text.
int run_headless(const Config& cfg, const TopOptions& opt) {
    Collector col(cfg);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    col.start();
    auto server = maybe_listen(col, opt);
    tui::History hist(tui::history_capacity(cfg.interval_seconds));
    std::shared_ptr<const Snapshot> snap;
    for (int i = 0; i < opt.iterations && !g_stop_requested; ++i) {
        if (i && sleep_unless_stopped(cfg.interval_seconds)) break;
        snap = col.tick();
        hist.feed(*snap);
    }
    tui::print_frame(snap.get(), hist, cfg.pid, cfg.interval_seconds, std::cout);
    return exit_status(snap);
}

}  // namespace

int run_top(const Config& given, const TopOptions& opt) {
    install_stop_signals();
    Config cfg = given;
    cfg.quick_start = true;
    if (!isatty(STDOUT_FILENO)) {
        if (opt.iterations > 0) {
            cfg.pid = resolve_once(opt.target.selector);
            return run_headless(cfg, opt);
        }
        throw Error(Exit::usage,
                    "top: stdout is not a terminal; use `qscope snapshot` or `qscope top --iterations N` for text");
    }
    // A selector may match nothing yet: wait here, on the terminal we have not taken over.
    cfg.pid = wait_for_match(opt.target.selector);
    if (g_stop_requested) return 0;  // interrupted while waiting
    std::optional<RingKeeper> ring;  // before the terminal is taken: a bad --output is said plainly
    if (opt.ring.enabled()) ring.emplace(opt.ring, opt.target.selector.text(), cfg.interval_seconds);
    uint64_t signals_seen = install_ring_signal();
    // Before the collector: "attaching…" shows while the probes load, and the dashboard
    // (which queues the snapshots) outlives the collector thread on every way out.
    tui::Dashboard dash(cfg.pid, cfg.interval_seconds, !opt.no_color);
    Follower follower(opt.target, cfg, /*say=*/false);  // the dashboard owns the terminal
    follower.verdict_over(opt.verdict_window_seconds);
    follower.start(false, [&](const auto& progress) { dash.attaching(progress); });
    std::unique_ptr<MetricsServer> server;
    if (!opt.listen.empty())
        server = std::make_unique<MetricsServer>([&follower] { return follower.latest(); }, cfg.label_cap, opt.listen,
                                                 opt.allow_remote);
    follower.run_in_background([&](const std::shared_ptr<const Snapshot>& s) {
        dash.post(s);
        if (!ring) {
            if (ring_signal_since(signals_seen)) dash.say(kNoRingToWrite);
            return;
        }
        if (std::string said = ring->keep(*s); !said.empty()) dash.say(std::move(said));
    });
    tui::Controls controls{
        .reset_window = [&] { follower.with_collector([](Collector& c) { c.reset_window(); }); },
        .request_jvm_dump = [&] { follower.with_collector([](Collector& c) { c.request(OnDemand::jvm_dump); }); },
        .stop_requested = [] { return g_stop_requested.load(); }};
    if (ring) controls.write_ring = [&] { return ring->write("w"); };
    const auto newest = dash.run(controls, opt.iterations);
    dash.leave();  // the shell's screen back at once; detaching the probes takes ~0.4 s more
    follower.stop();
    // A followed service outlives its processes: leaving while it is down is not an error.
    return opt.target.selector.follows_restarts() ? 0 : exit_status(newest);
}

}  // namespace qscope
