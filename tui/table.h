// The table-layout engine the panels share: columns with a priority drop out when the
// panel is narrow, the first column takes the width its content needs, a `fill` column
// the rest, and every cell is padded or cut (with an ellipsis) to its column.
#pragma once
#include <string>
#include <vector>

#include "tui/screen.h"

namespace qscope::tui {

struct Cell {
    std::string text;
    Role role = Role::normal;
};
using Row = std::vector<Cell>;

struct Col {
    std::string label, short_label;
    int width = 0;       // minimum (and, but for the first and a fill column, exact) width
    bool right = true;
    int priority = 0;    // lower shows first when space is short
    bool fill = false;   // takes whatever width is left (last column only)
};

// A laid-out table: the label line, then one line per row, in the rows' order.
struct Table {
    Line columns;
    std::vector<Line> rows;
};

// Lays out `rows` (one Cell per Col each) into lines at most `width` cells wide. Labels
// switch to their short form when any shown label would not fit its column.
Table layout_table(const std::vector<Col>& cols, const std::vector<Row>& rows, int width, bool unicode);

}  // namespace qscope::tui
