// `qscope diff A B`: two windows (JSON snapshots of docs/json.md, or windows of a recording
// rendered to that JSON) compared stage by stage, the way an operator compares "before the
// deploy" with "now". Pure: JSON in, text out.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace qscope {

struct DiffSide {
    std::string label;            // what the operator named: a file, FILE@FROM..TO
    nlohmann::ordered_json snap;  // the contract JSON of that window
};

// The verdict then and now, the door (listeners), requests, downstream peers, thread groups'
// blocked-by and carriers: "a → b" where they differ, the one value where they agree, "—"
// for what one side does not have. Counters are shown per second of each window, so windows
// of different lengths compare.
std::string render_diff(const DiffSide& a, const DiffSide& b);

}  // namespace qscope
