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

void Dashboard::say(std::string line) {
    {
        std::lock_guard<std::mutex> g(mu_);
        said_ = std::move(line);
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
            } else if (a == Action::write_ring) {
                ui_.flash = controls.write_ring ? controls.write_ring()
                                                : "w: no ring to write: start top with --ring 10m --output FILE";
            } else if (a == Action::pause_toggled) {
                if (ui_.paused) frozen_ = live_;
                else if (newest) shown = newest;
            }
            dirty |= a != Action::none;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            if (!said_.empty()) {
                ui_.flash = std::move(said_);
                said_.clear();
                dirty = true;
            }
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

namespace {

// The sparklines a live top would have drawn at tick `at`: the ticks before it, fed in order.
History history_until(const std::vector<Snapshot>& ticks, size_t at, size_t capacity) {
    History h(capacity);
    for (size_t i = at + 1 > capacity ? at + 1 - capacity : 0; i <= at; ++i) h.feed(ticks[i]);
    return h;
}

std::optional<size_t> next_critical(const std::vector<Snapshot>& ticks, size_t from) {
    for (size_t i = from + 1; i < ticks.size(); ++i)
        if (ticks[i].verdict.severity == Severity::critical) return i;
    return std::nullopt;
}

}  // namespace

void Dashboard::replay(const ReplaySource& src, const Controls& controls, int max_frames) {
    const std::vector<Snapshot>& ticks = *src.ticks;
    ui_.attach_progress.clear();
    ReplayState& r = ui_.replay;
    r.of = src.of;
    r.count = ticks.size();
    r.index = std::min(src.start, ticks.size() - 1);
    const size_t capacity = history_capacity(ui_.interval_seconds);
    History hist = history_until(ticks, r.index, capacity);
    auto moved = [&](size_t to) {
        if (to == r.index + 1) {
            hist.feed(ticks[to]);
        } else {
            hist = history_until(ticks, to, capacity);
        }
        r.index = to;
    };
    using clock = std::chrono::steady_clock;
    clock::time_point last_step = clock::now();
    int frames = 0;
    FlashTimer flash;
    bool dirty = true;
    while (!controls.stop_requested()) {
        if (dirty) {
            int w, h;
            term_.size(w, h);
            term_.paint(render(&ticks[r.index], w, h, ui_, hist));
            if (max_frames > 0 && ++frames >= max_frames) return;
            dirty = false;
        }
        input_.wait(r.playing ? 20 : 100);
        for (int key; (key = input_.next_key()) != kNoKey;) {
            if (key == kResized) {
                dirty = true;
                continue;
            }
            const Action a = handle_key(ui_, key, &ticks[r.index]);
            if (a == Action::quit) return;
            if (a == Action::step_back && r.index > 0) moved(r.index - 1);
            if (a == Action::step_forward && r.index + 1 < ticks.size()) moved(r.index + 1);
            if (a == Action::seek_critical) {
                if (auto at = next_critical(ticks, r.index)) {
                    moved(*at);
                    r.playing = false;
                } else {
                    ui_.flash = "no critical verdict after this tick";
                }
            }
            if (a == Action::seek_time) {
                if (auto at = src.seek_time ? src.seek_time(r.prompt) : std::nullopt)
                    moved(*at);
                else
                    ui_.flash = "go to " + r.prompt + ": not a time in the recording";
                r.prompt.clear();
            }
            if (a != Action::none) last_step = clock::now();
            dirty |= a != Action::none;
        }
        // Playing: the next tick after its recorded interval, divided by the speed.
        if (r.playing && r.index + 1 < ticks.size()) {
            const double gap = std::max<int64_t>(ticks[r.index + 1].taken_at_unix_ms - ticks[r.index].taken_at_unix_ms, 1) /
                               1000.0 / r.speed;
            if (std::chrono::duration<double>(clock::now() - last_step).count() >= std::min(gap, 10.0)) {
                moved(r.index + 1);
                last_step = clock::now();
                dirty = true;
            }
        } else if (r.playing) {
            r.playing = false;
            ui_.flash = "end of the recording";
            dirty = true;
        }
        dirty |= flash.expire(ui_.flash);
    }
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
