#include "tui/screen.h"

#include <algorithm>

namespace qscope::tui {

char role_letter(Role r) {
    switch (r) {
        case Role::normal: return ' ';
        case Role::dim: return 'd';
        case Role::ok: return 'o';
        case Role::warn: return 'w';
        case Role::critical: return 'c';
        case Role::header: return 'h';
        case Role::selected: return 's';
    }
    return '?';
}

// Not one cell wide on a terminal: combining marks, zero-width and East Asian wide ranges.
// Conservative on purpose: a '?' is better than a line that overflows.
static bool single_width(char32_t c) {
    if (c < 0x20 || (c >= 0x7f && c < 0xa0)) return false;
    if (c >= 0x300 && c < 0x370) return false;
    if (c >= 0x200b && c <= 0x200f) return false;
    if (c >= 0x2028 && c <= 0x202e) return false;
    if (c >= 0x2060 && c <= 0x206f) return false;
    if (c >= 0x1100 && c <= 0x115f) return false;
    if (c >= 0x2e80 && c <= 0xa4cf) return false;
    if (c >= 0xac00 && c <= 0xd7a3) return false;
    if (c >= 0xd800 && c <= 0xdfff) return false;
    if (c >= 0xf900 && c <= 0xfaff) return false;
    if (c >= 0xfe00 && c <= 0xfe4f) return false;
    if (c >= 0xff00 && c <= 0xff60) return false;
    if (c >= 0xffe0 && c <= 0xffe6) return false;
    if (c >= 0xfff0) return false;  // specials, and everything beyond the BMP (emoji, CJK ext)
    return true;
}

std::u32string to_cells(std::string_view s) {
    std::u32string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char b = static_cast<unsigned char>(s[i]);
        char32_t cp = 0;
        int len = 0;
        if (b < 0x80) {
            cp = b;
            len = 1;
        } else if ((b & 0xe0) == 0xc0) {
            cp = b & 0x1f;
            len = 2;
        } else if ((b & 0xf0) == 0xe0) {
            cp = b & 0x0f;
            len = 3;
        } else if ((b & 0xf8) == 0xf0) {
            cp = b & 0x07;
            len = 4;
        } else {
            out.push_back(U'?');
            ++i;
            continue;
        }
        bool ok = i + len <= s.size();
        for (int k = 1; ok && k < len; ++k) {
            const unsigned char c = static_cast<unsigned char>(s[i + k]);
            if ((c & 0xc0) != 0x80) ok = false;
            else cp = (cp << 6) | (c & 0x3f);
        }
        // Overlong encodings decode to a different length than they claim.
        if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)))
            ok = false;
        if (!ok) {
            out.push_back(U'?');
            ++i;
            continue;
        }
        out.push_back(single_width(cp) ? cp : U'?');
        i += len;
    }
    return out;
}

std::string to_utf8(std::u32string_view cells) {
    std::string out;
    out.reserve(cells.size());
    for (char32_t c : cells) {
        if (c < 0x80) {
            out.push_back(static_cast<char>(c));
        } else if (c < 0x800) {
            out.push_back(static_cast<char>(0xc0 | (c >> 6)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
        } else if (c < 0x10000) {
            out.push_back(static_cast<char>(0xe0 | (c >> 12)));
            out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
        } else {
            out.push_back(static_cast<char>(0xf0 | (c >> 18)));
            out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3f)));
            out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3f)));
            out.push_back(static_cast<char>(0x80 | (c & 0x3f)));
        }
    }
    return out;
}

int cell_width(std::string_view s) { return static_cast<int>(to_cells(s).size()); }

std::string fit(std::string_view s, int width, bool unicode) {
    if (width <= 0) return {};
    std::u32string c = to_cells(s);
    if (static_cast<int>(c.size()) <= width) return to_utf8(c);
    c.resize(width);
    c[width - 1] = unicode ? U'…' : U'~';
    return to_utf8(c);
}

std::string pad(std::string_view s, int width, bool right_align, bool unicode) {
    std::string f = fit(s, width, unicode);
    const int n = width - cell_width(f);
    if (n <= 0) return f;
    return right_align ? std::string(n, ' ') + f : f + std::string(n, ' ');
}

int line_width(const Line& l) {
    int w = 0;
    for (const auto& sp : l) w += cell_width(sp.text);
    return w;
}

Grid::Grid(int width, int height)
    : w_(std::max(width, 0)), h_(std::max(height, 0)),
      cells_(static_cast<size_t>(w_) * h_, U' '), roles_(static_cast<size_t>(w_) * h_, Role::normal) {}

int Grid::put(int x, int y, std::string_view s, Role role, int max_x) {
    if (y < 0 || y >= h_) return x;
    const int limit = max_x < 0 ? w_ : std::min(max_x, w_);
    for (char32_t c : to_cells(s)) {
        if (x >= limit) break;
        if (x >= 0) {
            cells_[idx(x, y)] = c;
            roles_[idx(x, y)] = role;
        }
        ++x;
    }
    return x;
}

int Grid::put(int x, int y, const Line& line, int max_x) {
    for (const auto& sp : line) x = put(x, y, sp.text, sp.role, max_x);
    return x;
}

void Grid::fill(int x, int y, int n, char32_t ch, Role role) {
    if (y < 0 || y >= h_) return;
    for (int i = 0; i < n; ++i, ++x)
        if (x >= 0 && x < w_) {
            cells_[idx(x, y)] = ch;
            roles_[idx(x, y)] = role;
        }
}

void Grid::set_role(int x, int y, int n, Role role) {
    if (y < 0 || y >= h_) return;
    for (int i = 0; i < n; ++i, ++x)
        if (x >= 0 && x < w_) roles_[idx(x, y)] = role;
}

std::string Grid::row(int y) const {
    return to_utf8(std::u32string_view(cells_).substr(static_cast<size_t>(y) * w_, w_));
}

std::vector<std::string> Grid::rows() const {
    std::vector<std::string> out;
    out.reserve(h_);
    for (int y = 0; y < h_; ++y) out.push_back(row(y));
    return out;
}

std::string Grid::to_text(bool roles) const {
    std::string out;
    for (int y = 0; y < h_; ++y) out += row(y) + "\n";
    if (roles) {
        out += "---- roles: ' ' normal, d dim, o ok, w warn, c critical, h header, s selected ----\n";
        for (int y = 0; y < h_; ++y) {
            std::string r(w_, ' ');
            for (int x = 0; x < w_; ++x) r[x] = role_letter(roles_[idx(x, y)]);
            out += r + "\n";
        }
    }
    return out;
}

void put_line(Grid& g, int x, int y, const Line& line, int width, bool unicode) {
    if (width <= 0) return;
    const int end = x + width;
    g.put(x, y, line, end);
    if (line_width(line) > width) g.put(end - 1, y, unicode ? "…" : "~", Role::dim, end);
}

}  // namespace qscope::tui
