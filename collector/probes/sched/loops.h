// Event-loop turns, the user-space half of the poll hooks in bpf/sched.bpf.c (types in
// bpf/qs_loop.h): reads the per-thread turn aggregates each tick, takes window deltas, turns
// stall records and on-CPU samples into LoopStalls, and fills Snapshot::carriers.loops with
// every polling thread. model/loops.h then keeps the ones that serve many connections.
#pragma once
#include <linux/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "qs_loop.h"
}
#include "engine/bpf_util.h"
#include "model/histogram.h"
#include "model/snapshot.h"

namespace qscope {

// The poll hooks of bpf/sched.bpf.c, one pair of syscall tracepoints each (qs_loop_enter for
// every entry, qs_loop_exit_<name>); `qscope check` lists the same.
inline constexpr const char* kLoopPolls[] = {"epoll_wait", "epoll_pwait", "epoll_pwait2", "poll",
                                             "ppoll",      "select",      "pselect6",     "io_uring_enter"};

static_assert(sizeof(qs_loop_val) == 80 + 16 + QS_COMM_LEN + 4 * QS_WHIST_SLOTS, "qs_loop_val layout (bpf/qs_loop.h)");
static_assert(sizeof(qs_loop_stall) == 16 + 48 + QS_COMM_LEN, "qs_loop_stall layout (bpf/qs_loop.h)");
static_assert(sizeof(qs_loop_sample) == 32 + sizeof(qs_ustack), "qs_loop_sample layout (bpf/qs_loop.h)");

// One polling thread's cumulative figures, as of one read, and its window.
struct LoopWindow {
    uint64_t turns = 0, busy_ns = 0, stalls = 0, stalls_runqueue = 0, runqueue_ns = 0;
    std::vector<uint32_t> slots;
};

// Utilization over [window_start, now] of a thread whose completed turns add up to
// busy_ns_delta and whose current turn (0: none) began at turn_start. Clamped to [0, 1].
double loop_utilization(uint64_t busy_ns_delta, uint64_t turn_start, uint64_t window_start_ns, uint64_t now_ns);

// What the tracker needs from its source: symbols and the stacks of waits.
struct LoopContext {
    // User frames of a copied stack of process tgid (empty when stacks are off).
    std::function<std::vector<std::string>(int tgid, const qs_ustack&)> unwind;
    // The captured stack and the resource name of a wait key (sched's wait rows).
    std::function<std::pair<std::vector<std::string>, std::string>(const qs_wait_key&)> wait_site;
};

// Live state of a thread from the task iterator, as the loop view needs it.
struct LoopThreadNow {
    bool alive = false;
    CarrierState state = CarrierState::idle;
    std::string blocked_in;
};

class LoopTracker {
public:
    // After load: the maps and the sampler program of the sched object. Attaches one
    // cpu-clock perf event per CPU for on-CPU samples (a warning, not an error, when the
    // kernel refuses: stalls then name their blocks only).
    // The stall sampler's attach (or why it is off) goes to `attach`.
    void start(bpf_object* obj, __u64* epoch, double stall_seconds, std::vector<std::string>& warnings,
               std::vector<ProbeAttach>& attach);
    // Drains stall records and samples: call before reading the maps.
    void drain(const LoopContext& ctx);
    void collect(Snapshot& snap, uint64_t now_ns, uint64_t window_start_ns, bool window_reset,
                 const std::map<int, LoopThreadNow>& threads, const LoopContext& ctx);

private:
    static int on_record(void* self, void* data, size_t size);
    void on_stall(const qs_loop_stall& e);
    void on_sample(const qs_loop_sample& e);

    int loops_fd_ = -1, wmax_fd_ = -1;
    __u64* epoch_ = nullptr;
    double stall_seconds_ = 0.02;
    std::vector<Link> perf_links_;
    RingBuffer rb_;
    const LoopContext* ctx_ = nullptr;  // during drain()
    MapReader<__u32, qs_loop_val, 64> reader_;
    std::map<__u32, LoopWindow> base_;
    struct Sample {
        uint64_t turn_start = 0;
        std::vector<std::string> frames;
    };
    std::map<__u32, Sample> samples_;                  // latest per tid
    std::map<__u32, std::vector<LoopStall>> stalls_;   // this window's, longest first, capped
};

}  // namespace qscope
