// A probe family: loads its BPF object for one target, and fills its sections of each
// Snapshot. Sources never render and never see each other's state; the collector calls
// them in order on one thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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

// Work a user asks for once (a key in top, a flag at start) that is too slow for a tick: the
// source that does it starts it on request and shows the result at a later tick.
enum class OnDemand {
    jvm_dump,  // jcmd Thread.dump_to_file: where the parked virtual threads wait
};

// One cause of lost events, as read at one tick: its count since attach, and what it leaves
// incomplete, read after the count ("3 connections not tracked (connection table full ...)").
struct LostCause {
    uint64_t count = 0;
    std::string what;
};

// Events a source could not record since attach for lack of room: a BPF map or ring buffer
// full, per-thread storage unavailable. The BPF side counts each such event once, and every
// source reports its counts here, so Snapshot::lost_events (the sum over sources) means one
// thing, and `partial` names the causes:
//   "sched: 5 events lost since attach: 3 waits map full (...); 2 stack records (...)".
class LostEvents {
public:
    // This tick's reading of every cause (replacing the last tick's); adds the line to
    // snap.partial when any count is non-zero.
    void update(const char* source, const std::vector<LostCause>& causes, Snapshot& snap);
    uint64_t total() const { return total_; }

private:
    uint64_t total_ = 0;
};

class Source {
public:
    virtual ~Source() = default;
    virtual ProbeFamily family() const = 0;
    const char* name() const { return contract_name(family()); }
    // open → configure (rodata, map sizes) → load → attach. Throws qscope::Error naming the
    // program or map, the operation and the errno.
    virtual void start(const Target& target, const Config& cfg) = 0;
    // Its start asks the kernel's BTF which hooks exist (KernelTracepoints): the collector
    // then parses it while the tree loads, on the core that load leaves idle.
    virtual bool asks_kernel_btf() const { return false; }
    // Drain ring buffers, read maps, fill this source's sections of `snap`.
    virtual void collect(Snapshot& snap, const Tick& tick) = 0;
    // Every source has attached: the first window opens now. A source whose counters ran
    // from its own attach (earlier, when the families start side by side) rebases them here,
    // or the first window would count events from before it opened.
    virtual void open_window() {}
    // The first snapshot is out: start what start() left for later (Config::quick_start), on a
    // thread of the source's own. Called once, on the collector thread.
    virtual void after_first_tick() {}
    // Start on-demand work, called on the collector thread just before a collect(). A source
    // that does not do `what` ignores it; one already doing it does not start it twice.
    virtual void request(OnDemand /*what*/) {}
    // Blocks until the on-demand work started so far has finished; true if a result waits
    // for the next collect() to show it.
    virtual bool finish_requests() { return false; }
    // Events this source could not record, since attach (see LostEvents).
    uint64_t lost_events() const { return lost_.total(); }

protected:
    LostEvents lost_;
};

uint64_t monotonic_ns();

}  // namespace qscope
