// qscope: where is the queue? Flag parsing only; everything else lives in the libraries under collector/ and tui/.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <iostream>
#include <string>

#include "cli/app.h"
#include "cli/targets.h"
#include "engine/selector.h"
#include "model/errors.h"
#include "record/ring.h"
#include "sys/proc_stat.h"

using namespace qscope;

// The target flags as given; at most one per subcommand (export: or --target/--config).
struct TargetFlags {
    std::vector<std::pair<SelectorKind, std::string>> given;
    std::vector<CLI::Option*> pid_options;  // one per subcommand; only the parsed one counts
    bool pid_given() const {
        for (auto* o : pid_options)
            if (o->count()) return true;
        return false;
    }
};

static void add_target_flags(CLI::App* app, Config& cfg, TargetFlags& tf, bool follows) {
    const std::string g = "Target (one of)";
    auto* pid = app->add_option("-p,--pid", cfg.pid,
                    "PID of the server to observe, with every process it forks (nginx's master, "
                    "PostgreSQL's postmaster, gunicorn's arbiter, a JVM)" +
                        std::string(follows ? "; when it exits, so does qscope (status 6)" : ""));
    pid->group(g);
    tf.pid_options.push_back(pid);
    const std::string again = follows ? "; found again after the service restarts" : "";
    auto sel = [&](const char* flag, SelectorKind kind, const char* meta, const std::string& help) {
        app->add_option_function<std::string>(
               flag, [&tf, kind](const std::string& v) { tf.given.emplace_back(kind, v); }, help + again)
            ->type_name(meta)
            ->group(g);
    };
    sel("--pidfile", SelectorKind::pidfile, "FILE", "the PID written in FILE (e.g. /run/nginx.pid)");
    sel("--comm", SelectorKind::comm, "NAME",
        "the process named NAME exactly (/proc/PID/comm, as ps -o comm shows it); a master and the workers it "
        "forked are one target, their master");
    sel("--cmdline", SelectorKind::cmdline, "REGEX",
        "the process whose command line REGEX finds (POSIX extended, as grep -E; e.g. 'java .*orders\\.jar')");
    sel("--port", SelectorKind::port, "N", "the process listening on TCP port N (in qscope's network namespace)");
    sel("--cgroup", SelectorKind::cgroup, "PATH",
        "the process in cgroup v2 PATH (e.g. /system.slice/nginx.service, a container's cgroup)");
}

static void add_common(CLI::App* app, Config& cfg) {
    app->add_flag("--no-children", [&](int64_t) { cfg.follow_children = false; },
                  "observe the PID alone, not the processes it forks");
    app->add_option("-i,--interval", cfg.interval_seconds, "seconds between refreshes")
        ->check(CLI::Range(0.1, 60.0))
        ->capture_default_str();
    app->add_option("--carriers", cfg.carriers_regex,
                    "regex of thread names that carry a user-space scheduler's tasks. Without it, a JVM's "
                    "virtual-thread carriers, a Go program's Ms and a Tokio program's workers (by name, or "
                    "by a worker's stack) are found, and no other runtime's");
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
    // Opt-in: a uprobe costs a trap per SSL_write in the target (docs/benchmarks.md, "TLS").
    app->add_flag("--tls", cfg.tls,
                  "HTTPS targets: uprobes on the OpenSSL libssl the target maps (libssl.so.3, libssl.so.1.1) read "
                  "each response's status from its plaintext; statically linked TLS, Go crypto/tls, Java JSSE "
                  "and kTLS are not seen this way. HTTP/2 inside TLS is followed per stream: once the target "
                  "answers HTTP/2 over TLS, SSL_read and the calls' returns are probed too. Off by default: every "
                  "SSL_write of the target then traps into the kernel, and with HTTP/2 three more calls per "
                  "request (docs/benchmarks.md, \"TLS\")");
    // docs/kernel.md "Scoped to the target's cgroup": which processes pay for arrivals.
    app->add_option_function<std::string>(
           "--scope",
           [&cfg](const std::string& v) {
               cfg.scope = v == "cgroup" ? SockScope::cgroup : v == "global" ? SockScope::global : SockScope::automatic;
           },
           "which processes run the socket arrival probe: `cgroup` only the target's cgroup (its "
           "sockets must be charged to it: not the root cgroup, no listener inherited from elsewhere, "
           "no Unix-domain listener), `global` every process (the sk_data_ready tracepoint), `auto` "
           "cgroup when it holds and global otherwise, saying why (-v, JSON probe_attach, /metrics "
           "qscope_sock_scope_info)")
        ->check(CLI::IsMember({"auto", "cgroup", "global"}))
        ->type_name("SCOPE")
        ->default_str("auto");
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

// The one target of the flags: --pid (no service name: its series keep the labels they
// always had) or a selector (service = the selector, e.g. "port:8080"). `listed`: export's
// --target/--config name the targets instead.
static NamedTarget one_target(const Config& cfg, const TargetFlags& tf, bool listed) {
    std::vector<std::string> flags;
    if (tf.pid_given()) flags.push_back("--pid");
    for (const auto& [kind, v] : tf.given) flags.push_back(std::string("--") + contract_name(kind));
    if (listed) {
        if (!flags.empty())
            throw Error(Exit::usage, flags[0] + " with --target/--config: name every target there instead (e.g. "
                                     "--target web=port:8080)");
        return {};
    }
    if (flags.empty())
        throw Error(Exit::usage, "which process? give --pid PID, or a selector that finds it again after a restart: "
                                 "--pidfile FILE, --comm NAME, --cmdline REGEX, --port N or --cgroup PATH");
    if (flags.size() > 1) {
        std::string all;
        for (const auto& f : flags) all += (all.empty() ? "" : ", ") + f;
        throw Error(Exit::usage, "one target per qscope (got " + all +
                                     "): for several services, give `qscope export` one --target NAME=SELECTOR each");
    }
    if (tf.pid_given()) return {"", Selector{SelectorKind::pid, std::to_string(cfg.pid)}};
    const Selector s = make_selector(tf.given[0].first, tf.given[0].second);
    return {s.text(), s};
}

static std::vector<NamedTarget> export_targets(const NamedTarget& single, const std::vector<std::string>& args,
                                               const std::string& config_file) {
    std::vector<NamedTarget> out;
    for (const auto& a : args) out.push_back(parse_target_arg(a));
    if (!config_file.empty()) {
        std::string text;
        errno = 0;
        if (!read_file(config_file, text))
            throw Error(Exit::usage, "--config " + config_file + ": " + errno_text(errno ? errno : EIO));
        for (auto& t : parse_targets_file(text, config_file)) out.push_back(std::move(t));
    }
    if (out.empty()) out.push_back(single);
    check_unique_services(out);
    return out;
}

// A replay (`--replay FILE`) reads a recording, not a target.
// The always-on ring (cli/ring_keeper.h), the same flags on record, top and export. `record`
// has its own --output; top and export get one here, for the ring's files alone.
static void add_ring_flags(CLI::App* app, RingOptions& ring, bool own_output) {
    const std::string grp = "Always-on ring";
    if (own_output)
        app->add_option("-o,--output", ring.output,
                        "with --ring: the ring's files are OUTPUT-YYYYMMDD-HHMMSS (with several targets "
                        "OUTPUT-SERVICE-YYYYMMDD-HHMMSS), created 0600")
            ->type_name("FILE")
            ->group(grp);
    app->add_option_function<std::string>(
           "--ring",
           [&ring](const std::string& v) {
               const auto span = record::parse_span(v);
               if (!span) throw CLI::ValidationError("--ring", v + ": a span such as 10m, 90s, 1h");
               ring.seconds = *span;
           },
           std::string("keep the last SPAN of ticks in memory (about 1.3 KB a tick for a small server, never more than "
                       "64 MiB: the oldest go first) and write them to OUTPUT-YYYYMMDD-HHMMSS on SIGUSR1 (kill -USR1)") +
               (own_output ? " or, in top, the key w" : ""))
        ->type_name("SPAN")
        ->group(grp);
    app->add_option_function<std::string>(
           "--record-on", [&ring](const std::string&) { ring.on_critical = true; },
           "with --ring: also write them when the verdict is critical (then at most once per --cooldown)")
        ->type_name("critical")
        ->check(CLI::IsMember({"critical"}))
        ->group(grp);
    app->add_option("--cooldown", ring.cooldown_seconds, "with --record-on: seconds between two automatic writes")
        ->check(CLI::Range(1.0, 86400.0))
        ->capture_default_str()
        ->group(grp);
}

// --ring's flags belong together; said before anything attaches.
static void check_ring(const RingOptions& ring, bool own_output) {
    if (ring.on_critical && !ring.enabled())
        throw Error(Exit::usage, "--record-on critical writes the ring: give --ring SPAN too (e.g. --ring 10m)");
    if (!own_output) return;
    if (ring.enabled() && ring.output.empty())
        throw Error(Exit::usage, "--ring keeps the last minutes in memory and writes them to files named after "
                                 "--output: give --output FILE too (e.g. --output /var/tmp/web.qsrec)");
    if (!ring.enabled() && !ring.output.empty())
        throw Error(Exit::usage, "--output names the files of the always-on ring: give --ring SPAN too (e.g. --ring 10m), "
                                 "or use `qscope record --output FILE` to record every tick");
}

static void no_target(const TargetFlags& tf) {
    if (tf.pid_given() || !tf.given.empty()) throw Error(Exit::usage, "--replay reads a recording: give it no target");
}

// A subcommand's errors, one line each, with their exit codes.
static int guarded(const std::function<int()>& run) {
    try {
        return run();
    } catch (const Error& e) {
        std::fprintf(stderr, "qscope: %s\n", e.what());
        return e.exit_code();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qscope: internal error: %s\n", e.what());
        return static_cast<int>(Exit::failure);
    }
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
        "  qscope export --pid 1234 --listen 127.0.0.1:9464  serve Prometheus /metrics\n"
        "  qscope record --pid 1234 -o spike.qsrec       record every tick; then, for any window of it:\n"
        "  qscope snapshot --replay spike.qsrec --from 60 --to 90 --json\n"
        "  qscope diff spike.qsrec@0..60 spike.qsrec@60..90   what changed, stage by stage\n\n"
        "A PID names one process for its life. To follow a service across restarts, select it by\n"
        "something that outlives its PIDs: --pidfile FILE, --comm NAME, --cmdline REGEX, --port N,\n"
        "--cgroup PATH. `top` and `export` then wait for it, and re-attach when it comes back:\n"
        "  qscope export --port 8080                    whoever listens on 8080, restarts included\n"
        "  qscope export --target web=port:8080 --target db=comm:postgres   two services, one\n"
        "                                               /metrics, series labelled service=web|db\n"
        "  qscope export --config /etc/qscope/targets   the same, one `NAME KIND:VALUE` per line\n",
        "qscope"};
    app.set_version_flag("--version", "qscope " QSCOPE_VERSION);
    app.require_subcommand(0, 1);

    Config cfg;
    TargetFlags tflags;
    std::vector<std::string> target_args;
    std::string config_file;
    SnapshotOptions sopt;
    ExportOptions eopt;
    TopOptions topt;

    auto* top = app.add_subcommand("top", "live terminal dashboard; keys: q quit, p pause, ? help");
    add_target_flags(top, cfg, tflags, true);
    add_common(top, cfg);
    top->add_option("--listen", topt.listen, "also serve Prometheus /metrics on ADDR:PORT (e.g. 127.0.0.1:9464)");
    top->add_flag("--allow-remote", topt.allow_remote, "permit a non-loopback --listen address");
    top->add_option("-n,--iterations", topt.iterations, "draw N frames, then exit (scripts, CI)");
    top->add_flag("--no-color", topt.no_color, "monochrome (also honoured: NO_COLOR=1)");
    top->add_option("--verdict-window", topt.verdict_window_seconds,
                    "seconds the verdict looks back over once the window (since the attach, or `r`) is longer: "
                    "the panels keep the whole window, but a stall or a busy spell long gone must not read as the "
                    "limit now")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 86400.0));
    add_ring_flags(top, topt.ring, true);
    TopReplayOptions tropt;
    top->add_option("--replay", tropt.file,
                    "show a recording (qscope record) instead of a live target, with a time cursor: Space play/pause, "
                    ", . step, c next critical, g go to a time, + - speed")
        ->type_name("FILE")
        ->group("Replay (instead of a target)");
    top->add_option("--at", tropt.at, "with --replay: the tick shown first (seconds since the start, @UNIX or HH:MM:SS UTC)")
        ->type_name("T")
        ->group("Replay (instead of a target)");

    auto* snap = app.add_subcommand("snapshot", "observe for --duration seconds, then print one report (or JSON) and exit");
    add_target_flags(snap, cfg, tflags, false);
    add_common(snap, cfg);
    snap->add_option("-d,--duration", sopt.duration_seconds, "seconds to observe")
        ->check(CLI::Range(0.1, 86400.0))
        ->capture_default_str();
    snap->add_flag("--json", sopt.json, "print the JSON contract (docs/json.md) instead of a report");
    SnapshotReplayOptions ropt;
    const std::string tgrp = "Replay (instead of a target)";
    snap->add_option("--replay", ropt.file, "print the window of a recording (qscope record) instead of observing")
        ->type_name("FILE")
        ->group(tgrp);
    const std::string time_help = ": seconds since the recording's start (12.5), @UNIX seconds or a UTC HH:MM:SS";
    snap->add_option("--from", ropt.from, "with --replay: the window's start" + time_help)->type_name("T")->group(tgrp);
    snap->add_option("--to", ropt.to, "with --replay: the window's end (default: the last tick)" + time_help)
        ->type_name("T")
        ->group(tgrp);

    RecordOptions recopt;
    auto* rec = app.add_subcommand(
        "record", "write every tick's snapshot to a file (compressed; a cut or killed file replays up to its last "
                  "whole tick) for `snapshot --replay` (docs/recording.md)");
    add_target_flags(rec, cfg, tflags, false);
    add_common(rec, cfg);
    rec->add_option("-o,--output", recopt.ring.output, "the recording's file (created 0600, replaced if it exists)")
        ->type_name("FILE")
        ->required();
    rec->add_option("-d,--duration", recopt.duration_seconds, "seconds to record (default: until Ctrl-C or the "
                                                              "target exits)")
        ->check(CLI::Range(0.0, 31.0 * 86400));
    add_ring_flags(rec, recopt.ring, false);

    auto* exp = app.add_subcommand("export", "serve Prometheus /metrics until interrupted");
    add_target_flags(exp, cfg, tflags, true);
    exp->add_option("--target", target_args,
                    "NAME=KIND:VALUE, repeatable: several services on one /metrics, each series labelled "
                    "service=NAME (KIND: pid, pidfile, comm, cmdline, port, cgroup; e.g. web=port:8080)")
        ->type_name("NAME=SELECTOR")
        ->group("Target (one of)");
    exp->add_option("--config", config_file,
                    "FILE listing targets, one per line: NAME KIND:VALUE (e.g. `web port:8080`); '#' comments")
        ->type_name("FILE")
        ->group("Target (one of)");
    add_common(exp, cfg);
    exp->add_option("--listen", eopt.listen, "ADDR:PORT to serve /metrics on")->capture_default_str();
    exp->add_flag("--allow-remote", eopt.allow_remote, "permit a non-loopback --listen address (prints a warning)");
    exp->add_option("--verdict-window", eopt.verdict_window_seconds,
                    "seconds the verdict (qscope_verdict) looks back over; the exporter's counters run from the "
                    "attach, and a stall or a busy hour long gone must not read as the limit now")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 86400.0));
    add_ring_flags(exp, eopt.ring, true);

    DiffOptions dopt;
    auto* diff = app.add_subcommand(
        "diff", "compare two windows stage by stage: the verdict, the door, requests, downstream peers, thread "
                "groups' blocked-by and carriers, A → B (counters per second of each window)");
    diff->add_option("A", dopt.a,
                     "the window before: a JSON snapshot (snapshot --json > before.json), a recording, or "
                     "RECORDING@FROM..TO (times as --from/--to take them; either may be left out: spike.qsrec@..60)")
        ->required();
    diff->add_option("B", dopt.b, "the window after, the same kinds")->required();
    diff->footer(
        "  qscope snapshot --pid 1234 --duration 30 --json > before.json   # before the deploy\n"
        "  qscope snapshot --pid 1234 --duration 30 --json > after.json\n"
        "  qscope diff before.json after.json\n"
        "  qscope diff spike.qsrec@0..60 spike.qsrec@60..90                # calm minute, then the spike\n");

    auto* check = app.add_subcommand(
        "check", "report what qscope can observe on this kernel: each probe family's hooks and how they attach, "
                 "privileges, BTF, cgroup v2, lockdown; exit 0 when a run would be useful (4: privileges, 5: kernel)");

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

    if (*check) {
        try {
            return run_check();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "qscope: check: %s\n", e.what());
            return static_cast<int>(Exit::failure);
        }
    }
    if (*diff) return guarded([&] { return run_diff(dopt); });
    if (!cfg.want_requests && !cfg.want_threads) {
        std::fprintf(stderr, "qscope: --no-requests and --no-threads together leave nothing to observe: drop one\n");
        return static_cast<int>(Exit::usage);
    }
    install_stop_signals();
    if (*snap && !ropt.file.empty()) {
        ropt.json = sopt.json;
        return guarded([&] {
            no_target(tflags);
            return run_snapshot_replay(ropt);
        });
    }
    if (*top && !tropt.file.empty()) {
        tropt.iterations = topt.iterations;
        tropt.no_color = topt.no_color;
        return guarded([&] {
            no_target(tflags);
            return run_top_replay(tropt);
        });
    }
    if ((!ropt.from.empty() || !ropt.to.empty()) && ropt.file.empty()) {
        std::fprintf(stderr, "qscope: --from and --to choose a window of a recording: give --replay FILE\n");
        return static_cast<int>(Exit::usage);
    }
    if (!*snap && !*exp && !*top && !*rec) {
        std::cout << app.help();
        return static_cast<int>(Exit::usage);
    }
    return guarded([&] {
        const NamedTarget target = one_target(cfg, tflags, !target_args.empty() || !config_file.empty());
        if (*exp) eopt.targets = export_targets(target, target_args, config_file);
        topt.target = target;
        sopt.target = target.selector;
        recopt.target = target.selector;
        check_ring(recopt.ring, false);
        check_ring(topt.ring, true);
        check_ring(eopt.ring, true);
        if (*snap) return run_snapshot(cfg, sopt);
        if (*rec) return run_record(cfg, recopt);
        if (*exp) return run_export(cfg, eopt);
        return run_top(cfg, topt);
    });
}
