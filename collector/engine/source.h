// A probe family: loads its BPF object for one target, and fills its sections of each
// Snapshot. Sources never render and never see each other's state; the collector calls
// them in order on one thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/config.h"
#include "model/snapshot.h"

namespace qscope {

class Target;

struct Tick {
    uint64_t index = 0;
    uint64_t now_ns = 0;           // CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns()
    uint64_t window_start_ns = 0;  // window = [window_start_ns, now_ns]
    bool window_reset = false;     // first tick of a new window: rebase maxima and baselines
    double dt_seconds = 0;         // since the previous tick
};

class Source {
public:
    virtual ~Source() = default;
    virtual const char* name() const = 0;
    // open → configure (rodata, map sizes) → load → attach. Throws qscope::Error naming the
    // program or map, the operation and the errno.
    virtual void start(const Target& target, const Config& cfg) = 0;
    // Drain ring buffers, read maps, fill this source's sections of `snap`.
    virtual void collect(Snapshot& snap, const Tick& tick) = 0;
    // Events this source could not record (ring buffer full, map full), since attach.
    virtual uint64_t lost_events() const { return 0; }
};

uint64_t monotonic_ns();

}  // namespace qscope
