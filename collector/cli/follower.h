// One target of `export` or `top`, followed across restarts. It resolves the selector, runs
// a Collector on the process found and, when that process exits, drops the Collector (and
// with it every BPF program, link and map of that attach), then asks the selector again
// with backoff until a new process matches, and attaches to it: counters start from zero,
// as Prometheus expects of a restarted target. A --pid target is not asked again: a PID
// does not come back, so the follower ends with it.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "cli/targets.h"
#include "engine/collector.h"
#include "model/config.h"
#include "record/recent.h"

namespace qscope {

class Follower {
public:
    // `cfg` is every subcommand's configuration; its pid is set at each attach. `say`: tell
    // stderr when the target leaves, is waited for and is found (not under top's screen).
    Follower(NamedTarget target, Config cfg, bool say = true);
    ~Follower();
    Follower(const Follower&) = delete;
    Follower& operator=(const Follower&) = delete;

    // The first resolution and attach, on the calling thread. Throws Error for what waiting
    // cannot fix: a bad PID, several unrelated processes, an unreadable pidfile, missing
    // privileges or kernel support. When nothing matches yet, says so once on stderr and
    // returns unattached, unless `wait` (top), which waits here until a match or a stop
    // signal. `progress` reports the first attach's probe families (Collector::start).
    void start(bool wait = false, const Collector::StartProgress& progress = {});
    // Ticks every interval on a thread of its own until stop(); re-attaches as above.
    // `on_tick` runs after each publish, also with the snapshot that says the target left.
    using OnTick = std::function<void(const std::shared_ptr<const Snapshot>&)>;
    void run_in_background(OnTick on_tick = {});
    // Before start(): publish each snapshot with its verdict over the last `seconds` rather
    // than since the attach (record/recent.h; `export`, whose window runs for weeks).
    void verdict_over(double seconds) { recent_.emplace(seconds); }
    // Before start(): every attach takes this slot of the exporter's shared hooks.
    void share_hooks(SharedSlot shared) { shared_ = std::move(shared); }
    void stop();

    const NamedTarget& target() const { return target_; }
    // The newest snapshot of the current target; null while waiting for one.
    std::shared_ptr<const Snapshot> latest() const;
    // A --pid target exited: nothing more will come.
    bool finished() const { return finished_; }
    // How many times a target was attached (1 after the first attach).
    int attaches() const { return attaches_; }
    // The current target's Collector, for top's keys (reset window, JVM dump); may be null.
    void with_collector(const std::function<void(Collector&)>& fn);
    // One line on stderr under this target's name ("qscope [web]: ..."), unless `say` is off.
    void say(const std::string& msg);

private:
    bool try_attach(const Collector::StartProgress& progress);
    // Returns what it published: `s`, or a copy with its verdict over the recent window.
    std::shared_ptr<const Snapshot> publish(std::shared_ptr<const Snapshot> s);
    void say_once(const std::string& msg);
    // Lost events on stderr, where an exporter's operator reads them (its /metrics has the
    // count, not the cause): the first, then each time the count since attach has doubled.
    void say_lost(const Snapshot& s);
    void loop(OnTick on_tick);
    bool wait_for(double seconds);

    NamedTarget target_;
    Config cfg_;
    SharedSlot shared_;
    std::string prefix_;  // "qscope: " or "qscope [web]: "
    bool say_;
    std::mutex col_mu_;
    std::unique_ptr<Collector> col_;
    mutable std::mutex latest_mu_;
    std::shared_ptr<const Snapshot> latest_;
    std::optional<record::RecentVerdict> recent_;  // touched by publish() alone
    std::string last_said_;
    uint64_t lost_said_ = 0;  // the lost-events count say_lost() last told, this attach
    std::atomic<bool> finished_{false};
    std::atomic<int> attaches_{0};
    std::atomic<bool> stop_{false};
    std::mutex wait_mu_;
    std::condition_variable wait_cv_;
    std::thread thread_;
};

}  // namespace qscope
