// `qscope top`: the curses backend. It only paints the grid that view.cpp renders, maps
// keys to handle_key(), and keeps the terminal sane on every way out. The collector ticks
// on its own thread; this thread only takes published snapshots (never a collector lock
// while the kernel is read).
#include <curses.h>
#include <fcntl.h>
#include <langinfo.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <clocale>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/app.h"
#include "engine/collector.h"
#include "probes/probes.h"
#include "model/errors.h"
#include "cli/exporter.h"
#include "tui/view.h"

namespace qscope {
namespace {

using namespace tui;

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

bool colour_wanted(const TopOptions& opt) {
    if (opt.no_color) return false;
    const char* nc = std::getenv("NO_COLOR");  // no-color.org: any non-empty value
    return !(nc && *nc);
}

// Owns the curses session: every exit path (return, exception, signal) restores the terminal.
class Screen {
public:
    explicit Screen(bool colour) {
        std::setlocale(LC_ALL, "");
        unicode_ = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
        term_ = newterm(nullptr, stdout, stdin);
        if (!term_) {
            const char* t = std::getenv("TERM");
            throw Error(Exit::usage, std::string("top: cannot initialise the terminal (TERM=") + (t ? t : "unset") +
                                         "); use `qscope snapshot` or `top --iterations N` with output redirected");
        }
        set_term(term_);
        g_curses_active = true;
        install_fatal_handlers();
        cbreak();
        noecho();
        nonl();
        keypad(stdscr, TRUE);
        set_escdelay(25);
        curs_set(0);
        timeout(0);  // getch() never blocks: the loop waits in poll() on the keyboard and the collector
        for (int i = 0; i < kRoleCount; ++i) attr_[i] = A_NORMAL;
        if (colour && has_colors()) {
            start_color();
            use_default_colors();
            init_pair(1, COLOR_GREEN, -1);
            init_pair(2, COLOR_YELLOW, -1);
            init_pair(3, COLOR_RED, -1);
            init_pair(4, COLOR_CYAN, -1);
            attr_[int(Role::dim)] = A_DIM;
            attr_[int(Role::ok)] = COLOR_PAIR(1);
            attr_[int(Role::warn)] = COLOR_PAIR(2) | A_BOLD;
            attr_[int(Role::critical)] = COLOR_PAIR(3) | A_BOLD;
            attr_[int(Role::header)] = COLOR_PAIR(4) | A_BOLD;
            attr_[int(Role::selected)] = A_REVERSE;
        } else {
            // Monochrome: bold and reverse carry the severity.
            attr_[int(Role::warn)] = A_BOLD;
            attr_[int(Role::critical)] = A_BOLD | A_REVERSE;
            attr_[int(Role::header)] = A_BOLD;
            attr_[int(Role::selected)] = A_REVERSE;
        }
    }
    ~Screen() {
        if (g_curses_active.exchange(false)) endwin();
        if (term_) delscreen(term_);
    }
    Screen(const Screen&) = delete;
    Screen& operator=(const Screen&) = delete;

    bool unicode() const { return unicode_; }
    void size(int& w, int& h) const { getmaxyx(stdscr, h, w); }

    void paint(const Grid& g) {
        for (int y = 0; y < g.height(); ++y) {
            int x = 0;
            while (x < g.width()) {
                const Role r = g.role_at(x, y);
                std::u32string run;
                int e = x;
                while (e < g.width() && g.role_at(e, y) == r) run.push_back(g.at(e++, y));
                attrset(attr_[int(r)]);
                // The bottom-right cell cannot advance the cursor: curses reports ERR but
                // draws it, so the result is ignored on purpose.
                mvaddstr(y, x, to_utf8(run).c_str());
                x = e;
            }
        }
        attrset(A_NORMAL);
        refresh();
    }

private:
    SCREEN* term_ = nullptr;
    bool unicode_ = false;
    attr_t attr_[kRoleCount];
};

int map_key(int ch) {
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

std::unique_ptr<MetricsServer> maybe_listen(const Collector& col, const TopOptions& opt) {
    if (opt.listen.empty()) return nullptr;
    return std::make_unique<MetricsServer>(col, opt.listen, opt.allow_remote);
}

// Terminal size for a frame printed as text: explicit COLUMNS/LINES first, then whatever
// terminal stderr or stdin is attached to, else 120x40.
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

int exit_status(const std::shared_ptr<const Snapshot>& s) {
    if (s && s->target.exited) {
        std::fprintf(stderr, "qscope: %s\n", s->target.exit_note.c_str());
        return static_cast<int>(Exit::target_exited);
    }
    return 0;
}

// --iterations N with stdout not a terminal: tick N times, print the last frame as text.
int run_headless(const Config& cfg, const TopOptions& opt) {
    Collector col(cfg);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    col.start();
    auto server = maybe_listen(col, opt);
    History hist(history_capacity(cfg.interval_seconds));
    UiState ui;
    ui.pid = cfg.pid;
    ui.interval_seconds = cfg.interval_seconds;
    std::setlocale(LC_ALL, "");
    ui.unicode = std::strcmp(nl_langinfo(CODESET), "UTF-8") == 0;
    std::shared_ptr<const Snapshot> snap;
    for (int i = 0; i < opt.iterations && !g_stop_requested; ++i) {
        if (i && sleep_unless_stopped(cfg.interval_seconds)) break;
        snap = col.tick();
        hist.feed(*snap);
    }
    int w, h;
    text_size(w, h);
    const Grid g = render(snap.get(), w, h, ui, hist);
    for (const auto& row : g.rows()) {
        const size_t end = row.find_last_not_of(' ');
        std::cout << (end == std::string::npos ? std::string() : row.substr(0, end + 1)) << '\n';
    }
    std::cout.flush();
    return exit_status(snap);
}

}  // namespace

int run_top(const Config& cfg, const TopOptions& opt) {
    install_stop_signals();
    if (!isatty(STDOUT_FILENO)) {
        if (opt.iterations > 0) return run_headless(cfg, opt);
        throw Error(Exit::usage,
                    "top: stdout is not a terminal; use `qscope snapshot` or `qscope top --iterations N` for text");
    }

    Screen screen(colour_wanted(opt));
    UiState ui;
    ui.pid = cfg.pid;
    ui.unicode = screen.unicode();
    ui.interval_seconds = cfg.interval_seconds;
    History live(history_capacity(cfg.interval_seconds)), frozen = live;

    auto draw = [&](const Snapshot* s) {
        int w, h;
        screen.size(w, h);
        screen.paint(render(s, w, h, ui, ui.paused ? frozen : live));
    };
    draw(nullptr);  // "attaching…" before the probes load: the operator sees it started

    // The collector thread hands each snapshot over here; the UI drains the queue so the
    // sparklines get every tick even when the UI is busy. Declared before the collector so
    // they outlive its thread on every way out.
    std::mutex mu;
    std::vector<std::shared_ptr<const Snapshot>> inbox;
    // The collector thread also writes a byte here, so a new snapshot is painted at once
    // instead of at the next keyboard poll (a 100 ms poll delayed the first frame by ~50 ms).
    int wake[2] = {-1, -1};
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) wake[0] = wake[1] = -1;
    struct WakeCloser {
        int* fds;
        ~WakeCloser() {
            for (int i = 0; i < 2; i++)
                if (fds[i] >= 0) ::close(fds[i]);
        }
    } wake_closer{wake};

    Collector col(cfg);
    for (auto& s : default_sources(cfg)) col.add_source(std::move(s));
    col.start([&](const std::vector<std::pair<std::string, bool>>& progress) {
        ui.attach_progress = progress;
        draw(nullptr);
    });
    ui.attach_progress.clear();
    auto server = maybe_listen(col, opt);
    col.run_in_background([&](const std::shared_ptr<const Snapshot>& s) {
        {
            std::lock_guard<std::mutex> g(mu);
            if (inbox.size() < 1024) inbox.push_back(s);
        }
        if (wake[1] >= 0) {
            const char b = 1;
            (void)!::write(wake[1], &b, 1);  // a full pipe already means "wake up"
        }
    });

    std::shared_ptr<const Snapshot> shown, newest;
    int frames = 0;
    std::string last_flash;
    auto flash_since = std::chrono::steady_clock::now();
    bool quit = false, stdin_gone = false;
    while (!g_stop_requested && !quit) {
        bool dirty = false;
        // Up to 100 ms for a key, a snapshot or a signal (resize, stop): the loop also
        // expires the flash message.
        // A hung-up terminal stays "readable" forever: stop polling it rather than spin.
        pollfd pf[2] = {{stdin_gone ? -1 : STDIN_FILENO, POLLIN, 0}, {wake[0], POLLIN, 0}};
        (void)::poll(pf, 2, 100);
        if (pf[0].revents & (POLLHUP | POLLERR | POLLNVAL)) stdin_gone = true;
        if (wake[0] >= 0 && (pf[1].revents & POLLIN)) {
            char drain[64];
            while (::read(wake[0], drain, sizeof(drain)) > 0) {
            }
        }
        // Every key ncurses has (it may have read several in one go).
        for (int ch; !quit && (ch = getch()) != ERR;) {
            if (ch == KEY_RESIZE) {
                dirty = true;
                continue;
            }
            const Action a = handle_key(ui, map_key(ch), shown.get());
            if (a == Action::quit) {
                quit = true;
                break;
            }
            if (a == Action::reset_window) {
                col.reset_window();
                live.reset_maxima();
            } else if (a == Action::jvm_dump) {
                col.request_jvm_dump();
            } else if (a == Action::pause_toggled) {
                if (ui.paused) frozen = live;
                else if (newest) shown = newest;
            }
            dirty |= a != Action::none;
        }
        if (quit) break;
        std::vector<std::shared_ptr<const Snapshot>> fresh;
        {
            std::lock_guard<std::mutex> g(mu);
            fresh.swap(inbox);
        }
        for (const auto& s : fresh) {
            live.feed(*s);
            newest = s;
            if (!ui.paused) {
                shown = s;
                dirty = true;
                ++frames;
            }
        }
        if (ui.flash != last_flash) {
            last_flash = ui.flash;
            flash_since = std::chrono::steady_clock::now();
        } else if (!ui.flash.empty() && std::chrono::steady_clock::now() - flash_since > std::chrono::seconds(4)) {
            ui.flash.clear();
            last_flash.clear();
            dirty = true;
        }
        if (dirty) draw(shown.get());
        if (opt.iterations > 0 && frames >= opt.iterations) break;
    }
    col.stop();
    return exit_status(newest);
}

}  // namespace qscope
