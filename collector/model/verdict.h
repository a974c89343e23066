// Where the limit lives: ranks the stages of one snapshot and names the first. Pure.
#pragma once
#include "model/snapshot.h"

namespace qscope {

// Fills snap.verdict (and parked_in_runtime) from the rest of the snapshot. Pure.
void compute_verdict(Snapshot& snap);

}  // namespace qscope
