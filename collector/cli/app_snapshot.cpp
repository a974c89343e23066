#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/app.h"
#include "engine/collector.h"
#include "engine/selector.h"
#include "probes/probes.h"
#include "model/errors.h"
#include "output/json_writer.h"

namespace qscope {

std::atomic<bool> g_stop_requested{false};

// The handler also writes here (write(2) is async-signal-safe), so a thread waiting in
// sleep_unless_stopped() wakes at once whichever thread the signal was delivered to.
static int g_stop_pipe[2] = {-1, -1};

static void on_stop_signal(int) {
    g_stop_requested = true;
    if (g_stop_pipe[1] >= 0) {
        const char b = 1;
        (void)!::write(g_stop_pipe[1], &b, 1);
    }
}

bool sleep_unless_stopped(double seconds) {
    const uint64_t end = monotonic_ns() + static_cast<uint64_t>(std::max(0.0, seconds) * 1e9);
    while (!g_stop_requested) {
        const uint64_t now = monotonic_ns();
        if (now >= end) break;
        const int ms = static_cast<int>(std::min<uint64_t>((end - now + 999999) / 1000000, 60000));
        if (g_stop_pipe[0] >= 0) {
            pollfd pf{g_stop_pipe[0], POLLIN, 0};
            (void)::poll(&pf, 1, ms);
        } else {
            std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, 50)));
        }
    }
    return g_stop_requested;
}

void install_stop_signals() {
    if (g_stop_pipe[0] < 0 && pipe2(g_stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) g_stop_pipe[0] = g_stop_pipe[1] = -1;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
}

int resolve_once(const Selector& sel) {
    if (sel.kind == SelectorKind::pid) return std::atoi(sel.value.c_str());  // Target::open checks it
    const Resolution r = resolve(sel);
    switch (r.outcome) {
        case Resolution::Outcome::found: return r.pid;
        case Resolution::Outcome::none: throw Error(Exit::no_target, sel.text() + ": " + r.reason);
        case Resolution::Outcome::ambiguous: throw Error(Exit::no_target, sel.text() + ": " + r.reason);
        case Resolution::Outcome::error: throw Error(r.code, r.reason);
    }
    return 0;
}

int wait_for_match(const Selector& sel) {
    if (sel.kind == SelectorKind::pid) return std::atoi(sel.value.c_str());
    std::string said;
    double backoff = 0.1;
    while (!g_stop_requested) {
        const Resolution r = resolve(sel);
        switch (r.outcome) {
            case Resolution::Outcome::found: return r.pid;
            case Resolution::Outcome::ambiguous: throw Error(Exit::no_target, sel.text() + ": " + r.reason);
            case Resolution::Outcome::error: throw Error(r.code, r.reason);
            case Resolution::Outcome::none: break;
        }
        if (r.reason != said) std::fprintf(stderr, "qscope: waiting for the target: %s\n", r.reason.c_str());
        said = r.reason;
        sleep_unless_stopped(backoff);
        backoff = std::min(backoff * 2, 1.0);
    }
    return 0;
}

int run_snapshot(const Config& given, const SnapshotOptions& opt) {
    Config cfg = given;
    cfg.pid = resolve_once(opt.target);
    Collector col(cfg);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    col.start();
    // On stderr in both modes: JSON on stdout stays clean, and a script (or a test) waiting
    // for the window to open has a line to wait for.
    std::fprintf(stderr, "qscope: observing PID %d for %.1fs...\n", cfg.pid, opt.duration_seconds);
    const uint64_t start = monotonic_ns();
    const uint64_t end = start + static_cast<uint64_t>(opt.duration_seconds * 1e9);
    std::shared_ptr<const Snapshot> snap = col.tick();
    // Tick at the interval so per-tick sampling (sock_diag depths, /proc states) and ring
    // buffer draining keep up; the last tick closes the window exactly at --duration.
    while (!g_stop_requested && col.target_alive()) {
        const uint64_t now = monotonic_ns();
        if (now >= end) break;
        const uint64_t step = std::min<uint64_t>(end - now, static_cast<uint64_t>(cfg.interval_seconds * 1e9));
        // Interrupted: one more tick, so the report covers the run up to the Ctrl-C.
        sleep_unless_stopped(step / 1e9);
        // On-demand work still running (--jvm-dump's jcmd, started by the first tick) belongs
        // in the output: the last tick waits for it, stretching the window by that long.
        if (g_stop_requested || monotonic_ns() >= end) col.finish_requests();
        snap = col.tick();
    }
    // The loop ended without that last tick (a first tick that outlasted --duration, a stop
    // or exit seen at a tick): one more for the result.
    if (col.finish_requests()) snap = col.tick();
    if (opt.json)
        std::cout << render_json(*snap) << std::endl;
    else
        std::cout << render_report(*snap);
    if (snap->target.exited) {
        std::fprintf(stderr, "qscope: %s\n", snap->target.exit_note.c_str());
        return static_cast<int>(Exit::target_exited);
    }
    return 0;
}

}  // namespace qscope
