#include "cli/follower.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cli/app.h"
#include "model/errors.h"
#include "probes/probes.h"

namespace qscope {

namespace {
// Re-resolution backoff after the target left: soon at first (a restart takes a moment),
// then once a second, which costs one /proc scan (--port: one sock_diag dump and a read of
// every fd table) per second while the service is down.
constexpr double kFirstBackoff = 0.1, kMaxBackoff = 1.0;
}  // namespace

Follower::Follower(NamedTarget target, Config cfg, bool say)
    : target_(std::move(target)),
      cfg_(std::move(cfg)),
      prefix_(target_.service.empty() ? "qscope: " : "qscope [" + target_.service + "]: "),
      say_(say) {}

void Follower::say(const std::string& msg) {
    if (say_) std::fprintf(stderr, "%s%s\n", prefix_.c_str(), msg.c_str());
}

Follower::~Follower() { stop(); }

void Follower::say_once(const std::string& msg) {
    if (msg == last_said_) return;
    last_said_ = msg;
    say(msg);
}

void Follower::say_lost(const Snapshot& s) {
    if (s.lost_events == 0 || s.lost_events < 2 * lost_said_) return;
    lost_said_ = s.lost_events;
    std::string why;
    for (const auto& p : s.partial) why += (why.empty() ? "" : "; ") + p;
    say(std::to_string(s.lost_events) + " events lost since attach (qscope_lost_events_total), incomplete: " + why);
}

std::shared_ptr<const Snapshot> Follower::publish(std::shared_ptr<const Snapshot> s) {
    if (recent_) s = recent_->apply(std::move(s));
    std::lock_guard<std::mutex> g(latest_mu_);
    latest_ = s;
    return s;
}

std::shared_ptr<const Snapshot> Follower::latest() const {
    std::lock_guard<std::mutex> g(latest_mu_);
    return latest_;
}

void Follower::with_collector(const std::function<void(Collector&)>& fn) {
    std::lock_guard<std::mutex> g(col_mu_);
    if (col_) fn(*col_);
}

// True once attached. Throws Error for what waiting cannot fix (the caller decides whether
// that ends qscope or is said once and retried).
bool Follower::try_attach(const Collector::StartProgress& progress) {
    const Selector& sel = target_.selector;
    int pid = 0;
    if (sel.kind == SelectorKind::pid) {
        pid = std::atoi(sel.value.c_str());  // Target::open says what is wrong with it
    } else {
        const Resolution r = resolve(sel);
        switch (r.outcome) {
            case Resolution::Outcome::found: pid = r.pid; break;
            case Resolution::Outcome::none:
                say_once("waiting for the target: " + r.reason + " (qscope_up is 0 until it appears)");
                return false;
            case Resolution::Outcome::ambiguous: throw Error(Exit::no_target, sel.text() + ": " + r.reason);
            case Resolution::Outcome::error: throw Error(r.code, r.reason);
        }
    }
    Config c = cfg_;
    c.pid = pid;
    auto col = std::make_unique<Collector>(c);
    col->share_hooks(shared_);
    for (auto& s : default_sources(c)) col->add_source(std::move(s));
    col->start(progress);
    auto snap = col->tick();
    // The load's parse of the kernel's BTF (once per BPF object) is freed by now; glibc
    // would keep up to its dynamic trim threshold (tens of MiB) of it mapped.
    malloc_trim(0);
    {
        std::lock_guard<std::mutex> g(col_mu_);
        col_ = std::move(col);
    }
    publish(snap);
    ++attaches_;
    last_said_.clear();
    lost_said_ = 0;
    if (sel.follows_restarts())
        say("attached to PID " + std::to_string(pid) + " (" + snap->target.comm + "), found by " + sel.text());
    say_lost(*snap);
    return true;
}

void Follower::start(bool wait, const Collector::StartProgress& progress) {
    double backoff = kFirstBackoff;
    while (!try_attach(progress)) {
        if (!wait || sleep_unless_stopped(backoff)) return;
        backoff = std::min(backoff * 2, kMaxBackoff);
    }
}

bool Follower::wait_for(double seconds) {
    std::unique_lock<std::mutex> lk(wait_mu_);
    return wait_cv_.wait_for(lk, std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)),
                             [this] { return stop_.load(); });
}

void Follower::loop(OnTick on_tick) {
    const double interval = cfg_.interval_seconds;
    double backoff = kFirstBackoff;
    while (!stop_) {
        if (!col_) {
            bool attached = false;
            try {
                attached = try_attach({});
            } catch (const Error& e) {
                // The process vanished between the look-up and the attach, two unrelated
                // matches for a moment, a pidfile being rewritten: said once, asked again.
                say_once(std::string(e.what()) + " (retrying)");
            }
            if (attached) {
                backoff = kFirstBackoff;
                if (on_tick) on_tick(latest());
                wait_for(interval);
            } else {
                wait_for(backoff);
                backoff = std::min(backoff * 2, kMaxBackoff);
            }
            continue;
        }
        auto snap = col_->tick();
        if (col_->target_alive()) {
            say_lost(*snap);
            snap = publish(std::move(snap));
            if (on_tick) on_tick(snap);
            wait_for(interval);
            continue;
        }
        if (!target_.selector.follows_restarts()) {
            // --pid: the last snapshot stays (qscope_up 0 with the final counts) and the
            // subcommand decides when to exit.
            snap = publish(std::move(snap));
            if (on_tick) on_tick(snap);
            finished_ = true;
            return;
        }
        auto gone = std::make_shared<Snapshot>(*snap);
        gone->target.exit_note = "target PID " + std::to_string(snap->target.pid) +
                                 " exited; waiting for the next process matching " + target_.selector.text();
        if (on_tick) on_tick(gone);
        say("target PID " + std::to_string(snap->target.pid) + " exited; waiting for the next process matching " +
            target_.selector.text());
        // Nothing of the old target is served while it is gone: qscope_up 0 alone, so no
        // gauge claims a queue of a process that no longer exists.
        publish(nullptr);
        {
            std::lock_guard<std::mutex> g(col_mu_);
            col_.reset();  // every BPF program, link and map of that attach is closed here
        }
        malloc_trim(0);  // what the Collector held goes back to the system now
        backoff = kFirstBackoff;
        wait_for(backoff);
    }
}

void Follower::run_in_background(OnTick on_tick) {
    stop_ = false;
    thread_ = std::thread([this, on_tick = std::move(on_tick)] {
        // start()'s attach took the first snapshot: it is handed on like a re-attach's, and
        // the next tick is an interval later (ticking again at once cost top's first frame a
        // whole tick, ~170 ms at 10,000 threads, and gave that frame a window of ~0.1 s).
        if (col_) {
            if (on_tick) on_tick(latest());
            if (wait_for(cfg_.interval_seconds)) return;
        }
        loop(on_tick);
    });
}

void Follower::stop() {
    {
        std::lock_guard<std::mutex> g(wait_mu_);
        stop_ = true;
    }
    wait_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

}  // namespace qscope
