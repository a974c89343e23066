// `qscope export` and the /metrics server it shares with `top --listen`.
//
// Scrapes render the latest published snapshot (a shared_ptr copy), so a scrape never waits
// for the collector and the collector never waits for a scrape.
#include "cli/exporter.h"

#include <malloc.h>

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <set>
#include <stdexcept>

#include <algorithm>

#include "cli/app.h"
#include "cli/follower.h"
#include "cli/ring_keeper.h"
#include "engine/collector.h"
#include "engine/shared_hooks.h"
#include "metrics/metrics.h"
#include "metrics/services.h"
#include "model/errors.h"
#include "probes/probes.h"
#include "probes/sched/loops.h"
#include "probes/sock/attach_plan.h"
#include "prom/pull/exposer.h"

namespace qscope {

MetricsServer::MetricsServer(Latest latest, uint32_t label_cap, const std::string& listen, bool allow_remote)
    : MetricsServer(std::make_shared<SnapshotCollectable>(std::move(latest), label_cap), listen, allow_remote) {}

MetricsServer::MetricsServer(LatestServices latest, uint32_t label_cap, const std::string& listen, bool allow_remote)
    : MetricsServer(std::make_shared<ServicesCollectable>(std::move(latest), label_cap), listen, allow_remote) {}

MetricsServer::MetricsServer(std::shared_ptr<const prom::Collectable> collectable, const std::string& listen,
                             bool allow_remote) {
    prom::ListenAddress a;
    try {
        a = prom::parse_listen_address(listen);
    } catch (const std::invalid_argument& e) {
        throw Error(Exit::usage, "--listen " + listen + ": " + e.what() +
                                     " (expected ADDR:PORT, e.g. 127.0.0.1:9464 or [::1]:9464)");
    }
    if (!a.loopback && !allow_remote)
        throw Error(Exit::usage, "--listen " + listen +
                                     " is not a loopback address: /metrics names the target's peers, ports and "
                                     "threads without authentication; pass --allow-remote to serve it there anyway");
    if (!a.loopback)
        std::fprintf(stderr,
                     "qscope: warning: serving /metrics on %s, reachable from other hosts without authentication "
                     "(--allow-remote)\n",
                     a.host_port(a.port).c_str());
    try {
        exposer_ = std::make_unique<prom::Exposer>(a, std::move(collectable));
    } catch (const prom::BindError& e) {
        throw Error(Exit::failure, "cannot listen on " + e.address + ": " +
                                       (e.err ? errno_text(e.err) + " (errno " + std::to_string(e.err) + ")"
                                              : std::string("bind failed")));
    }
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const { return exposer_->url(); }

// "PID 1234" (a lone --pid), "port:8080", "web (port:8080)": for the start-up line.
static std::string describe(const NamedTarget& t) {
    if (t.service.empty()) return "PID " + t.selector.value;
    if (t.service == t.selector.text()) return t.service;
    return t.service + " (" + t.selector.text() + ")";
}

int run_export(const Config& cfg, const ExportOptions& opt) {
    // Adopt the user's locale as `top --listen` does (ncurses needs it): the exposition
    // must come out byte-identical either way, and this keeps that property exercised.
    std::setlocale(LC_ALL, "");
    // One malloc arena for the whole process, set before any thread starts. Each attach
    // parses the kernel's BTF once per BPF object on concurrent threads; with glibc's
    // per-thread arenas that left ~27 MiB of freed memory mapped after the first re-attach
    // (measured: RSS 41 → 70 MiB, then flat); with one arena RSS stays flat from the first
    // attach on. The cost, arena contention, is nil for a process that ticks once a second.
    mallopt(M_ARENA_MAX, 1);
    std::vector<std::unique_ptr<Follower>> followers;
    for (const auto& t : opt.targets) {
        followers.push_back(std::make_unique<Follower>(t, cfg));
        followers.back()->verdict_over(opt.verdict_window_seconds);
    }
    // Bind before attaching: a bad or busy address fails in milliseconds, not after the
    // probes load.
    MetricsServer server(
        [&followers] {
            std::vector<ServiceSnapshot> out;
            for (const auto& f : followers) out.push_back({f->target().service, f->latest()});
            return out;
        },
        cfg.label_cap, opt.listen, opt.allow_remote);
    // --ring: each target's own ring, before anything attaches (a bad --output fails now).
    std::vector<std::unique_ptr<RingKeeper>> rings;
    if (opt.ring.enabled())
        for (const auto& t : opt.targets)
            rings.push_back(std::make_unique<RingKeeper>(opt.ring, t.selector.text(), cfg.interval_seconds, t.service));
    uint64_t signals_seen = install_ring_signal();
    // Several targets: the busiest hooks once for all (engine/shared_hooks.h), each target's
    // own programs behind them: the tracepoints, or before them the kernel functions the sock
    // family's plan takes (its targets take the same). Without them (a refused load) each
    // target attaches its own, at a cost per target.
    if (followers.size() > 1 && (cfg.want_requests || cfg.want_threads)) {
        try {
            std::vector<SharedHooks::Hook> fallbacks;
            if (cfg.want_requests) {
                KernelTracepoints tps;
                fallbacks = shared_fallbacks(plan_sock_attach(sock_offer(tps)));
            }
            const auto hooks = SharedHooks::open({std::begin(kLoopPolls), std::end(kLoopPolls)}, fallbacks);
            for (size_t i = 0; i < followers.size() && i < static_cast<size_t>(SharedHooks::kSlots); ++i)
                followers[i]->share_hooks({hooks, static_cast<int>(i)});
        } catch (const Error& e) {
            std::fprintf(stderr, "qscope: the targets' hooks are not shared (each target attaches its own): %s\n",
                         e.what());
        }
    }
    // One at a time: each target is its own Collector with its own BPF objects.
    for (auto& f : followers) f->start();
    for (size_t i = 0; i < followers.size(); ++i) {
        if (rings.empty()) {
            followers[i]->run_in_background();
            continue;
        }
        followers[i]->run_in_background([f = followers[i].get(), ring = rings[i].get()](const auto& s) {
            if (const std::string said = ring->keep(*s); !said.empty()) f->say(said);
        });
    }
    std::string what;
    for (const auto& f : followers) what += (what.empty() ? "" : ", ") + describe(f->target());
    std::fprintf(stderr, "qscope: serving %s for %s\n", server.url().c_str(), what.c_str());

    // Only --pid targets end; the others are followed until a stop signal.
    auto all_finished = [&] {
        return std::all_of(followers.begin(), followers.end(), [](const auto& f) { return f->finished(); });
    };
    std::set<std::string> shared_said;  // each pair of services once
    auto say_shared = [&] {
        std::vector<ServiceSnapshot> now;
        for (const auto& f : followers) now.push_back({f->target().service, f->latest()});
        for (const SharedProcess& p : shared_processes(now))
            if (shared_said.insert(p.a + '\n' + p.b).second)
                std::fprintf(stderr,
                             "qscope: warning: services %s and %s share PID %d (%s): it is observed twice, at "
                             "twice the cost, and a sum over both services counts it twice\n",
                             p.a.c_str(), p.b.c_str(), p.pid, p.comm.c_str());
    };
    for (int turn = 0; !g_stop_requested && !all_finished(); ++turn) {
        sleep_unless_stopped(0.1);
        if (rings.empty() && ring_signal_since(signals_seen)) std::fprintf(stderr, "qscope: %s\n", kNoRingToWrite);
        if (followers.size() > 1 && turn % 10 == 0) say_shared();
    }
    int rc = 0;
    if (!g_stop_requested) {
        if (followers.size() == 1)
            std::fprintf(stderr, "qscope: target PID %s exited; serving the last snapshot for 1 s, then exiting\n",
                         followers[0]->target().selector.value.c_str());
        else
            std::fprintf(stderr, "qscope: every target exited; serving the last snapshots for 1 s, then exiting\n");
        // One more chance for Prometheus to see qscope_up 0 and the final counts.
        sleep_unless_stopped(1.0);
        rc = static_cast<int>(Exit::target_exited);
    }
    for (auto& f : followers) f->stop();
    return rc;
}

}  // namespace qscope
