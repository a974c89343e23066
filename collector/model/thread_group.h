// How threads are grouped in every view: by name, without the pool index.
#pragma once
#include <string>

namespace qscope {

// "http-nio-8080-exec-17" → "http-nio-8080-exec"; "ForkJoinPool-1-worker-3" →
// "ForkJoinPool-1-worker"; digits inside the name stay.
std::string thread_group_name(const std::string& comm);

}  // namespace qscope
