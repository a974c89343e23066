// Event loops from behaviour: a thread that waits in a poll (the sched family's turns) and
// serves many inbound connections (the sock family's serving threads) is a loop and a
// carrier, whatever the runtime: Node's main thread, nginx workers, Redis. No per-runtime
// configuration.
//
// When it is the limit: saturated (busy >= kLoopSaturated of the window) or stalled (a turn
// >= the stall threshold in the window, or going on now), with requests waiting behind it.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "model/snapshot.h"

namespace qscope {

// Inbound connections a polling thread must have held open at once (since attach) to be a
// loop: more than one, so a thread- or process-per-connection server's workers never
// qualify, though they poll their one connection before reading it (php-fpm's children,
// gunicorn's sync workers) and serve many in turn.
constexpr uint64_t kLoopMinConnections = 2;
// Busy this share of the window or more: saturated.
constexpr double kLoopSaturated = 0.9;

// Joins s.serving into s.carriers.loops, drops a user-space scheduler's carriers and the
// polling threads that serve no inbound connections (JDK socket reads that poll, a PostgreSQL
// latch, timer threads), fills each loop's accept queue from its process's listeners and
// orders them busiest first.
// Idempotent.
void settle_loops(Snapshot& s);

// A loop that waits in io_uring_enter accepts through its ring, with no accept() syscall:
// the accept wait and accepted counts of its listeners are not seen (settle_loops says so in
// `partial`), so no connection limit is read from "nothing accepted".
bool accepts_unseen(const Snapshot& s);

// Busy kLoopSaturated of the window or more, most of it working rather than waiting for a CPU.
bool loop_saturated(const EventLoop& l);
bool loop_stalled(const EventLoop& l, double stall_threshold_seconds);
// The turn going on now is a stall of the loop's own: as long as the threshold outside the run
// queue, as a turn that ended is judged (stalls_runqueue).
bool current_turn_stalled(const EventLoop& l, double stall_threshold_seconds);
// Requests held up behind the loop: unread and in the accept queue, and the ones it has read
// but not answered beyond the one it works on.
uint64_t loop_waiting(const EventLoop& l);

// The verdict's candidate for the busiest loop that is the limit.
struct LoopLimit {
    std::string where;                  // "event loop of node (tid 1234)"
    std::string detail;                 // the sentence, without the door queues
    uint64_t waiting = 0;
};
std::optional<LoopLimit> loop_limit(const Snapshot& s);

// Futex waiters of a thread group that are idle workers of a process whose requests loops
// carry (V8 platform workers, libuv's pool in uv_cond_wait): not a gate. A loop thread
// itself blocked on a futex holds its requests and stays counted.
int idle_futex_waiters(const Snapshot& s, const ThreadGroup& g);

}  // namespace qscope
