#include "tui/input.h"

#include <curses.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include "tui/view.h"

namespace qscope::tui {
namespace {

int decode_key(int ch) {
    switch (ch) {
        case KEY_UP: return kKeyUp;
        case KEY_DOWN: return kKeyDown;
        case KEY_LEFT: return kKeyLeft;
        case KEY_RIGHT: return kKeyRight;
        case KEY_PPAGE: return kKeyPgUp;
        case KEY_NPAGE: return kKeyPgDn;
        case KEY_HOME: return kKeyHome;
        case KEY_END: return kKeyEnd;
        case '\t': return kKeyTab;
        case KEY_BTAB: return kKeyBackTab;
        case KEY_ENTER:
        case '\n':
        case '\r': return kKeyEnter;
        case 27: return kKeyEscape;
        case 3: return 'q';  // Ctrl-C when the terminal delivers it as a key
        default: return ch;
    }
}

}  // namespace

// The collector thread writes a byte to the pipe, so a new snapshot is painted at once
// instead of at the next keyboard poll (a 100 ms poll delayed the first frame by ~50 ms).
Input::Input() {
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) wake_[0] = wake_[1] = -1;
}

Input::~Input() {
    for (int fd : wake_)
        if (fd >= 0) ::close(fd);
}

void Input::wake() {
    if (wake_[1] < 0) return;
    const char b = 1;
    (void)!::write(wake_[1], &b, 1);  // a full pipe already means "wake up"
}

void Input::wait(int timeout_ms) {
    // A hung-up terminal stays "readable" forever: stop polling it rather than spin.
    pollfd pf[2] = {{stdin_gone_ ? -1 : STDIN_FILENO, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    (void)::poll(pf, 2, timeout_ms);
    if (pf[0].revents & (POLLHUP | POLLERR | POLLNVAL)) stdin_gone_ = true;
    if (wake_[0] >= 0 && (pf[1].revents & POLLIN)) {
        char drain[64];
        while (::read(wake_[0], drain, sizeof(drain)) > 0) {
        }
    }
}

int Input::next_key() {
    const int ch = getch();
    if (ch == ERR) return kNoKey;
    if (ch == KEY_RESIZE) return kResized;
    return decode_key(ch);
}

}  // namespace qscope::tui
