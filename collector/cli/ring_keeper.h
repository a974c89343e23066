// The always-on ring of `record`, `top` and `export` (docs/recording.md "The ring"): the
// last --ring SPAN of ticks kept in memory, written whole to a file named by its time on
// SIGUSR1, on `w` in top, or when the verdict turns critical (--record-on critical), so the
// minutes before the spike are kept by the time somebody looks.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

#include "model/snapshot.h"
#include "record/ring.h"

namespace qscope {

struct RingOptions {
    double seconds = 0;             // 0: no ring
    std::string output;             // dumps are OUTPUT-YYYYMMDD-HHMMSS (the extension kept)
    bool on_critical = false;       // also write when the verdict is critical…
    double cooldown_seconds = 300;  // …at most once per cooldown
    bool enabled() const { return seconds > 0; }
};

// SIGUSR1 asks every ring of the process to write (one per target of `export --target`):
// each compares a counter the handler bumps against the value it last saw. `top` and
// `export` install it with or without a ring: SIGUSR1's default action would end an
// exporter that an operator meant to ask for a dump. Returns the count so far, to compare
// against with ring_signal_since().
uint64_t install_ring_signal();
// True when SIGUSR1 arrived since `seen` was last brought up to date (it is, here).
bool ring_signal_since(uint64_t& seen);
// What `top` and `export` say to a SIGUSR1 when they keep no ring.
inline constexpr const char* kNoRingToWrite =
    "SIGUSR1: no ring to write: start qscope with --ring SPAN --output FILE to keep the last minutes";

// Thread-safe: the collector's thread keeps ticks while top's keyboard asks for a write.
class RingKeeper {
public:
    // `selector` is the target as given ("port:8080"); `service`, when several targets share
    // the process, goes into the dump's name (OUTPUT-SERVICE-YYYYMMDD-HHMMSS). Throws Error
    // when OUTPUT's directory cannot take files, before anything is attached.
    RingKeeper(RingOptions opt, std::string selector, double interval_seconds, std::string service = "");

    // Keeps `s`, then writes the ring when SIGUSR1 arrived since the last tick or the verdict
    // is critical (with --record-on, once per cooldown). Returns the line saying what was
    // written (or why it could not be), empty when nothing was.
    std::string keep(const Snapshot& s);
    // Writes the ring now (top's `w`); the same kind of line.
    std::string write(const std::string& why);

    const RingOptions& options() const { return opt_; }

private:
    std::string write_locked(const std::string& why, int64_t at_unix_ms);

    RingOptions opt_;
    std::string service_;
    std::mutex mu_;
    record::Ring ring_;
    record::RecordHeader header_;
    uint64_t signals_seen_ = 0;
    int64_t last_tick_ms_ = 0;
    int64_t last_auto_ms_ = 0;  // the last write --record-on made
};

}  // namespace qscope
