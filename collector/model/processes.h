// How a process tree is described in one line (report, TUI header).
#pragma once
#include <string>

#include "model/snapshot.h"

namespace qscope {

// "3 processes: master process, 2 worker process"; "" for a single process. Roles in the
// order they first appear (the root's first), each with its count when more than one.
std::string describe_processes(const TargetInfo& t);

}  // namespace qscope
