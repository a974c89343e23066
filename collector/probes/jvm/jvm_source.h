// Carrier threads (JVM virtual-thread carriers, or --carriers REGEX for other runtimes) and
// the on-demand JVM enrichments. Implementation: jvm_source.cpp.
#pragma once
#include <memory>

#include "engine/source.h"

namespace qscope {

std::unique_ptr<Source> make_jvm_source();

}  // namespace qscope
