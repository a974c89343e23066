// The keyboard side of `qscope top`: curses key codes become the view's Key codes, and
// the dashboard waits here for its next thing to do: a key, a wake-up from the collector
// thread or a signal. Needs a live tui::Terminal (curses reads the keys).
#pragma once

namespace qscope::tui {

// What next_key() returns besides the view's keys (view.h Key, plain characters).
constexpr int kNoKey = -1;
constexpr int kResized = -2;  // the terminal changed size: repaint

class Input {
public:
    Input();  // opens the wake pipe
    ~Input();
    Input(const Input&) = delete;
    Input& operator=(const Input&) = delete;

    // Makes the current or next wait() return at once. Any thread; async-signal-safe.
    void wake();

    // Waits up to `timeout_ms` for a key, a wake() or a signal.
    void wait(int timeout_ms);
    // The next key typed, as the view's Key code; kNoKey when there is none left. Curses
    // may have read several since the last call.
    int next_key();

private:
    int wake_[2] = {-1, -1};
    bool stdin_gone_ = false;
};

}  // namespace qscope::tui
