#include "tui/table.h"

#include <algorithm>

namespace qscope::tui {
namespace {

struct ColumnFit {
    std::vector<int> width;
    std::vector<bool> shown;
};

// Drops low-priority columns until the rest fit, gives the first column the natural width
// of its content (capped), and a `fill` column the rest.
ColumnFit fit_columns(const std::vector<Col>& cols, const std::vector<Row>& rows, int width) {
    const int n = static_cast<int>(cols.size());
    ColumnFit f{std::vector<int>(n), std::vector<bool>(n, false)};
    auto& w = f.width;
    auto& shown = f.shown;
    for (int i = 0; i < n; ++i) w[i] = cols[i].width;
    int natural = cols[0].width;
    for (const auto& r : rows) natural = std::max(natural, cell_width(r[0].text));
    natural = std::max(natural, cell_width(cols[0].label));
    std::vector<int> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cols[a].priority < cols[b].priority; });
    int used = 0;
    for (int i : order) {
        const int need = w[i] + (used ? 1 : 0);
        if (used + need > width) continue;
        shown[i] = true;
        used += need;
    }
    if (!shown[0]) {  // too narrow for anything but the name
        shown.assign(n, false);
        shown[0] = true;
        used = w[0] = std::max(width, 0);
    }
    // Give the first column its natural width (up to 40 cells) from what is left.
    const int grow0 = std::clamp(std::min(natural, 40) - w[0], 0, std::max(width - used, 0));
    w[0] += grow0;
    used += grow0;
    for (int i = n - 1; i > 0; --i)
        if (shown[i] && cols[i].fill) {
            w[i] += std::max(width - used, 0);
            break;
        }
    return f;
}

}  // namespace

Table layout_table(const std::vector<Col>& cols, const std::vector<Row>& rows, int width, bool unicode) {
    const int n = static_cast<int>(cols.size());
    const ColumnFit f = fit_columns(cols, rows, width);
    bool short_labels = false;
    for (int i = 0; i < n; ++i)
        if (f.shown[i] && cell_width(cols[i].label) > f.width[i]) short_labels = true;
    auto emit = [&](auto cell_of) {
        Line line;
        bool first = true;
        for (int i = 0; i < n; ++i) {
            if (!f.shown[i]) continue;
            if (!first) line.push_back({" ", Role::normal});
            first = false;
            Cell c = cell_of(i);
            line.push_back({pad(c.text, f.width[i], cols[i].right && !cols[i].fill && i > 0, unicode), c.role});
        }
        return line;
    };
    Table t;
    t.columns = emit([&](int i) { return Cell{short_labels ? cols[i].short_label : cols[i].label, Role::dim}; });
    for (const auto& r : rows) t.rows.push_back(emit([&](int i) { return r[i]; }));
    return t;
}

}  // namespace qscope::tui
