// The subcommands. main() only parses flags and calls one of these.
#pragma once
#include <atomic>
#include <string>
#include <vector>

#include "cli/ring_keeper.h"
#include "cli/targets.h"
#include "model/config.h"

namespace qscope {

struct SnapshotOptions {
    Selector target;             // resolved once: a snapshot has one window on one process
    double duration_seconds = 5;
    bool json = false;
};

struct ExportOptions {
    std::vector<NamedTarget> targets;  // at least one; a lone --pid has no service name
    std::string listen = "127.0.0.1:9464";
    bool allow_remote = false;   // a non-loopback bind must be asked for explicitly
    double verdict_window_seconds = 60;  // the verdict's window (record/recent.h)
    RingOptions ring;            // --ring: each target's last minutes, written on SIGUSR1
};

struct TopOptions {
    NamedTarget target;          // --pid or a selector: a selector is followed across restarts
    std::string listen;          // empty: no /metrics
    bool allow_remote = false;
    int iterations = 0;          // 0: until 'q'; N: draw N frames and exit (CI, scripts)
    bool no_color = false;
    double verdict_window_seconds = 60;  // the verdict's window once the window is longer (record/recent.h)
    RingOptions ring;            // --ring: the last minutes, written on `w` or SIGUSR1
};

struct RecordOptions {
    Selector target;             // resolved once: a recording is of one process
    double duration_seconds = 0; // 0: until interrupted (or the target exits)
    // --ring: keep the last ring.seconds in memory instead of streaming every tick to the
    // file, and write them to files named after --output when asked (cli/ring_keeper.h).
    RingOptions ring;
    const std::string& output() const { return ring.output; }  // -o: the file, or the dumps' name
};

struct SnapshotReplayOptions {
    std::string file;            // a recording (docs/recording.md)
    std::string from, to;        // empty: the recording's start, its last tick
    bool json = false;
};

struct DiffOptions {
    std::string a, b;            // JSON snapshots, recordings, or RECORDING@FROM..TO
};

struct TopReplayOptions {
    std::string file;            // a recording
    std::string at;              // the tick shown first (a time); empty: the first
    int iterations = 0;          // 0: until 'q'; N: paint N frames and exit
    bool no_color = false;
};

int run_snapshot(const Config& cfg, const SnapshotOptions& opt);  // collector/app_snapshot.cpp
int run_record(const Config& cfg, const RecordOptions& opt);      // cli/record.cpp
int run_snapshot_replay(const SnapshotReplayOptions& opt);        // cli/record.cpp
int run_top_replay(const TopReplayOptions& opt);                  // cli/record.cpp
int run_diff(const DiffOptions& opt);                             // cli/record.cpp
int run_export(const Config& cfg, const ExportOptions& opt);      // collector/cli/exporter.cpp
int run_top(const Config& cfg, const TopOptions& opt);            // cli/top.cpp
// What qscope can observe on this kernel, printed for an operator; 0 when a run would be
// useful (cli/check.cpp).
int run_check();

// The PID a selector names now (--pid: that PID, checked at attach). Throws Error when
// nothing or several unrelated processes match, or the selector cannot be answered.
int resolve_once(const Selector& sel);
// Like resolve_once, but waits (saying so once on stderr) while nothing matches; 0 when a
// stop signal ends the wait.
int wait_for_match(const Selector& sel);

// SIGINT/SIGTERM/SIGHUP set this; long-running loops poll it.
extern std::atomic<bool> g_stop_requested;
void install_stop_signals();
// Sleeps up to `seconds`, returning early (true) as soon as a stop signal arrives: a plain
// sleep resumes after the signal, and Ctrl-C then waited out the rest of the interval.
bool sleep_unless_stopped(double seconds);

}  // namespace qscope
