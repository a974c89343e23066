#include "cli/ring_keeper.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>

#include "cli/record_file.h"
#include "model/errors.h"

namespace qscope {
namespace {

std::atomic<uint64_t> g_ring_signals{0};
void on_usr1(int) { g_ring_signals.fetch_add(1); }

// spike.qsrec → spike-20261201-205300.qsrec (spike-web-20261201-205300.qsrec for the
// service web): one file per write, named by its time (UTC).
std::string dump_path(const std::string& output, const std::string& service, int64_t unix_ms) {
    const time_t t = static_cast<time_t>(unix_ms / 1000);
    struct tm tm {};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &tm);
    const std::string infix = "-" + (service.empty() ? "" : service + "-") + stamp;
    const size_t slash = output.rfind('/');
    const size_t dot = output.rfind('.');
    const bool ext = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
    return ext ? output.substr(0, dot) + infix + output.substr(dot) : output + infix;
}

// The directory the dumps go to must take files now: an exporter that learns at the first
// spike that it cannot write has kept nothing.
void check_writable(const std::string& output) {
    const size_t slash = output.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : output.substr(0, slash);
    if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        const int err = errno;
        throw Error(Exit::usage, "--output " + output + ": cannot write the ring's files in " + dir + ": " +
                                     errno_text(err));
    }
}

std::string kilobytes(size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f KB", bytes / 1000.0);
    return b;
}

}  // namespace

uint64_t install_ring_signal() {
    struct sigaction sa {};
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, nullptr);
    return g_ring_signals.load();
}

bool ring_signal_since(uint64_t& seen) {
    const uint64_t now = g_ring_signals.load();
    if (now == seen) return false;
    seen = now;
    return true;
}

RingKeeper::RingKeeper(RingOptions opt, std::string selector, double interval_seconds, std::string service)
    : opt_(std::move(opt)), service_(std::move(service)), ring_(opt_.seconds), signals_seen_(g_ring_signals.load()) {
    check_writable(opt_.output);
    header_.selector = std::move(selector);
    header_.interval_seconds = interval_seconds;
}

std::string RingKeeper::keep(const Snapshot& s) {
    std::lock_guard<std::mutex> g(mu_);
    // A followed service's ticks may come from several processes in turn: the header names
    // the newest, whose ticks end the dump.
    if (s.target.pid != header_.pid || header_.qscope_version.empty()) {
        header_ = recording_header(s, header_.selector, header_.interval_seconds);
        ring_.set_header(header_);
    }
    ring_.push(s);
    last_tick_ms_ = s.taken_at_unix_ms;
    if (ring_signal_since(signals_seen_)) return write_locked("SIGUSR1", s.taken_at_unix_ms);
    if (opt_.on_critical && s.verdict.severity == Severity::critical &&
        (!last_auto_ms_ || s.taken_at_unix_ms - last_auto_ms_ >= opt_.cooldown_seconds * 1000)) {
        last_auto_ms_ = s.taken_at_unix_ms;
        return write_locked("the verdict turned critical", s.taken_at_unix_ms);
    }
    return "";
}

std::string RingKeeper::write(const std::string& why) {
    std::lock_guard<std::mutex> g(mu_);
    if (!ring_.ticks()) return why + ": nothing kept yet (the first tick has not come)";
    return write_locked(why, last_tick_ms_);
}

std::string RingKeeper::write_locked(const std::string& why, int64_t at_unix_ms) {
    const std::string path = dump_path(opt_.output, service_, at_unix_ms);
    try {
        write_whole(path, ring_.file());
    } catch (const Error& e) {
        return why + ": could not write the ring: " + e.what();
    }
    return why + ": wrote the last " + std::to_string(ring_.ticks()) + " ticks (" + kilobytes(ring_.bytes()) +
           ") to " + path;
}

}  // namespace qscope
