// `qscope record` and `qscope snapshot --replay`: the flight recorder (docs/recording.md).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "cli/app.h"
#include "cli/record_file.h"
#include "cli/ring_keeper.h"
#include "engine/collector.h"
#include "model/errors.h"
#include "output/diff.h"
#include "output/json_writer.h"
#include "probes/probes.h"
#include "record/format.h"
#include "record/window.h"
#include "sys/proc_stat.h"
#include "tui/dashboard.h"

namespace qscope {
namespace {

int64_t unix_ms_now() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

}  // namespace

int run_record(const Config& given, const RecordOptions& opt) {
    Config cfg = given;
    cfg.pid = resolve_once(opt.target);
    const bool ring = opt.ring.enabled();
    // Before the attach, so a bad path fails at once: the streamed file, or the ring's
    // directory (RingKeeper checks it).
    std::optional<RecordFile> out;
    std::optional<RingKeeper> kept;
    if (ring) {
        kept.emplace(opt.ring, opt.target.text(), cfg.interval_seconds);
        install_ring_signal();
    } else {
        out.emplace(opt.output());
    }
    Collector col(cfg);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    const int64_t started = unix_ms_now();
    col.start();
    std::shared_ptr<const Snapshot> snap = col.tick();

    record::RecordHeader h = recording_header(*snap, opt.target.text(), cfg.interval_seconds);
    if (!h.started_unix_ms) h.started_unix_ms = started;
    if (out) out->write(record::file_header() + record::header_frame(h));

    uint64_t ticks = 0;
    auto keep = [&] {
        ++ticks;
        if (out) return out->write(record::tick_frame(*snap));
        if (const std::string said = kept->keep(*snap); !said.empty()) std::fprintf(stderr, "qscope: %s\n", said.c_str());
    };
    keep();
    if (ring)
        std::fprintf(stderr,
                     "qscope: keeping the last %.0fs of PID %d (%s) in memory; SIGUSR1%s writes them to %s, named by "
                     "the time\n",
                     opt.ring.seconds, cfg.pid, h.comm.c_str(), opt.ring.on_critical ? " or a critical verdict" : "",
                     opt.ring.output.c_str());
    else {
        char span[48] = ", until interrupted";
        if (opt.duration_seconds > 0) std::snprintf(span, sizeof span, " for %gs", opt.duration_seconds);
        std::fprintf(stderr, "qscope: recording PID %d (%s) to %s every %gs%s\n", cfg.pid, h.comm.c_str(),
                     opt.output().c_str(), cfg.interval_seconds, span);
    }

    const uint64_t start = monotonic_ns();
    const uint64_t end = opt.duration_seconds > 0 ? start + static_cast<uint64_t>(opt.duration_seconds * 1e9) : 0;
    while (!g_stop_requested && col.target_alive()) {
        const uint64_t now = monotonic_ns();
        if (end && now >= end) break;
        uint64_t step = static_cast<uint64_t>(cfg.interval_seconds * 1e9);
        if (end) step = std::min(step, end - now);
        sleep_unless_stopped(step / 1e9);
        snap = col.tick();
        keep();
    }
    if (out)
        std::fprintf(stderr, "qscope: wrote %llu ticks (%llu bytes) to %s\n", static_cast<unsigned long long>(ticks),
                     static_cast<unsigned long long>(out->written()), opt.output().c_str());
    if (snap->target.exited) {
        std::fprintf(stderr, "qscope: %s\n", snap->target.exit_note.c_str());
        return static_cast<int>(Exit::target_exited);
    }
    return 0;
}

namespace {

// A recording's bytes, read from `path` (already read: a diff operand looked at them first).
record::Recording parse_recording(const std::string& path, const std::string& bytes) {
    record::Recording rec = record::parse(bytes);
    // What is whole is replayed; one line says where the rest stops being readable.
    std::string where;
    if (rec.stopped)
        where = "readable up to byte " + std::to_string(rec.readable_bytes) + " of " + std::to_string(bytes.size()) +
                " (" + std::to_string(rec.ticks.size()) + " ticks), then " + *rec.stopped;
    if (rec.ticks.empty())
        throw Error(Exit::usage, path + ": no whole tick to replay" + (where.empty() ? "" : ": " + where));
    if (!where.empty()) std::fprintf(stderr, "qscope: %s: %s\n", path.c_str(), where.c_str());
    return rec;
}

}  // namespace

record::Recording read_recording(const std::string& path) {
    std::string bytes;
    errno = 0;
    if (!read_file(path, bytes)) throw Error(Exit::usage, "--replay " + path + ": " + errno_text(errno ? errno : EIO));
    return parse_recording(path, bytes);
}

namespace {

// The tick a window or a cursor at `t` starts from: the last at or before it (the first when
// `t` precedes them all).
size_t tick_at(const std::vector<Snapshot>& ticks, int64_t t) {
    size_t at = 0;
    for (size_t i = 0; i < ticks.size(); ++i)
        if (ticks[i].taken_at_unix_ms <= t) at = i;
    return at;
}

// "spike.qsrec on web-1 from 20:31:05 UTC" (the header shows the target's pid and comm)
std::string recording_of(const std::string& path, const record::RecordHeader& h) {
    std::string of = path;
    if (!h.hostname.empty()) of += " on " + h.hostname;
    const time_t t = static_cast<time_t>(h.started_unix_ms / 1000);
    struct tm tm {};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, " from %H:%M:%S UTC", &tm);
    return of + buf;
}

}  // namespace

int run_top_replay(const TopReplayOptions& opt) {
    const record::Recording rec = read_recording(opt.file);
    const int64_t start = rec.header.started_unix_ms;
    size_t first = 0;
    if (!opt.at.empty()) {
        const auto t = record::parse_time(opt.at, start);
        if (!t) throw Error(Exit::usage, "--at " + opt.at + ": not a time (12.5, @UNIX or HH:MM:SS UTC)");
        first = tick_at(rec.ticks, *t);
    }
    if (!isatty(STDOUT_FILENO)) throw Error(Exit::usage, "top --replay: stdout is not a terminal; use `qscope snapshot --replay` for text");
    tui::Dashboard dash(rec.header.pid, rec.header.interval_seconds > 0 ? rec.header.interval_seconds : 1, !opt.no_color);
    tui::ReplaySource src;
    src.ticks = &rec.ticks;
    src.of = recording_of(opt.file, rec.header);
    src.start = first;
    src.seek_time = [&](const std::string& text) -> std::optional<size_t> {
        const auto t = record::parse_time(text, start);
        if (!t || *t < rec.ticks.front().taken_at_unix_ms - 1000 || *t > rec.ticks.back().taken_at_unix_ms + 1000)
            return std::nullopt;
        return tick_at(rec.ticks, *t);
    };
    dash.replay(src, {.reset_window = [] {}, .request_jvm_dump = [] {}, .stop_requested = [] { return g_stop_requested.load(); }},
                opt.iterations);
    return 0;
}

namespace {

// The window [from, to] of a recording, times as an operator types them (record::parse_time);
// `what` names the recording in errors.
Snapshot replay_window(const record::Recording& rec, const std::string& from, const std::string& to,
                       const std::string& what) {
    const int64_t start = rec.header.started_unix_ms;
    record::WindowBounds b;
    auto bound = [&](const std::string& flag, const std::string& text) -> std::optional<int64_t> {
        if (text.empty()) return std::nullopt;
        auto t = record::parse_time(text, start);
        if (!t)
            throw Error(Exit::usage, flag + " " + text +
                                         ": a time is seconds since the recording's start (12.5), @UNIX seconds "
                                         "(@1764619200.5) or a UTC time of day (20:31:05)");
        return t;
    };
    b.from_unix_ms = bound("from", from);
    b.to_unix_ms = bound("to", to);
    record::WindowResult w = record::window(rec.ticks, b);
    if (!w.snap) throw Error(Exit::usage, what + ": " + w.error);
    return std::move(*w.snap);
}

// A diff operand: a JSON snapshot (`snapshot --json` output), a recording (its whole span),
// or RECORDING@FROM..TO (a window of it; either end may be left out).
DiffSide diff_side(const std::string& arg) {
    std::string path = arg, from, to;
    bool window = false;
    if (access(arg.c_str(), F_OK) != 0)
        for (size_t at = arg.find('@'); at != std::string::npos; at = arg.find('@', at + 1))
            if (const size_t dots = arg.find("..", at); dots != std::string::npos) {
                path = arg.substr(0, at);
                from = arg.substr(at + 1, dots - at - 1);
                to = arg.substr(dots + 2);
                window = true;
                break;
            }
    std::string bytes;
    errno = 0;
    if (!read_file(path, bytes)) throw Error(Exit::usage, "diff: " + path + ": " + errno_text(errno ? errno : EIO));
    const size_t first = bytes.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && bytes[first] == '{') {
        if (window) throw Error(Exit::usage, "diff: " + path + " is a JSON snapshot: @FROM..TO chooses a window of a recording");
        try {
            return {arg, nlohmann::ordered_json::parse(bytes)};
        } catch (const std::exception& e) {
            throw Error(Exit::usage, "diff: " + path + ": not a qscope JSON snapshot: " + e.what());
        }
    }
    const record::Recording rec = parse_recording(path, bytes);
    return {arg, to_json(replay_window(rec, from, to, "diff: " + arg))};
}

}  // namespace

int run_snapshot_replay(const SnapshotReplayOptions& opt) {
    const record::Recording rec = read_recording(opt.file);
    const Snapshot w = replay_window(rec, opt.from, opt.to, "--replay " + opt.file);
    if (opt.json)
        std::cout << render_json(w) << std::endl;
    else
        std::cout << render_report(w);
    return 0;
}

int run_diff(const DiffOptions& opt) {
    const DiffSide a = diff_side(opt.a), b = diff_side(opt.b);
    std::cout << render_diff(a, b);
    return 0;
}

}  // namespace qscope
