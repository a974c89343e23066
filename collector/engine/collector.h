// Owns the target and the sources; builds one immutable Snapshot per tick and publishes it.
// Views (TUI, JSON, exporter) only ever see published snapshots.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/snapshot.h"
#include "engine/source.h"
#include "engine/target.h"

namespace qscope {

class Collector {
public:
    explicit Collector(Config cfg);
    ~Collector();
    Collector(const Collector&) = delete;
    Collector& operator=(const Collector&) = delete;

    // The probe families to run (probes/probes.h chooses them from the config).
    void add_source(std::unique_ptr<Source> s);
    // Before start(): the exporter's shared hooks and this target's slot (engine/shared_hooks.h).
    void share_hooks(SharedSlot shared) { shared_ = std::move(shared); }

    // Validates the target, checks privileges and BTF, starts every source (concurrently).
    // Throws Error. `progress`, if set, runs on the calling thread with each source's name
    // and whether it is attached yet: once before any has finished, then at each change.
    using StartProgress = std::function<void(const std::vector<std::pair<std::string, bool>>&)>;
    void start(const StartProgress& progress = {});
    // Builds one snapshot now and publishes it. Call from one thread at a time.
    std::shared_ptr<const Snapshot> tick();
    // Ticks every interval on a background thread until stop(); `on_tick` runs after
    // each publish (on the collector thread; keep it cheap).
    void run_in_background(std::function<void(const std::shared_ptr<const Snapshot>&)> on_tick = {});
    void stop();

    std::shared_ptr<const Snapshot> latest() const;
    // Start a new window at the next tick (maxima, quantiles, window counters).
    void reset_window() { reset_requested_ = true; }
    // Asks the sources for on-demand work (any thread): the next tick hands it to them, and
    // a later one shows the result. --jvm-dump is such a request, made by start().
    void request(OnDemand what);
    // Waits for the on-demand work the sources have started; true if a result waits for the
    // next tick. Call from the thread that ticks, before a tick whose snapshot must show it.
    bool finish_requests();
    bool target_alive() const { return target_alive_; }
    const Config& config() const { return cfg_; }
    const Target& target() const { return target_; }

private:
    void say_scope(const Snapshot& s);

    Config cfg_;
    SharedSlot shared_;
    Target target_;
    std::vector<std::unique_ptr<Source>> sources_;
    std::shared_ptr<const Snapshot> latest_;
    mutable std::mutex latest_mu_;
    uint64_t attach_ns_ = 0, window_start_ns_ = 0, last_tick_ns_ = 0, tick_index_ = 0;
    std::string lockdown_note_;  // kernel lockdown in force and what it leaves ("" for none)
    std::string scope_said_;     // -v: the socket scope last said (say_scope)
    std::atomic<bool> reset_requested_{false};
    std::mutex requests_mu_;
    std::vector<OnDemand> requests_;  // made since the last tick
    std::atomic<bool> target_alive_{true};
    std::atomic<bool> stop_{false};
    std::mutex wait_mu_;
    std::condition_variable wait_cv_;
    std::thread thread_;
};

}  // namespace qscope
