// The sock probe family, user-space side: loads bpf/sock.bpf.c for one target, tells it the
// target's listening ports, seeds connections that predate the attach, and each tick turns the
// kernel's cumulative aggregates into the window's listeners / requests / downstream.
#include "probes/sock/sock_source.h"

#include <linux/inet_diag.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <tuple>

#include "engine/bpf_util.h"
#include "engine/kernel_features.h"
#include "engine/shared_hooks.h"
#include "probes/sock/attach_plan.h"
#include "probes/sock/scope.h"
#include "model/errors.h"
#include "model/syscall_table.h"
#include "symbols/symbolizer.h"
#include "sys/proc_fds.h"
#include "sys/proc_maps.h"
#include "sys/proc_stat.h"
#include "sys/proc_table.h"
#include "sys/proc_tasks.h"
#include "sys/tls_libs.h"
#include "tree.h"  // struct qs_tree_range: the skeleton maps its .data.tree section
#include "req_ctx.h"
#include "h2.h"
#include "sock.skel.h"
#include "sys/sock_diag.h"
#include "sys/unix_diag.h"
#include "engine/source.h"
#include "engine/target.h"

namespace qscope {

static_assert(sizeof(qs_served) == 16, "qs_served layout shared with bpf/sock.h");
static_assert(sizeof(qs_conn) == 48, "qs_conn layout shared with bpf/conn_state.h");
static_assert(sizeof(qs_port_stats) == 152, "qs_port_stats layout shared with bpf/sock.h");
static_assert(sizeof(qs_peer_key) == 20, "qs_peer_key layout shared with bpf/sock.h");
static_assert(sizeof(qs_peer_stats) == 208, "qs_peer_stats layout shared with bpf/sock.h");
static_assert(sizeof(qs_unix_name) == 128, "qs_unix_name layout shared with bpf/sock.h");

std::string peer_label(const qs_peer_key& k) {
    return format_endpoint(k.family, k.addr, k.port);
}

uint64_t listen_overflows(uint64_t sk_drops_delta, uint64_t overflow_skb_drops_delta) {
    return sk_drops_delta > overflow_skb_drops_delta ? sk_drops_delta - overflow_skb_drops_delta : 0;
}

namespace {

constexpr uint32_t kListenMask = 1u << 10;  // TCP_LISTEN

template <typename T>
T load(const T& v) {
    return __atomic_load_n(&v, __ATOMIC_RELAXED);
}

uint64_t u(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }

struct PortWindow {
    uint64_t accepted = 0, overflows = 0, dropped = 0;
    uint64_t status[QS_STATUS_CLASSES] = {};
    Histogram hists[QS_PORT_HISTS];
};

struct PeerWindow {
    uint64_t calls = 0, connect_failures = 0, resets = 0;
    FanOutCounts fan_out;
    Histogram hists[QS_PEER_HISTS];
};

FanOutCounts fan_out_counts(const qs_peer_stats& ps) {
    FanOutCounts f;
    f.requests = load(ps.fan_requests);
    f.calls = load(ps.fan_calls);
    f.retries = load(ps.fan_retries);
    f.failing_requests = load(ps.fail_requests);
    f.failing_calls = load(ps.fail_calls);
    f.failing_retries = load(ps.fail_retries);
    f.failed_calls = load(ps.failed_calls);
    f.calls_in_requests = load(ps.calls_in_request);
    f.calls_outside_requests = load(ps.calls_outside);
    f.calls_moved = load(ps.calls_moved);
    return f;
}

struct ListenSocket {
    uint16_t port = 0;
    uint64_t drops_at_first_sight = 0;
    uint64_t drops_now = 0;
    bool present = false;
};

class SockSource final : public Source {
public:
    ~SockSource() override {
        routes_.clear();  // the shared hooks stop handing events here first
        if (shared_.hooks) shared_.hooks->release_ports(shared_.slot);
        std::vector<Link> all = std::move(links_);
        for (auto& [pid, proc] : tls_procs_)
            for (Link& l : proc.links) all.push_back(std::move(l));
        detach_concurrently(all);
    }
    ProbeFamily family() const override { return ProbeFamily::sock; }
    bool asks_kernel_btf() const override { return true; }  // probe_features

    void start(const Target& target, const Config& cfg) override {
        pid_ = target.pid();
        target_ = &target;
        cfg_ = cfg;
        skel_.reset(sock_bpf::open());
        if (!skel_) throw_bpf_error("sock: opening BPF object", errno ? errno : EINVAL);
        make_empty_bss(skel_->maps.bss, "sock: making map .bss");
        share_tree_maps(skel_->obj, target, "sock");
        // The exporter's shared softirq hooks hand events here, and these programs hand them on
        // to the next target the socket concerns (bpf/port_owner.h).
        shared_ = target.shared_slot();
        if (shared_.hooks) {
            using H = SharedHooks::Hook;
            shared_.hooks->share_maps(skel_->obj,
                                      {H::data_ready, H::set_state, H::kfree_skb, H::rst_in, H::rst_out,
                                       H::data_ready_fentry, H::data_ready_kprobe},
                                      "sock");
            skel_->rodata->owner_slot = static_cast<__u32>(shared_.slot + 1);
        }
        bpf_check(bpf_map__set_max_entries(skel_->maps.conns, std::max<uint32_t>(cfg.max_connections, 64)),
                  "sock: sizing map conns");
        bpf_check(bpf_map__set_max_entries(skel_->maps.unix_live, std::max<uint32_t>(cfg.max_connections, 64)),
                  "sock: sizing map unix_live");
        probe_features();
        skel_->rodata->tls_plaintext = cfg.tls;
        // The HTTP/2 frame walk runs in bpf_loop (5.17); without it the verifier drops it as dead code.
        h2_streams_ = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_loop, nullptr) == 1;
        skel_->rodata->h2_streams = h2_streams_;
        plan_walk();
        if (!cfg.tls)
            for (bpf_program* prog : {skel_->progs.qs_ssl_write, skel_->progs.qs_ssl_write_ex, skel_->progs.qs_ssl_read,
                                      skel_->progs.qs_ssl_read_ex, skel_->progs.qs_ssl_read_ret,
                                      skel_->progs.qs_ssl_read_ex_ret, skel_->progs.qs_ssl_write_ret,
                                      skel_->progs.qs_ssl_write_ex_ret})
                bpf_program__set_autoload(prog, false);
        load_split();
        // Not before the load: the kernel's .bss was made empty (make_empty_bss).
        skel_->bss->h2_walk_coming = !walk_twins_.empty() && walk_state_ != WalkState::failed;
        // Ports first, so children of the target's listeners are recognised from the first
        // handshake after attach.
        refresh_listeners();
        scan_unix();  // Unix listeners before the hooks and the seeding walk need them
        choose_arrival_scope();
        attach_all();
        // A listener's drops count from here: before, no program told tcp_v{4,6}_rcv's apart
        // (at thousands a second, the attach's milliseconds would show as overflows).
        refresh_listeners();
        for (auto& [ino, ls] : listen_sockets_) ls.drops_at_first_sight = ls.drops_now;
        rcv_drops_base_ = rcv_drops_before_dump_;  // a base: see port_cumulative
        early_in_base_ = early_before_dump_;
        // The links hold the copies' programs; the copies themselves (~4 MiB each of parsed
        // ELF and BTF) would only weigh on a process that runs for weeks.
        for (Skel& side : sides_) side.reset();
        malloc_trim(0);
        last_rate_ns_ = monotonic_ns();  // completions count from here (rate_per_second)
        attached_ns_ = last_rate_ns_;
        seed_existing();
        refresh_tls();
        if (cfg.tls && tls_libs_.empty())
            warnings_.push_back("sock: --tls: no process of the target maps OpenSSL's libssl (libssl.so.3, "
                                "libssl.so.1.1)" + unsupported_tls_text() + ": nothing to probe");
    }

    void after_first_tick() override {
        find_tcp_rcv_text();
        load_walk_twins();
    }

    // Where tcp_v4_rcv, tcp_v6_rcv and tcp_rcv_state_process are, for qs_kfree_skb (tcp_rcv_text
    // in sock.bpf.c): the segments they drop on a listener count in its sk_drops and are not
    // overflows. On a
    // thread: /proc/kallsyms takes 25-75 ms to read and ~40 ms to parse (the table is the
    // one the sched family names kernel stacks with from tick 1). Until it is in, only
    // ACK-stage overflows are told apart (by their drop reason).
    void find_tcp_rcv_text() {
        if (bpf_program__fd(skel_->progs.qs_kfree_skb) < 0) {
            early_sweeps_left_ = 0;  // nothing keeps early drops
            return;
        }
        if (rcv_text_finder_.joinable()) return;
        rcv_text_finder_ = std::jthread([this] {
            const KernelSymbols& syms = kernel_symbols();
            __u64* slots = skel_->bss->tcp_rcv_text;
            rcv_texts_ = {syms.text_of("tcp_v4_rcv"), syms.text_of("tcp_v6_rcv"), syms.text_of("tcp_rcv_state_process"),
                          syms.text_of("tcp_drop_reason")};
            for (int i = 0; i < QS_RCV_TEXTS; i++) {
                // The start first: a range with only its start set matches nothing.
                __atomic_store_n(&slots[2 * i], rcv_texts_[i].start, __ATOMIC_RELEASE);
                __atomic_store_n(&slots[2 * i + 1], rcv_texts_[i].end, __ATOMIC_RELEASE);
            }
            // After the ranges: from here the kernel side counts by them, not in early_drops.
            __atomic_store_n(&skel_->bss->tcp_rcv_text_settled, 1, __ATOMIC_RELEASE);
            rcv_text_settled_.store(true, std::memory_order_release);
        });
    }

    // A listener's drops the kernel side kept by location while the ranges were unknown
    // (early_drops): held back from overflows until then, and then told apart, those in
    // tcp_v{4,6}_rcv going with rcv_drops. A program that read "not settled" just before the
    // store may still add one, so the map is read for a few ticks after.
    void sweep_early_drops() {
        if (early_sweeps_left_ == 0) return;
        const bool settled = rcv_text_settled_.load(std::memory_order_acquire);
        const int fd = bpf_map__fd(skel_->maps.early_drops);
        std::vector<qs_early_drop_key> keys;
        qs_early_drop_key k{}, next{};
        for (const void* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0; prev = &k) {
            keys.push_back(next);
            k = next;
        }
        early_pending_.fill(0);
        for (const auto& key : keys) {
            __u64 segs = 0;
            if (key.port_idx >= QS_MAX_PORTS) continue;
            const EarlyKey at{key.location, key.port_idx};
            if (!settled) {
                if (bpf_map_lookup_elem(fd, &key, &segs) == 0) {
                    early_pending_[key.port_idx] += segs;
                    early_read_[at] = segs;
                }
                continue;
            }
            if (bpf_map_lookup_and_delete_elem(fd, &key, &segs) != 0) continue;
            // Outside both ranges (or with the addresses hidden): the listener's drops count
            // as overflows, as they would have had the ranges been known. Those of them the
            // attach's base held (as pending) leave the base too: kept there, they would lower
            // every count of tcp_v{4,6}_rcv's drops since, and raise the overflows as much.
            if (std::any_of(rcv_texts_.begin(), rcv_texts_.end(), [&](const auto& t) { return t.contains(key.location); })) {
                early_rcv_drops_[key.port_idx] += segs;
            } else if (auto b = early_in_base_.find(at); b != early_in_base_.end()) {
                rcv_drops_base_[key.port_idx] -= std::min(rcv_drops_base_[key.port_idx], b->second);
            }
            early_in_base_.erase(at);
        }
        if (settled) --early_sweeps_left_;
    }

    // Once, on the collector's thread: overflows then count a listener's other drops too.
    void say_rcv_text() {
        if (rcv_text_said_ || !rcv_text_settled_.load(std::memory_order_acquire) || !rcv_texts_[0].empty()) return;
        rcv_text_said_ = true;
        warnings_.push_back("sock: /proc/kallsyms hides tcp_v4_rcv's address (kptr_restrict, or no CAP_SYSLOG): a "
                            "listener's overflows also count its other drops (a SYN retransmitted to a request "
                            "socket, a reset before the handshake ends)");
    }

    // top: the HTTP/2 frame walk's twins, on a thread of their own (plan_walk).
    void load_walk_twins() {
        if (walk_state_.load(std::memory_order_acquire) != WalkState::loading || walk_loader_.joinable()) return;
        walk_asked_ns_ = monotonic_ns();
        walk_loader_ = std::jthread([this] {
            try {
                const Skel side = load_side(walk_twins_);
                install_walk({side->obj});
                walk_in_ns_ = monotonic_ns();
                walk_state_.store(WalkState::in, std::memory_order_release);
            } catch (const std::exception& e) {
                walk_failed(e.what());
            }
            malloc_trim(0);  // the copy's parsed ELF and BTF (see start)
        });
    }

    void collect(Snapshot& snap, const Tick& tick) override {
        auto* b = skel_->bss;
        refresh_listeners();
        scan_unix();
        refresh_unix_listeners();
        check_arrival_scope();
        refresh_tls();
        // Tick 0's window was opened by open_window(), moments ago.
        if (tick.window_reset && tick.index > 0) rebase();

        // ---- connection table: ages of the oldest request / unread / busy call ---------
        double oldest_req = 0, oldest_unread = 0;
        std::map<uint32_t, double> oldest_busy;
        scan_conns(tick.now_ns, oldest_req, oldest_unread, oldest_busy);
        collect_serving(snap, tick);
        snap.calling_tids = calling_now_;

        // ---- listeners and requests, per port ------------------------------------------
        // The window's end reads the kernel side's drops again, now, milliseconds after the
        // dump: an ACK-stage overflow adds its second sk_drops before kfree_skb counts it in
        // rcv_drops, so read beside a dump that lands between the two, it is one overflow too
        // many, which the floor would keep for good. Read late, a drop since the dump only
        // lowers this tick's total; the next tick counts it.
        rcv_drops_end_ = rcv_drops_now();
        Requests& r = snap.requests;
        Histogram latency;
        const uint32_t nports = std::min<uint64_t>(load(b->next_port_idx), QS_MAX_PORTS);
        std::map<uint16_t, Listener> by_port;
        for (const auto& d : listen_diag_) {
            auto& l = by_port[d.sport];
            l.port = d.sport;
            l.backlog = std::max(l.backlog, d.wqueue);
            l.accept_queue += d.rqueue;
            if (l.addr.empty())
                l.addr = d.src;
            else if (l.addr.find(d.src) == std::string::npos)
                l.addr += "," + d.src;
        }
        std::vector<Listener> unix_listeners;
        for (uint32_t i = 0; i < nports; ++i) {
            const qs_port_stats& ps = b->port_stats[i];
            const uint32_t raw_port = load(ps.port);
            if (!raw_port) continue;
            const bool is_unix = raw_port == QS_PORT_UNIX;
            const uint16_t port = is_unix ? 0 : static_cast<uint16_t>(raw_port);
            const std::string unix_path = is_unix ? unix_port_name(i) : "";
            PortWindow cum = port_cumulative(i);
            const PortWindow& base = port_base_[i];
            const auto unix_diag = is_unix ? unix_listen_diag_.find(b->unix_port_names[i].ino) : unix_listen_diag_.end();
            const bool listening = is_unix ? unix_diag != unix_listen_diag_.end() : by_port.count(port) > 0;

            PortRequests pr;
            pr.port = port;
            pr.unix_path = unix_path;
            pr.in_flight = u(load(ps.in_flight));
            pr.waiting_unread = u(load(ps.waiting_unread));
            for (int c = 0; c < QS_STATUS_CLASSES; ++c) {
                pr.completed_total += cum.status[c];
                pr.duration_total[c] = cum.hists[QS_PH_LATENCY + c];
            }
            pr.dropped_total = cum.dropped;
            r.dropped += cum.dropped - std::min(cum.dropped, base.dropped);
            r.in_flight += pr.in_flight;
            r.in_flight_max += u(load(ps.in_flight_max));
            r.waiting_unread += pr.waiting_unread;
            r.waiting_unread_max += u(load(ps.waiting_unread_max));
            r.connections += u(load(ps.connections));
            uint64_t st[QS_STATUS_CLASSES];
            for (int c = 0; c < QS_STATUS_CLASSES; ++c) {
                st[c] = cum.status[c] - std::min(cum.status[c], base.status[c]);
                r.completed += st[c];
                latency.merge(cum.hists[QS_PH_LATENCY + c].delta(base.hists[QS_PH_LATENCY + c]));
            }
            r.status.c2xx += st[QS_STATUS_2XX];
            r.status.c3xx += st[QS_STATUS_3XX];
            r.status.c4xx += st[QS_STATUS_4XX];
            r.status.c5xx += st[QS_STATUS_5XX];
            r.status.unknown += st[QS_STATUS_UNKNOWN];
            r.ports.push_back(std::move(pr));

            if (!listening) continue;  // closed listener: its requests still count above
            if (is_unix) {
                unix_listeners.emplace_back();
                unix_listeners.back().unix_path = unix_path;
                unix_listeners.back().backlog = unix_diag->second.wqueue.value_or(0);
                unix_listeners.back().accept_queue = unix_diag->second.rqueue.value_or(0);
            }
            Listener& l = is_unix ? unix_listeners.back() : by_port[port];
            l.accept_queue_max = std::max<uint32_t>(l.accept_queue, static_cast<uint32_t>(u(load(ps.accept_queue_max))));
            l.accepted_total = cum.accepted;
            l.accepted = cum.accepted - std::min(cum.accepted, base.accepted);
            l.overflows_total = cum.overflows;
            l.overflows = cum.overflows - std::min(cum.overflows, base.overflows);
            l.accept_wait_total = cum.hists[QS_PH_ACCEPT_WAIT];
            l.accept_wait = cum.hists[QS_PH_ACCEPT_WAIT].delta(base.hists[QS_PH_ACCEPT_WAIT]).quantiles();
            l.connections += u(load(ps.connections));
            l.protocols.http1 += load(ps.wire[QS_WIRE_HTTP1]);
            l.protocols.h2 += load(ps.wire[QS_WIRE_H2]);
            l.protocols.tls += load(ps.wire[QS_WIRE_TLS]);
            l.protocols.other += load(ps.wire[QS_WIRE_OTHER]);
            // When the port last accepted: the tick its accept count last moved (a store in the
            // accept path's BPF program was refused under 6.1's lockdown integrity).
            auto& seen = last_accept_[i];
            if (seen.ns == 0 || seen.accepted != cum.accepted) seen = {cum.accepted, seen.ns ? tick.now_ns : attached_ns_};
            l.seconds_since_accept = tick.now_ns > seen.ns ? (tick.now_ns - seen.ns) / 1e9 : 0;
        }
        auto publish = [&](Listener& l) { snap.listeners.push_back(std::move(l)); };
        for (auto& [port, l] : by_port) {
            count_holders(port, l);
            publish(l);
        }
        for (auto& l : unix_listeners) publish(l);
        if (!unix_listeners.empty())
            snap.partial.push_back("sock: Unix listeners: a connect refused because the backlog is full (EAGAIN) "
                                   "is not counted by the kernel: their overflows read 0");
        r.latency = latency.quantiles();
        r.oldest_in_flight_seconds = oldest_req;
        r.oldest_unread_seconds = oldest_unread;
        // Over this source's own interval: the families start in parallel, so requests are
        // counted from this one's attach, before the collector's clock starts; dividing those
        // by the first tick's interval gave a first frame of millions of requests per second.
        if (tick.now_ns > last_rate_ns_) {
            const uint64_t total = completed_total();
            r.rate_per_second = (total - std::min(total, last_completed_)) / ((tick.now_ns - last_rate_ns_) / 1e9);
            last_completed_ = total;
            last_rate_ns_ = tick.now_ns;
        }

        // ---- downstream peers ----------------------------------------------------------
        r.attribution_total = attribution_total();
        r.attribution = r.attribution_total.since(attribution_base_);
        collect_peers(snap, oldest_busy);

        // ---- losses --------------------------------------------------------------------
        const uint64_t missed = load(b->kretprobe_missed);  // the slots' text only when it is read
        lost_.update("sock",
                     {{load(b->lost_conn_full), "connections not tracked (connection table full at --max-connections " +
                                                    std::to_string(cfg_.max_connections) + ")"},
                      {load(b->lost_port_full), "listening ports not measured (more than " +
                                                    std::to_string(QS_MAX_PORTS) + " ports)"},
                      {missed, missed ? "reads or writes not seen: their return from tcp_recvmsg/tcp_sendmsg was "
                                        "missed by the kretprobe (more threads inside those functions at once, "
                                        "blocked reads included, than the kretprobe has return slots for: it has " +
                                            kretprobe_slots_said() + ")"
                                      : std::string()},
                      {load(b->fan_slots_full), "calls not counted per request (a request called more than " +
                                                    std::to_string(QS_REQ_PEERS) + " distinct peers)"},
                      {load(b->h2_evicted), "HTTP/2 streams dropped from a connection's table before their end (more than " +
                                                std::to_string(QS_H2_PROBE) + " open near one stream id, or their end was "
                                                "missed): neither completed nor in flight"}},
                     snap);
        if (listen_error_.size()) snap.partial.push_back("sock: listeners: " + listen_error_);
        if (unix_error_.size()) snap.partial.push_back("sock: Unix listeners: " + unix_error_);
        collect_h2(snap);
        collect_tls(snap);
        say_rcv_text();
        snap.warnings.insert(snap.warnings.end(), warnings_.begin(), warnings_.end());
        snap.probe_attach.insert(snap.probe_attach.end(), attach_.begin(), attach_.end());
        snap.probe_attach.push_back(walk_row());
        say_walk();
    }

    // A walk that failed to load is warned of; with -v, top's deferred walk says when it came in.
    // Once, on the collector's thread.
    void say_walk() {
        const WalkState now = walk_state_.load(std::memory_order_acquire);
        if (walk_said_ || now == WalkState::loading || now == WalkState::off) return;
        walk_said_ = true;
        if (now == WalkState::failed)
            warnings_.push_back("sock: HTTP/2 streams are not followed: the frame walk failed to load (" + walk_error_ +
                                "); HTTP/2 connections are counted per connection");
        if (!cfg_.verbose || !walk_asked_ns_) return;
        if (now == WalkState::in)
            std::fprintf(stderr,
                         "qscope: sock: HTTP/2 frame walk in, %.0f ms after the first tick (%llu responses in HTTP/2 "
                         "frames counted as turns meanwhile)\n",
                         (walk_in_ns_ - walk_asked_ns_) / 1e6, static_cast<unsigned long long>(load(skel_->bss->h2_unwalked)));
        else
            std::fprintf(stderr, "qscope: sock: HTTP/2 frame walk failed: %s\n", walk_error_.c_str());
    }

private:
    using Skel = QSCOPE_SKEL_PTR(sock);

    struct Hook {
        bpf_program* prog;
        std::string what;       // for messages
        bool required;          // without it the requests section is meaningless
        bool available;
    };

    // The three hooks whose tracepoints are recent (reads, writes, arrivals) get an attach
    // type each from plan_sock_attach(); the programs of the ways not taken are switched off.
    // Any other hook the kernel lacks is switched off before load (autoload false) with a
    // warning; without inet_sock_set_state the numbers would be wrong, so that is an error.
    void probe_features() {
        auto& p = skel_->progs;
        KernelTracepoints tps;
        const KernelOffer offer = sock_offer(tps);
        // tcp_recvmsg lost its `nonblock` argument in 5.19: the BPF side reads flags and the
        // return value by position.
        if (!offer.functions.empty())
            skel_->rodata->tcp_recvmsg_nargs = static_cast<__u32>(tps.function_args("tcp_recvmsg"));
        // The Unix sweep's iterator is the one a kernel may refuse alone (engine/kernel_features.h):
        // without it the object would not load at all.
        sweep_error_ = iter_probe(tps, "bpf_map_elem");
        if (!sweep_error_.empty()) bpf_program__set_autoload(p.qs_unix_sweep, false);
        const SockAttachPlan plan = plan_sock_attach(offer);
        if (!plan.error.empty()) throw Error(Exit::kernel, plan.error);
        warnings_.insert(warnings_.end(), plan.warnings.begin(), plan.warnings.end());
        arrivals_warning_ = plan.of(SockHook::data_ready).warning;
        // Entry points per hook: tp_btf, fentry/fexit, kprobe, kretprobe (nullptr: none).
        const std::map<SockHook, std::array<bpf_program*, 4>> entries = {
            {SockHook::recv, {p.qs_recv, p.qs_recv_fexit, p.qs_recv_kprobe, p.qs_recv_kretprobe}},
            {SockHook::send, {p.qs_send, p.qs_send_fexit, p.qs_send_kprobe, p.qs_send_kretprobe}},
            {SockHook::data_ready, {p.qs_data_ready, p.qs_data_ready_fentry, p.qs_data_ready_kprobe, nullptr}},
        };
        // The syscall exits behind the reads and the writes (qs_sys_exit_<name>).
        const auto sys_exits = [&](SockHook hook) {
            std::vector<bpf_program*> out;
            const auto add = [&](const auto& names) {
                for (const char* n : names)
                    out.push_back(bpf_object__find_program_by_name(skel_->obj, (std::string("qs_sys_exit_") + n).c_str()));
            };
            if (hook == SockHook::recv) add(kSyscallReads);
            if (hook == SockHook::send) add(kSyscallWrites);
            return out;
        };
        bool kprobe_pairs = false;
        for (const auto& [hook, progs] : entries) {
            const HookChoice& c = plan.of(hook);
            for (bpf_program* prog : progs)
                if (prog) bpf_program__set_autoload(prog, false);
            for (bpf_program* prog : sys_exits(hook)) {
                bpf_program__set_autoload(prog, c.attach == AttachType::tracepoint);
                if (c.attach == AttachType::tracepoint) sys_exit_progs_.push_back(prog);
            }
            switch (c.attach) {
                case AttachType::tp_btf: bpf_program__set_autoload(progs[0], true); break;
                case AttachType::fentry:
                case AttachType::fexit: bpf_program__set_autoload(progs[1], true); break;
                case AttachType::kprobe: bpf_program__set_autoload(progs[2], true); break;
                case AttachType::kretprobe:
                    // The entry keeps the socket for the return (io_args).
                    bpf_program__set_autoload(progs[2], true);
                    bpf_program__set_autoload(progs[3], true);
                    kprobe_pairs = true;
                    break;
                default: break;
            }
            attach_.push_back(c.attach != AttachType::none ? ProbeAttach{ProbeFamily::sock, c.tracepoint, c.attach, c.via}
                                                           : hook_off(ProbeFamily::sock, c.tracepoint, c.caveat));
            if (hook == SockHook::data_ready) {
                arrivals_row_ = attach_.size() - 1;
                for (bpf_program* prog : progs)
                    if (prog && bpf_program__autoload(prog)) arrivals_prog_ = prog;
            }
        }
        // Unix reads and writes reach only the tracepoints, never tcp_recvmsg/tcp_sendmsg.
        const bool unix_seen = plan.of(SockHook::recv).attach == AttachType::tp_btf &&
                               plan.of(SockHook::send).attach == AttachType::tp_btf &&
                               (plan.of(SockHook::data_ready).attach == AttachType::tp_btf ||
                                plan.of(SockHook::data_ready).attach == AttachType::fentry);
        skel_->rodata->follow_unix = unix_seen;
        // The arrivals' scoped way in (choose_arrival_scope) is loaded only when it may be used;
        // it needs no global one (where the kernel offers none, it is the only way in).
        // Scoped, the target's Unix connects are seen at their syscall's exit instead of at the
        // listener's sk_data_ready.
        if (unix_seen && !tps.has_tracefs("syscalls", "sys_exit_connect"))
            scope_kernel_missing_ = "no syscalls/sys_exit_connect tracepoint to see the target's Unix connects";
        else if (cfg_.scope != SockScope::global)
            scope_kernel_missing_ = scoped_arrivals_unsupported();
        if (cfg_.scope == SockScope::global || !scope_kernel_missing_.empty())
            bpf_program__set_autoload(p.qs_arrival_skb, false);
        if (!bpf_program__autoload(p.qs_arrival_skb) || !unix_seen)
            bpf_program__set_autoload(p.qs_unix_connect_exit, false);
        if (!unix_seen)
            warnings_.push_back("sock: Unix-domain sockets are not followed: their reads and writes are seen only "
                                "through the sock_recv_length/sock_send_length tracepoints (Linux 6.3+)");
        // One slot per thread between a kprobe and its kretprobe; unused otherwise.
        bpf_check(bpf_map__set_max_entries(skel_->maps.io_args, kprobe_pairs ? 16384 : 1), "sock: sizing map io_args");

        std::vector<Hook> hooks = {
            {p.qs_set_state, "tp_btf/inet_sock_set_state", true, tps.has_btf("inet_sock_set_state")},
            {p.qs_accept4_exit, "tracepoint syscalls/sys_exit_accept4: no accept wait", false,
             tps.has_tracefs("syscalls", "sys_exit_accept4")},
            {p.qs_accept_exit, "tracepoint syscalls/sys_exit_accept: no accept wait for accept()", false,
             tps.has_tracefs("syscalls", "sys_exit_accept")},
            {p.qs_kfree_skb, "tp_btf/kfree_skb with rx_sk and SKB_DROP_REASON_TCP_LISTEN_OVERFLOW: ACK-stage overflows "
                             "counted from sk_drops only", false,
             kfree_skb_tells_overflows(tps)},
            {p.qs_rst_in, "tp_btf/tcp_receive_reset: downstream resets received not counted", false,
             tps.has_btf("tcp_receive_reset")},
            {p.qs_rst_out, "tp_btf/tcp_send_reset: downstream resets sent not counted", false,
             tps.has_btf("tcp_send_reset")},
            {p.qs_close_enter, "tracepoint syscalls/sys_enter_close: a Unix connection's close is seen at the next tick",
             false, tps.has_tracefs("syscalls", "sys_enter_close")},
        };
        for (auto& h : hooks) {
            if (h.available) {
                attach_.push_back(program_attach(ProbeFamily::sock, h.prog));
                continue;
            }
            if (h.required)
                throw Error(Exit::kernel, "sock: the kernel lacks " + h.what + ", needed to follow requests");
            bpf_program__set_autoload(h.prog, false);
            warnings_.push_back("sock: hook unavailable: " + h.what);
            attach_.push_back(hook_off(ProbeFamily::sock, program_attach(ProbeFamily::sock, h.prog).hook, h.what));
        }
        // The iterators: connections open before the attach (task_file), the threads' own
        // sockets (task), the Unix sweep (bpf_map_elem). Each once, whatever walks it.
        std::set<std::string> iters;
        for (bpf_program* prog : {p.qs_seed, p.qs_seed_busy, p.qs_unix_scan, p.qs_unix_sweep}) {
            ProbeAttach a = program_attach(ProbeFamily::sock, prog);
            if (!bpf_program__autoload(prog)) a = hook_off(ProbeFamily::sock, a.hook, a.via + ": " + sweep_error_);
            if (iters.insert(a.hook).second) attach_.push_back(std::move(a));
        }
    }

    // ---- the HTTP/2 frame walk's twins (recv_walk and send_walk in sock.bpf.c) ----------
    enum class WalkState { off, loading, in, failed };

    // Each light program of the reads and the writes, and its twin with the walk.
    std::array<std::pair<bpf_program*, bpf_program*>, 6> walk_pairs() const {
        auto& p = skel_->progs;
        return {{{p.qs_recv, p.qs_recv_walk},
                 {p.qs_recv_fexit, p.qs_recv_fexit_walk},
                 {p.qs_recv_kretprobe, p.qs_recv_kretprobe_walk},
                 {p.qs_send, p.qs_send_walk},
                 {p.qs_send_fexit, p.qs_send_fexit_walk},
                 {p.qs_send_kretprobe, p.qs_send_kretprobe_walk}}};
    }

    // The twins of the light programs the plan turned on, where the kernel runs the walk
    // (bpf_loop). None loads with the object itself: with the rest (load_split) or after
    // top's first frame (after_first_tick).
    void plan_walk() {
        for (auto [light, twin] : walk_pairs()) {
            if (h2_streams_ && bpf_program__autoload(light)) walk_twins_.push_back(bpf_program__name(twin));
            bpf_program__set_autoload(twin, false);
        }
        if (!walk_twins_.empty())
            walk_state_ = WalkState::loading;
        else if (h2_streams_)  // the syscall exits' programs: the walk is inline
            walk_state_ = WalkState::in;
        else
            walk_off_ = "this kernel lacks bpf_loop (Linux 5.17), which walks the frames";
    }

    // Put the loaded twins (in `from`) into their slots, all or none: one hook's walk without
    // the other's would follow streams whose bytes are half unseen.
    void install_walk(std::initializer_list<const bpf_object*> from) {
        std::vector<int> filled;
        const auto slot_of = [&](const std::string& twin) {
            return bpf_map__fd(twin.rfind("qs_send", 0) == 0 ? skel_->maps.send_walk : skel_->maps.recv_walk);
        };
        for (const std::string& twin : walk_twins_) {
            int fd = -1;
            for (const bpf_object* o : from)
                if (const bpf_program* q = o ? bpf_object__find_program_by_name(o, twin.c_str()) : nullptr)
                    if (bpf_program__autoload(q)) fd = bpf_program__fd(q);
            const __u32 zero = 0;
            const int err = fd < 0 ? ENOENT : bpf_map_update_elem(slot_of(twin), &zero, &fd, BPF_ANY) ? errno : 0;
            if (err) {
                for (int map : filled) bpf_map_delete_elem(map, &zero);
                throw_bpf_error("sock: putting " + twin + " into its slot", err);
            }
            filled.push_back(slot_of(twin));
        }
    }

    // The walk failed to load: HTTP/2 connections are counted per connection from here on.
    void walk_failed(const std::string& why) {
        walk_error_ = why;
        skel_->bss->h2_walk_coming = 0;
        walk_state_.store(WalkState::failed, std::memory_order_release);
    }

    // The walk's row of probe_attach: how its state reads now.
    ProbeAttach walk_row() const {
        // via: the light programs it is entered from ("qs_recv, qs_send"), or inline.
        ProbeAttach a{ProbeFamily::sock, "http2_frame_walk", AttachType::tail_call, "", ""};
        for (const std::string& twin : walk_twins_)
            a.via += (a.via.empty() ? "" : ", ") + twin.substr(0, twin.size() - std::strlen("_walk"));
        if (walk_twins_.empty()) {
            a.attach = AttachType::tracepoint;
            a.via = "inline in the syscall exits' programs";
        }
        switch (walk_state_.load(std::memory_order_acquire)) {
            case WalkState::in: break;
            case WalkState::loading: a.attach = AttachType::none; a.off = "loading: top draws its first frame first"; break;
            case WalkState::failed: a.attach = AttachType::none; a.off = walk_error_; break;
            case WalkState::off: a.attach = AttachType::none; a.off = walk_off_; break;
        }
        return a;
    }

    // libbpf verifies an object's programs one after another. The HTTP/2 walk's twins (~80 ms
    // each) and the light programs of the reads and the writes would be most of the family's
    // start, so (unless top loads the twins later) the reads' and the writes' are verified on a
    // thread each, in a second copy of the object that shares every map of the first: the
    // first loads the rest (maps made), then both copies load at once.
    void load_split() {
        const KernelBtfLoan loan;
        if (cfg_.quick_start) {
            // The light programs verify in ~10 ms: a second copy of the object is not worth its open.
            if (int err = sock_bpf::load(skel_.get()))
                throw_load_error(ProbeFamily::sock, "sock: loading BPF programs (sock.bpf.c)", err);
            return;
        }
        auto& p = skel_->progs;
        std::array<std::vector<std::string>, 2> groups;  // reads, writes: what the plan turned on
        const std::array<std::vector<bpf_program*>, 2> heavy = {
            std::vector<bpf_program*>{p.qs_recv, p.qs_recv_fexit, p.qs_recv_kprobe, p.qs_recv_kretprobe},
            std::vector<bpf_program*>{p.qs_send, p.qs_send_fexit, p.qs_send_kprobe, p.qs_send_kretprobe}};
        std::array<std::vector<std::string>, 2> twins;
        for (size_t g = 0; g < heavy.size(); g++)
            for (bpf_program* prog : heavy[g])
                if (bpf_program__autoload(prog)) {
                    groups[g].push_back(bpf_program__name(prog));
                    bpf_program__set_autoload(prog, false);
                    const std::string twin = groups[g].back() + "_walk";
                    if (std::find(walk_twins_.begin(), walk_twins_.end(), twin) != walk_twins_.end())
                        twins[g].push_back(twin);
                }
        if (int err = sock_bpf::load(skel_.get()))
            throw_load_error(ProbeFamily::sock, "sock: loading BPF programs (sock.bpf.c)", err);
        std::array<std::exception_ptr, 2> errors;
        std::array<std::string, 2> walk_errors;
        std::vector<std::thread> loaders;
        for (size_t g = 0; g < groups.size(); g++) {
            if (groups[g].empty()) continue;
            loaders.emplace_back([&, g] {
                try {
                    std::vector<std::string> names = groups[g];
                    names.insert(names.end(), twins[g].begin(), twins[g].end());
                    try {
                        sides_[g] = load_side(names);
                    } catch (const std::exception& e) {
                        if (twins[g].empty()) throw;
                        walk_errors[g] = e.what();  // the light program alone, then
                        sides_[g] = load_side(groups[g]);
                    }
                } catch (...) {
                    errors[g] = std::current_exception();
                }
            });
        }
        for (auto& t : loaders) t.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
        if (walk_state_ != WalkState::loading) return;
        if (const std::string& why = walk_errors[0].empty() ? walk_errors[1] : walk_errors[0]; !why.empty()) {
            walk_failed(why);
            return;
        }
        try {
            install_walk({sides_[0] ? sides_[0]->obj : nullptr, sides_[1] ? sides_[1]->obj : nullptr});
            walk_state_ = WalkState::in;
        } catch (const std::exception& e) {
            walk_failed(e.what());
        }
    }

    // A copy of the object that loads only `names`, on skel_'s maps.
    Skel load_side(const std::vector<std::string>& names) {
        Skel side(sock_bpf::open());
        if (!side) throw_bpf_error("sock: opening BPF object", errno ? errno : EINVAL);
        bpf_map* m;
        bpf_object__for_each_map(m, side->obj) {
            const bpf_map* ours = bpf_object__find_map_by_name(skel_->obj, bpf_map__name(m));
            if (ours && bpf_map__fd(ours) >= 0)
                bpf_check(bpf_map__reuse_fd(m, bpf_map__fd(ours)), std::string("sock: sharing map ") + bpf_map__name(m));
            else
                bpf_map__set_autocreate(m, false);  // not made for the first copy: none of ours uses it
        }
        bpf_program* prog;
        bpf_object__for_each_program(prog, side->obj) {
            bpf_program__set_autoload(prog, std::find(names.begin(), names.end(), bpf_program__name(prog)) != names.end());
        }
        const KernelBtfLoan loan;
        if (int err = sock_bpf::load(side.get()))
            throw_load_error(ProbeFamily::sock, "sock: loading BPF programs (sock.bpf.c)", err);
        return side;
    }

    // The program that was loaded for skel_'s `prog`: itself, or its namesake in a side copy
    // (until attach_all is done).
    bpf_program* loaded(bpf_program* prog) const {
        if (bpf_program__autoload(prog)) return prog;
        for (const Skel& side : sides_)
            if (side)
                if (bpf_program* q = bpf_object__find_program_by_name(side->obj, bpf_program__name(prog)))
                    if (bpf_program__autoload(q)) return q;
        return prog;
    }

    // Arrivals from the target's cgroup alone (probes/sock/scope.h), or from the global hook
    // the plan chose, with the reason in probe_attach. Runs after the listeners are known.
    void choose_arrival_scope() {
        ScopeFacts f;
        f.asked = cfg_.scope;
        f.kernel_missing = scope_kernel_missing_;
        if (f.asked != SockScope::global && f.kernel_missing.empty()) {
            f.mount = cgroup2_mount();
            for (const auto& p : target_->processes())
                if (auto cg = proc_cgroup_v2(p.pid)) f.cgroups.insert(*cg);
            f.unix_listener = has_unix_listener();
            if (f.mount && f.cgroups.size() == 1 && *f.cgroups.begin() != "/") {
                scope_ids_ = cgroup_subtree_ids(*f.mount + *f.cgroups.begin());
                if (auto why = listeners_outside_scope(); !why.empty()) f.listeners_outside.push_back(why);
            }
        }
        ScopeChoice c = choose_scope(f);
        if (c.cgroup) {
            const std::string dir = *f.mount + *c.cgroup;
            const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd >= 0) scope_link_.reset(bpf_program__attach_cgroup(skel_->progs.qs_arrival_skb, fd));
            int err = errno;
            if (fd >= 0) close(fd);
            if (scope_link_ && bpf_program__autoload(skel_->progs.qs_unix_connect_exit)) {
                unix_connect_link_.reset(bpf_program__attach(skel_->progs.qs_unix_connect_exit));
                err = errno;
                if (!unix_connect_link_) scope_link_.reset();
            }
            if (!scope_link_)
                c = ScopeChoice{std::nullopt, "attaching " + std::string(fd < 0 ? "to cgroup " + dir : "the scoped hooks") +
                                                  ": " + errno_text(err)};
        }
        if (!c.cgroup && cfg_.scope == SockScope::cgroup)
            throw Error(Exit::usage, "--scope cgroup: " + c.why + " (--scope auto falls back to the global hook)");
        arrivals_global_row_ = attach_[arrivals_row_];
        if (c.cgroup) {
            scope_ = c.cgroup;
            // The plan's warning that arrivals have no way in is not true of a scoped target.
            if (!arrivals_prog_ && !arrivals_warning_.empty()) std::erase(warnings_, arrivals_warning_);
            attach_[arrivals_row_] = ProbeAttach{ProbeFamily::sock, "sk_data_ready", AttachType::cgroup_skb, *c.cgroup};
            if (unix_connect_link_)
                attach_.push_back(program_attach(ProbeFamily::sock, skel_->progs.qs_unix_connect_exit));
        } else {
            attach_.push_back(hook_off(ProbeFamily::sock, kScopeHook, c.why));
        }
    }

    // A scope that stops holding (a new listener charged elsewhere, a Unix listener) hands the
    // arrivals back to the global hook: the tracepoint first, so no arrival falls between.
    void check_arrival_scope() {
        if (!scope_ || scope_stuck_) return;
        std::string why = has_unix_listener() ? "the target now listens on a Unix-domain socket" : "";
        if (why.empty()) why = listeners_outside_scope();
        if (why.empty()) return;
        const bool routed = arrivals_prog_ && route_shared(arrivals_prog_, arrivals_prog_);
        Link l(arrivals_prog_ && !routed ? bpf_program__attach(arrivals_prog_) : nullptr);
        if (!l && !routed) {
            warnings_.push_back("sock: arrivals stay scoped to cgroup " + *scope_ + " although " + why + "; " +
                                (arrivals_prog_ ? std::string("attaching ") + bpf_program__name(arrivals_prog_) +
                                                      " failed: " + errno_text(errno)
                                                : std::string("the kernel offers no global way in for them")) +
                                ": the arrivals of the connections outside it are not seen");
            scope_stuck_ = true;  // said once; the next ticks would only fail the same way
            return;
        }
        if (l) links_.push_back(std::move(l));
        scope_link_.reset();
        unix_connect_link_.reset();
        warnings_.push_back("sock: arrivals moved from cgroup " + *scope_ + " to the global hook: " + why +
                            "; its connections' arrivals before this tick were not seen");
        attach_[arrivals_row_] = arrivals_global_row_;
        const ProbeAttach connects = program_attach(ProbeFamily::sock, skel_->progs.qs_unix_connect_exit);
        attach_.erase(std::remove_if(attach_.begin(), attach_.end(),
                                     [&](const ProbeAttach& a) { return a.family == connects.family && a.hook == connects.hook; }),
                      attach_.end());
        attach_.push_back(hook_off(ProbeFamily::sock, kScopeHook, why));
        scope_.reset();
    }

    // Registered by qs_unix_scan, and kept once seen (a port slot is never given back).
    bool has_unix_listener() const {
        const uint32_t n = std::min<uint64_t>(load(skel_->bss->next_port_idx), QS_MAX_PORTS);
        for (uint32_t i = 0; i < n; ++i)
            if (load(skel_->bss->port_stats[i].port) == QS_PORT_UNIX) return true;
        return false;
    }

    // Why one of the target's TCP listeners is outside the scoped cgroup's subtree, or "".
    // The subtree is read again when an unknown id shows up (a cgroup made below it since).
    std::string listeners_outside_scope() {
        const auto outside = [&]() -> std::string {
            for (const auto& d : listen_diag_) {
                const std::string where = format_endpoint(d.src, d.sport);
                if (!d.cgroup_id) return "the kernel does not report the cgroup of listener " + where;
                if (std::string why = listener_outside(where, *d.cgroup_id, scope_ids_); !why.empty()) return why;
            }
            return "";
        };
        std::string why = outside();
        const auto mount = scope_ && !why.empty() ? cgroup2_mount() : std::nullopt;
        if (!mount) return why;
        scope_ids_ = cgroup_subtree_ids(*mount + *scope_);
        return outside();
    }

    void attach_all() {
        auto& p = skel_->progs;
        // Required: without them the requests section would be wrong, not just thinner.
        const std::set<bpf_program*> required = {p.qs_set_state,     p.qs_recv,          p.qs_send,
                                                 p.qs_recv_fexit,    p.qs_send_fexit,    p.qs_recv_kprobe,
                                                 p.qs_recv_kretprobe, p.qs_send_kprobe,  p.qs_send_kretprobe};
        std::vector<bpf_program*> progs = {
            p.qs_set_state,   p.qs_recv,          p.qs_recv_fexit,        p.qs_recv_kprobe,  p.qs_recv_kretprobe,
            p.qs_send,        p.qs_send_fexit,    p.qs_send_kprobe,       p.qs_send_kretprobe, p.qs_data_ready,
            p.qs_data_ready_fentry, p.qs_data_ready_kprobe, p.qs_accept4_exit, p.qs_accept_exit, p.qs_kfree_skb,
            p.qs_rst_in,      p.qs_rst_out,       p.qs_close_enter};
        progs.insert(progs.end(), sys_exit_progs_.begin(), sys_exit_progs_.end());
        // The exporter's shared hooks, where it has them: each hands this target's events to
        // its program here (engine/shared_hooks.h).
        if (shared_.hooks && skel_->rodata->follow_unix)
            shared_.hooks->add_port_owner(SharedHooks::PortOwners::unix_sockets, 0, shared_.slot);
        for (bpf_program* ours : progs) {
            bpf_program* prog = loaded(ours);
            if (!bpf_program__autoload(prog)) continue;
            if (ours == arrivals_prog_ && scope_) continue;  // the cgroup's instead (choose_arrival_scope)
            if (route_shared(ours, prog)) continue;
            Link l(attach_link(prog));
            if (!l) {
                const int err = errno;
                // A syscall exit standing in for the reads or writes is as required as they are.
                if (required.count(ours) ||
                    std::find(sys_exit_progs_.begin(), sys_exit_progs_.end(), ours) != sys_exit_progs_.end())
                    throw_bpf_error(std::string("sock: attaching ") + bpf_program__name(prog), err);
                warnings_.push_back(std::string("sock: could not attach ") + bpf_program__name(prog) + ": " +
                                    errno_text(err));
                continue;
            }
            links_.push_back(std::move(l));
        }
    }

    // Where the exporter shares `ours`'s hook, its program there hands the target's events to
    // `prog` (its loaded copy), with a tail call: the hook runs once per event however many
    // targets share it. Said in the attach listing. False where the hook is not shared.
    bool route_shared(bpf_program* ours, bpf_program* prog) {
        using H = SharedHooks::Hook;
        const auto& p = skel_->progs;
        const std::map<const bpf_program*, H> shareable = {
            {p.qs_recv, H::recv},
            {p.qs_send, H::send},
            {p.qs_accept4_exit, H::accept4},
            {p.qs_accept_exit, H::accept},
            {p.qs_close_enter, H::close},
            {p.qs_data_ready, H::data_ready},
            {p.qs_set_state, H::set_state},
            {p.qs_kfree_skb, H::kfree_skb},
            {p.qs_rst_in, H::rst_in},
            {p.qs_rst_out, H::rst_out},
            {p.qs_recv_fexit, H::recv_fexit},
            {p.qs_send_fexit, H::send_fexit},
            {p.qs_recv_kprobe, H::recv_kprobe},
            {p.qs_recv_kretprobe, H::recv_kretprobe},
            {p.qs_send_kprobe, H::send_kprobe},
            {p.qs_send_kretprobe, H::send_kretprobe},
            {p.qs_data_ready_fentry, H::data_ready_fentry},
            {p.qs_data_ready_kprobe, H::data_ready_kprobe}};
        const auto hook = shareable.find(ours);
        if (hook == shareable.end() || !shared_.hooks || !shared_.hooks->has(hook->second)) return false;
        routes_.push_back(shared_.hooks->route(hook->second, shared_.slot, prog));
        // The hook's row: by the function or tracepoint and the attach type (a kprobe pair's row
        // is its kretprobe's, which names the pair's shared programs).
        const ProbeAttach mine = program_attach(ProbeFamily::sock, prog);
        for (ProbeAttach& a : attach_)
            if (a.family == ProbeFamily::sock && a.via == mine.via && a.attach == mine.attach)
                a.via = shared_.hooks->via(a.via, hook->second, prog, shared_.slot);
        return true;
    }

    // Connections opened before the attach: walk the target's fd tables once (iter/task_file,
    // where bpf_sock_from_file works) and insert each TCP connection they hold. One walk per
    // process of a small tree; past that one walk of every task, which the programs filter.
    void seed_existing() {
        const auto procs = target_->processes();
        std::vector<int> pids;
        if (procs.size() <= 32)
            for (const auto& p : procs) pids.push_back(p.pid);
        else
            pids.push_back(0);
        for (int pid : pids) {
            run_iter(skel_->progs.qs_seed, pid, "connections opened before the attach are not counted");
            run_iter(skel_->progs.qs_seed_busy, pid,
                     "downstream calls in progress at the attach are not counted as busy");
        }
    }

    // Unix-domain sockets (bpf/sock.bpf.c): qs_unix_scan registers the target's Unix listeners
    // and marks the tracked Unix sockets its fd tables still hold; qs_unix_sweep then closes
    // the others (no tracepoint sees a Unix socket close). Once per tick, so a close is seen
    // within a tick.
    void scan_unix() {
        if (!sweep_error_.empty() && skel_->rodata->follow_unix) {
            const std::string w = "sock: iter/bpf_map_elem unavailable (" + sweep_error_ + "): closed Unix connections "
                                  "are seen only at their close() (sys_enter_close), not at an exit or a dup'd fd's close";
            if (std::find(warnings_.begin(), warnings_.end(), w) == warnings_.end()) warnings_.push_back(w);
        }
        __atomic_fetch_add(&skel_->bss->unix_gc_gen, 1, __ATOMIC_RELEASE);
        for (int pid : iter_pids())
            run_iter(skel_->progs.qs_unix_scan, pid, "Unix listeners and closes of Unix connections are not seen");
        DECLARE_LIBBPF_OPTS(bpf_iter_attach_opts, opts);
        union bpf_iter_link_info linfo;
        std::memset(&linfo, 0, sizeof(linfo));
        linfo.map.map_fd = static_cast<__u32>(bpf_map__fd(skel_->maps.unix_live));
        opts.link_info = &linfo;
        opts.link_info_len = sizeof(linfo);
        if (sweep_error_.empty())
            drain_iter(Link(bpf_program__attach_iter(skel_->progs.qs_unix_sweep, &opts)), "sock: iter/bpf_map_elem",
                       "closed Unix connections stay counted");
    }

    // The machine's Unix listeners (queue depth and backlog), by inode: one small dump per
    // tick, only while the target has Unix listeners.
    void refresh_unix_listeners() {
        unix_error_.clear();
        unix_listen_diag_.clear();
        if (!has_unix_listener()) return;
        try {
            for (auto& d : unix_diag_dump(kListenMask, pid_)) unix_listen_diag_[d.inode] = std::move(d);
        } catch (const Error& e) {
            unix_error_ = e.what();
        }
    }

    static std::string unix_name(const qs_unix_name& n) {
        qs_unix_name copy;
        std::memcpy(&copy, &n, sizeof(copy));  // the kernel may write it concurrently
        return unix_name_text(copy.path, std::min<uint32_t>(copy.len, QS_UNIX_PATH));
    }
    std::string unix_port_name(uint32_t i) const { return unix_name(skel_->bss->unix_port_names[i]); }

    std::vector<int> iter_pids() const {
        const auto procs = target_->processes();
        std::vector<int> pids;
        if (procs.size() <= 32)
            for (const auto& p : procs) pids.push_back(p.pid);
        else
            pids.push_back(0);
        return pids;
    }

    // pid 0: every task on the machine.
    void run_iter(bpf_program* prog, int pid, const std::string& consequence) {
        DECLARE_LIBBPF_OPTS(bpf_iter_attach_opts, opts);
        union bpf_iter_link_info linfo;
        std::memset(&linfo, 0, sizeof(linfo));
        linfo.task.pid = static_cast<__u32>(pid);
        opts.link_info = &linfo;
        opts.link_info_len = sizeof(linfo);
        Link link(bpf_program__attach_iter(prog, &opts));
        if (!link) {
            // Kernels before 6.1 cannot filter the walk by pid: walk every task (the
            // program filters on tgid itself).
            link.reset(bpf_program__attach_iter(prog, nullptr));
        }
        drain_iter(std::move(link), std::string("sock: ") + bpf_program__section_name(prog), consequence);
    }

    // Runs an attached iterator to its end (its programs do their work while it is read).
    void drain_iter(Link link, const std::string& what, const std::string& consequence) {
        // Iterators that run every tick must not repeat their warning every tick.
        auto warn = [&](const std::string& w) {
            if (std::find(warnings_.begin(), warnings_.end(), w) == warnings_.end()) warnings_.push_back(w);
        };
        if (!link) {
            warn(what + " unavailable (" + errno_text(errno) + "): " + consequence);
            return;
        }
        try {
            (void)read_iter(link.get(), what);  // these programs write nothing: they work as it runs
        } catch (const Error& e) {
            warn(std::string(e.what()) + ": " + consequence);
        }
    }

    // Listeners the target holds: its processes' /proc/PID/fd socket inodes ∩ sock_diag
    // LISTEN sockets. A listener several workers share is one inode, counted once.
    // The machine's listeners come from one small sock_diag dump per tick; which of them are
    // the target's needs its fd table, which for a server with 10,000 connections is 10,000
    // readlinks where the kernel cannot read it in one pass (Target::socket_fds): so it is read
    // only when a listener appears that was never classified.
    void refresh_listeners() {
        listen_error_.clear();
        std::vector<DiagSocket> all;
        try {
            // The kernel side's rcv_drops as of the dump's sk_drops (port_cumulative subtracts
            // them): read later, a listener dropping a segment per connection (a bare ACK under
            // TCP_DEFER_ACCEPT) at thousands a second would show the drops in between as
            // overflows. The dump is read again while a drop lands during it.
            for (int attempt = 0; attempt < 3; ++attempt) {
                rcv_drops_before_dump_ = rcv_drops_now();
                early_before_dump_ = early_read_;
                all.clear();
                for (int fam : {AF_INET, AF_INET6})
                    for (auto& d : sock_diag_dump(fam, kListenMask, true, pid_)) all.push_back(std::move(d));
                if (rcv_drops_now() == rcv_drops_before_dump_) break;
            }
        } catch (const Error& e) {
            listen_error_ = e.what();
            listen_diag_.clear();
            return;
        }
        bool unknown = false;
        for (const auto& d : all)
            if (!listen_sockets_.count(d.inode) && !not_ours_.count(d.inode)) unknown = true;
        const std::vector<ProcessMember> procs = target_->processes();
        if (unknown || holders_stale(procs)) {
            std::set<uint64_t> listening;
            for (const auto& d : all) listening.insert(d.inode);
            std::set<uint64_t> inodes;
            holders_.clear();
            for (const auto& p : procs)
                for (const SocketFd& s : target_->socket_fds(p.pid)) {
                    inodes.insert(s.inode);
                    if (listening.count(s.inode)) holders_[s.inode].insert(p.pid);
                }
            for (const auto& d : all)
                if (!inodes.count(d.inode)) not_ours_.insert(d.inode);
            holder_members_.clear();
            for (const auto& p : procs) holder_members_.push_back(p.pid);
            holders_read_ = std::chrono::steady_clock::now();
        }
        listen_diag_.clear();
        std::set<uint64_t> live;
        for (auto& d : all) {
            live.insert(d.inode);
            if (!not_ours_.count(d.inode)) listen_diag_.push_back(std::move(d));
        }
        // Inodes are recycled: forget closed sockets so a new one is classified afresh.
        for (auto it = not_ours_.begin(); it != not_ours_.end();)
            it = live.count(*it) ? std::next(it) : not_ours_.erase(it);
        for (auto& [ino, ls] : listen_sockets_) ls.present = false;
        for (const auto& d : listen_diag_) {
            auto it = listen_sockets_.find(d.inode);
            if (it == listen_sockets_.end()) {
                ListenSocket ls;
                ls.port = d.sport;
                ls.drops_at_first_sight = d.drops.value_or(0);
                it = listen_sockets_.emplace(d.inode, ls).first;
                register_port(d.sport);
            }
            it->second.present = true;
            if (d.drops) it->second.drops_now = *d.drops;
        }
        // Listeners closed since: forget them (their requests stay in the port's figures).
        for (auto it = listen_sockets_.begin(); it != listen_sockets_.end();)
            it = it->second.present ? std::next(it) : listen_sockets_.erase(it);
    }

    // Which processes hold a listener changes only when the tree does (a fork inherits the
    // parent's sockets, an exit drops them): the fd tables are read again then, at most once
    // a second, so a tree whose members churn (a process per connection) has its fd tables
    // read at most once a second, not at every change.
    bool holders_stale(const std::vector<ProcessMember>& procs) const {
        if (procs.size() == holder_members_.size()) {
            bool same = true;
            for (size_t i = 0; i < procs.size() && same; ++i) same = procs[i].pid == holder_members_[i];
            if (same) return false;
        }
        return std::chrono::steady_clock::now() - holders_read_ >= std::chrono::seconds(1);
    }

    // Processes of the tree holding a listening socket of `port` (several sockets with
    // SO_REUSEPORT), and of them the ones other than the tree's root.
    void count_holders(uint16_t port, Listener& l) const {
        std::set<int> pids;
        for (const auto& d : listen_diag_) {
            if (d.sport != port) continue;
            auto it = holders_.find(d.inode);
            if (it != holders_.end()) pids.insert(it->second.begin(), it->second.end());
        }
        l.processes = static_cast<uint32_t>(pids.size());
        l.workers = static_cast<uint32_t>(pids.size() - pids.count(pid_));
    }

    void register_port(uint16_t port) {
        if (port_index_.count(port)) return;
        __u32 key = port, idx = 0;
        if (bpf_map_lookup_elem(bpf_map__fd(skel_->maps.port_idx), &key, &idx) == 0) {
            port_index_[port] = idx;  // the kernel saw the listen() first
            return;
        }
        const uint64_t n = __atomic_fetch_add(&skel_->bss->next_port_idx, 1, __ATOMIC_RELAXED);
        if (n >= QS_MAX_PORTS) {
            __atomic_fetch_add(&skel_->bss->lost_port_full, 1, __ATOMIC_RELAXED);
            port_index_[port] = QS_MAX_PORTS;
            return;
        }
        idx = static_cast<__u32>(n);
        __atomic_store_n(&skel_->bss->port_stats[idx].port, static_cast<__u32>(port), __ATOMIC_RELEASE);
        __atomic_fetch_or(&skel_->bss->port_bits[port / 64], 1ULL << (port % 64), __ATOMIC_RELEASE);
        if (shared_.hooks) shared_.hooks->add_port_owner(SharedHooks::PortOwners::listen, port, shared_.slot);
        if (bpf_map_update_elem(bpf_map__fd(skel_->maps.port_idx), &key, &idx, BPF_NOEXIST) != 0 &&
            bpf_map_lookup_elem(bpf_map__fd(skel_->maps.port_idx), &key, &idx) != 0)
            throw_bpf_error("sock: registering listening port " + std::to_string(port) + " in map port_idx", errno);
        port_index_[port] = idx;
    }

    // Per port slot: the segments the kernel side saw tcp_v{4,6}_rcv drop on its listener,
    // and those it kept aside while their site was unknown (sweep_early_drops).
    std::array<uint64_t, QS_MAX_PORTS> rcv_drops_now() {
        sweep_early_drops();
        std::array<uint64_t, QS_MAX_PORTS> out{};
        const uint32_t n = std::min<uint64_t>(load(skel_->bss->next_port_idx), QS_MAX_PORTS);
        for (uint32_t i = 0; i < n; ++i)
            out[i] = load(skel_->bss->port_stats[i].rcv_drops) + early_rcv_drops_[i] + early_pending_[i];
        return out;
    }

    // Overflows of a port since first sight: sk_drops of its sockets minus the segments
    // tcp_v{4,6}_rcv dropped on them (qs_port_stats.rcv_drops).
    uint64_t port_overflows(uint16_t port, uint64_t skb_drops) const {
        uint64_t drops = 0;
        for (const auto& [ino, ls] : listen_sockets_)
            if (ls.port == port) drops += ls.drops_now - std::min(ls.drops_now, ls.drops_at_first_sight);
        const uint64_t total = listen_overflows(drops, skb_drops);
        return std::max(total, overflow_floor_.count(port) ? overflow_floor_.at(port) : 0);
    }

    // As a window's base, or at its end. The kernel side's drops are read on both sides of the
    // sk_drops dump: the base takes the reading before (overflows counted high, the window's
    // low) and the end one taken after, as collect reads the ports (counted low): a drop
    // between the readings never shows as an overflow.
    enum class Reading { base, end };
    PortWindow port_cumulative(uint32_t i, Reading reading = Reading::end) {
        const qs_port_stats& ps = skel_->bss->port_stats[i];
        PortWindow w;
        w.accepted = load(ps.accepted);
        w.dropped = load(ps.dropped);
        for (int c = 0; c < QS_STATUS_CLASSES; ++c) w.status[c] = load(ps.status[c]);
        for (int h = 0; h < QS_PORT_HISTS; ++h) w.hists[h] = Histogram::from_kernel(skel_->bss->port_hists[i * QS_PORT_HISTS + h]);
        const uint16_t port = static_cast<uint16_t>(load(ps.port));
        const uint64_t rcv = reading == Reading::base ? rcv_drops_before_dump_[i] : rcv_drops_end_[i];
        // Saturating: early drops found outside tcp_v{4,6}_rcv leave the sum (they are overflows).
        w.overflows = port_overflows(port, rcv - std::min(rcv, rcv_drops_base_[i]));
        // A listener that closes takes its sk_drops with it: never let the total go back.
        if (reading == Reading::end) overflow_floor_[port] = w.overflows;
        return w;
    }

    PeerWindow peer_cumulative(uint32_t i) {
        const qs_peer_stats& ps = skel_->bss->peer_stats[i];
        PeerWindow w;
        w.calls = load(ps.calls);
        w.connect_failures = load(ps.connect_failures);
        w.resets = load(ps.resets);
        w.fan_out = fan_out_counts(ps);
        for (int h = 0; h < QS_PEER_HISTS; ++h) w.hists[h] = Histogram::from_kernel(skel_->bss->peer_hists[i * QS_PEER_HISTS + h]);
        return w;
    }

    RequestAttribution attribution_total() const {
        return {load(skel_->bss->fan_attributed), load(skel_->bss->fan_unattributed)};
    }

    uint64_t completed_total() const {
        uint64_t t = 0;
        const uint32_t n = std::min<uint64_t>(load(skel_->bss->next_port_idx), QS_MAX_PORTS);
        for (uint32_t i = 0; i < n; ++i)
            for (int c = 0; c < QS_STATUS_CLASSES; ++c) t += load(skel_->bss->port_stats[i].status[c]);
        return t;
    }

    // New window: baselines := cumulative now; maxima := the gauge now (an atomic store, so
    // a concurrent kernel max update is either before it — and overwritten by a value that
    // is still a valid max of the new window's start — or after it).
    void open_window() override {
        refresh_listeners();  // the accept queues' depths now: where their maxima start
        refresh_unix_listeners();
        rebase();
    }

    void rebase() {
        auto* b = skel_->bss;
        const uint32_t nports = std::min<uint64_t>(load(b->next_port_idx), QS_MAX_PORTS);
        for (uint32_t i = 0; i < nports; ++i) {
            qs_port_stats& ps = b->port_stats[i];
            port_base_[i] = port_cumulative(i, Reading::base);
            __atomic_store_n(&ps.in_flight_max, load(ps.in_flight), __ATOMIC_RELAXED);
            __atomic_store_n(&ps.waiting_unread_max, load(ps.waiting_unread), __ATOMIC_RELAXED);
            int64_t depth = 0;
            for (const auto& d : listen_diag_)
                if (d.sport == load(ps.port)) depth = std::max<int64_t>(depth, d.rqueue);
            if (load(ps.port) == QS_PORT_UNIX)
                if (auto it = unix_listen_diag_.find(b->unix_port_names[i].ino); it != unix_listen_diag_.end())
                    depth = it->second.rqueue.value_or(0);
            __atomic_store_n(&ps.accept_queue_max, depth, __ATOMIC_RELAXED);
        }
        attribution_base_ = attribution_total();
        serving_base_ = serving_held_;
        const uint32_t npeers = std::min<uint64_t>(load(b->next_peer_idx), QS_PEER_OTHER);
        for (uint32_t i = 0; i <= npeers && i < QS_MAX_PEERS; ++i) {
            qs_peer_stats& ps = b->peer_stats[i];
            peer_base_[i] = peer_cumulative(i);
            __atomic_store_n(&ps.busy_max, load(ps.busy), __ATOMIC_RELAXED);
        }
    }

    // One pass over the connection table.
    void scan_conns(uint64_t now, double& oldest_req, double& oldest_unread, std::map<uint32_t, double>& oldest_busy) {
        serving_now_.clear();
        calling_now_.clear();
        replied_now_.clear();
        // HTTP/2 connections' open streams: they are its requests in flight (bpf/h2.h).
        h2_open_.clear();
        h2_.for_each(bpf_map__fd(skel_->maps.h2_conns), [&](const __u64& key, const qs_h2& h) {
            H2Open& o = h2_open_[key];
            o.streams = h.open;
            for (uint32_t i = 0; i < QS_H2_SLOTS; ++i)
                if (h.sid[i] && h.t[i] && (!o.oldest_t || h.t[i] < o.oldest_t)) o.oldest_t = h.t[i];
        });
        conns_.for_each(bpf_map__fd(skel_->maps.conns), [&](const __u64& key, const qs_conn& c) {
            if (c.dir == QS_DIR_IN && c.server_tid && !(c.aflags & QS_A_CLOSED)) {
                ThreadServing& t = serving_now_[c.server_tid];
                t.connections++;
                if (c.state == QS_ST_REQUEST) t.in_flight++;
                if (c.proto == QS_PROTO_H2)
                    if (const auto it = h2_open_.find(key); it != h2_open_.end()) t.in_flight += it->second.streams;
                if (c.aflags & QS_A_COUNTED) t.unread++;
            }
            // An HTTP/2 connection's oldest open stream is its oldest request or call.
            if (c.proto == QS_PROTO_H2)
                if (const auto it = h2_open_.find(key); it != h2_open_.end() && it->second.oldest_t &&
                                                        now > it->second.oldest_t) {
                    const double age = (now - it->second.oldest_t) / 1e9;
                    if (c.dir == QS_DIR_IN) oldest_req = std::max(oldest_req, age);
                    else oldest_busy[c.idx] = std::max(oldest_busy[c.idx], age);
                }
            if (c.dir == QS_DIR_IN) {
                if (c.state == QS_ST_REQUEST && c.t_req && now > c.t_req)
                    oldest_req = std::max(oldest_req, (now - c.t_req) / 1e9);
                if ((c.aflags & QS_A_COUNTED) && c.t_unread && now > c.t_unread)
                    oldest_unread = std::max(oldest_unread, (now - c.t_unread) / 1e9);
            } else if (c.dir == QS_DIR_OUT && c.state == QS_ST_BUSY) {
                const bool replied = c.aflags & QS_A_UNREAD;  // the reply has come, unread
                if (replied) replied_now_[c.idx]++;
                if (c.server_tid) {
                    calling_now_.push_back(static_cast<int>(c.server_tid));
                    if (!replied) serving_now_[c.server_tid].calling++;
                }
                if (c.t_req && now > c.t_req) {
                    double& o = oldest_busy[c.idx];
                    o = std::max(o, (now - c.t_req) / 1e9);
                }
            }
        });
    }

    void collect_peers(Snapshot& snap, const std::map<uint32_t, double>& oldest_busy) {
        auto* b = skel_->bss;
        struct Row {
            DownstreamPeer p;
            Histogram call_win, connect_win, fan_out_win;
            bool other = false;
        };
        std::vector<Row> rows;
        bool any_unix = false;
        const uint64_t allocated = load(b->next_peer_idx);
        for (uint32_t i = 0; i < QS_MAX_PEERS; ++i) {
            if (i < QS_PEER_OTHER && i >= allocated) continue;
            const qs_peer_stats& ps = b->peer_stats[i];
            if (!load(ps.used)) continue;
            const PeerWindow cum = peer_cumulative(i);
            const PeerWindow& base = peer_base_[i];
            Row row;
            row.other = i == QS_PEER_OTHER;
            DownstreamPeer& p = row.p;
            qs_peer_key key;
            std::memcpy(&key, &ps.key, sizeof(key));
            p.peer = row.other ? "other" : key.family == AF_UNIX ? "unix:" + unix_name(b->unix_peer_names[i]) : peer_label(key);
            any_unix = any_unix || key.family == AF_UNIX;
            p.connections = u(load(ps.connections));
            p.busy = u(load(ps.busy));
            if (auto it = replied_now_.find(i); it != replied_now_.end()) p.replied = std::min(p.busy, it->second);
            p.busy_max = std::max<uint64_t>(p.busy, u(load(ps.busy_max)));
            p.calls_total = cum.calls;
            p.calls = cum.calls - std::min(cum.calls, base.calls);
            p.connect_failures_total = cum.connect_failures;
            p.connect_failures = cum.connect_failures - std::min(cum.connect_failures, base.connect_failures);
            p.resets_total = cum.resets;
            p.h2_connections = load(ps.h2_conns);
            p.h2_followed_connections = load(ps.h2_followed);
            p.protocols = {load(ps.wire[QS_WIRE_HTTP1]), load(ps.wire[QS_WIRE_H2]), load(ps.wire[QS_WIRE_TLS]),
                           load(ps.wire[QS_WIRE_OTHER])};
            p.resets = cum.resets - std::min(cum.resets, base.resets);
            p.call_total = cum.hists[QS_PEER_H_CALL];
            row.call_win = cum.hists[QS_PEER_H_CALL].delta(base.hists[QS_PEER_H_CALL]);
            row.connect_win = cum.hists[QS_PEER_H_CONNECT].delta(base.hists[QS_PEER_H_CONNECT]);
            p.fan_out.total = cum.fan_out;
            p.fan_out.window = cum.fan_out.since(base.fan_out);
            p.fan_out.per_request_total = cum.hists[QS_PEER_H_FANOUT];
            row.fan_out_win = cum.hists[QS_PEER_H_FANOUT].delta(base.hists[QS_PEER_H_FANOUT]);
            if (auto it = oldest_busy.find(i); it != oldest_busy.end()) p.oldest_busy_seconds = it->second;
            rows.push_back(std::move(row));
        }
        // Busiest first; beyond the label cap, fold into "other" (bounded metric labels).
        std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
            if (a.other != b.other) return !a.other;
            if (a.p.busy != b.p.busy) return a.p.busy > b.p.busy;
            if (a.p.connections != b.p.connections) return a.p.connections > b.p.connections;
            return a.p.calls_total > b.p.calls_total;
        });
        const size_t cap = std::max<uint32_t>(cfg_.label_cap, 2);
        std::vector<Row> kept;
        Row other;
        other.other = true;
        other.p.peer = "other";
        bool have_other = false;
        for (auto& row : rows) {
            if (!row.other && kept.size() + 1 < cap) {
                kept.push_back(std::move(row));
                continue;
            }
            have_other = true;
            DownstreamPeer& o = other.p;
            o.connections += row.p.connections;
            o.busy += row.p.busy;
            o.busy_max += row.p.busy_max;
            o.calls += row.p.calls;
            o.calls_total += row.p.calls_total;
            o.connect_failures += row.p.connect_failures;
            o.connect_failures_total += row.p.connect_failures_total;
            o.resets += row.p.resets;
            o.resets_total += row.p.resets_total;
            o.h2_connections += row.p.h2_connections;
            o.h2_followed_connections += row.p.h2_followed_connections;
            o.protocols.add(row.p.protocols);
            o.call_total.merge(row.p.call_total);
            o.oldest_busy_seconds = std::max(o.oldest_busy_seconds, row.p.oldest_busy_seconds);
            other.call_win.merge(row.call_win);
            other.connect_win.merge(row.connect_win);
            o.fan_out.total.add(row.p.fan_out.total);
            o.fan_out.window.add(row.p.fan_out.window);
            o.fan_out.per_request_total.merge(row.p.fan_out.per_request_total);
            other.fan_out_win.merge(row.fan_out_win);
        }
        if (have_other) kept.push_back(std::move(other));
        if (any_unix)
            snap.partial.push_back("sock: Unix peers: connect time is not measured (a Unix connect has no handshake); "
                                   "their connect_seconds read 0");
        for (const auto& row : kept)
            if (const uint64_t n = row.p.h2_per_connection())
                snap.partial.push_back("sock: calls to " + row.p.peer + " go over " + std::to_string(n) +
                                       " HTTP/2 connections opened before the attach (or beyond the table of " +
                                       std::to_string(QS_H2_CONNS) + "): counted per connection, not per stream "
                                       "(busy: connections awaiting any reply; calls: replies read after a write)");
        const RequestAttribution attribution = snap.requests.attribution;
        for (auto& row : kept) {
            row.p.call = row.call_win.quantiles();
            row.p.connect = row.connect_win.quantiles();
            fill_per_request(row.p.fan_out, row.fan_out_win);
            judge_fan_out(row.p.fan_out, attribution);
            snap.downstream.push_back(std::move(row.p));
        }
    }

    // ---- --tls: uprobes on each process's libssl (bpf/sock.bpf.c, "TLS plaintext") --------
    // Attached per process, so other processes mapping the same libssl never trap; a process
    // that joins the tree is probed at the next tick (until then bpf's tls_hooked leaves its
    // records unknown rather than calling them control records).
    struct TlsProcess {
        uint64_t start_time = 0;            // a recycled pid is another process
        std::vector<std::pair<std::string, std::string>> libraries;  // probed libssl: /proc/PID/root path, name
        bool walked = false;                // the plaintext walk's probes are attached too
        std::vector<Link> links;
    };

    void refresh_tls() {
        if (!cfg_.tls) return;
        std::set<int> live;
        for (const auto& p : target_->processes()) {
            live.insert(p.pid);
            auto it = tls_procs_.find(p.pid);
            if (it != tls_procs_.end() && it->second.start_time == p.start_time_ticks) continue;
            tls_procs_.erase(p.pid);
            tls_procs_.emplace(p.pid, attach_tls(p));
        }
        const int hooked = bpf_map__fd(skel_->maps.tls_hooked);
        bool saw_h2 = false;  // the target answers HTTP/2 over TLS: all its processes get the walk
        for (auto it = tls_procs_.begin(); it != tls_procs_.end();) {
            const __u32 tgid = static_cast<__u32>(it->first);
            if (!live.count(it->first)) {
                bpf_map_delete_elem(hooked, &tgid);
                it = tls_procs_.erase(it);
                continue;
            }
            __u32 bits = 0;
            saw_h2 = saw_h2 || (bpf_map_lookup_elem(hooked, &tgid, &bits) == 0 && (bits & QS_TLS_SAW_H2));
            ++it;
        }
        if (!saw_h2 || !h2_streams_) return;
        for (auto& [pid, tp] : tls_procs_) {
            const __u32 tgid = static_cast<__u32>(pid);
            __u32 bits = 0;
            if (tp.walked || tp.libraries.empty() || !attach_tls_walk(pid, tp) ||
                bpf_map_lookup_elem(hooked, &tgid, &bits) != 0)
                continue;
            bits |= QS_TLS_WALKED;
            bpf_map_update_elem(hooked, &tgid, &bits, BPF_EXIST);
        }
    }

    // One uprobe (or uretprobe) on fn in the library at path (lib: its name in the target);
    // a failure is a warning, said once.
    Link attach_ssl(bpf_program* prog, int pid, const std::string& path, const std::string& lib, const char* fn,
                    bool ret) {
        DECLARE_LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = ret, .func_name = fn);
        Link l(bpf_program__attach_uprobe_opts(prog, pid, path.c_str(), 0, &opts));
        if (!l) {
            const std::string w = "sock: --tls: could not attach a " + std::string(ret ? "uretprobe" : "uprobe") +
                                  " on " + fn + " in " + lib + " (pid " + std::to_string(pid) + "): " + errno_text(errno);
            if (std::find(warnings_.begin(), warnings_.end(), w) == warnings_.end()) warnings_.push_back(w);
        }
        return l;
    }

    // SSL_write and SSL_write_ex of every supported libssl the process maps; the process is
    // marked hooked only when both attached (a write through the missing one would otherwise
    // read as a control record).
    TlsProcess attach_tls(const ProcessMember& p) {
        TlsProcess tp;
        tp.start_time = p.start_time_ticks;
        const std::string proc = "/proc/" + std::to_string(p.pid);
        std::string text;
        if (!read_file(proc + "/maps", text)) return tp;  // exited meanwhile
        for (const TlsLibrary& lib : tls_libraries(parse_proc_maps(text))) {
            if (!lib.probed()) {
                tls_unsupported_.insert(lib.path);
                continue;
            }
            const std::string path = proc + "/root" + lib.path;  // the target's mount namespace
            bool all = true;
            for (const auto& [prog, fn] : {std::pair{skel_->progs.qs_ssl_write, "SSL_write"},
                                           std::pair{skel_->progs.qs_ssl_write_ex, "SSL_write_ex"}}) {
                Link l = attach_ssl(prog, p.pid, path, lib.path, fn, false);
                all = all && l;
                if (l) tp.links.push_back(std::move(l));
            }
            if (!all) continue;
            tls_libs_.insert(lib.path);
            tp.libraries.emplace_back(path, lib.path);
            const __u32 tgid = static_cast<__u32>(p.pid);
            const __u32 bits = QS_TLS_HOOKED;
            bpf_map_update_elem(bpf_map__fd(skel_->maps.tls_hooked), &tgid, &bits, BPF_ANY);
        }
        return tp;
    }

    // HTTP/2 inside TLS: SSL_read's entry and the four calls' returns, which hand over the
    // plaintext the frame walk reads. Added only once a TLS connection of the target answered
    // in HTTP/2 frames: three more uprobe traps per request that an HTTPS/1.1 server never pays.
    bool attach_tls_walk(int pid, TlsProcess& tp) {
        bool all = !tp.libraries.empty();
        for (const auto& [path, lib] : tp.libraries) {
            for (const auto& [prog, fn, ret] : {std::tuple{skel_->progs.qs_ssl_read, "SSL_read", false},
                                                std::tuple{skel_->progs.qs_ssl_read_ex, "SSL_read_ex", false},
                                                std::tuple{skel_->progs.qs_ssl_read_ret, "SSL_read", true},
                                                std::tuple{skel_->progs.qs_ssl_read_ex_ret, "SSL_read_ex", true},
                                                std::tuple{skel_->progs.qs_ssl_write_ret, "SSL_write", true},
                                                std::tuple{skel_->progs.qs_ssl_write_ex_ret, "SSL_write_ex", true}}) {
                Link l = attach_ssl(prog, pid, path, lib, fn, ret);
                all = all && l;
                if (l) tp.links.push_back(std::move(l));
            }
        }
        tp.walked = true;  // tried once: a failure is a warning, not a retry every tick
        return all;
    }

    std::string unsupported_tls_text() const {
        std::string t;
        for (const auto& l : tls_unsupported_) t += (t.empty() ? "; it maps " : ", ") + l;
        return t.empty() ? t : t + ", which --tls does not probe";
    }

    // Inbound HTTP/2: streams followed as requests (bpf/h2.h), and what could not be.
    void collect_h2(Snapshot& snap) const {
        auto* b = skel_->bss;
        Http2Seen& h = snap.requests.h2;
        h.connections = load(b->conns_h2);
        h.followed_connections = load(b->h2_followed);
        h.joined_connections = load(b->h2_joined);
        h.client_resets = load(b->h2_client_resets);
        h.server_resets = load(b->h2_server_resets);
        h.lost_sync = load(b->h2_lost_sync);
        h.trailers = load(b->h2_trailers);
        for (uint32_t code = 0; code < QS_GRPC_CODES; code++)
            if (const uint64_t n = load(b->h2_grpc_codes[code])) h.grpc_status[grpc_code_name(code)] = n;
        h.grpc_status_unread = load(b->h2_grpc_unread[0]);
        // gRPC answers every call :status 200 and puts its own status in the trailers, read
        // where the connection's HPACK table was followed from its start (bpf/hpack.h).
        if (h.grpc_status_unread)
            snap.partial.push_back("sock: " + std::to_string(h.grpc_status_unread) +
                                   " gRPC answers (since attach) carry their status (grpc-status) behind an HPACK "
                                   "table entry qscope did not follow (a connection met mid-way, or whose header "
                                   "blocks were not all walked): their class is the HTTP :status, so a failed call "
                                   "among them counts as 2xx");
        if (const uint64_t n = load(b->h2_grpc_unread[1]))
            snap.partial.push_back("sock: " + std::to_string(n) +
                                   " gRPC calls (since attach) were answered with their status (grpc-status) behind "
                                   "an HPACK table entry qscope did not follow (a connection met mid-way, or whose "
                                   "header blocks were not all walked): a failed call among them is not counted as "
                                   "failed");
        const WalkState walk = walk_state_.load(std::memory_order_acquire);
        if (h.connections > h.followed_connections)
            snap.partial.push_back(
                "sock: " + std::to_string(h.connections - h.followed_connections) +
                " connections answer in HTTP/2 frames (since attach) and are counted per connection, not per stream (" +
                (walk == WalkState::failed ? "the frame walk failed to load: " + walk_error_
                 : h2_streams_             ? "the table of HTTP/2 connections was full at " + std::to_string(QS_H2_CONNS)
                                           : walk_off_) +
                "): in flight, completed and latency are the connection's read/write turns; status unknown");
        // While it loads (probe_attach says so), only targets that answer in HTTP/2 are told:
        if (const uint64_t n = load(b->h2_unwalked))
            snap.partial.push_back("sock: " + std::to_string(n) +
                                   " responses in HTTP/2 frames (since attach) were counted as read/write turns while "
                                   "the frame walk loaded (in completed and latency, status unknown); their "
                                   "connections join the walk at their next response (joined_connections)");
        if (const uint64_t unseen = load(b->h2_unseen))
            snap.partial.push_back("sock: " + std::to_string(unseen) +
                                   " HTTP/2 streams were answered whose start was not seen (since attach: open "
                                   "before the attach, or while a connection's frame boundaries were lost): not "
                                   "in completed or latency, and not in flight while open");
        if (const uint64_t unseen = load(b->h2_calls_unseen))
            snap.partial.push_back("sock: " + std::to_string(unseen) +
                                   " HTTP/2 calls were answered whose start was not seen (since attach: open when "
                                   "qscope met their connection, or while its frame boundaries were lost): not in "
                                   "downstream calls or call latency, and not busy while open");
    }

    void collect_tls(Snapshot& snap) const {
        auto* b = skel_->bss;
        TlsSeen& t = snap.requests.tls;
        t.probing = cfg_.tls;
        t.libraries.assign(tls_libs_.begin(), tls_libs_.end());
        t.connections = load(b->conns_tls);
        t.plaintext_connections = load(b->conns_tls_plain);
        t.h2_connections = load(b->conns_tls_h2);
        t.h2_followed_connections = load(b->h2_tls_followed);
        const std::string n = std::to_string(t.connections);
        if (!t.connections) return;
        if (!cfg_.tls) {
            snap.partial.push_back("sock: " + n + " connections are encrypted (TLS records, since attach): status "
                                   "classes unknown, and HTTP/2 inside is counted per connection; run with --tls");
        } else if (tls_libs_.empty()) {
            snap.partial.push_back("sock: " + n + " connections are encrypted (TLS records, since attach) and the "
                                   "target maps no supported TLS library (OpenSSL libssl.so.3, libssl.so.1.1)" +
                                   unsupported_tls_text() + ": statically linked TLS, Go crypto/tls and Java JSSE "
                                   "are not seen; status classes unknown");
        } else if (t.plaintext_connections < t.connections) {
            snap.partial.push_back("sock: " + std::to_string(t.connections - t.plaintext_connections) + " of " + n +
                                   " TLS connections showed no plaintext through libssl (since attach): a handshake "
                                   "without a request, or TLS outside the probed library");
        }
        if (const uint64_t n = t.h2_per_connection())
            snap.partial.push_back(
                "sock: " + std::to_string(n) + " TLS connections carry HTTP/2 (seen through libssl) and are counted " +
                "per connection, not per stream, status unknown (" +
                (!h2_streams_ ? std::string("this kernel lacks bpf_loop, Linux 5.17, which walks the frames")
                              : "answered only before the SSL_read and return probes were added, a tick after the "
                                "process's first HTTP/2 answer over TLS, or those probes could not attach: see "
                                "warnings") +
                ")");
    }

    Skel skel_;
    std::array<Skel, 2> sides_;  // the reads' and the writes' programs, on skel_'s maps, until attached (load_split)
    std::vector<std::string> walk_twins_;  // the walk's twins to load (plan_walk)
    std::atomic<WalkState> walk_state_{WalkState::off};
    std::string walk_off_;                 // off: why (set at start)
    std::string walk_error_;               // failed: why (written before the state)
    uint64_t walk_asked_ns_ = 0;           // top's first tick, when the loader started
    uint64_t walk_in_ns_ = 0;              // when the twins went into their slots (written before the state)
    bool walk_said_ = false;
    std::jthread walk_loader_;             // top's: after skel_, so it is joined before skel_ goes
    std::jthread rcv_text_finder_;         // after skel_, for the same reason
    std::array<KernelSymbols::Text, QS_RCV_TEXTS> rcv_texts_;  // sock.h's functions: written by the finder before
    std::atomic<bool> rcv_text_settled_{false};     // this
    int early_sweeps_left_ = 3;                     // sweep_early_drops, once settled
    std::array<uint64_t, QS_MAX_PORTS> rcv_drops_before_dump_{};  // rcv_drops_now(), by refresh_listeners
    std::array<uint64_t, QS_MAX_PORTS> rcv_drops_end_{};          // ... as the tick reads its ports (collect)
    std::array<uint64_t, QS_MAX_PORTS> rcv_drops_base_{};         // the reading before, once attached (start)
    std::array<uint64_t, QS_MAX_PORTS> early_pending_{};    // segments per port slot, not yet told apart
    std::array<uint64_t, QS_MAX_PORTS> early_rcv_drops_{};  // ... told apart: tcp_v{4,6}_rcv's
    // Early drops by (location, port slot), as last read before the ranges were known; those
    // read beside the dump that rcv_drops_before_dump_ went with; those in rcv_drops_base_.
    using EarlyKey = std::pair<uint64_t, uint32_t>;
    std::map<EarlyKey, uint64_t> early_read_, early_before_dump_, early_in_base_;
    bool rcv_text_said_ = false;
    std::vector<Link> links_;
    SharedSlot shared_;                       // the exporter's shared hooks and this target's slot, if any
    std::vector<SharedHooks::Route> routes_;  // taken out of the shared tables with the source
    std::map<int, TlsProcess> tls_procs_;    // by pid, the tree's processes seen so far (links die before skel_)
    std::set<std::string> tls_libs_;         // probed libraries, as the target maps them
    std::set<std::string> tls_unsupported_;  // TLS libraries mapped that --tls does not probe

    MapReader<__u64, qs_conn> conns_;
    MapReader<__u64, qs_h2> h2_;
    struct H2Open {
        uint32_t streams = 0;
        uint64_t oldest_t = 0;  // the oldest open stream's start (ns), 0: none
    };
    std::map<__u64, H2Open> h2_open_;    // per HTTP/2 connection, from scan_conns
    bool h2_streams_ = false;            // the kernel runs the HTTP/2 frame walk (bpf_loop)
    MapReader<__u32, qs_served> served_;
    std::map<uint32_t, ThreadServing> serving_now_;  // by server tid, from scan_conns
    std::vector<int> calling_now_;                    // Snapshot::calling_tids, from scan_conns
    std::map<uint32_t, uint64_t> replied_now_;        // by peer index: busy calls whose reply waits unread

    // Inbound connections per serving thread, for event-loop detection (model/loops.h).
    void collect_serving(Snapshot& snap, const Tick& tick) {
        std::map<uint32_t, ThreadServing> held;
        std::map<uint32_t, WaitingRing> held_past;
        served_.for_each(bpf_map__fd(skel_->maps.served), [&](const __u32& tid, const qs_served& v) {
            ThreadServing t;
            auto it = serving_now_.find(tid);
            if (it != serving_now_.end()) t = it->second;
            t.tid = static_cast<int>(tid);
            t.pid = static_cast<int>(v.tgid);
            t.adopted_total = v.adopted;
            const ThreadServing none;
            const auto held_it = serving_held_.find(tid), base_it = serving_base_.find(tid);
            const ThreadServing& before = held_it == serving_held_.end() ? none : held_it->second;
            t.connections_max = std::max(t.connections, before.connections_max);
            t.waiting_samples_total = before.waiting_samples_total + 1;
            t.waiting_sum_total = before.waiting_sum_total + t.waiting();
            // From the later of the window's start and the totals kWaitingAveragedTicks ticks ago.
            ThreadServing base = base_it == serving_base_.end() ? none : base_it->second;
            uint64_t since_ns = tick.window_start_ns;
            WaitingRing ring;
            if (auto p = serving_past_.find(tid); p != serving_past_.end()) ring = p->second;
            if (const WaitingTotals* o = ring.oldest(); o && o->samples > base.waiting_samples_total) {
                base.waiting_samples_total = o->samples;
                base.waiting_sum_total = o->sum;
                since_ns = std::max(since_ns, o->ns);
            }
            t.waiting_average = t.waiting_average_since(base);
            t.waiting_average_seconds = tick.now_ns > since_ns ? (tick.now_ns - since_ns) / 1e9 : 0;
            ring.push({t.waiting_samples_total, t.waiting_sum_total, tick.now_ns});
            held_past[tid] = ring;
            held[tid] = t;
            snap.serving.push_back(t);
        });
        serving_held_ = std::move(held);  // threads gone from `served` are forgotten
        serving_past_ = std::move(held_past);
    }
    // By server tid, as of the last tick: the running maximum and the waiting samples' totals.
    std::map<uint32_t, ThreadServing> serving_held_;
    std::map<uint32_t, ThreadServing> serving_base_;  // the same at the window's start
    // A serving thread's waiting totals at each of its last kWaitingAveragedTicks ticks: a ring
    // of 24-byte entries, as a server may run 10,000 threads that serve connections.
    struct WaitingTotals {
        uint64_t samples = 0, sum = 0;
        uint64_t ns = 0;  // the tick's time (CLOCK_MONOTONIC)
    };
    struct WaitingRing {
        std::array<WaitingTotals, kWaitingAveragedTicks> at{};
        size_t count = 0, next = 0;
        const WaitingTotals* oldest() const { return count == at.size() ? &at[next] : nullptr; }
        void push(WaitingTotals w) {
            at[next] = w;
            next = (next + 1) % at.size();
            count = std::min(count + 1, at.size());
        }
    };
    std::map<uint32_t, WaitingRing> serving_past_;
    int pid_ = 0;  // the tree's root: its network namespace is the one whose listeners we dump
    const Target* target_ = nullptr;
    Config cfg_;
    uint64_t last_completed_ = 0;
    uint64_t last_rate_ns_ = 0;  // when last_completed_ was read (at first: the attach)
    uint64_t attached_ns_ = 0;
    struct LastAccept {
        uint64_t accepted = 0, ns = 0;
    };
    std::map<uint32_t, LastAccept> last_accept_;  // per port slot
    std::vector<std::string> warnings_;
    std::vector<ProbeAttach> attach_;  // how each hook was reached, for the snapshot
    // Arrivals (choose_arrival_scope): the plan's program for them, its probe_attach row and
    // that row's global form; when scoped, the cgroup and the cgroup_skb link.
    bpf_program* arrivals_prog_ = nullptr;
    size_t arrivals_row_ = 0;
    ProbeAttach arrivals_global_row_;
    std::string scope_kernel_missing_;  // why the scoped way in is not loaded ("": it is)
    std::string arrivals_warning_;      // the plan's warning about the arrivals' hook ("": none)
    std::optional<std::string> scope_;
    std::set<uint64_t> scope_ids_;      // the scoped cgroup's subtree (cgroup ids)
    bool scope_stuck_ = false;          // it stopped holding and the global hook would not attach
    Link scope_link_;
    Link unix_connect_link_;            // qs_unix_connect_exit, while scoped and following Unix sockets
    std::vector<bpf_program*> sys_exit_progs_;  // the syscall exits in use (attach type tracepoint)
    std::string sweep_error_;                   // why iter/bpf_map_elem does not load here ("": it does)
    std::string listen_error_;
    std::string unix_error_;
    std::map<uint64_t, UnixDiagSocket> unix_listen_diag_;  // the machine's Unix listeners, by inode
    std::vector<DiagSocket> listen_diag_;
    std::map<uint64_t, ListenSocket> listen_sockets_;  // the target's, by inode
    std::set<uint64_t> not_ours_;                      // other processes' listeners
    std::map<uint64_t, std::set<int>> holders_;        // the target's listeners: inode → member PIDs holding it
    std::vector<int> holder_members_;                  // the members when holders_ was read
    std::chrono::steady_clock::time_point holders_read_{};
    std::map<uint16_t, uint32_t> port_index_;
    std::map<uint16_t, uint64_t> overflow_floor_;
    std::map<uint32_t, PortWindow> port_base_;
    std::map<uint32_t, PeerWindow> peer_base_;
    RequestAttribution attribution_base_;
};

}  // namespace

std::unique_ptr<Source> make_sock_source() { return std::make_unique<SockSource>(); }

}  // namespace qscope
