#include "engine/collector.h"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <exception>

#include "engine/bpf_util.h"
#include "engine/kernel_features.h"
#include "model/verdict.h"
#include "model/errors.h"

namespace qscope {

uint64_t monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
}

Collector::Collector(Config cfg) : cfg_(std::move(cfg)) {}

Collector::~Collector() { stop(); }

void Collector::add_source(std::unique_ptr<Source> s) { sources_.push_back(std::move(s)); }

void Collector::start(const StartProgress& progress) {
    target_ = Target::open(cfg_.pid);
    check_bpf_privileges();
    // Without the target's fd table its listeners are invisible and its clients would read
    // as downstream peers: refuse rather than print plausible wrong numbers.
    const std::string fd_dir = "/proc/" + std::to_string(cfg_.pid) + "/fd";
    if (DIR* d = opendir(fd_dir.c_str())) {
        closedir(d);
    } else if (errno == EACCES || errno == EPERM) {
        throw Error(Exit::permission, "cannot read " + fd_dir + " (the target's sockets): run as root, or add "
                                      "CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE (docs/security.md)");
    }
    check_btf();
    const std::string lockdown = lockdown_mode();
    lockdown_note_ = lockdown_consequence(lockdown);
    // Under confidentiality lockdown a BPF load fails with a bare EINVAL or EPERM: say why.
    const auto name_lockdown = [&](const Error& err) {
        if (lockdown != "confidentiality") throw err;
        throw Error(err.code(), std::string(err.what()) + " (" + lockdown_note_ + ")");
    };
    init_libbpf_logging(cfg_.verbose);
    // The kernel's BTF for the sources that ask it, parsed while the tree loads and held until
    // they have started, so that their questions wait for this parse instead of making one
    // after the tree's. Declared before the thread, which is joined first.
    std::shared_ptr<btf> kernel_btf;
    std::jthread btf_parse;
    if (std::any_of(sources_.begin(), sources_.end(), [](const auto& s) { return s->asks_kernel_btf(); }))
        btf_parse = std::jthread([&kernel_btf] { kernel_btf = shared_vmlinux_btf(); });
    // Before the sources: each loads with the tree's bitmap as its filter.
    try {
        target_.follow(cfg_.follow_children, shared_);
    } catch (const Error& err) {
        name_lockdown(err);
    }
    // Sources load and attach concurrently: each is its own BPF object, the verifier and
    // the seeding walks are CPU-bound but independent, and the first frame waits for the
    // slowest source instead of the sum (bench/top_startup.sh).
    const uint64_t t0 = monotonic_ns();
    std::vector<std::exception_ptr> errors(sources_.size());
    std::vector<std::pair<std::string, bool>> state;
    for (const auto& s : sources_) state.emplace_back(s->name(), false);
    std::mutex mu;
    std::condition_variable cv;
    size_t finished = 0;
    std::vector<std::thread> starters;
    starters.reserve(sources_.size());
    for (size_t i = 0; i < sources_.size(); i++) {
        starters.emplace_back([&, i] {
            const uint64_t ts = monotonic_ns();
            try {
                sources_[i]->start(target_, cfg_);
            } catch (...) {
                errors[i] = std::current_exception();
            }
            if (cfg_.verbose)
                std::fprintf(stderr, "qscope: start %s %.0f ms\n", sources_[i]->name(), (monotonic_ns() - ts) / 1e6);
            std::lock_guard<std::mutex> g(mu);
            state[i].second = true;
            finished++;
            cv.notify_all();
        });
    }
    {
        // The caller's thread reports progress (a UI draws from its own thread only).
        std::unique_lock<std::mutex> lk(mu);
        size_t reported = static_cast<size_t>(-1);
        while (true) {
            if (progress && finished != reported) {
                reported = finished;
                const auto copy = state;
                lk.unlock();
                try {
                    progress(copy);
                } catch (...) {
                    // Progress is cosmetic; the starters must still be joined below.
                }
                lk.lock();
                continue;  // re-check: more may have finished while drawing
            }
            if (finished == sources_.size()) break;
            cv.wait(lk);
        }
    }
    for (auto& t : starters) t.join();
    if (cfg_.verbose) std::fprintf(stderr, "qscope: start total %.0f ms\n", (monotonic_ns() - t0) / 1e6);
    // The first failure in source order, as a sequential start would have reported it.
    for (auto& e : errors) {
        if (!e) continue;
        try {
            std::rethrow_exception(e);
        } catch (const Error& err) {
            name_lockdown(err);
        }
    }
    for (auto& s : sources_) s->open_window();
    attach_ns_ = window_start_ns_ = last_tick_ns_ = monotonic_ns();
    if (cfg_.jvm_dump) request(OnDemand::jvm_dump);
}

// -v: which processes pay for the socket arrivals, at the first tick and whenever it changes.
void Collector::say_scope(const Snapshot& s) {
    const auto scope = sock_scope(s.probe_attach);
    if (!scope) return;
    const std::string said = scope->cgroup ? "socket arrivals scoped to cgroup " + scope->path
                                           : "socket arrivals from the global hook, every process pays: " + scope->why;
    if (said == scope_said_) return;
    scope_said_ = said;
    std::fprintf(stderr, "qscope: %s\n", said.c_str());
}

void Collector::request(OnDemand what) {
    std::lock_guard<std::mutex> g(requests_mu_);
    requests_.push_back(what);
}

bool Collector::finish_requests() {
    bool waited = false;
    for (auto& s : sources_) waited |= s->finish_requests();
    return waited;
}

std::shared_ptr<const Snapshot> Collector::tick() {
    auto snap = std::make_shared<Snapshot>();
    Tick t;
    t.index = tick_index_++;
    t.now_ns = monotonic_ns();
    t.window_reset = t.index == 0 || reset_requested_.exchange(false);
    if (t.window_reset && t.index > 0) window_start_ns_ = t.now_ns;
    t.window_start_ns = window_start_ns_;
    t.dt_seconds = (t.now_ns - last_tick_ns_) / 1e9;
    last_tick_ns_ = t.now_ns;

    snap->tick = t.index;
    target_.refresh();
    snap->target = target_.info();
    const bool root_alive = target_.alive();
    // A master that exits leaving its workers (nginx's binary upgrade, a re-parented
    // pool) still has a service to observe.
    const auto& procs = snap->target.processes;
    const bool forked_remain = std::any_of(procs.begin(), procs.end(),
                                           [&](const ProcessInfo& p) { return p.pid != target_.pid(); });
    const bool alive = root_alive || forked_remain;
    if (!root_alive && alive)
        snap->warnings.push_back("target PID " + std::to_string(target_.pid()) + " exited; still observing the " +
                                 std::to_string(procs.size()) + " processes it forked");
    if (!alive) {
        target_alive_ = false;
        snap->target.exited = true;
        snap->target.exit_note = "target PID " + std::to_string(target_.pid()) +
                                 " exited during the run; figures cover the time it was alive";
    }
    if (!lockdown_note_.empty()) snap->warnings.push_back(lockdown_note_);
    for (ProbeAttach& a : target_.attach()) snap->probe_attach.push_back(std::move(a));
    snap->window_seconds = (t.now_ns - window_start_ns_) / 1e9;
    snap->attached_seconds = (t.now_ns - attach_ns_) / 1e9;
    snap->taken_at_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    std::vector<OnDemand> requests;
    {
        std::lock_guard<std::mutex> g(requests_mu_);
        requests.swap(requests_);
    }
    for (auto& s : sources_) {
        snap->probes.add(s->family());
        const uint64_t ts = monotonic_ns();
        try {
            for (OnDemand r : requests) s->request(r);
            s->collect(*snap, t);
        } catch (const std::exception& e) {
            // One source failing (say, the target vanished mid-read) must not take down
            // the others: mark its sections partial and go on.
            snap->partial.push_back(std::string(s->name()) + ": " + e.what());
        }
        snap->lost_events += s->lost_events();
        if (cfg_.verbose && t.index == 0)
            std::fprintf(stderr, "qscope: tick 0 %s %.0f ms\n", s->name(), (monotonic_ns() - ts) / 1e6);
    }
    if (cfg_.verbose) say_scope(*snap);
    compute_verdict(*snap, t.index == 0 ? Seen::first_look : Seen::window);
    std::shared_ptr<const Snapshot> out = snap;
    {
        std::lock_guard<std::mutex> g(latest_mu_);
        latest_ = out;
    }
    if (t.index == 0)
        for (auto& s : sources_) s->after_first_tick();
    return out;
}

void Collector::run_in_background(std::function<void(const std::shared_ptr<const Snapshot>&)> on_tick) {
    stop_ = false;
    thread_ = std::thread([this, on_tick] {
        const auto interval = std::chrono::microseconds(static_cast<int64_t>(cfg_.interval_seconds * 1e6));
        auto next = std::chrono::steady_clock::now();
        while (!stop_) {
            auto snap = tick();
            if (on_tick) on_tick(snap);
            next += interval;
            std::unique_lock<std::mutex> lk(wait_mu_);
            wait_cv_.wait_until(lk, next, [this] { return stop_.load(); });
        }
    });
}

void Collector::stop() {
    stop_ = true;
    wait_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const Snapshot> Collector::latest() const {
    std::lock_guard<std::mutex> g(latest_mu_);
    return latest_;
}

}  // namespace qscope
