// Which items each panel lists and in what order: the sort keys `s` cycles through and
// the order they give, shared by the panels (what is drawn) and the key bindings (what
// the selected row is).
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "model/snapshot.h"
#include "tui/ui_state.h"

namespace qscope::tui {

// Sort orders a panel can cycle through with `s` (first = default); empty: not sortable.
const std::vector<std::string>& sort_keys(Panel p);
// Item indices of the panel's list (listeners, peers, groups, waits, carrier stalls) in
// display order for the sort key.
std::vector<size_t> sorted_order(const Snapshot& s, Panel p, int sort);
// How many selectable items the panel lists (0 for panels without rows to select).
int panel_items(const Snapshot& s, Panel p);
// A wait's identity across snapshots, for keeping its stack open.
std::string wait_key(const Wait& w);
bool is_jvm(const Snapshot& s);

}  // namespace qscope::tui
