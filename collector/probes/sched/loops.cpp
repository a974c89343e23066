// Event-loop turns: window deltas of the kernel's per-thread aggregates, stalls with where
// their time went (probes/sched/loops.h).
#include "probes/sched/loops.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "model/loops.h"
#include "sys/syscall_names.h"

namespace qscope {

namespace {

constexpr size_t kStallsKept = 4;     // per loop, per window: the longest
constexpr uint64_t kSampleHz = 199;   // on-CPU samples: a 20 ms turn sees two or more

std::string comm_of(const char c[QS_COMM_LEN]) { return std::string(c, strnlen(c, QS_COMM_LEN)); }

void add_slots(Histogram& h, const uint32_t* slots, const std::vector<uint32_t>* base) {
    for (size_t i = 0; i < QS_WHIST_SLOTS; i++) {
        uint32_t n = slots[i];
        if (base && i < base->size()) n = n >= (*base)[i] ? n - (*base)[i] : 0;
        if (!n) continue;
        const uint64_t lo = qs_whist_slot_low(static_cast<uint32_t>(i));
        const uint64_t hi = i + 1 < QS_WHIST_SLOTS ? qs_whist_slot_low(static_cast<uint32_t>(i + 1)) : lo * 2;
        h.add((lo + hi) / 2, n);
    }
}

// The turn going on now's waits for a CPU: those that ended and the one going on, if any
// (bpf/qs_loop.h). Read apart from turn_start without a lock: clamped to the turn.
double current_turn_runqueue(const qs_loop_val& v, uint64_t now_ns, double turn_seconds) {
    if (!v.turn_start) return 0;
    uint64_t rq = v.turn_rq_ns;
    if (v.turn_rq_since >= v.turn_start && now_ns > v.turn_rq_since) rq += now_ns - v.turn_rq_since;
    return std::min(rq / 1e9, turn_seconds);
}

}  // namespace

double loop_utilization(uint64_t busy_ns_delta, uint64_t turn_start, uint64_t window_start_ns, uint64_t now_ns) {
    if (now_ns <= window_start_ns) return 0;
    uint64_t busy = busy_ns_delta;
    if (turn_start && now_ns > turn_start) busy += now_ns - std::max(turn_start, window_start_ns);
    return std::clamp(static_cast<double>(busy) / static_cast<double>(now_ns - window_start_ns), 0.0, 1.0);
}

void LoopTracker::start(bpf_object* obj, __u64* epoch, double stall_seconds, std::vector<std::string>& warnings,
                        std::vector<ProbeAttach>& attach) {
    epoch_ = epoch;
    stall_seconds_ = stall_seconds;
    bpf_map* loops = bpf_object__find_map_by_name(obj, "loops");
    bpf_map* wmax = bpf_object__find_map_by_name(obj, "loop_wmax");
    bpf_map* events = bpf_object__find_map_by_name(obj, "loop_events");
    if (!loops || !wmax || !events) throw_bpf_error("sched: find the event-loop maps", ENOENT);
    loops_fd_ = bpf_map__fd(loops);
    wmax_fd_ = bpf_map__fd(wmax);
    rb_ = open_ring_buffer(events, &LoopTracker::on_record, this, "sched: open ring buffer loop_events");

    bpf_program* sampler = bpf_object__find_program_by_name(obj, "qs_loop_sample");
    if (!sampler) return;
    const int ncpu = libbpf_num_possible_cpus();
    std::string failed;
    for (int cpu = 0; cpu < ncpu; cpu++) {
        perf_event_attr attr{};
        attr.size = sizeof(attr);
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_CPU_CLOCK;
        attr.freq = 1;
        attr.sample_freq = kSampleHz;
        const int fd = static_cast<int>(syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
        if (fd < 0) {
            if (errno == ENODEV) continue;  // a possible CPU that is not online
            failed = std::string("perf_event_open: ") + std::strerror(errno);
            break;
        }
        Link link(bpf_program__attach_perf_event(sampler, fd));
        if (!link) {
            failed = std::string("attach perf_event: ") + std::strerror(errno);
            ::close(fd);
            break;
        }
        perf_links_.push_back(std::move(link));
    }
    if (!failed.empty()) {
        perf_links_.clear();
        warnings.push_back("sched: event-loop stalls without on-CPU stacks (" + failed + ")");
        attach.push_back(hook_off(ProbeFamily::sched, bpf_program__name(sampler), failed));
    } else {
        ProbeAttach a = program_attach(ProbeFamily::sched, sampler);
        a.via = "cpu-clock " + std::to_string(kSampleHz) + " Hz";
        attach.push_back(std::move(a));
    }
}

int LoopTracker::on_record(void* self, void* data, size_t size) {
    auto* t = static_cast<LoopTracker*>(self);
    if (size < sizeof(uint32_t)) return 0;
    uint32_t kind;
    std::memcpy(&kind, data, sizeof(kind));
    if (kind == QS_EV_LOOP_STALL && size >= sizeof(qs_loop_stall))
        t->on_stall(*static_cast<const qs_loop_stall*>(data));
    else if (kind == QS_EV_LOOP_SAMPLE && size >= sizeof(qs_loop_sample))
        t->on_sample(*static_cast<const qs_loop_sample*>(data));
    return 0;
}

void LoopTracker::on_sample(const qs_loop_sample& e) {
    Sample s;
    s.turn_start = e.turn_start;
    if (ctx_ && ctx_->unwind) s.frames = ctx_->unwind(static_cast<int>(e.tgid), e.ustack);
    samples_[e.tid] = std::move(s);
}

void LoopTracker::on_stall(const qs_loop_stall& e) {
    LoopStall st;
    st.seconds = e.turn_ns / 1e9;
    st.blocked_seconds = e.blocked_ns / 1e9;
    const uint64_t awake_ns = e.turn_ns - std::min(e.turn_ns, e.blocked_ns);  // on a CPU or runnable
    st.runqueue_seconds = std::min<uint64_t>(e.runqueue_ns, awake_ns) / 1e9;
    st.on_cpu_seconds = std::max(0.0, st.seconds - st.blocked_seconds - st.runqueue_seconds);
    if (e.top_syscall >= 0) st.syscall = syscall_name(e.top_syscall);
    const bool blocked = e.blocked_ns > awake_ns;
    if (blocked && e.top_syscall >= 0 && ctx_ && ctx_->wait_site) {
        qs_wait_key k{};
        std::memcpy(k.group, e.group, sizeof(k.group));
        k.tgid = e.tgid;
        k.syscall = e.top_syscall;
        k.res = e.top_res;
        auto [stack, resource] = ctx_->wait_site(k);
        st.stack = std::move(stack);
        st.resource = std::move(resource);
    }
    if (st.stack.empty()) {  // CPU-bound, or the block's stack was never captured
        auto it = samples_.find(e.tid);
        if (it != samples_.end() && it->second.turn_start + e.turn_ns == e.end_ns) st.stack = it->second.frames;
    }
    auto& v = stalls_[e.tid];
    v.push_back(std::move(st));
    std::stable_sort(v.begin(), v.end(), [](const LoopStall& a, const LoopStall& b) { return a.seconds > b.seconds; });
    if (v.size() > kStallsKept) v.resize(kStallsKept);
}

void LoopTracker::drain(const LoopContext& ctx) {
    if (!rb_) return;
    ctx_ = &ctx;
    ring_buffer__consume(rb_.get());
    ctx_ = nullptr;
}

void LoopTracker::collect(Snapshot& snap, uint64_t now_ns, uint64_t window_start_ns, bool window_reset,
                          const std::map<int, LoopThreadNow>& threads, const LoopContext& ctx) {
    drain(ctx);
    snap.carriers.loop_stall_threshold_seconds = stall_seconds_;
    if (window_reset) {
        if (epoch_) __atomic_add_fetch(epoch_, 1, __ATOMIC_RELAXED);
        stalls_.clear();
    }
    std::map<__u32, qs_loop_val> vals;
    reader_.for_each(loops_fd_, [&](const __u32& tid, const qs_loop_val& v) { vals[tid] = v; });
    const uint64_t epoch = epoch_ ? __atomic_load_n(epoch_, __ATOMIC_RELAXED) : 0;
    std::vector<__u32> gone;
    for (const auto& [tid, v] : vals) {
        auto th = threads.find(static_cast<int>(tid));
        if (th == threads.end() || !th->second.alive) {
            gone.push_back(tid);
            continue;
        }
        LoopWindow cum{v.turns, v.busy_ns, v.stalls, v.stalls_runqueue, v.runqueue_ns,
                       std::vector<uint32_t>(v.slots, v.slots + QS_WHIST_SLOTS)};
        if (window_reset) {
            // The turn going on at the reset: its part before the window is not the window's.
            if (v.turn_start && window_start_ns > v.turn_start) cum.busy_ns += window_start_ns - v.turn_start;
            base_[tid] = cum;
        }
        const LoopWindow* base = nullptr;
        auto b = base_.find(tid);
        if (b != base_.end()) base = &b->second;
        // A cumulative figure's part since the window's base.
        const auto in_window = [base](uint64_t now, uint64_t LoopWindow::*f) {
            return now - (base ? std::min<uint64_t>(base->*f, now) : 0);
        };
        EventLoop l;
        l.tid = static_cast<int>(tid);
        l.pid = static_cast<int>(v.tgid);
        l.name = comm_of(v.comm);
        l.poll = syscall_name(v.poll_syscall);
        l.turns = in_window(v.turns, &LoopWindow::turns);
        const uint64_t busy = in_window(v.busy_ns, &LoopWindow::busy_ns);
        l.utilization = loop_utilization(busy, v.turn_start, window_start_ns, now_ns);
        const double window = (now_ns - window_start_ns) / 1e9;
        l.turns_per_second = window > 0 ? l.turns / window : 0;
        l.stalls = in_window(v.stalls, &LoopWindow::stalls);
        l.stalls_total = v.stalls;
        l.stalls_runqueue = in_window(v.stalls_runqueue, &LoopWindow::stalls_runqueue);
        l.stalls_runqueue_total = v.stalls_runqueue;
        l.turns_total = v.turns;
        l.busy_seconds_total = v.busy_ns / 1e9;
        l.runqueue_seconds_total = v.runqueue_ns / 1e9;
        if (window > 0) l.runqueue_share = std::min(1.0, in_window(v.runqueue_ns, &LoopWindow::runqueue_ns) / 1e9 / window);
        l.current_turn_seconds = v.turn_start && now_ns > v.turn_start ? (now_ns - v.turn_start) / 1e9 : 0;
        l.current_turn_runqueue_seconds = current_turn_runqueue(v, now_ns, l.current_turn_seconds);
        Histogram win;
        add_slots(win, v.slots, base ? &base->slots : nullptr);
        add_slots(l.turn_total, v.slots, nullptr);
        l.turn_total.set_max_ns(v.max_ns);
        struct {
            __u64 epoch, max_ns;
        } wm{};
        if (bpf_map_lookup_elem(wmax_fd_, &tid, &wm) == 0 && wm.epoch == epoch) win.set_max_ns(wm.max_ns);
        l.longest_turn_seconds = win.max_ns() ? win.max_ns() / 1e9 : (win.empty() ? 0 : win.max_seconds());
        l.p99_turn_seconds = win.empty() ? 0 : std::min(win.quantile(0.99), l.longest_turn_seconds);
        // A turn going on longer than any completed one is the longest so far.
        l.longest_turn_seconds = std::max(l.longest_turn_seconds, l.current_turn_seconds);
        // Blocked inside a turn is blocked outside its poll: busy, a stall. Blocked with no
        // turn going on is its poll: idle.
        const LoopThreadNow& now = th->second;
        l.state = now.state;
        if (now.state == CarrierState::blocked) {
            l.state = l.current_turn_seconds > 0 ? CarrierState::stalled : CarrierState::idle;
            if (l.current_turn_seconds > 0) l.blocked_in = now.blocked_in;
        }
        if (current_turn_stalled(l, stall_seconds_)) l.state = CarrierState::stalled;
        auto st = stalls_.find(tid);
        if (st != stalls_.end()) l.recent_stalls = st->second;
        snap.carriers.loops.push_back(std::move(l));
    }
    for (__u32 tid : gone) {
        bpf_map_delete_elem(loops_fd_, &tid);
        bpf_map_delete_elem(wmax_fd_, &tid);
        base_.erase(tid);
        samples_.erase(tid);
        stalls_.erase(tid);
    }
}

}  // namespace qscope
