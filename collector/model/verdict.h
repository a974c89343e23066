// Where the limit lives: ranks the stages of one snapshot and names the first. Pure.
#pragma once
#include "model/snapshot.h"

namespace qscope {

// How much of the target qscope has seen move. At the first tick (the instant of attach) the
// door's queues are facts, but which threads carry requests is not known yet: an event loop
// is told from its turns, a pool's idle workers from the requests its busy ones hold. A
// verdict inside would guess; Node's first frame named an idle V8 worker parked in
// uv_cond_wait the gate while its event loop was the limit.
enum class Seen { first_look, window };

// Fills snap.verdict (and parked_in_runtime) from the rest of the snapshot. Pure.
void compute_verdict(Snapshot& snap, Seen seen = Seen::window);

// "25 requests dropped unanswered at their connections' close" (Requests::dropped): the
// verdict's clause and the report's line.
std::string dropped_text(uint64_t dropped);

}  // namespace qscope
