// Snapshot → the JSON contract of docs/json.md. A pure renderer, peer of the text report,
// the TUI and the exporter.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "model/snapshot.h"

namespace qscope {

nlohmann::ordered_json to_json(const Snapshot& s);
std::string render_json(const Snapshot& s, int indent = 2);
// Readable multi-line report for `snapshot` without --json.
std::string render_report(const Snapshot& s);

}  // namespace qscope
