#include "tui/dashboard.h"

#include <chrono>
#include <ostream>

namespace qscope::tui {
namespace {

UiState initial_ui(int pid, double interval_seconds, bool unicode) {
    UiState ui;
    ui.pid = pid;
    ui.interval_seconds = interval_seconds;
    ui.unicode = unicode;
    return ui;
}

// The footer's flash message goes away 4 s after it last changed.
class FlashTimer {
public:
    // Clears an expired flash; true when it did (the screen needs a repaint).
    bool expire(std::string& flash) {
        if (flash != last_) {
            last_ = flash;
            since_ = std::chrono::steady_clock::now();
        } else if (!flash.empty() && std::chrono::steady_clock::now() - since_ > std::chrono::seconds(4)) {
            flash.clear();
            last_.clear();
            return true;
        }
        return false;
    }

private:
    std::string last_;
    std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
};

}  // namespace

Dashboard::Dashboard(int pid, double interval_seconds, bool colour)
    : term_(colour),
      ui_(initial_ui(pid, interval_seconds, term_.unicode())),
      live_(history_capacity(interval_seconds)),
      frozen_(live_) {
    draw(nullptr);
}

void Dashboard::attaching(const std::vector<std::pair<std::string, bool>>& progress) {
    ui_.attach_progress = progress;
    draw(nullptr);
}

void Dashboard::post(std::shared_ptr<const Snapshot> s) {
    {
        std::lock_guard<std::mutex> g(mu_);
        if (posted_.size() < 1024) posted_.push_back(std::move(s));
    }
    input_.wake();
}

std::vector<std::shared_ptr<const Snapshot>> Dashboard::take_posted() {
    std::vector<std::shared_ptr<const Snapshot>> fresh;
    std::lock_guard<std::mutex> g(mu_);
    fresh.swap(posted_);
    return fresh;
}

void Dashboard::draw(const Snapshot* s) {
    int w, h;
    term_.size(w, h);
    term_.paint(render(s, w, h, ui_, ui_.paused ? frozen_ : live_));
}

std::shared_ptr<const Snapshot> Dashboard::run(const Controls& controls, int max_frames) {
    ui_.attach_progress.clear();  // attached: from now on the dashboard proper
    std::shared_ptr<const Snapshot> shown, newest;
    int frames = 0;
    FlashTimer flash;
    while (!controls.stop_requested()) {
        // Up to 100 ms for a key, a snapshot or a signal (resize, stop): the loop also
        // expires the flash message.
        input_.wait(100);
        bool dirty = false;
        for (int key; (key = input_.next_key()) != kNoKey;) {
            if (key == kResized) {
                dirty = true;
                continue;
            }
            const Action a = handle_key(ui_, key, shown.get());
            if (a == Action::quit) return newest;
            if (a == Action::reset_window) {
                controls.reset_window();
                live_.reset_maxima();
            } else if (a == Action::jvm_dump) {
                controls.request_jvm_dump();
            } else if (a == Action::pause_toggled) {
                if (ui_.paused) frozen_ = live_;
                else if (newest) shown = newest;
            }
            dirty |= a != Action::none;
        }
        for (const auto& s : take_posted()) {
            live_.feed(*s);
            newest = s;
            if (!ui_.paused) {
                shown = s;
                dirty = true;
                ++frames;
            }
        }
        dirty |= flash.expire(ui_.flash);
        if (dirty) draw(shown.get());
        if (max_frames > 0 && frames >= max_frames) break;
    }
    return newest;
}

void print_frame(const Snapshot* snap, const History& history, int pid, double interval_seconds, std::ostream& out) {
    const UiState ui = initial_ui(pid, interval_seconds, utf8_locale());
    int w, h;
    text_size(w, h);
    const Grid g = render(snap, w, h, ui, history);
    for (const auto& row : g.rows()) {
        const size_t end = row.find_last_not_of(' ');
        out << (end == std::string::npos ? std::string() : row.substr(0, end + 1)) << '\n';
    }
    out.flush();
}

}  // namespace qscope::tui
