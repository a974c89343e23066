// `qscope top` on a terminal: the loop that takes each snapshot the collector publishes,
// turns keys into handle_key() calls and repaints through tui::Terminal. It reaches the
// collector only through Controls (cli/top.cpp wires them), so tui stays a renderer of
// the model. The collector ticks on its own thread; this thread only takes published
// snapshots (never a collector lock while the kernel is read).
#pragma once
#include <functional>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model/snapshot.h"
#include "tui/input.h"
#include "tui/terminal.h"
#include "tui/view.h"

namespace qscope::tui {

// What the dashboard asks of whoever collects.
struct Controls {
    std::function<void()> reset_window;      // start a new window (maxima, quantiles)
    std::function<void()> request_jvm_dump;  // a JVM thread dump at the next tick
    std::function<bool()> stop_requested;    // a stop signal arrived: leave the loop
    // `w`: write the always-on ring now; returns the line to show. Unset: top has no ring.
    std::function<std::string()> write_ring;
};

// `top --replay`: a recording's ticks (each a snapshot as the live collector published it)
// under a time cursor. The dashboard only reads them; parsing times is the caller's.
struct ReplaySource {
    const std::vector<Snapshot>* ticks = nullptr;  // at least one
    std::string of;                                // what was recorded, for the header
    size_t start = 0;                              // the tick shown first
    // The tick a typed time names; nullopt when it names none (the footer says so).
    std::function<std::optional<size_t>(const std::string&)> seek_time;
};

class Dashboard {
public:
    // Takes over the terminal and paints "attaching to pid…" at once, before the probes
    // load. Throws Error(usage) when there is no usable terminal.
    Dashboard(int pid, double interval_seconds, bool colour);

    // While the collector starts: each probe family and whether it is attached yet.
    void attaching(const std::vector<std::pair<std::string, bool>>& progress);
    // From the collector thread, each tick: queued, so the sparklines get every tick even
    // when the UI is busy, and the loop wakes to paint it at once.
    void post(std::shared_ptr<const Snapshot> s);
    // From any thread: a line for the footer (e.g. the ring written on SIGUSR1).
    void say(std::string line);
    // Until `q`, a stop request or, with max_frames > 0, that many frames painted.
    // Returns the newest snapshot posted (null if none).
    std::shared_ptr<const Snapshot> run(const Controls& controls, int max_frames);
    // Hands the terminal back; the dashboard paints nothing after it (post() still queues).
    void leave() { term_.leave(); }
    // Plays `src` until `q` or a stop request (or, with max_frames > 0, that many frames).
    void replay(const ReplaySource& src, const Controls& controls, int max_frames);

private:
    void draw(const Snapshot* s);
    std::vector<std::shared_ptr<const Snapshot>> take_posted();

    Terminal term_;
    UiState ui_;
    History live_, frozen_;  // frozen_: what a paused screen shows
    Input input_;
    std::mutex mu_;
    std::vector<std::shared_ptr<const Snapshot>> posted_;
    std::string said_;  // say()'s newest line, not yet shown
};

// `top --iterations N` without a terminal: the frame for `snap` as text, trailing spaces
// trimmed, sized by text_size().
void print_frame(const Snapshot* snap, const History& history, int pid, double interval_seconds, std::ostream& out);

}  // namespace qscope::tui
