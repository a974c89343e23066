// The sched source: loads bpf/sched.bpf.c for one target and builds thread_groups and waits.
//
// Live thread states come from a task iterator run once per tick over the target's threads
// (a pid-filtered iter/task link), not from /proc: the iterator reads the very fields
// /proc/PID/task/TID/{stat,syscall} print (__state, pt_regs->orig_ax) in one read() of a
// few bytes per thread, where /proc costs two open+read+close per thread — with 10,000
// threads that is 20,000 file reads (~100-200 ms of CPU) per tick against ~2 ms. The same
// pass seeds threads blocked since before attach (sched_switch never saw them go to sleep)
// and samples the stacks of long waits (see sched.bpf.c for why there).
#include "probes/sched/sched_source.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "engine/bpf_util.h"
#include "engine/kernel_features.h"
#include "engine/shared_hooks.h"
#include "owner.h"
#include "model/syscall_table.h"
#include "probes/sched/loops.h"
#include "model/errors.h"
#include "sys/proc_tasks.h"
#include "tree.h"  // struct qs_tree_range: the skeleton maps its .data.tree section
#include "sched.skel.h"
#include "engine/source.h"
#include "symbols/symbolizer.h"
#include "sys/syscall_names.h"
#include "engine/target.h"
#include "model/runtime_frames.h"

namespace qscope {

namespace {

// Stack captures per iterator run. The iterator is the ring's only producer and user space
// drains it before every run, so a ring holding one run's budget never fills: a full ring
// used to be reported as ~one lost event per thread of a 10,000-thread target.
constexpr uint32_t kMaxStacksPerIter = 64;

uint32_t stack_ring_bytes() {
    const uint64_t need = uint64_t{kMaxStacksPerIter} * (sizeof(qs_stack_event) + 8 /* BPF_RINGBUF_HDR_SZ */);
    uint64_t size = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    while (size < need) size <<= 1;  // a power-of-two number of pages
    return static_cast<uint32_t>(size);
}

struct WaitKeyLess {
    bool operator()(const qs_wait_key& a, const qs_wait_key& b) const {
        return std::memcmp(&a, &b, sizeof(a)) < 0;
    }
};

struct Cum {  // cumulative figures of one kernel wait key, as of one read
    uint64_t count = 0, total_ns = 0;
    std::vector<uint32_t> slots;  // only for futex keys: the window histogram needs them
};

struct StackInfo {
    std::vector<std::string> user, kernel;
    std::vector<uint64_t> kernel_ips;  // captured before the kernel symbol table was loaded
};

std::string group_of(const char g[QS_COMM_LEN]) { return std::string(g, strnlen(g, QS_COMM_LEN)); }

using WaitMap = std::map<qs_wait_key, qs_wait_val, WaitKeyLess>;
using CumMap = std::map<qs_wait_key, Cum, WaitKeyLess>;

// What the task iterator says about the target's threads right now.
struct LiveView {
    std::map<std::string, ThreadGroup> groups;                // by label
    std::map<qs_wait_key, uint64_t, WaitKeyLess> ongoing_ns;  // blocked so far, waits not over yet
    std::map<qs_wait_key, int, WaitKeyLess> threads_now;      // threads blocked on each key
};

// One wait row: (group, syscall, resource[, wait site for futex gates]).
using WaitRowKey = std::tuple<std::string, std::string, std::string, std::string>;
struct WaitRow {
    Wait w;
    Histogram hist;
    bool have_stack = false;
};
using WaitRows = std::map<WaitRowKey, WaitRow>;

class SchedSource final : public Source {
public:
    ~SchedSource() override {
        routes_.clear();  // the shared hooks stop handing events here first
        detach_concurrently(links_);
    }
    ProbeFamily family() const override { return ProbeFamily::sched; }
    void start(const Target& target, const Config& cfg) override;
    void collect(Snapshot& snap, const Tick& tick) override;

private:
    // Kernel state, read in this order each tick (see collect()).
    WaitMap read_waits();
    std::map<std::string, Histogram> read_runqueue();
    std::vector<qs_thread_rec> read_threads(Snapshot& snap, const Tick& tick);
    std::vector<qs_thread_rec> run_iter();
    void on_stack(const qs_stack_event& e);
    static int ringbuf_cb(void* ctx, void* data, size_t size);
    void name_kernel_frames();
    void report_lost(Snapshot& snap);
    // From kernel state to the snapshot's sections.
    void claim_group_labels(const std::vector<qs_thread_rec>& recs);
    LiveView live_view(const std::vector<qs_thread_rec>& recs);
    static CumMap cumulative(const WaitMap& waits, const LiveView& live);
    void add_runqueue_wait(std::map<std::string, ThreadGroup>& groups, const std::map<std::string, Histogram>& rq,
                           double tick_seconds);
    void add_blocked_totals(std::map<std::string, ThreadGroup>& groups, const CumMap& cum);
    std::vector<Wait> wait_rows(const CumMap& cum, const LiveView& live);
    void add_wait(WaitRows& rows, const qs_wait_key& k, const Cum& c, int now_threads);
    std::pair<std::string, std::string> labels_of(const qs_wait_key& k);
    std::string resource_of(const qs_wait_key& k, WaitKind& kind, const StackInfo* st);
    // The process tree: which processes there are, each one's fd names and symbols.
    void refresh_processes();
    std::string tree_group(uint32_t tgid, const char group[QS_COMM_LEN]) const;
    Link& iter_link();
    FdResolver& fds_of(int tgid);
    Symbolizer* symbolizer_of(int tgid);

    // Declared in the order they are made, so they are released in reverse.
    QSCOPE_SKEL_PTR(sched) skel_;
    std::vector<Link> links_;
    SharedSlot shared_;                        // the exporter's shared hooks, if any
    std::vector<SharedHooks::Route> routes_;   // this target's programs in their tables
    Link iter_link_;      // the root's threads only
    Link all_iter_link_;  // every task, filtered by the tree: once the tree has forked
    RingBuffer rb_;
    MapReader<qs_wait_key, qs_wait_val> waits_reader_;
    MapReader<qs_group_key, qs_hist, 64> rq_reader_;  // few keys, 5 KiB values
    // Per process: addresses and fds mean something only within their process.
    // Made on a process's first stack. Processes that map the same code at the same
    // addresses (workers forked without exec) share one (Symbolizer::modules_signature), and
    // distinct ones are capped, least recently used first: a tree of hundreds of backends
    // would otherwise hold hundreds of copies of the same libraries' symbol tables (~2 MiB
    // each). An evicted one is made again when needed.
    static constexpr size_t kMaxSymbolizers = 16;
    struct SymEntry {
        std::shared_ptr<Symbolizer> sym;
        uint64_t used = 0;
    };
    std::shared_ptr<Symbolizer> shared_symbolizer(int tgid) const;
    void evict_symbolizers();
    std::map<int, SymEntry> syms_;
    uint64_t sym_clock_ = 0;
    std::set<int> sym_refreshed_;  // processes whose libraries were re-read this tick
    // Kernel frames are named from the second tick on: the first load of /proc/kallsyms
    // (~120k symbols, 100-150 ms of CPU) is not worth delaying the first frame for.
    bool name_kernel_frames_ = false;
    std::map<int, std::unique_ptr<FdResolver>> fds_;
    Config cfg_;
    int pid_ = 0;
    const Target* target_ = nullptr;
    // Role of each process (tgid) when the tree's processes differ in role: thread groups
    // are then "<thread group>: <role>" ("postgres: client backend", "nginx: worker process").
    std::map<uint32_t, std::string> role_of_;
    size_t processes_ = 1;
    bool stacks_failed_ = false;
    bool drain_failed_ = false;  // the attach's drain of the stack ring, said on the first tick
    std::string stack_warning_;

    std::unique_ptr<LabelCap> groups_;
    // Window baselines, per kernel key: cumulative (completed + ongoing) at window start.
    CumMap base_waits_;
    std::map<std::string, Histogram> base_rq_;
    // Runqueue wait (ns, since attach) per read_runqueue() key at the tick before: the tick's average.
    std::map<std::string, uint64_t> last_rq_ns_;
    // Run-queue histograms of processes that left the tree, folded by label and their keys
    // deleted from rq_hist: a tree with a process per connection would otherwise fill the map
    // with the keys of exited processes within seconds. Labels are taken with the roles of
    // the tick before (a departed process has no role this tick).
    std::map<std::string, Histogram> departed_rq_;
    std::set<int> live_;                               // the tree's members this tick
    std::map<uint32_t, std::string> last_role_of_;     // role_of_ of the tick before
    // Stacks by kernel wait key (group, syscall, res): the latest capture for that key.
    std::map<qs_wait_key, StackInfo, WaitKeyLess> stacks_;
    // Exported counters are kept monotonic across the (rare) tick where a wait completes
    // between the map read and the iterator run.
    std::map<std::pair<std::string, std::string>, double> exported_blocked_;
    // Event-loop turns (probes/sched/loops.h).
    LoopTracker loops_;
    std::vector<std::string> loop_warnings_;
    std::vector<ProbeAttach> attach_;  // every hook and how it was reached, for the snapshot
    void attach_loop_hooks();
    void attach_or_route(bpf_program* prog, SharedHooks::Hook hook);
    void collect_loops(Snapshot& snap, const Tick& tick, const std::vector<qs_thread_rec>& recs);
};


void SchedSource::start(const Target& target, const Config& cfg) {
    cfg_ = cfg;
    pid_ = target.pid();
    target_ = &target;
    groups_ = std::make_unique<LabelCap>(cfg.label_cap);
    skel_.reset(sched_bpf__open());
    if (!skel_) throw_bpf_error("sched: open BPF object", errno);
    share_tree_maps(skel_->obj, target, "sched");
    // The exporter's shared switch hook hands events here, and this program hands on those of
    // another target's next (bpf/sched.bpf.c owner_slot).
    shared_ = target.shared_slot();
    if (shared_.hooks && shared_.hooks->has(SharedHooks::Hook::sched_switch)) {
        shared_.hooks->share_maps(skel_->obj, {SharedHooks::Hook::sched_switch}, "sched");
        skel_->rodata->owner_slot = static_cast<__u32>(shared_.slot + 1);
    }
    skel_->rodata->want_stacks = cfg.want_stacks ? 1 : 0;
    skel_->rodata->stack_min_ns = static_cast<__u64>(cfg.stack_min_block_seconds * 1e9);
    skel_->rodata->max_stacks_per_iter = kMaxStacksPerIter;
    skel_->rodata->loop_stall_ns = static_cast<__u64>(cfg.loop_stall_seconds * 1e9);
    skel_->rodata->loop_sample_min_ns = static_cast<__u64>(cfg.loop_stall_seconds * 1e9 / 2);
    // A poll syscall this kernel lacks (epoll_pwait2 before 5.11): its exit is not loaded, and
    // the one entry program is not attached there.
    for (const char* name : kLoopPolls)
        if (!KernelTracepoints::has_tracefs("syscalls", std::string("sys_enter_") + name))
            if (bpf_program* p =
                    bpf_object__find_program_by_name(skel_->obj, (std::string("qs_loop_exit_") + name).c_str()))
                bpf_program__set_autoload(p, false);
    // Wait keys: about one per thread per wait site (a JVM parks each thread on its own
    // futex word) plus one per fd waited on; the slack covers sockets and files.
    const uint32_t threads = std::max<uint32_t>(cfg.max_threads, 256);
    bpf_check(bpf_map__set_max_entries(skel_->maps.waits, threads + 4096), "sched: size map waits");
    bpf_check(bpf_map__set_max_entries(skel_->maps.stack_seen, threads), "sched: size map stack_seen");
    bpf_check(bpf_map__set_max_entries(skel_->maps.stacks, stack_ring_bytes()), "sched: size ring buffer stacks");
    // Kernel groups are pre-cap (comm-derived); beyond this they fold into the overflow group.
    // Keyed by process too: a PostgreSQL with 500 backends has 500 "postgres" groups here.
    bpf_check(bpf_map__set_max_entries(skel_->maps.rq_hist, std::max<uint32_t>(cfg.label_cap * 4 + 64, 4096)),
              "sched: size map rq_hist");
    const KernelBtfLoan loan;
    if (int err = sched_bpf__load(skel_.get())) {
        // Name a missing tracepoint rather than libbpf's errno. Checked only on failure: a
        // parse of the kernel's BTF costs ~20 ms on the way to the first frame.
        KernelTracepoints tps;
        for (const char* tp : {"sched_switch", "sched_wakeup", "sched_wakeup_new"})
            if (!tps.has_btf(tp))
                throw Error(Exit::kernel, std::string("kernel BTF lacks the ") + tp + " tracepoint (tp_btf/" + tp +
                                              "): the sched probes cannot attach");
        if (tps.btf_args("sched_switch") < 4)
            throw Error(Exit::kernel, "sched: tp_btf sched_switch has no prev_state argument (Linux 5.18+): the "
                                      "thread views cannot load here (--no-threads runs the requests alone)");
        throw_load_error(ProbeFamily::sched, "sched: load BPF programs (sched.bpf.c)", err);
    }

    // Overflow buckets the programs fall back to when a map is full.
    qs_wait_key ok{};
    ok.syscall = QS_SYSCALL_OTHER;
    qs_wait_val zv{};
    bpf_check(bpf_map_update_elem(bpf_map__fd(skel_->maps.waits), &ok, &zv, BPF_NOEXIST), "sched: seed map waits");
    qs_group_key gk{};
    auto zh = std::make_unique<qs_hist>();
    std::memset(zh.get(), 0, sizeof(qs_hist));
    bpf_check(bpf_map_update_elem(bpf_map__fd(skel_->maps.rq_hist), &gk, zh.get(), BPF_NOEXIST), "sched: seed map rq_hist");

    for (const auto& [prog, hook] : {std::pair{skel_->progs.qs_sched_switch, SharedHooks::Hook::sched_switch},
                                     std::pair{skel_->progs.qs_sched_wakeup, SharedHooks::Hook::wakeup},
                                     std::pair{skel_->progs.qs_sched_wakeup_new, SharedHooks::Hook::wakeup_new}})
        attach_or_route(prog, hook);
    attach_.push_back(program_attach(ProbeFamily::sched, skel_->progs.qs_task_iter));

    rb_ = open_ring_buffer(skel_->maps.stacks, &SchedSource::ringbuf_cb, this, "sched: open ring buffer stacks");
    attach_loop_hooks();

    if (cfg.want_stacks) symbolizer_of(pid_);  // the root's, now: its failure is worth a warning early
    // Seed threads that are blocked right now, so their waits count from attach.
    refresh_processes();
    run_iter();
    // Its captures unwound now, while the other families still start: on the first tick, on
    // the way to the first frame, they took ~30 ms (64 stacks of a 10,000-thread target).
    drain_failed_ = ring_buffer__consume(rb_.get()) < 0;
}

// The root's threads alone while it is the whole tree (the cheapest walk); every task, which
// the program filters on the tree, once the tree has other processes.
Link& SchedSource::iter_link() {
    Link& link = processes_ > 1 ? all_iter_link_ : iter_link_;
    if (link) return link;
    union bpf_iter_link_info linfo;
    std::memset(&linfo, 0, sizeof(linfo));
    linfo.task.pid = processes_ > 1 ? 0 : static_cast<__u32>(pid_);
    DECLARE_LIBBPF_OPTS(bpf_iter_attach_opts, iopts);
    iopts.link_info = &linfo;
    iopts.link_info_len = sizeof(linfo);
    link.reset(bpf_program__attach_iter(skel_->progs.qs_task_iter, &iopts));
    if (!link) {
        // Kernels before 6.1 have no pid filter for task iterators: walk every task and let
        // the program's tree check skip the others (slower on a busy machine, same result).
        link.reset(bpf_program__attach_iter(skel_->progs.qs_task_iter, nullptr));
        if (!link) throw_bpf_error("sched: attach iter.s/task (task iterator)", errno);
    }
    return link;
}

void SchedSource::refresh_processes() {
    const auto procs = target_->processes();
    processes_ = std::max<size_t>(procs.size(), 1);
    std::set<std::string> roles;
    last_role_of_ = std::move(role_of_);
    role_of_.clear();
    for (const auto& p : procs) {
        role_of_[static_cast<uint32_t>(p.pid)] = p.role;
        roles.insert(p.role);
    }
    if (roles.size() <= 1) role_of_.clear();  // one kind of process: group names stay plain
    // Exited processes' fd tables and symbols go with them.
    std::set<int> live;
    for (const auto& p : procs) live.insert(p.pid);
    live_ = live;
    for (auto it = fds_.begin(); it != fds_.end();) it = live.count(it->first) ? std::next(it) : fds_.erase(it);
    // A shared symbolizer reads its owner's /proc: when the owner goes, so do its sharers.
    for (auto it = syms_.begin(); it != syms_.end();) {
        const bool owner_live = !it->second.sym || live.count(it->second.sym->pid()) || it->second.sym->pid() == pid_;
        it = (live.count(it->first) || it->first == pid_) && owner_live ? std::next(it) : syms_.erase(it);
    }
}

// One of a live process with the same code at the same addresses, if any.
std::shared_ptr<Symbolizer> SchedSource::shared_symbolizer(int tgid) const {
    // With none to share, its maps are not worth a read (the root's first: 20,000 lines at
    // 10,000 threads, ~10-20 ms of the family's start, read again by its own symbolizer).
    if (std::none_of(syms_.begin(), syms_.end(), [](const auto& e) { return e.second.sym != nullptr; }))
        return nullptr;
    const std::string sig = Symbolizer::modules_signature(tgid);
    if (sig.empty()) return nullptr;
    struct stat st;
    if (::stat(("/proc/" + std::to_string(tgid) + "/root/tmp/perf-" + std::to_string(tgid) + ".map").c_str(), &st) == 0)
        return nullptr;  // JIT code of its own
    for (const auto& [pid, e] : syms_)
        if (e.sym && !e.sym->has_perf_map() && e.sym->signature() == sig) return e.sym;
    return nullptr;
}

// Frees the least recently used distinct symbolizer (never the root's) when at the cap.
void SchedSource::evict_symbolizers() {
    std::map<const Symbolizer*, uint64_t> last_use;
    for (const auto& [pid, e] : syms_)
        if (e.sym) last_use[e.sym.get()] = std::max(last_use[e.sym.get()], e.used);
    if (last_use.size() < kMaxSymbolizers) return;
    const Symbolizer* lru = nullptr;
    uint64_t oldest = UINT64_MAX;
    for (const auto& [sym, used] : last_use)
        if (sym->pid() != pid_ && used < oldest) {
            oldest = used;
            lru = sym;
        }
    for (auto it = syms_.begin(); it != syms_.end();) it = it->second.sym.get() == lru ? syms_.erase(it) : std::next(it);
}

std::string SchedSource::tree_group(uint32_t tgid, const char group[QS_COMM_LEN]) const {
    std::string g = group_of(group);
    if (g.empty()) return g;  // the overflow group
    auto it = role_of_.find(tgid);
    return it == role_of_.end() ? g : g + ": " + it->second;
}

FdResolver& SchedSource::fds_of(int tgid) {
    auto& f = fds_[tgid];
    if (!f) f = std::make_unique<FdResolver>(tgid, [this, tgid] { return target_->socket_fds_one_pass(tgid); });
    return *f;
}

// Null when stacks are off or the process's symbols cannot be read (warned once).
Symbolizer* SchedSource::symbolizer_of(int tgid) {
    if (!cfg_.want_stacks) return nullptr;
    auto it = syms_.find(tgid);
    if (it == syms_.end()) {
        std::shared_ptr<Symbolizer> s = shared_symbolizer(tgid);
        if (!s) {
            evict_symbolizers();
            try {
                s = std::make_shared<Symbolizer>(tgid);
            } catch (const std::exception& e) {
                if (stack_warning_.empty()) stack_warning_ = std::string("sched: stacks not symbolized: ") + e.what();
            }
        }
        it = syms_.emplace(tgid, SymEntry{std::move(s), 0}).first;
        sym_refreshed_.insert(tgid);  // its maps were read just now (made, or matched by signature)
    }
    it->second.used = ++sym_clock_;
    return it->second.sym.get();
}

int SchedSource::ringbuf_cb(void* ctx, void* data, size_t size) {
    auto* self = static_cast<SchedSource*>(ctx);
    if (size < sizeof(uint32_t)) return 0;
    uint32_t kind;
    std::memcpy(&kind, data, sizeof(kind));
    if (kind == QS_EV_STACK && size >= sizeof(qs_stack_event))
        self->on_stack(*static_cast<const qs_stack_event*>(data));
    return 0;
}

void SchedSource::on_stack(const qs_stack_event& e) {
    qs_wait_key k{};
    std::memcpy(k.group, e.group, sizeof(k.group));
    k.tgid = e.tgid;
    k.syscall = e.syscall;
    k.res = e.res;
    StackInfo st;
    Symbolizer* sym = symbolizer_of(static_cast<int>(e.tgid));
    if (sym && sym->pid() != static_cast<int>(e.tgid) && sym_refreshed_.insert(static_cast<int>(e.tgid)).second &&
        Symbolizer::modules_signature(static_cast<int>(e.tgid)) != sym->signature()) {
        // A sharer that loaded a library of its own since: it gets its own symbolizer.
        syms_.erase(static_cast<int>(e.tgid));
        sym = symbolizer_of(static_cast<int>(e.tgid));
    }
    if (sym) {
        try {
            if (sym_refreshed_.insert(static_cast<int>(e.tgid)).second)  // libraries loaded since the last tick
                sym->refresh();
            std::vector<uint64_t> ips = sym->unwind(e.ustack);
            st.user = sym->symbolize_user(ips);
            std::vector<uint64_t> kips(e.kstack, e.kstack + std::min<uint32_t>(e.kstack_len, QS_KSTACK_DEPTH));
            if (name_kernel_frames_)
                st.kernel = sym->symbolize_kernel(kips);
            else
                st.kernel_ips = std::move(kips);
        } catch (const std::exception& ex) {
            // One bad sample must not cost the tick; the wait keeps its numbers.
            if (!stacks_failed_) stack_warning_ = std::string("sched: stack unwinding failed: ") + ex.what();
            stacks_failed_ = true;
        }
    }
    if (!st.user.empty() || !st.kernel.empty() || !st.kernel_ips.empty()) stacks_[k] = std::move(st);
}

WaitMap SchedSource::read_waits() {
    WaitMap out;
    waits_reader_.for_each(bpf_map__fd(skel_->maps.waits),
                           [&](const qs_wait_key& k, const qs_wait_val& v) { out[k] = v; });
    return out;
}

std::map<std::string, Histogram> SchedSource::read_runqueue() {
    std::map<std::string, Histogram> out = departed_rq_;
    std::vector<qs_group_key> gone;
    const int fd = bpf_map__fd(skel_->maps.rq_hist);
    rq_reader_.for_each(fd, [&](const qs_group_key& k, const qs_hist& h) {
        Histogram hist = Histogram::from_kernel(h);
        const bool departed = k.tgid != 0 && static_cast<int>(k.tgid) != pid_ && !live_.count(static_cast<int>(k.tgid));
        std::string g;
        if (departed) {
            auto r = last_role_of_.find(k.tgid);
            g = group_of(k.group);
            if (!g.empty() && r != last_role_of_.end()) g += ": " + r->second;
            departed_rq_[g].merge(hist);
            gone.push_back(k);
        } else {
            g = tree_group(k.tgid, k.group);
        }
        out[g].merge(hist);
    });
    // The process is gone: its key gets no more updates (a PID reused within the tick by a
    // new member loses that tick's samples).
    for (const auto& k : gone) bpf_map_delete_elem(fd, &k);
    return out;
}

std::vector<qs_thread_rec> SchedSource::run_iter() {
    skel_->bss->iter_captures = 0;
    const std::vector<char> buf = read_iter(iter_link().get(), "sched: run task iterator");
    std::vector<qs_thread_rec> recs(buf.size() / sizeof(qs_thread_rec));
    if (!recs.empty()) std::memcpy(recs.data(), buf.data(), recs.size() * sizeof(qs_thread_rec));
    return recs;
}

std::string SchedSource::resource_of(const qs_wait_key& k, WaitKind& kind, const StackInfo* st) {
    char buf[64];
    if (k.syscall == QS_SYSCALL_OTHER) {
        kind = WaitKind::other;
        return "(waits map full)";
    }
    switch (syscall_arg0_kind(k.syscall)) {
    case SyscallArg0::fd: {
        auto r = fds_of(static_cast<int>(k.tgid)).resolve(static_cast<int>(k.res));
        kind = wait_kind_named(r.kind).value_or(WaitKind::other);
        return r.name;
    }
    case SyscallArg0::futex_addr: {
        kind = WaitKind::futex;
        if (st) {
            const std::string f = first_app_frame(st->user);
            if (!f.empty()) return "futex:" + short_function(f);
        }
        std::snprintf(buf, sizeof(buf), "futex@0x%" PRIx64, static_cast<uint64_t>(k.res));
        return buf;
    }
    case SyscallArg0::futex_vec:
        kind = WaitKind::futex;
        return "futex_waitv";
    default:
        kind = WaitKind::other;
        return "";
    }
}

void SchedSource::collect(Snapshot& snap, const Tick& tick) {
    // Order matters: the map is read before the iterator so a wait that completes in
    // between is counted once (next tick), never twice (as completed and as ongoing).
    refresh_processes();
    const WaitMap waits = read_waits();
    const std::map<std::string, Histogram> rq = read_runqueue();
    const std::vector<qs_thread_rec> recs = read_threads(snap, tick);
    for (auto& [tgid, f] : fds_) f->refresh();
    name_kernel_frames();
    report_lost(snap);
    if (!stack_warning_.empty()) snap.warnings.push_back(stack_warning_);
    snap.probe_attach.insert(snap.probe_attach.end(), attach_.begin(), attach_.end());

    claim_group_labels(recs);
    LiveView live = live_view(recs);
    const CumMap cum = cumulative(waits, live);
    if (tick.window_reset) {
        base_waits_ = cum;
        base_rq_ = rq;
    }
    add_runqueue_wait(live.groups, rq, tick.index == 0 ? 0 : tick.dt_seconds);
    add_blocked_totals(live.groups, cum);
    snap.waits = wait_rows(cum, live);
    collect_loops(snap, tick, recs);
    for (auto& [name, g] : live.groups) snap.thread_groups.push_back(std::move(g));
    std::sort(snap.thread_groups.begin(), snap.thread_groups.end(),
              [](const ThreadGroup& a, const ThreadGroup& b) {
                  if (a.threads != b.threads) return a.threads > b.threads;
                  return a.name < b.name;
              });
}

// Runs the task iterator, draining the stack ring before (what the previous run left, so this
// run has the whole ring) and after.
std::vector<qs_thread_rec> SchedSource::read_threads(Snapshot& snap, const Tick& tick) {
    // The attach's drain refreshed the processes' libraries moments ago: on the first tick a
    // second read of their maps (20,000 lines at 10,000 threads, ~15 ms) would find the same.
    if (tick.index > 0) sym_refreshed_.clear();
    name_kernel_frames_ = tick.index > 0;
    bool rb_failed = std::exchange(drain_failed_, false);
    rb_failed |= ring_buffer__consume(rb_.get()) < 0;
    std::vector<qs_thread_rec> recs = run_iter();
    rb_failed |= ring_buffer__consume(rb_.get()) < 0;
    if (rb_failed) snap.partial.push_back("sched: ring buffer read failed");
    return recs;
}

// Stacks captured before kernel frames were named (the first tick's) get their names now.
void SchedSource::name_kernel_frames() {
    Symbolizer* sym = symbolizer_of(pid_);  // kernel symbols are the machine's: any process's will do
    if (!sym || !name_kernel_frames_) return;
    for (auto& [k, st] : stacks_) {
        if (st.kernel_ips.empty()) continue;
        try {
            st.kernel = sym->symbolize_kernel(st.kernel_ips);
        } catch (const std::exception& ex) {
            if (!stacks_failed_) stack_warning_ = std::string("sched: kernel stack symbolization failed: ") + ex.what();
            stacks_failed_ = true;
        }
        st.kernel_ips.clear();
    }
}

// The BPF side's per-CPU loss counters, summed, one cause each.
void SchedSource::report_lost(Snapshot& snap) {
    static const char* const what[QS_LOST_MAX] = {
        "waits map full (time attributed to syscall \"other\")",
        "runqueue map full (attributed to group \"other\")",
        "stack records (ring buffer full)",
        // A get also fails when the program interrupted another that holds the CPU's task
        // storage: the kernel's per-CPU guard against a deadlock refuses the nested get.
        "per-thread state unavailable (allocation failed, or the CPU's task storage in use by an "
        "interrupted program)",
        "polling threads (loops map full: their turns not counted)",
        "event-loop stall records (ring buffer full)",
    };
    const int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> per(static_cast<size_t>(std::max(ncpu, 1)));
    std::vector<LostCause> causes;
    for (uint32_t i = 0; i < QS_LOST_MAX; i++) {
        if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.lost), &i, per.data()) != 0) continue;
        uint64_t n = 0;
        for (auto v : per) n += v;
        causes.push_back({n, what[i]});
    }
    lost_.update("sched", causes, snap);
}

// The first tick's groups claim labels biggest first; later groups first come.
void SchedSource::claim_group_labels(const std::vector<qs_thread_rec>& recs) {
    if (groups_->size() != 0) return;
    std::map<std::string, int> sizes;
    for (const auto& r : recs) sizes[tree_group(r.tgid, r.group)]++;
    std::vector<std::pair<int, std::string>> order;
    for (const auto& [g, n] : sizes) order.push_back({-n, g});
    std::sort(order.begin(), order.end());
    for (const auto& [n, g] : order) groups_->label(g);
}

// Thread groups by live state, and the waits going on now.
LiveView SchedSource::live_view(const std::vector<qs_thread_rec>& recs) {
    LiveView live;
    for (const auto& r : recs) {
        const std::string& label = groups_->label(tree_group(r.tgid, r.group));
        ThreadGroup& g = live.groups[label];
        g.name = label;
        g.threads++;
        switch (thread_state(r)) {
        case ThreadState::running:
            g.running++;
            g.on_cpu_tids.push_back(static_cast<int>(r.tid));
            break;
        case ThreadState::runnable:
            g.runnable++;
            g.on_cpu_tids.push_back(static_cast<int>(r.tid));
            break;
        case ThreadState::blocked:
            g.blocked++;
            g.blocked_by[syscall_name(r.syscall)]++;
            if (r.syscall == QS_NR_futex) g.futex_by_pid[static_cast<int>(r.tgid)]++;
            break;
        }
        if (r.state != 0) {
            qs_wait_key k{};
            std::memcpy(k.group, r.group, sizeof(k.group));
            k.tgid = r.tgid;
            k.syscall = r.syscall;
            k.res = r.res;
            live.threads_now[k]++;
            if ((r.flags & QS_TREC_TRACKED) && r.now_ns > r.block_start_ns)
                live.ongoing_ns[k] += r.now_ns - r.block_start_ns;
        }
    }
    return live;
}

// Per kernel key: completed waits plus the time the ongoing ones have waited so far.
CumMap SchedSource::cumulative(const WaitMap& waits, const LiveView& live) {
    CumMap cum;
    for (const auto& [k, v] : waits) {
        Cum& c = cum[k];
        c.count = v.count;
        c.total_ns = v.total_ns;
        if (syscall_arg0_kind(k.syscall) == SyscallArg0::futex_addr) c.slots.assign(v.slots, v.slots + QS_WHIST_SLOTS);
    }
    for (const auto& [k, ns] : live.ongoing_ns) cum[k].total_ns += ns;
    return cum;
}

// The window's runqueue wait of each group with a live thread, and the last tick's average
// (none on the first tick: there is no tick before; tick_seconds 0).
void SchedSource::add_runqueue_wait(std::map<std::string, ThreadGroup>& groups,
                                    const std::map<std::string, Histogram>& rq, double tick_seconds) {
    // Several kernel groups may fold into one label ("other"): merge window histograms.
    std::map<std::string, Histogram> per_label;
    std::map<std::string, uint64_t> tick_ns;
    std::map<std::string, uint64_t> now_ns;
    for (auto& [g, h] : rq) {
        const std::string& label = groups_->label(g);
        auto b = base_rq_.find(g);
        per_label[label].merge(b != base_rq_.end() ? h.delta(b->second) : h);
        now_ns[g] = h.sum_ns();
        auto l = last_rq_ns_.find(g);
        const uint64_t before = l != last_rq_ns_.end() ? l->second : 0;
        tick_ns[label] += h.sum_ns() - std::min(h.sum_ns(), before);
    }
    last_rq_ns_ = std::move(now_ns);
    for (auto& [label, h] : per_label) {
        auto it = groups.find(label);
        if (it == groups.end()) continue;  // no live thread in that group now
        it->second.runqueue_wait = h.quantiles();
        it->second.runqueue_wait_seconds = h.sum_seconds();
        // At most every thread of the group: a process whose label changed (a role found
        // later) brings its waits since it started under the new label at once.
        if (tick_seconds > 0)
            it->second.waiting_for_cpu = std::min<double>(tick_ns[label] / 1e9 / tick_seconds, it->second.threads);
    }
}

// Seconds blocked since attach, per group and syscall: exported counters, never going back.
void SchedSource::add_blocked_totals(std::map<std::string, ThreadGroup>& groups, const CumMap& cum) {
    std::map<std::pair<std::string, std::string>, double> blocked_total;
    for (const auto& [k, c] : cum) blocked_total[labels_of(k)] += c.total_ns / 1e9;
    for (auto& [key, secs] : blocked_total) {
        double& exp = exported_blocked_[key];
        exp = std::max(exp, secs);
    }
    for (const auto& [key, secs] : exported_blocked_) {
        auto it = groups.find(key.first);
        if (it == groups.end()) continue;  // the exporter shows live groups; totals resume if it returns
        it->second.blocked_seconds_by_syscall_total[key.second] = secs;
        it->second.blocked_seconds_total += secs;
    }
}

// The window's wait rows, the ones that explain the most waiting first.
std::vector<Wait> SchedSource::wait_rows(const CumMap& cum, const LiveView& live) {
    WaitRows rows;
    for (const auto& [k, c] : cum) {
        auto tn = live.threads_now.find(k);
        add_wait(rows, k, c, tn == live.threads_now.end() ? 0 : tn->second);
    }
    std::vector<Wait> out;
    out.reserve(rows.size());
    for (auto& [key, row] : rows) {
        if (row.w.kind == WaitKind::futex) {
            row.w.waiters_now = row.w.threads_now;
            row.w.wait = row.hist.quantiles();
        }
        out.push_back(std::move(row.w));
    }
    std::sort(out.begin(), out.end(), [](const Wait& a, const Wait& b) {
        if (a.threads_now != b.threads_now) return a.threads_now > b.threads_now;
        return a.blocked_seconds > b.blocked_seconds;
    });
    // Bounded output: the rows that explain the most waiting. The dropped tail is small.
    const size_t max_rows = std::max<size_t>(cfg_.label_cap * 2, 20);
    if (out.size() > max_rows) out.resize(max_rows);
    return out;
}

// Adds one kernel key's window (cumulative minus its baseline) to its row; a key idle in
// the window adds nothing.
void SchedSource::add_wait(WaitRows& rows, const qs_wait_key& k, const Cum& c, int now_threads) {
    const Cum* base = nullptr;
    auto b = base_waits_.find(k);
    if (b != base_waits_.end()) base = &b->second;
    const uint64_t dcount = base && c.count >= base->count ? c.count - base->count : (base ? 0 : c.count);
    const uint64_t dns = base && c.total_ns >= base->total_ns ? c.total_ns - base->total_ns : (base ? 0 : c.total_ns);
    if (dcount == 0 && dns == 0 && now_threads == 0) return;  // idle in this window

    const StackInfo* st = nullptr;
    auto s = stacks_.find(k);
    if (s != stacks_.end()) st = &s->second;
    WaitKind kind = WaitKind::other;
    const std::string res = resource_of(k, kind, st);
    const auto [label, sc] = labels_of(k);
    // A futex gate's call site; a lock wait's frame where one poll set serves several sites.
    std::string site;
    if (st) site = kind == WaitKind::futex ? wait_site_signature(st->user) : lock_wait_frame(st->user);
    WaitRow& row = rows[{label, sc, res, site}];
    row.w.group = label;
    row.w.syscall = sc;
    row.w.resource = res;
    row.w.kind = kind;
    row.w.threads_now += now_threads;
    row.w.blocked_seconds += dns / 1e9;
    row.w.count += dcount;
    if (st && !row.have_stack) {
        row.w.stack = st->user;
        row.w.kernel_stack = st->kernel;
        row.have_stack = true;
    }
    if (!c.slots.empty()) {
        std::vector<uint32_t> d(c.slots);
        if (base && base->slots.size() == d.size())
            for (size_t i = 0; i < d.size(); i++) d[i] = d[i] >= base->slots[i] ? d[i] - base->slots[i] : 0;
        add_wait_slots(row.hist, d.data(), d.size());
    }
}

// (group label, syscall name) of a kernel key; the overflow bucket is ("other", "other").
std::pair<std::string, std::string> SchedSource::labels_of(const qs_wait_key& k) {
    const std::string label = k.syscall == QS_SYSCALL_OTHER ? "other" : groups_->label(tree_group(k.tgid, k.group));
    const std::string sc = k.syscall == QS_SYSCALL_OTHER ? "other" : syscall_name(k.syscall);
    return {label, sc};
}

// Each poll's exit program has its place in a slot of the shared exits' table (bpf/owner.h).
static_assert(std::size(kLoopPolls) == QS_OWNER_POLLS, "bpf/owner.h QS_OWNER_POLLS: one per poll of kLoopPolls");

// A hook the exporter's targets share (engine/shared_hooks.h) hands this target's events to
// `prog`; elsewhere `prog` attaches itself.
void SchedSource::attach_or_route(bpf_program* prog, SharedHooks::Hook hook) {
    ProbeAttach a = program_attach(ProbeFamily::sched, prog);
    if (shared_.hooks && shared_.hooks->has(hook)) {
        routes_.push_back(shared_.hooks->route(hook, shared_.slot, prog));
        a.via = shared_.hooks->via(a.via, hook, prog, shared_.slot);
    } else {
        links_.push_back(attach_program(prog, std::string("sched: attach ") + bpf_program__section_name(prog)));
    }
    attach_.push_back(std::move(a));
}

void SchedSource::attach_loop_hooks() {
    // One entry program for every poll (qs_loop_enter: the syscall's number tells them apart),
    // one exit program each.
    bool entry_routed = false;
    for (const char* name : kLoopPolls) {
        bpf_program* enter = skel_->progs.qs_loop_enter;
        bpf_program* exit = bpf_object__find_program_by_name(skel_->obj, (std::string("qs_loop_exit_") + name).c_str());
        if (!exit) continue;
        const bool here = bpf_program__autoload(exit);  // off where the kernel lacks the syscall
        for (const auto& [dir, p] : {std::pair{"enter", enter}, std::pair{"exit", exit}}) {
            const std::string hook = std::string("sys_") + dir + "_" + name;
            if (!here) {
                attach_.push_back(hook_off(ProbeFamily::sched, hook,
                                           "no syscalls/" + hook + " in tracefs: this kernel lacks the syscall"));
                continue;
            }
            ProbeAttach a{ProbeFamily::sched, hook, AttachType::tracepoint, "syscalls/" + hook};
            const auto shared_hook = std::string(dir) == "enter" ? SharedHooks::Hook::poll_enter : SharedHooks::Hook::poll_exit;
            if (shared_.hooks && shared_.hooks->has(shared_hook)) {
                // The entry program serves every poll: in its slot once.
                if (shared_hook == SharedHooks::Hook::poll_exit || !entry_routed) {
                    routes_.push_back(shared_.hooks->route(shared_hook, shared_.slot, p, syscall_number(name)));
                    entry_routed |= shared_hook == SharedHooks::Hook::poll_enter;
                }
                a.via = shared_.hooks->via(a.via, shared_hook, p, shared_.slot);
                attach_.push_back(std::move(a));
                continue;
            }
            Link l(bpf_program__attach_tracepoint(p, "syscalls", hook.c_str()));
            if (!l) throw_bpf_error("sched: attach tracepoint/syscalls/" + hook, errno);
            links_.push_back(std::move(l));
            attach_.push_back(std::move(a));
        }
    }
    loops_.start(skel_->obj, &skel_->bss->loop_epoch, cfg_.loop_stall_seconds, loop_warnings_, attach_);
}

void SchedSource::collect_loops(Snapshot& snap, const Tick& tick, const std::vector<qs_thread_rec>& recs) {
    std::map<int, LoopThreadNow> threads;
    for (const auto& r : recs) {
        LoopThreadNow& t = threads[static_cast<int>(r.tid)];
        t.alive = true;
        switch (thread_state(r)) {
        case ThreadState::running: t.state = CarrierState::running; break;
        case ThreadState::runnable: t.state = CarrierState::runnable; break;
        case ThreadState::blocked:
            t.state = CarrierState::blocked;
            t.blocked_in = syscall_name(r.syscall);
            break;
        }
    }
    LoopContext ctx;
    ctx.unwind = [this](int tgid, const qs_ustack& u) -> std::vector<std::string> {
        Symbolizer* sym = symbolizer_of(tgid);
        if (!sym) return {};
        try {
            if (sym_refreshed_.insert(tgid).second) sym->refresh();
            return sym->symbolize_user(sym->unwind(u));
        } catch (const std::exception&) {
            return {};  // one bad sample: the stall keeps its numbers
        }
    };
    ctx.wait_site = [this](const qs_wait_key& k) -> std::pair<std::vector<std::string>, std::string> {
        auto it = stacks_.find(k);
        const StackInfo* st = it == stacks_.end() ? nullptr : &it->second;
        WaitKind kind = WaitKind::other;
        std::string res = resource_of(k, kind, st);
        return {st ? st->user : std::vector<std::string>{}, res};
    };
    loops_.collect(snap, tick.now_ns, tick.window_start_ns, tick.window_reset, threads, ctx);
    for (const auto& w : loop_warnings_) snap.warnings.push_back(w);
}

}  // namespace

std::unique_ptr<Source> make_sched_source() { return std::make_unique<SchedSource>(); }

}  // namespace qscope
