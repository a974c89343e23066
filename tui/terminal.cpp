#include "tui/terminal.h"

#include <curses.h>
#include <langinfo.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <atomic>
#include <clocale>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "model/errors.h"

namespace qscope::tui {
namespace {

// Set while curses owns the terminal, for the fatal-signal handler.
std::atomic<bool> g_curses_active{false};

void on_fatal_signal(int sig) {
    // endwin() is not async-signal-safe, but the process is about to die either way and a
    // terminal left in raw mode without echo is worse (htop and btop do the same).
    if (g_curses_active.exchange(false)) endwin();
    signal(sig, SIG_DFL);
    raise(sig);
}

void install_fatal_handlers() {
    struct sigaction sa {};
    sa.sa_handler = on_fatal_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    for (int sig : {SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
}

bool no_color_env() {
    const char* nc = std::getenv("NO_COLOR");  // no-color.org: any non-empty value
    return nc && *nc;
}

}  // namespace

bool utf8_locale() {
    std::setlocale(LC_ALL, "");
    return std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
}

void text_size(int& w, int& h) {
    w = 120;
    h = 40;
    const char* c = std::getenv("COLUMNS");
    const char* l = std::getenv("LINES");
    if (c && l && std::atoi(c) > 0 && std::atoi(l) > 0) {
        w = std::atoi(c);
        h = std::atoi(l);
        return;
    }
    winsize ws{};
    for (int fd : {STDERR_FILENO, STDIN_FILENO})
        if (ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
            w = ws.ws_col;
            h = ws.ws_row;
            return;
        }
}

struct Terminal::Session {
    SCREEN* term = nullptr;
    attr_t attr[kRoleCount];
};

Terminal::Terminal(bool colour) : session_(std::make_unique<Session>()) {
    unicode_ = utf8_locale();
    session_->term = newterm(nullptr, stdout, stdin);
    if (!session_->term) {
        const char* t = std::getenv("TERM");
        throw Error(Exit::usage, std::string("top: cannot initialise the terminal (TERM=") + (t ? t : "unset") +
                                     "); use `qscope snapshot` or `top --iterations N` with output redirected");
    }
    set_term(session_->term);
    g_curses_active = true;
    install_fatal_handlers();
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    timeout(0);  // getch() never blocks: tui/input.cpp waits in poll() on the keyboard and the collector
    attr_t* attr = session_->attr;
    for (int i = 0; i < kRoleCount; ++i) attr[i] = A_NORMAL;
    if (colour && !no_color_env() && has_colors()) {
        start_color();
        use_default_colors();
        init_pair(1, COLOR_GREEN, -1);
        init_pair(2, COLOR_YELLOW, -1);
        init_pair(3, COLOR_RED, -1);
        init_pair(4, COLOR_CYAN, -1);
        attr[int(Role::dim)] = A_DIM;
        attr[int(Role::ok)] = COLOR_PAIR(1);
        attr[int(Role::warn)] = COLOR_PAIR(2) | A_BOLD;
        attr[int(Role::critical)] = COLOR_PAIR(3) | A_BOLD;
        attr[int(Role::header)] = COLOR_PAIR(4) | A_BOLD;
        attr[int(Role::selected)] = A_REVERSE;
    } else {
        // Monochrome: bold and reverse carry the severity.
        attr[int(Role::warn)] = A_BOLD;
        attr[int(Role::critical)] = A_BOLD | A_REVERSE;
        attr[int(Role::header)] = A_BOLD;
        attr[int(Role::selected)] = A_REVERSE;
    }
}

Terminal::~Terminal() { leave(); }

void Terminal::leave() {
    if (g_curses_active.exchange(false)) endwin();
    if (session_->term) delscreen(std::exchange(session_->term, nullptr));
}

void Terminal::size(int& w, int& h) const {
    if (session_->term) getmaxyx(stdscr, h, w);
    else w = h = 0;
}

void Terminal::paint(const Grid& g) {
    if (!session_->term) return;  // left: the shell owns the screen again
    for (int y = 0; y < g.height(); ++y) {
        int x = 0;
        while (x < g.width()) {
            const Role r = g.role_at(x, y);
            std::u32string run;
            int e = x;
            while (e < g.width() && g.role_at(e, y) == r) run.push_back(g.at(e++, y));
            attrset(session_->attr[int(r)]);
            // The bottom-right cell cannot advance the cursor: curses reports ERR but
            // draws it, so the result is ignored on purpose.
            mvaddstr(y, x, to_utf8(run).c_str());
            x = e;
        }
    }
    attrset(A_NORMAL);
    refresh();
}

}  // namespace qscope::tui
