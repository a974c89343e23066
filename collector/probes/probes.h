// The probe families qscope ships, and which of them a configuration asks for. The engine
// knows only the Source interface; this is the one place that names the families.
#pragma once
#include <memory>
#include <vector>

#include "engine/source.h"
#include "model/config.h"

namespace qscope {

// want_requests: sock; want_threads: sched and jvm (in this order: the collector runs them so).
std::vector<std::unique_ptr<Source>> default_sources(const Config& cfg);

}  // namespace qscope
