// `qscope export` and the /metrics server it shares with `top --listen`.
//
// Scrapes render the latest published snapshot (a shared_ptr copy), so a scrape never waits
// for the collector and the collector never waits for a scrape.
#include "cli/exporter.h"

#include <cerrno>
#include <clocale>
#include <cstdio>
#include <stdexcept>

#include "cli/app.h"
#include "engine/collector.h"
#include "metrics/metrics.h"
#include "model/errors.h"
#include "probes/probes.h"
#include "prom/pull/exposer.h"

namespace qscope {

MetricsServer::MetricsServer(Latest latest, uint32_t label_cap, const std::string& listen, bool allow_remote) {
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
        exposer_ = std::make_unique<prom::Exposer>(
            a, std::make_shared<SnapshotCollectable>(std::move(latest), label_cap));
    } catch (const prom::BindError& e) {
        throw Error(Exit::failure, "cannot listen on " + e.address + ": " +
                                       (e.err ? errno_text(e.err) + " (errno " + std::to_string(e.err) + ")"
                                              : std::string("bind failed")));
    }
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const { return exposer_->url(); }

int run_export(const Config& cfg, const ExportOptions& opt) {
    // Adopt the user's locale as `top --listen` does (ncurses needs it): the exposition
    // must come out byte-identical either way, and this keeps that property exercised.
    std::setlocale(LC_ALL, "");
    Collector col(cfg);
    // Bind before attaching: a bad or busy address fails in milliseconds, not after the
    // probes load.
    MetricsServer server([&col] { return col.latest(); }, cfg.label_cap, opt.listen, opt.allow_remote);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    col.start();
    col.tick();
    col.run_in_background();
    std::fprintf(stderr, "qscope: serving %s for PID %d\n", server.url().c_str(), cfg.pid);

    while (!g_stop_requested && col.target_alive()) sleep_unless_stopped(0.1);
    int rc = 0;
    if (!g_stop_requested && !col.target_alive()) {
        std::fprintf(stderr, "qscope: target PID %d exited; serving the last snapshot for 1 s, then exiting\n",
                     cfg.pid);
        // One more chance for Prometheus to see qscope_up 0 and the final counts.
        sleep_unless_stopped(1.0);
        rc = static_cast<int>(Exit::target_exited);
    }
    col.stop();
    return rc;
}

}  // namespace qscope
