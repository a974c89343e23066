// An abstract terminal: a fixed grid of single-width cells, each with a semantic colour
// role. The view draws into it; the curses backend paints it; tests print it as text.
// Widgets name roles, never colours (htop CRT.h ColorElements).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace qscope::tui {

enum class Role : uint8_t { normal, dim, ok, warn, critical, header, selected };
constexpr int kRoleCount = 7;
// One letter per role, for the golden files' role layer: ' ' normal, d w c o h s.
char role_letter(Role r);

// A run of text in one role. Text is UTF-8; the view only emits single-width glyphs.
struct Span {
    std::string text;
    Role role = Role::normal;
};
using Line = std::vector<Span>;

// Decodes UTF-8 into code points; anything undecodable, any control character and any
// glyph that is not one terminal cell wide becomes '?', so untrusted text (thread names,
// stack frames, peers) can never move the cursor or overflow a line.
std::u32string to_cells(std::string_view utf8);
std::string to_utf8(std::u32string_view cells);
// Width in cells of already-sanitized text.
int cell_width(std::string_view utf8);
// Fits text into `width` cells: cut with a trailing ellipsis when too long.
std::string fit(std::string_view utf8, int width, bool unicode = true);
// Same, padded with spaces (left-aligned) or right-aligned to exactly `width` cells.
std::string pad(std::string_view utf8, int width, bool right_align = false, bool unicode = true);
int line_width(const Line& l);

class Grid {
public:
    Grid(int width, int height);
    int width() const { return w_; }
    int height() const { return h_; }
    // Writes text from (x, y), clipped at the right edge and at `max_x` (exclusive);
    // returns the x after the last written cell.
    int put(int x, int y, std::string_view utf8, Role role = Role::normal, int max_x = -1);
    int put(int x, int y, const Line& line, int max_x = -1);
    void fill(int x, int y, int n, char32_t ch, Role role);
    void set_role(int x, int y, int n, Role role);
    char32_t at(int x, int y) const { return cells_[idx(x, y)]; }
    Role role_at(int x, int y) const { return roles_[idx(x, y)]; }
    // One string per row, each exactly width() cells.
    std::vector<std::string> rows() const;
    std::string row(int y) const;
    // Rows as text, then (with roles=true) a separator and one row of role letters per row.
    std::string to_text(bool roles = false) const;

private:
    size_t idx(int x, int y) const { return static_cast<size_t>(y) * w_ + x; }
    int w_, h_;
    std::u32string cells_;
    std::vector<Role> roles_;
};

// Draws a line clipped to [x, x+width): a cut line ends in an ellipsis, so truncation is
// visible rather than silent.
void put_line(Grid& g, int x, int y, const Line& line, int width, bool unicode);

}  // namespace qscope::tui
