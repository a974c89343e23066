// The curses session of `qscope top`: it paints a Grid with the colour roles and keeps the
// terminal sane on every way out (return, exception, fatal signal). It knows nothing of
// the collector or of keys: tui/dashboard.h drives it, tui/input.h reads the keyboard.
// curses.h stays out of this header: its macros (timeout, clear, erase...) would leak
// into every includer.
#pragma once
#include <memory>

#include "tui/screen.h"

namespace qscope::tui {

// Takes the locale from the environment (LANG, LC_*) and says whether it is UTF-8: if not,
// the view draws ASCII glyphs only.
bool utf8_locale();

// The size for a frame printed as text: explicit COLUMNS/LINES first, then whatever
// terminal stderr or stdin is attached to, else 120x40.
void text_size(int& width, int& height);

class Terminal {
public:
    // Colour unless `colour` is false or NO_COLOR is set (no-color.org). Throws
    // Error(usage) when the terminal cannot be initialised (TERM unset or unknown).
    explicit Terminal(bool colour);
    ~Terminal();
    Terminal(const Terminal&) = delete;
    Terminal& operator=(const Terminal&) = delete;

    // Gives the terminal back (the screen as it was, the cursor, cooked mode) before the
    // object goes: qscope's exit then waits on the kernel detaching probes, not the user.
    // Nothing may be painted after it.
    void leave();

    bool unicode() const { return unicode_; }
    void size(int& width, int& height) const;
    void paint(const Grid& g);

private:
    struct Session;
    std::unique_ptr<Session> session_;
    bool unicode_ = false;
};

}  // namespace qscope::tui
