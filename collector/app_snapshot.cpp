#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "app.h"
#include "collector.h"
#include "errors.h"
#include "json_writer.h"

namespace qscope {

std::atomic<bool> g_stop_requested{false};

static void on_stop_signal(int) { g_stop_requested = true; }

void install_stop_signals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
}

int run_snapshot(const Config& cfg, const SnapshotOptions& opt) {
    Collector col(cfg);
    col.add_default_sources();
    col.start();
    if (!opt.json) std::fprintf(stderr, "qscope: observing PID %d for %.1fs...\n", cfg.pid, opt.duration_seconds);
    const uint64_t start = monotonic_ns();
    const uint64_t end = start + static_cast<uint64_t>(opt.duration_seconds * 1e9);
    std::shared_ptr<const Snapshot> snap = col.tick();
    // Tick at the interval so per-tick sampling (sock_diag depths, /proc states) and ring
    // buffer draining keep up; the last tick closes the window exactly at --duration.
    while (!g_stop_requested && col.target_alive()) {
        const uint64_t now = monotonic_ns();
        if (now >= end) break;
        const uint64_t step = std::min<uint64_t>(end - now, static_cast<uint64_t>(cfg.interval_seconds * 1e9));
        std::this_thread::sleep_for(std::chrono::nanoseconds(step));
        snap = col.tick();
    }
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
