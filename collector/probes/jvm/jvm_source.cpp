// Carrier threads (JVM virtual-thread carriers, Go's Ms, or --carriers REGEX for other
// runtimes) and the on-demand JVM enrichments (thread-dump aggregation, perf map). BPF side:
// bpf/carrier.bpf.c; model: carrier_model.h; JVM internals: jvm_vmstructs.h; Go:
// go_runtime.h.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <future>
#include <map>
#include <regex>
#include <set>

#include "probes/jvm/jvm_source.h"

#include "engine/bpf_util.h"
#include "engine/kernel_features.h"
#include "carrier.skel.h"
#include "carrier.h"
#include "probes/jvm/carrier_model.h"
#include "probes/jvm/go_runtime.h"
#include "model/errors.h"
#include "model/runtime_frames.h"
#include "model/syscall_table.h"
#include "probes/jvm/jvm_dump.h"
#include "probes/jvm/jvm_vmstructs.h"
#include "engine/source.h"
#include "symbols/symbolizer.h"
#include "sys/proc_tasks.h"
#include "engine/target.h"

namespace qscope {
namespace {

static_assert(sizeof(qs_carrier) == 88, "qs_carrier layout shared with carrier.bpf.c");
static_assert(sizeof(qs_carrier_stall) == 32, "qs_carrier_stall layout");
static_assert(sizeof(qs_carrier_pinned) == 16, "qs_carrier_pinned layout");

constexpr uint64_t kStallThresholdNs = 20'000'000;  // JFR jdk.VirtualThreadPinned default
constexpr const char* kCarrierClass = "jdk/internal/misc/CarrierThread";
constexpr size_t kMaxWindowStalls = 4096;   // kept per window for the "stalls" list
constexpr size_t kStallsShown = 20;
constexpr size_t kSymbolizePerTick = 64;    // stacks are symbolized when they arrive
constexpr double kRescanSeconds = 2.0;      // carrier set refresh when the thread count is stable
// Renamed Tokio workers not found at attach are looked for again every kRescanSeconds for the
// first minute, then every kTokioLookLaterSeconds (look_for_tokio_again).
constexpr double kTokioLookFirstSeconds = 60.0;
constexpr double kTokioLookLaterSeconds = 30.0;
constexpr double kJcmdTimeout = 15.0;

// bpf_ktime_get_ns() clock.
uint64_t mono_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

struct StallRec {
    int tid = 0;
    uint64_t start_ns = 0, duration_ns = 0;
    int64_t syscall = -1;
    bool pinned = false;
    std::string vm_reason;  // non-empty: a VM wait, not a stall
    std::vector<std::string> stack;
};

// Tokio's multi-thread runtime names its workers "tokio-runtime-worker" (a comm keeps 15
// characters) unless the program names them otherwise (Builder::thread_name{,_fn}).
constexpr std::string_view kTokioWorkerComm = "tokio-runtime-w";
// In a symbol name of every program built with Tokio's multi-thread scheduler, in either of
// Rust's manglings.
constexpr std::string_view kTokioSchedulerSymbol = "7runtime9scheduler12multi_thread6worker";
// At most this many blocked threads' stacks are read at attach to find renamed workers.
constexpr int kTokioStackLooks = 32;
// Past this many threads not yet named, a scan reads every name in one pass where the kernel
// allows (Target::thread_names_one_pass: an iterator's link and its read) rather than a /proc
// comm file each (an open, a read and a close; 10,002 of them took 120-190 ms of a start, the
// pass under 20 ms).
constexpr long kCommFilesAtMost = 64;

class JvmSource final : public Source {
public:
    ProbeFamily family() const override { return ProbeFamily::jvm; }

    void start(const Target& target, const Config& cfg) override {
        cfg_ = cfg;
        pid_ = target.pid();
        target_ = &target;
        jvm_ = jvm::find_jvm(pid_);
        if (!jvm_) pick_jvm_in_tree(target);
        if (jvm_) {
            jvm::load_vmstructs(pid_, *jvm_);
            mem_ = std::make_unique<jvm::ProcessMemory>(pid_);
            jcmd_ = jvm::find_jcmd(*jvm_);
        }
        if (!cfg.carriers_regex.empty()) {
            try {
                regex_ = std::regex(cfg.carriers_regex);
            } catch (const std::regex_error& e) {
                throw Error(Exit::usage, "--carriers: invalid regular expression '" + cfg.carriers_regex +
                                             "': " + e.what());
            }
            pattern_ = cfg.carriers_regex;
        } else if (jvm_) {
            pattern_ = "ForkJoinPool-N-worker-M (JVM virtual-thread scheduler)";
        } else if ((go_ = go::find_go(pid_))) {
            // Every thread of a Go program is an M of its scheduler (a cgo library's own
            // threads share the comm and cannot be told apart: counted as Ms too).
            go_mode_ = true;
            pattern_ = "Go scheduler threads (Ms" + (go_->version.empty() ? "" : ", " + go_->version) + ")";
            mem_ = std::make_unique<jvm::ProcessMemory>(pid_);
            if (!go_->why.empty())
                notes_.push_back("carriers: Go program " + go_->path + ": GOMAXPROCS unknown (" + go_->why +
                                 "); whether every P is busy is not judged");
        } else if (find_tokio_workers()) {
            // Tokio's workers run tasks as Go's Ms run goroutines: parked on a condvar (futex)
            // or in the I/O driver's epoll_wait when they have none, the generic rule.
            tokio_mode_ = true;
            pattern_ = tokio_pattern();
        } else {
            // Not a JVM, Go or Tokio, and no pattern: nothing to watch, no probes attached. A
            // program that links Tokio's scheduler is looked at again (look_for_tokio_again).
            tokio_look_again_ = tokio_links_scheduler_ && cfg.want_stacks;
            attached_ns_ = mono_ns();
            if (!tokio_unfound_.empty()) {
                notes_.push_back(tokio_unfound_note());
                hooks_off(tokio_unfound_);
            } else {
                hooks_off("the target is neither a JVM, a Go program nor a Tokio one (threads named "
                          "tokio-runtime-worker, or found in its scheduler's frames), and no --carriers pattern "
                          "was given");
            }
            return;
        }
        jvm_mode_ = jvm_ && jvm_->layout.has_value();
        if (jvm_mode_ && cfg.carriers_regex.empty() && !jvm_->layout->has_vthread && !jvm_->layout->jt_cont_entry) {
            // JDK < 21: no virtual threads, so no carriers; its ForkJoinPool workers are
            // ordinary pool threads (the sched family covers them).
            pattern_.clear();
            hooks_off("this JVM has no virtual threads (JDK < 21), so no carriers");
            return;
        }
        if (jvm_ && !jvm_mode_)
            notes_.push_back("carriers: JVM internals unreadable (" + jvm_->why +
                             "); mounted-vs-idle falls back to the generic rule (blocked outside futex/epoll = stalled)");
        if (cfg.jvm_perfmap && jvm_) run_perfmap();
        open_bpf(cfg);
        refresh_carriers(true);
        if (cfg.verbose)
            std::fprintf(stderr, "qscope: carriers: %zu attached (%s)\n", carriers_.size(), contract_name(runtime()));
    }

    // --jvm-dump, or 'j' in top: jcmd runs on a thread of its own (seconds, with a 15 s
    // timeout, that no tick waits for); the first collect() after it finishes shows it.
    void request(OnDemand what) override {
        if (what != OnDemand::jvm_dump) return;
        if (!jvm_) {
            dump_notes_.push_back("--jvm-dump: PID " + std::to_string(pid_) + " is not a JVM (no libjvm.so mapped)");
            return;
        }
        if (jcmd_.empty()) {
            dump_notes_.push_back("--jvm-dump: no jcmd found for " + jvm_->java_home);
            return;
        }
        if (dump_.valid()) return;  // one at a time: the running dump is as fresh
        dump_ = std::async(std::launch::async, jvm::thread_dump, jcmd_, pid_, kJcmdTimeout);
    }

    bool finish_requests() override {
        if (!dump_.valid()) return false;
        dump_.wait();
        return true;
    }

    // Utilization is busy time over the window: the carriers found at start() have been
    // counting since, while the other families started (a few hundred ms; more under ASan),
    // which read 0.12-0.15 too busy on a 3 s window (go_test's GOMAXPROCS=2 case against
    // schedstat). Their busy time restarts from here. Stalls keep counting from the attach
    // (collect() says why).
    void open_window() override {
        if (!skel_) return;
        const uint64_t now = mono_ns();
        const int map_fd = bpf_map__fd(skel_->maps.carriers);
        for (auto& [tid, info] : carriers_) {
            qs_carrier k{};
            if (bpf_map_lookup_elem(map_fd, &tid, &k) != 0) continue;
            info.busy_base = carrier::busy_ns(k, now);
            info.base_ns = now;
        }
    }

    void collect(Snapshot& snap, const Tick& tick) override {
        if (tokio_look_again_) look_for_tokio_again();
        take_thread_dump();
        for (auto& n : dump_notes_) snap.warnings.push_back(std::move(n));
        dump_notes_.clear();
        if (!parked_.empty()) snap.parked_virtual_threads = parked_;
        for (const auto& n : notes_) snap.warnings.push_back(n);
        snap.probe_attach.insert(snap.probe_attach.end(), attach_.begin(), attach_.end());
        if (!skel_) {
            // Tokio's renamed workers not found yet (running at attach, or --no-stacks): a
            // Tokio program with no carriers, whose event loops may be those workers (loop_limit).
            if (!tokio_unfound_.empty()) snap.carriers.runtime = CarrierRuntime::tokio;
            return;
        }

        const uint64_t now = tick.now_ns;
        // The first window starts when the probes attached (before the collector's first
        // tick, which waits for every other source to start): stalls in between count.
        // The kernel counts every mounted block >= the threshold; VM waits are told apart only
        // here, from the records' stacks, and subtracted. A record read now may belong to a
        // block the counter read just before did not include yet: only VM waits that ended
        // before that read are subtracted this tick, the rest at the next one, so the count
        // never dips below the truth. Records without a stack (ring buffer short of room,
        // symbolizing capped) stay stalls.
        const uint64_t read_at = mono_ns();
        const uint64_t stalls_total = read_counter(QS_CC_STALLS);
        if (tick.window_reset && tick.index > 0) {
            window_stalls_.clear();
            window_stalls_dropped_ = false;
        }
        refresh_carriers(false);
        symbolized_this_tick_ = 0;
        tokio_looked_at_.clear();
        ring_buffer__consume(rb_.get());
        lost_.update("carriers",
                     {{read_counter(QS_CC_RB_DROPS), "stall records (ring buffer full): not listed, still counted"}},
                     snap);
        while (!vm_pending_.empty() && vm_pending_.front() < read_at) {
            vm_pending_.pop_front();
            vm_waits_total_++;
        }
        if (tick.window_reset && tick.index > 0) {
            window_stalls_base_ = stalls_total;
            vm_waits_base_ = vm_waits_total_;
        }

        Carriers& c = snap.carriers;
        c.detected = !carriers_.empty();
        c.pattern = pattern_;
        c.runtime = runtime();
        c.mount_state_known = jvm_mode_;
        c.stall_events_total = stalls_total - std::min(stalls_total, vm_waits_total_);
        const uint64_t window_all = stalls_total - std::min(stalls_total, window_stalls_base_);
        c.vm_waits = std::min(window_all, vm_waits_total_ - std::min(vm_waits_total_, vm_waits_base_));
        c.stall_events = window_all - c.vm_waits;
        if (cfg_.verbose >= 2)
            std::fprintf(stderr, "qscope: carriers: tick %llu reset %d stalls total %llu base %llu records %zu\n",
                         (unsigned long long)tick.index, (int)tick.window_reset, (unsigned long long)stalls_total,
                         (unsigned long long)window_stalls_base_, window_stalls_.size());
        qs_hist h{};
        const uint32_t zero = 0;
        if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stall_hist), &zero, &h) == 0)
            c.stall_total = Histogram::from_kernel(h);

        if (go_mode_) c.procs = std::max(0, go::read_gomaxprocs(*mem_, *go_));
        if (tokio_mode_) c.procs = static_cast<int>(carriers_.size());  // its blocking pool's threads dropped once seen
        const int map_fd = bpf_map__fd(skel_->maps.carriers);
        std::vector<CarrierStall> ongoing;
        for (auto& [tid, info] : carriers_) {
            qs_carrier k{};
            const bool have = bpf_map_lookup_elem(map_fd, &tid, &k) == 0;
            carrier::Observation o;
            o.generic = !jvm_mode_;
            o.go = go_mode_;
            o.bpf_state = have ? k.state : 0;
            if (o.bpf_state == QS_CS_UNKNOWN) fill_from_proc(tid, info.jt, o);
            CarrierThread t;
            t.tid = tid;
            t.name = info.name;
            t.state = carrier::classify(o);
            if (have) {
                const uint64_t busy = carrier::busy_ns(k, now);
                if (tick.window_reset && tick.index > 0) {
                    info.busy_base = busy;
                    info.base_ns = now;
                }
                t.utilization = carrier::utilization(info.busy_base, busy, std::max(info.base_ns, tick.window_start_ns), now);
                c.busy += t.utilization;
            }
            // Blocked right now with a virtual thread mounted, but on the VM (a safepoint, a GC
            // pause): not a stall of the carrier's task. Shown as "blocked", counted nowhere.
            // A Go M blocked under one of the runtime's idle frames holds no goroutine: idle.
            std::string vm_now;
            if (have && k.state == QS_CS_STALLED && (jvm_mode_ || go_mode_ || tokio_mode_) && cfg_.want_stacks)
                vm_now = current_vm_wait(tid);
            if (!vm_now.empty()) t.state = go_mode_ ? CarrierState::idle : CarrierState::blocked;
            std::vector<std::string> lock_stack;
            if (have && k.state == QS_CS_IDLE && tokio_mode_ && cfg_.want_stacks &&
                syscall_class(k.syscall) == SyscallClass::futex)
                lock_stack = task_lock_wait(tid);
            if (!lock_stack.empty()) t.state = CarrierState::stalled;
            c.threads++;
            switch (t.state) {
                case CarrierState::running: c.running++; break;
                case CarrierState::runnable: c.runnable++; break;
                case CarrierState::idle: c.idle++; break;
                case CarrierState::stalled: c.stalled++; break;
                case CarrierState::blocked: break;  // see above
            }
            const bool stalled_now = (have && k.state == QS_CS_STALLED && vm_now.empty()) || !lock_stack.empty();
            if (stalled_now && k.block_start_ns && now > k.block_start_ns && now - k.block_start_ns >= kStallThresholdNs) {
                CarrierStall s;
                s.tid = tid;
                s.syscall = carrier::syscall_label(k.syscall);
                s.reason = carrier::stall_reason(k.syscall, false, runtime(), lock_stack);
                s.seconds = (now - k.block_start_ns) / 1e9;
                s.ongoing = true;
                s.stack = std::move(lock_stack);
                ongoing.push_back(std::move(s));
            }
            c.per_carrier.push_back(t);
        }
        std::vector<const StallRec*> done;
        for (const auto& s : window_stalls_)
            if (s.vm_reason.empty()) done.push_back(&s);
        std::sort(done.begin(), done.end(),
                  [](const StallRec* a, const StallRec* b) { return a->duration_ns > b->duration_ns; });
        std::sort(ongoing.begin(), ongoing.end(),
                  [](const CarrierStall& a, const CarrierStall& b) { return a.seconds > b.seconds; });
        for (auto& s : ongoing)
            if (c.stalls.size() < kStallsShown) c.stalls.push_back(std::move(s));
        for (const StallRec* r : done) {
            if (c.stalls.size() >= kStallsShown) break;
            CarrierStall s;
            s.tid = r->tid;
            s.syscall = carrier::syscall_label(r->syscall);
            s.reason = carrier::stall_reason(r->syscall, r->pinned, runtime(), r->stack);
            s.seconds = r->duration_ns / 1e9;
            s.stack = r->stack;
            c.stalls.push_back(std::move(s));
        }
        if (window_stalls_dropped_)
            snap.partial.push_back("carriers: only the first " + std::to_string(kMaxWindowStalls) +
                                   " stalls of the window are listed; counts are exact");
    }

private:
    // The carrier family watches one JVM, not the tree: its model is one VM's internals
    // (VMStructs offsets, JavaThread addresses read from its memory, its libjvm for the
    // pinned-park uprobe) and carrier_bpf's `carriers` map holds that VM's thread IDs, so its
    // BPF filter stays the single-tgid compare of that JVM (targ_tgid) instead of the tree's
    // bitmap. A JVM does not fork JVMs of its own (Runtime.exec/ProcessBuilder spawn and exec
    // other programs), so a tree rooted at a JVM has its carriers in the root. When the root
    // is a wrapper (a shell script, a supervisor) the one JVM among its descendants is
    // watched; several JVMs are named, and none is guessed.
    void pick_jvm_in_tree(const Target& target) {
        const auto members = target.processes();
        if (members.size() < 2) return;
        constexpr size_t kMaxRead = 256;  // /proc/PID/maps of each: bounded at start
        std::vector<std::pair<int, jvm::JvmProcess>> found;
        for (size_t i = 1; i < members.size() && i <= kMaxRead; ++i)
            if (auto j = jvm::find_jvm(members[i].pid)) found.emplace_back(members[i].pid, std::move(*j));
        if (found.size() == 1) {
            notes_.push_back("carriers: PID " + std::to_string(pid_) + " is not a JVM; watching the JVM in its tree, PID " +
                             std::to_string(found[0].first));
            pid_ = found[0].first;
            jvm_ = std::move(found[0].second);
        } else if (found.size() > 1) {
            std::string pids;
            for (const auto& [pid, j] : found) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
            notes_.push_back("carriers: " + std::to_string(found.size()) + " JVMs in the tree (PIDs " + pids +
                             "); carriers are read from one JVM's internals: give that JVM's PID with --pid");
        }
    }

    struct CarrierInfo {
        uint64_t jt = 0;
        std::string name;
        // Utilization's baseline: carrier::busy_ns() at base_ns (registration or the window's reset).
        uint64_t busy_base = 0, base_ns = 0;
    };

    CarrierRuntime runtime() const {
        return jvm_mode_ ? CarrierRuntime::jvm
               : go_mode_ ? CarrierRuntime::go
               : tokio_mode_ ? CarrierRuntime::tokio
                             : CarrierRuntime::generic;
    }

    // Whether the target runs Tokio's multi-thread runtime, and the name its workers share
    // (tokio_comm_). Reads every thread's name into the cache the first scan uses: one walk at
    // attach; not Tokio, the cache is dropped (nothing is watched). A program that names its
    // workers itself is found by its symbols, then by a worker's stack (tokio_worker_comm).
    bool find_tokio_workers() {
        refill_comm_cache();
        for (const auto& [tid, comm] : comm_cache_)
            if (comm.rfind(kTokioWorkerComm, 0) == 0) {
                tokio_comm_ = kTokioWorkerComm;
                return true;
            }
        if (jvm::elf_has_symbol_containing("/proc/" + std::to_string(pid_) + "/exe", kTokioSchedulerSymbol)) {
            tokio_links_scheduler_ = true;
            tokio_comm_ = tokio_worker_comm();
            symbolized_this_tick_ = 0;  // the first scan tells the blocking pool apart by stacks too
            if (!tokio_comm_.empty()) return true;
        }
        comm_cache_.clear();
        return false;
    }

    // Every thread's name, read afresh (a Tokio look: at attach, and again in look_for_tokio_again),
    // in one pass where the kernel allows: a file each cost a 10,000-thread target's attach ~120 ms.
    void refill_comm_cache() { comm_cache_ = target_->thread_names(pid_); }

    // The note's intervals are the constants' (the first minute is spelled in words: held to 60 s).
    static_assert(kTokioLookFirstSeconds == 60.0, "tokio_unfound_note says 'after a minute'");
    std::string tokio_unfound_note() const {
        std::string note = "carriers: " + tokio_unfound_;
        if (tokio_look_again_) {
            char again[96];
            std::snprintf(again, sizeof again, " (looked for again every %g s, after a minute every %g s)",
                          kRescanSeconds, kTokioLookLaterSeconds);
            note += again;
        }
        return note;
    }

    std::string tokio_pattern() const {
        return tokio_comm_ == kTokioWorkerComm
                   ? "Tokio runtime workers (tokio-runtime-worker)"
                   : "Tokio runtime workers (named " + tokio_comm_ + "*, found by a worker's stack)";
    }

    // Renamed workers are found by the stack of one that waits (tokio_worker_comm). When none
    // was seen waiting at attach (all running, or blocked in a task's call), they are looked for
    // again, every kRescanSeconds for the first minute, then every kTokioLookLaterSeconds:
    // before, a program whose workers were busy at attach stayed read as event loops for the
    // whole run. Found, the family attaches then, and a note says its numbers start there. A
    // current-thread runtime has none: looked for to the end (an exporter's weeks), each look a
    // read of every thread's name and syscall and of at most kTokioStackLooks stacks.
    void look_for_tokio_again() {
        const uint64_t now = mono_ns();
        const double every =
            now - attached_ns_ < kTokioLookFirstSeconds * 1e9 ? kRescanSeconds : kTokioLookLaterSeconds;
        if (now - std::max(attached_ns_, last_scan_ns_) < every * 1e9) return;
        last_scan_ns_ = now;
        refill_comm_cache();
        // The warning says what the last look saw: threads running then (a helper thread of a
        // current-thread program, met running at attach, is not warned of for the whole run).
        std::erase(notes_, tokio_unfound_note());
        tokio_unfound_.clear();
        tokio_comm_ = tokio_worker_comm();
        if (tokio_comm_.empty()) {
            comm_cache_.clear();
            if (!tokio_unfound_.empty()) notes_.push_back(tokio_unfound_note());
            return;
        }
        // tokio_unfound_ stays empty: cleared above, and tokio_worker_comm sets it only when none is found.
        tokio_look_again_ = false;
        attach_.clear();  // hooks_off's
        tokio_mode_ = true;
        pattern_ = tokio_pattern();
        symbolized_this_tick_ = 0;
        char after[32];
        std::snprintf(after, sizeof after, "%.1f", (now - attached_ns_) / 1e9);
        notes_.push_back("carriers: the program's Tokio workers (named " + tokio_comm_ + "*) were found " + after +
                         " s after the attach, when one first waited: they are watched from then on");
        try {
            open_bpf(cfg_);
        } catch (const std::exception& e) {
            rb_ = {};
            links_.clear();
            skel_.reset();
            attach_.clear();  // open_bpf's, when it failed after its hooks were attached (the ring buffer)
            hooks_off(e.what());
            notes_.push_back(std::string("carriers: Tokio workers found, but the probes failed: ") + e.what());
            return;
        }
        refresh_carriers(true);
    }

    // A renamed worker's name less its number (carrier::name_family), read from one parked on
    // its condvar or in the I/O driver's epoll_wait whose stack shows the scheduler's worker
    // frames. The blocking pool's threads, which Tokio names alike, are told apart by the scan
    // as under the default name. "" when none is found; tokio_unfound_ then says why where a
    // worker may have been missed (threads running, or no stacks), and nothing for a program
    // that links the scheduler but runs a current-thread runtime.
    std::string tokio_worker_comm() {
        int waiting = 0, running = 0;
        for (const auto& [tid, comm] : comm_cache_) {
            if (tid == pid_) continue;  // main runs block_on, never a worker
            const auto sc = read_task_syscall(pid_, tid);
            if (!sc) continue;
            if (sc->running) {
                ++running;
                continue;
            }
            const SyscallClass cls = sc->nr < 0 ? SyscallClass::other : syscall_class(sc->nr);
            if (cls != SyscallClass::futex && cls != SyscallClass::epoll) continue;
            if (++waiting > kTokioStackLooks) break;
            if (cfg_.want_stacks && tokio_worker(stack_now(tid, *sc))) return carrier::name_family(comm);
        }
        const std::string links = "the program links Tokio's multi-thread runtime, but no thread is named "
                                  "tokio-runtime-worker";
        if (!cfg_.want_stacks && waiting + running > 0)
            tokio_unfound_ = links + ", and renamed workers are found by their stacks, which --no-stacks turns off: "
                                     "name them with --carriers REGEX";
        else if (running > 0)
            tokio_unfound_ = links + ", and no thread waiting where a worker parks shows a worker's frames; " +
                             std::to_string(running) +
                             " were running, whose stacks are not read: if they are its workers, name them with "
                             "--carriers REGEX";
        return {};
    }

    uint64_t read_counter(uint32_t idx) const {
        uint64_t v = 0;
        bpf_map_lookup_elem(bpf_map__fd(skel_->maps.counters), &idx, &v);
        return v;
    }

    void open_bpf(const Config& cfg) {
        skel_.reset(carrier_bpf__open());
        if (!skel_) throw_bpf_error("carrier: open BPF object", errno);
        auto* ro = skel_->rodata;
        ro->targ_tgid = static_cast<uint32_t>(pid_);
        ro->stall_threshold_ns = kStallThresholdNs;
        ro->want_stacks = cfg.want_stacks ? 1 : 0;
        ro->mount_mode = go_mode_ ? QS_MOUNT_GO : QS_MOUNT_GENERIC;
        if (jvm_mode_) {
            const auto& l = *jvm_->layout;
            if (l.jt_cont_entry) {
                ro->mount_mode = QS_MOUNT_CONT_ENTRY;
                ro->mount_off_a = *l.jt_cont_entry;
            } else if (l.has_vthread) {
                ro->mount_mode = QS_MOUNT_OOPHANDLES;
                ro->mount_off_a = l.jt_vthread;
                ro->mount_off_b = l.jt_threadobj;
            } else {
                // JDK < 21: no virtual threads, so nothing is ever mounted.
                jvm_mode_ = false;
                notes_.push_back("carriers: this JVM has no virtual threads (no JavaThread::_vthread)");
            }
        }
        const uint32_t max_carriers = std::max<uint32_t>(64, std::min<uint32_t>(cfg.max_threads, 4096));
        bpf_check(bpf_map__set_max_entries(skel_->maps.carriers, max_carriers), "carrier: size map carriers");
        bpf_check(bpf_map__set_max_entries(skel_->maps.stack_slots, cfg.want_stacks ? 256 : 1),
                  "carrier: size map stack_slots");
        const bool pin_hook = jvm_ && jvm_->has_pinned_event && jvm_mode_;
        bpf_program__set_autoload(skel_->progs.carrier_pinned, pin_hook);
        const KernelBtfLoan loan;
        if (int err = carrier_bpf__load(skel_.get()))
            throw_load_error(ProbeFamily::jvm, "carrier: load BPF programs (tp_btf/sched_switch, sched_wakeup)", err);
        links_.push_back(attach_program(skel_->progs.carrier_switch, "carrier: attach tp_btf/sched_switch"));
        links_.push_back(attach_program(skel_->progs.carrier_wakeup, "carrier: attach tp_btf/sched_wakeup"));
        attach_.push_back(program_attach(ProbeFamily::jvm, skel_->progs.carrier_switch));
        attach_.push_back(program_attach(ProbeFamily::jvm, skel_->progs.carrier_wakeup));
        if (!pin_hook)
            attach_.push_back(hook_off(ProbeFamily::jvm, kPinnedEvent,
                                       !jvm_ ? "not a JVM (--carriers pattern)"
                                       : !jvm_mode_ ? "JVM internals unreadable or no virtual threads"
                                                    : "this JVM has no JVM_VirtualThreadPinnedEvent (JDK 24+)"));
        if (pin_hook) {
            LIBBPF_OPTS(bpf_uprobe_opts, uo, .func_name = "JVM_VirtualThreadPinnedEvent");
            Link l(bpf_program__attach_uprobe_opts(skel_->progs.carrier_pinned, pid_, jvm_->libjvm_host.c_str(), 0,
                                                   &uo));
            if (!l) {
                const std::string why = errno_text(errno);
                notes_.push_back("carriers: cannot attach uprobe JVM_VirtualThreadPinnedEvent in " +
                                 jvm_->libjvm + ": " + why + "; futex stalls are not labelled 'pinned park'");
                attach_.push_back(hook_off(ProbeFamily::jvm, kPinnedEvent, "uprobe in " + jvm_->libjvm + ": " + why));
            } else {
                links_.push_back(std::move(l));
                attach_.push_back({ProbeFamily::jvm, kPinnedEvent, AttachType::uprobe,
                                   jvm_->libjvm + ":" + kPinnedEvent});
            }
        }
        rb_ = open_ring_buffer(skel_->maps.events, &JvmSource::on_event, this, "carrier: ring_buffer__new(events)");
    }

    static int on_event(void* ctx, void* data, size_t size) {
        auto* self = static_cast<JvmSource*>(ctx);
        if (size < sizeof(uint32_t)) return 0;
        const uint32_t kind = *static_cast<const uint32_t*>(data);
        if ((kind == QS_CARRIER_REC_STALL && size >= sizeof(qs_carrier_stall)) ||
            (kind == QS_CARRIER_REC_STALL_STACK && size >= sizeof(qs_carrier_stall_stack))) {
            const auto* r = static_cast<const qs_carrier_stall*>(data);
            StallRec s;
            s.tid = static_cast<int>(r->tid);
            s.start_ns = r->start_ns;
            s.duration_ns = r->duration_ns;
            s.syscall = r->syscall;
            // Tokio: a thread is told apart (worker or blocking pool) by one stack a tick, so that
            // 32 pool threads' records, ten a second each, leave the tick's budget for the rest.
            const bool told_apart = self->tokio_mode_ && (self->tokio_blocking_.count(s.tid) ||
                                                          !self->tokio_looked_at_.insert(s.tid).second);
            if (kind == QS_CARRIER_REC_STALL_STACK && !told_apart)
                self->symbolize(static_cast<const qs_carrier_stall_stack*>(data)->stack, s.stack);
            s.vm_reason = self->not_a_stall(s.tid, s.stack);
            if (!s.vm_reason.empty()) {
                self->vm_pending_.push_back(s.start_ns + s.duration_ns);
                if (self->cfg_.verbose >= 1) {
                    std::string top;
                    for (size_t i = 0; i < s.stack.size() && i < 8; i++) top += (i ? " <- " : "") + s.stack[i];
                    std::fprintf(stderr, "qscope: carriers: tid %d %.1f ms %s, not a stall: %s\n", s.tid,
                                 s.duration_ns / 1e6, s.vm_reason.c_str(), top.c_str());
                }
            }
            if (self->window_stalls_.size() >= kMaxWindowStalls) {
                self->window_stalls_dropped_ = true;
                return 0;
            }
            self->window_stalls_.push_back(std::move(s));
        } else if (kind == QS_CARRIER_REC_PINNED && size >= sizeof(qs_carrier_pinned)) {
            const auto* p = static_cast<const qs_carrier_pinned*>(data);
            // The JVM reports the pinned park right after it returns: label the stall of
            // that carrier that ended just before.
            for (auto it = self->window_stalls_.rbegin(); it != self->window_stalls_.rend(); ++it) {
                if (it->tid != static_cast<int>(p->tid)) continue;
                const uint64_t end = it->start_ns + it->duration_ns;
                if (end <= p->at_ns && p->at_ns - end < 100'000'000) it->pinned = true;
                break;
            }
        }
        return 0;
    }

    // The stack copied when the carrier's current block began (its slot is marked with
    // start_ns 0 until the block ends), judged like a finished record's.
    std::string current_vm_wait(int tid) {
        if (tokio_blocking_.count(tid)) return not_a_stall(tid, {});
        if (!stack_buf_) stack_buf_ = std::make_unique<qs_carrier_stall_stack>();
        const uint32_t key = static_cast<uint32_t>(tid);
        if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.stack_slots), &key, stack_buf_.get()) != 0) return {};
        if (stack_buf_->hdr.start_ns != 0 || stack_buf_->stack.tid != key) return {};
        std::vector<std::string> frames;
        symbolize(stack_buf_->stack, frames);
        return not_a_stall(tid, frames);
    }

    // A Tokio worker idle in futex by the kernel side's rule, whose task holds it there: a
    // std::sync::Mutex or Condvar wait, where a parked worker waits on a futex too. Told by its
    // stack as it stands (tokio_task_blocked), read only if the thread is still blocked at the
    // same place after the read. Returns that stack, or nothing for a parked worker or an
    // unreadable stack (which stays idle, as the kernel side has it).
    std::vector<std::string> task_lock_wait(int tid) {
        const auto sc = read_task_syscall(pid_, tid);
        if (!sc || sc->running || sc->nr < 0 || syscall_class(sc->nr) != SyscallClass::futex) return {};
        std::vector<std::string> frames = stack_now(tid, *sc);
        const auto again = read_task_syscall(pid_, tid);
        if (!again || again->running || again->sp != sc->sp || again->pc != sc->pc) return {};  // woke meanwhile
        return tokio_task_blocked(frames) ? frames : std::vector<std::string>{};
    }

    // A mounted block that is no stall of the carrier's task, by its stack: the JVM's own
    // waits (carrier::vm_wait_reason), a Go M parked under one of the runtime's idle frames
    // (model/runtime_frames.h), or a thread of Tokio's blocking pool in its job (it shares
    // the workers' name; dropped from the carriers at the next scan). "" for a stall.
    std::string not_a_stall(int tid, const std::vector<std::string>& stack) {
        if (tokio_mode_) {
            if (!tokio_blocking_.count(tid) && !tokio_blocking_pool(stack)) return {};
            if (tokio_blocking_.insert(tid).second) tokio_rescan_ = true;
            return "tokio: a blocking-pool thread in its job, not a worker";
        }
        if (!go_mode_) return carrier::vm_wait_reason(stack);
        const std::string idle = go_idle_frame(stack);
        return idle.empty() ? std::string() : "go: idle M in " + idle;
    }

    void symbolize(const qs_ustack& st, std::vector<std::string>& out) {
        if (symbolized_this_tick_ >= kSymbolizePerTick || st.size == 0) return;
        symbolized_this_tick_++;
        try {
            if (!symbolizer_) symbolizer_ = std::make_unique<Symbolizer>(pid_);
            auto ips = symbolizer_->unwind(st, 32);
            out = symbolizer_->symbolize_user(ips);
        } catch (const std::exception&) {
            // A stack is a bonus: the stall itself is already counted.
        }
    }

    void fill_from_proc(int tid, uint64_t jt, carrier::Observation& o) {
        std::string stat;
        const std::string base = "/proc/" + std::to_string(pid_) + "/task/" + std::to_string(tid);
        ProcStat ps;
        if (read_file(base + "/stat", stat) && parse_proc_stat(stat, ps)) o.proc_state = ps.state;
        if (jvm_mode_ && jt) {
            o.mounted_now = jvm::thread_mounted(*mem_, *jvm_->layout, jt);
        } else if (const auto sc = read_task_syscall(pid_, tid)) {
            // The model's -1 is "not in a syscall": /proc's running, or its -1 (outside one).
            o.proc_syscall = sc->running ? -1 : sc->nr;
        }
    }

    // Whether a thread named as Tokio's workers is its blocking pool's, told from /proc as the
    // scan first meets it (a thread met in its job has no stack copied for that block, so its
    // first stall could not be told apart). Between jobs a pool thread waits on a condvar with
    // its keep-alive (10 s by default) as a timeout, where a worker parks with none or in the
    // I/O driver's epoll_wait: a timed futex wait (its 4th argument) is the pool's. A worker
    // whose task waits on a timed condvar would be taken for the pool's and left out of the
    // workers' count: a blocking call on a worker is a mistake Tokio's documentation warns of.
    // Blocked elsewhere, its stack is read as it stands (stack_now).
    bool in_blocking_pool_now(int tid) {
        const auto sc = read_task_syscall(pid_, tid);
        if (!sc || sc->running || sc->nr < 0) return false;
        const SyscallClass cls = syscall_class(sc->nr);
        if (cls == SyscallClass::futex) return sc->args[3] != 0;
        if (cls == SyscallClass::epoll || !cfg_.want_stacks) return false;
        return tokio_blocking_pool(stack_now(tid, *sc));
    }

    // The stack of a thread blocked in a syscall, as it stands: stack pointer and program
    // counter from /proc's syscall file, the bytes above from /proc/PID/mem. Empty when
    // unreadable or past the tick's symbolizing budget.
    std::vector<std::string> stack_now(int tid, const ProcSyscall& sc) {
        if (!stack_buf_) stack_buf_ = std::make_unique<qs_carrier_stall_stack>();
        qs_ustack& st = stack_buf_->stack;
        st = {};
        st.regs[QS_REG_RSP] = sc.sp;
        st.regs[QS_REG_RIP] = sc.pc;
        st.tid = static_cast<uint32_t>(tid);
        const int fd = ::open(("/proc/" + std::to_string(pid_) + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) return {};
        const ssize_t n = ::pread(fd, st.data, sizeof st.data, static_cast<off_t>(sc.sp));
        ::close(fd);
        if (n <= 0) return {};
        st.size = static_cast<uint32_t>(n);
        std::vector<std::string> frames;
        symbolize(st, frames);
        return frames;
    }

    // The pool's threads end after their keep-alive and new ones start: an exporter running for
    // weeks keeps only the tids still there.
    void forget_gone_pool_threads() {
        for (auto it = tokio_blocking_.begin(); it != tokio_blocking_.end();)
            it = comm_cache_.count(*it) ? std::next(it) : tokio_blocking_.erase(it);
    }

    // /proc/PID/stat's num_threads: cheaper than listing the tasks every tick.
    int thread_count() const {
        std::string stat;
        ProcStat ps;
        if (read_file("/proc/" + std::to_string(pid_) + "/stat", stat) && parse_proc_stat(stat, ps))
            return ps.num_threads;
        return -1;
    }

    // Finds carriers: on the first call, when the thread count changed, or every few
    // seconds. JVM: JavaThreads whose java.lang.Thread is a jdk.internal.misc.CarrierThread
    // (read through VMStructs: excludes JDK 25's ForkJoinPool-1-delayScheduler, which
    // shares the carriers' comm, and application ForkJoinPools); --carriers: comm regex.
    void refresh_carriers(bool force) {
        const uint64_t now = monotonic_ns();
        const int nthreads = thread_count();
        if (!force && !tokio_rescan_ && nthreads == last_nthreads_ && (now - last_scan_ns_) / 1e9 < kRescanSeconds)
            return;
        tokio_rescan_ = false;
        last_nthreads_ = nthreads;
        last_scan_ns_ = now;

        std::map<int, CarrierInfo> found;
        std::map<int, uint64_t> jts;
        if (jvm_mode_) jts = jvm::java_threads(*mem_, *jvm_->layout);
        const bool by_regex = !cfg_.carriers_regex.empty();
        bool need_names = false;
        // Thread names rarely change after start: read each new tid's comm once, so a
        // 10,000-thread target costs one directory listing per scan, not 10,000 reads. Many
        // new ones (the first scan of a JVM, a pool grown) are read in one pass instead, where
        // the kernel has one: without it, every name read afresh would cost more files than the
        // new ones alone.
        const std::vector<int> tids = list_tids(pid_);
        const auto fresh = std::count_if(tids.begin(), tids.end(), [&](int tid) { return !comm_cache_.count(tid); });
        std::optional<std::map<int, std::string>> all;
        if (fresh > kCommFilesAtMost) all = target_->thread_names_one_pass(pid_);
        if (all) {
            comm_cache_ = std::move(*all);
        } else {
            std::map<int, std::string> comms;
            for (int tid : tids) {
                auto cached = comm_cache_.find(tid);
                comms[tid] = cached != comm_cache_.end() ? cached->second : read_task_comm(pid_, tid);
            }
            comm_cache_.swap(comms);
        }
        for (const auto& [tid, comm] : comm_cache_) {
            CarrierInfo info;
            info.name = comm;
            if (go_mode_) {
                found[tid] = info;
                continue;
            }
            if (tokio_mode_ && !by_regex) {
                if (!carrier::in_name_family(comm, tokio_comm_)) continue;
                if (!carriers_.count(tid) && !tokio_blocking_.count(tid) && in_blocking_pool_now(tid))
                    tokio_blocking_.insert(tid);
                if (!tokio_blocking_.count(tid)) found[tid] = info;
                continue;
            }
            if (by_regex) {
                if (!std::regex_search(comm, regex_)) continue;
                if (jvm_mode_) {
                    auto it = jts.find(tid);
                    if (it == jts.end()) continue;  // JVM mode reads JavaThread fields
                    info.jt = it->second;
                }
                found[tid] = info;
                continue;
            }
            if (comm.rfind("ForkJoinPool-", 0) != 0) continue;
            if (!jvm_mode_) {
                // No VMStructs: comm only. JDK 25's delayScheduler is in here too (noted).
                if (std::regex_match(comm, std::regex(R"(ForkJoinPool-\d+-?)"))) found[tid] = info;
                continue;
            }
            auto it = jts.find(tid);
            if (it == jts.end()) continue;
            info.jt = it->second;
            const std::string cls = jvm::thread_class_name(*mem_, *jvm_->layout, info.jt);
            if (cls.empty()) {
                need_names = true;
                found[tid] = info;  // decided below by Java name
                continue;
            }
            if (cls == kCarrierClass) found[tid] = info;
        }
        if (need_names) filter_by_java_names(found);
        if (cfg_.verbose >= 2)
            std::fprintf(stderr, "qscope: carriers: scan of %d threads found %zu carriers\n", nthreads, found.size());
        if (tokio_mode_) forget_gone_pool_threads();
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        if (tokio_mode_ && !by_regex && cpus > 0 && found.size() > static_cast<size_t>(cpus) && !tokio_count_noted_) {
            tokio_count_noted_ = true;
            notes_.push_back("carriers: " + std::to_string(found.size()) + " threads named tokio-runtime-worker, more " +
                             "than this host's " + std::to_string(cpus) + " CPUs (Tokio's default number of workers): " +
                             "some may be its blocking pool's (spawn_blocking, tokio::fs), each counted as a worker " +
                             "until seen in a job, and whether every worker is busy is then judged against too many");
        }
        if (!jvm_mode_ && !go_mode_ && !tokio_mode_ && !by_regex && !comm_only_noted_) {
            comm_only_noted_ = true;
            notes_.push_back("carriers: matched by thread name prefix only; JDK 25's ForkJoinPool-1-delayScheduler "
                             "may be counted as a carrier");
        }

        const int map_fd = bpf_map__fd(skel_->maps.carriers);
        const int slot_fd = bpf_map__fd(skel_->maps.stack_slots);
        for (auto it = carriers_.begin(); it != carriers_.end();) {
            if (!found.count(it->first)) {
                bpf_map_delete_elem(map_fd, &it->first);
                bpf_map_delete_elem(slot_fd, &it->first);
                it = carriers_.erase(it);
            } else {
                ++it;
            }
        }
        for (auto& [tid, info] : found) {
            auto cur = carriers_.find(tid);
            if (cur != carriers_.end() && cur->second.jt == info.jt) continue;
            qs_carrier k{};
            k.jt = info.jt;
            k.syscall = -1;
            const uint32_t key = static_cast<uint32_t>(tid);
            if (bpf_map_update_elem(map_fd, &key, &k, BPF_ANY) != 0) continue;  // map full: unwatched
            info.base_ns = mono_ns();
            if (cfg_.want_stacks) {
                static qs_carrier_stall_stack zero_slot{};
                bpf_map_update_elem(slot_fd, &key, &zero_slot, BPF_NOEXIST);  // full: no stacks
            }
            carriers_[tid] = info;
        }
    }

    // Fallback when class names cannot be read: Java names from `jcmd Thread.print`.
    void filter_by_java_names(std::map<int, CarrierInfo>& found) {
        std::map<int, std::string> names;
        if (!jcmd_.empty()) {
            auto r = jvm::run_command({jcmd_, std::to_string(pid_), "Thread.print"}, kJcmdTimeout);
            if (r.exit_status == 0)
                for (const auto& e : jvm::parse_thread_print(r.out)) names[e.nid] = e.name;
        }
        for (auto it = found.begin(); it != found.end();) {
            auto n = names.find(it->first);
            if (n == names.end()) {
                ++it;  // unknown: keep (comm matched)
                continue;
            }
            if (!jvm::is_carrier_name(n->second)) {
                it = found.erase(it);
            } else {
                it->second.name = n->second;
                ++it;
            }
        }
    }

    // A finished dump replaces the last one; a failed one leaves it and says why.
    void take_thread_dump() {
        if (!dump_.valid() || dump_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
        jvm::ThreadDump d = dump_.get();
        if (!d.error.empty())
            dump_notes_.push_back("--jvm-dump: " + d.error);
        else
            parked_ = std::move(d.parked);
    }

    void run_perfmap() {
        if (jcmd_.empty()) {
            notes_.push_back("--jvm-perfmap: no jcmd found for " + jvm_->java_home);
            return;
        }
        auto r = jvm::run_command({jcmd_, std::to_string(pid_), "Compiler.perfmap"}, kJcmdTimeout);
        if (r.timed_out || r.exit_status != 0)
            notes_.push_back("--jvm-perfmap: jcmd Compiler.perfmap failed" +
                             std::string(r.timed_out ? " (timed out)" : ""));
    }

    Config cfg_;
    int pid_ = 0;
    const Target* target_ = nullptr;
    std::optional<jvm::JvmProcess> jvm_;
    std::unique_ptr<jvm::ProcessMemory> mem_;
    std::string jcmd_;
    bool jvm_mode_ = false;
    std::optional<go::GoProcess> go_;
    bool go_mode_ = false;
    bool tokio_mode_ = false;
    std::set<int> tokio_blocking_;  // tids of Tokio's blocking pool (seen in a job, or idle in it): never workers
    bool tokio_rescan_ = false;     // one joined tokio_blocking_: drop it at the next tick
    bool tokio_count_noted_ = false;
    std::string tokio_comm_;     // Tokio's workers' name family: kTokioWorkerComm, or the program's
    std::string tokio_unfound_;  // why a program that links Tokio's scheduler has no workers found
    bool tokio_links_scheduler_ = false;  // the executable has Tokio's multi-thread scheduler
    bool tokio_look_again_ = false;       // ... and no worker was found yet: look_for_tokio_again
    uint64_t attached_ns_ = 0;
    std::regex regex_;
    std::string pattern_;
    std::vector<std::string> notes_;
    std::vector<ProbeAttach> attach_;  // every hook and how it was reached, for the snapshot
    static constexpr const char* kPinnedEvent = "JVM_VirtualThreadPinnedEvent";
    // The family's three hooks, off for this target.
    void hooks_off(const std::string& why) {
        for (const char* h : {"sched_switch", "sched_wakeup", kPinnedEvent})
            attach_.push_back(hook_off(ProbeFamily::jvm, h, why));
    }
    bool comm_only_noted_ = false;

    // Declared in the order they are made, so they are released in reverse.
    QSCOPE_SKEL_PTR(carrier) skel_;
    std::vector<Link> links_;
    RingBuffer rb_;

    std::map<int, CarrierInfo> carriers_;
    std::map<int, std::string> comm_cache_;
    int last_nthreads_ = -1;
    uint64_t last_scan_ns_ = 0;

    std::deque<StallRec> window_stalls_;
    bool window_stalls_dropped_ = false;
    uint64_t window_stalls_base_ = 0;
    std::deque<uint64_t> vm_pending_;   // end times of VM-wait records not yet subtracted
    uint64_t vm_waits_total_ = 0, vm_waits_base_ = 0;
    size_t symbolized_this_tick_ = 0;
    std::set<int> tokio_looked_at_;  // this tick: tids whose record's stack was looked at
    std::unique_ptr<Symbolizer> symbolizer_;
    std::unique_ptr<qs_carrier_stall_stack> stack_buf_;  // 8 KiB: not on the stack
    std::vector<ParkedFrames> parked_;
    std::vector<std::string> dump_notes_;  // for the next snapshot's warnings
    // The running thread dump, which works on copies (jcmd path, pid). A source destroyed
    // while it runs waits for it here (jcmd's timeout bounds the wait).
    std::future<jvm::ThreadDump> dump_;
};

}  // namespace

std::unique_ptr<Source> make_jvm_source() { return std::make_unique<JvmSource>(); }

}  // namespace qscope
