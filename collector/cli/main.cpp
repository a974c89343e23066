// qscope: where is the queue? Flag parsing only; everything else lives in the libraries under collector/ and tui/.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "cli/app.h"
#include "model/errors.h"

using namespace qscope;

static void add_common(CLI::App* app, Config& cfg) {
    app->add_option("-p,--pid", cfg.pid,
                    "PID of the server to observe, with every process it forks (nginx's master, "
                    "PostgreSQL's postmaster, gunicorn's arbiter, a JVM)")
        ->required();
    app->add_flag("--no-children", [&](int64_t) { cfg.follow_children = false; },
                  "observe the PID alone, not the processes it forks");
    app->add_option("-i,--interval", cfg.interval_seconds, "seconds between refreshes")
        ->check(CLI::Range(0.1, 60.0))
        ->capture_default_str();
    app->add_option("--carriers", cfg.carriers_regex,
                    "regex of thread names that carry a user-space scheduler's tasks "
                    "(default: detect JVM virtual-thread carriers, ForkJoinPool-N-worker-M)");
    app->add_option_function<double>(
           "--loop-stall-ms", [&](double ms) { cfg.loop_stall_seconds = ms / 1000.0; },
           "an event-loop turn at least this long is a stall (default 20)")
        ->check(CLI::Range(1.0, 60000.0));
    app->add_flag("--no-stacks", [&](int64_t) { cfg.want_stacks = false; },
                  "do not capture stacks for waits (cheaper; waits still counted)");
    app->add_flag("--no-threads", [&](int64_t) { cfg.want_threads = false; },
                  "only the request path (accept queue, connector, in flight, downstream); no scheduler probes");
    // The socket probes fire on every read and write of every process on the machine; the
    // scheduler's only on context switches (docs/benchmarks.md: the floor).
    app->add_flag("--no-requests", [&](int64_t) { cfg.want_requests = false; },
                  "only the thread views (thread groups, waits, run queue, carriers); no socket probes, so "
                  "other processes' reads and writes cost nothing");
    app->add_flag("--jvm-dump", cfg.jvm_dump,
                  "JVM targets: once, run `jcmd PID Thread.dump_to_file` and show what parked virtual threads wait in");
    app->add_flag("--jvm-perfmap", cfg.jvm_perfmap,
                  "JVM targets: run `jcmd PID Compiler.perfmap` once so JIT frames get names");
    app->add_option("--label-cap", cfg.label_cap, "peers, groups and ports beyond this fold into \"other\"")
        ->capture_default_str();
    app->add_flag("-v,--verbose", cfg.verbose, "more diagnostics on stderr (-vv: libbpf debug)");
    // Kernel memory is preallocated for every slot, so the default is a trade-off; a server
    // with more open connections than this is still measured, minus the excess, which is
    // counted in lost_events and named in `partial`.
    app->add_option("--max-connections", cfg.max_connections,
                    "connections tracked at once (BPF map size); beyond it they are counted as lost, never "
                    "silently missed")
        ->check(CLI::Range(64u, 4u << 20))
        ->capture_default_str()
        ->group("Advanced");
}

// CLI11 has an exit code per parse error kind; ours is one: 2, bad usage. --help and
// --version stay 0.
static int usage_exit(CLI::App& app, const CLI::ParseError& e) {
    // CLI11 would say "--pid: At Most 1 required but received 2": say what to do instead.
    const std::string what = e.what();
    if (what.rfind("--pid", 0) == 0 && what.find("At Most 1") != std::string::npos) {
        std::fprintf(stderr,
                     "qscope: one target per qscope: run one qscope per PID (any number of qscopes may watch the "
                     "same PID)\n");
        return static_cast<int>(Exit::usage);
    }
    const int rc = app.exit(e);
    return rc == 0 ? 0 : static_cast<int>(Exit::usage);
}

int main(int argc, char** argv) {
    if (geteuid() != getuid()) {
        std::fprintf(stderr, "qscope: refusing to run setuid: grant capabilities instead (docs/security.md)\n");
        return static_cast<int>(Exit::permission);
    }
    CLI::App app{
        "qscope — where is the queue? Attach to a running server by PID and see, live, where its\n"
        "requests wait: accept queue → connector → in flight → gates / downstream → carriers.\n"
        "Needs root (or CAP_BPF+CAP_PERFMON). Nothing in the target changes.\n\n"
        "  qscope top --pid 1234                       live dashboard (default on a terminal)\n"
        "  qscope snapshot --pid 1234 --duration 10 --json   observe 10 s, print one JSON object\n"
        "  qscope export --pid 1234 --listen 127.0.0.1:9464  serve Prometheus /metrics\n",
        "qscope"};
    app.set_version_flag("--version", "qscope " QSCOPE_VERSION);
    app.require_subcommand(0, 1);

    Config cfg;
    SnapshotOptions sopt;
    ExportOptions eopt;
    TopOptions topt;

    auto* top = app.add_subcommand("top", "live terminal dashboard; keys: q quit, p pause, ? help");
    add_common(top, cfg);
    top->add_option("--listen", topt.listen, "also serve Prometheus /metrics on ADDR:PORT (e.g. 127.0.0.1:9464)");
    top->add_flag("--allow-remote", topt.allow_remote, "permit a non-loopback --listen address");
    top->add_option("-n,--iterations", topt.iterations, "draw N frames, then exit (scripts, CI)");
    top->add_flag("--no-color", topt.no_color, "monochrome (also honoured: NO_COLOR=1)");

    auto* snap = app.add_subcommand("snapshot", "observe for --duration seconds, then print one report (or JSON) and exit");
    add_common(snap, cfg);
    snap->add_option("-d,--duration", sopt.duration_seconds, "seconds to observe")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    snap->add_flag("--json", sopt.json, "print the JSON contract (docs/json.md) instead of a report");

    auto* exp = app.add_subcommand("export", "serve Prometheus /metrics until interrupted");
    add_common(exp, cfg);
    exp->add_option("--listen", eopt.listen, "ADDR:PORT to serve /metrics on")->capture_default_str();
    exp->add_flag("--allow-remote", eopt.allow_remote, "permit a non-loopback --listen address (prints a warning)");

    // No subcommand: `top` on a terminal, `snapshot` otherwise, with the same flags.
    if (argc > 1 && argv[1][0] == '-' && std::string(argv[1]) != "--help" && std::string(argv[1]) != "-h" &&
        std::string(argv[1]) != "--version") {
        std::vector<std::string> args(argv + 1, argv + argc);
        std::reverse(args.begin(), args.end());
        args.push_back(isatty(STDOUT_FILENO) ? "top" : "snapshot");
        try {
            app.parse(args);
        } catch (const CLI::ParseError& e) {
            return usage_exit(app, e);
        }
    } else {
        try {
            app.parse(argc, argv);
        } catch (const CLI::ParseError& e) {
            return usage_exit(app, e);
        }
    }

    if (!cfg.want_requests && !cfg.want_threads) {
        std::fprintf(stderr, "qscope: --no-requests and --no-threads together leave nothing to observe: drop one\n");
        return static_cast<int>(Exit::usage);
    }
    install_stop_signals();
    try {
        if (*snap) return run_snapshot(cfg, sopt);
        if (*exp) return run_export(cfg, eopt);
        if (*top) return run_top(cfg, topt);
        std::cout << app.help();
        return static_cast<int>(Exit::usage);
    } catch (const Error& e) {
        std::fprintf(stderr, "qscope: %s\n", e.what());
        return e.exit_code();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qscope: internal error: %s\n", e.what());
        return static_cast<int>(Exit::failure);
    }
}
