// The sock probe family, user-space side: loads bpf/sock.bpf.c for one target, tells it the
// target's listening ports, seeds connections that predate the attach, and each tick turns the
// kernel's cumulative aggregates into the window's listeners / requests / downstream.
#include "probes/sock/sock_source.h"

#include <linux/inet_diag.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "engine/bpf_util.h"
#include "model/errors.h"
#include "sys/proc_fds.h"
#include "sock.skel.h"
#include "sys/sock_diag.h"
#include "engine/source.h"
#include "engine/target.h"

namespace qscope {

static_assert(sizeof(qs_served) == 16, "qs_served layout shared with bpf/sock.h");
static_assert(sizeof(qs_conn) == 48, "qs_conn layout shared with bpf/conn_state.h");
static_assert(sizeof(qs_port_stats) == 112, "qs_port_stats layout shared with bpf/sock.h");
static_assert(sizeof(qs_peer_key) == 20, "qs_peer_key layout shared with bpf/sock.h");
static_assert(sizeof(qs_peer_stats) == 80, "qs_peer_stats layout shared with bpf/sock.h");

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
    uint64_t accepted = 0, overflows = 0;
    uint64_t status[QS_STATUS_CLASSES] = {};
    Histogram hists[QS_PORT_HISTS];
};

struct PeerWindow {
    uint64_t calls = 0, connect_failures = 0, resets = 0;
    Histogram hists[QS_PEER_HISTS];
};

struct ListenSocket {
    uint16_t port = 0;
    uint64_t drops_at_first_sight = 0;
    uint64_t drops_now = 0;
    bool present = false;
};

class SockSource final : public Source {
public:
    ProbeFamily family() const override { return ProbeFamily::sock; }

    void start(const Target& target, const Config& cfg) override {
        pid_ = target.pid();
        target_ = &target;
        cfg_ = cfg;
        skel_.reset(sock_bpf::open());
        if (!skel_) throw_bpf_error("sock: opening BPF object", errno ? errno : EINVAL);
        share_tree_maps(skel_->obj, target, "sock");
        bpf_check(bpf_map__set_max_entries(skel_->maps.conns, std::max<uint32_t>(cfg.max_connections, 64)),
                  "sock: sizing map conns");
        probe_features();
        bpf_check(sock_bpf::load(skel_.get()), "sock: loading BPF programs (sock.bpf.c)");
        // Ports first, so children of the target's listeners are recognised from the first
        // handshake after attach.
        refresh_listeners();
        attach_all();
        seed_existing();
    }

    void collect(Snapshot& snap, const Tick& tick) override {
        auto* b = skel_->bss;
        refresh_listeners();
        // Tick 0 opens the first window at the attach itself: the zero baselines are right.
        if (tick.window_reset && tick.index > 0) rebase(tick);

        // ---- connection table: ages of the oldest request / unread / busy call ---------
        double oldest_req = 0, oldest_unread = 0;
        std::map<uint32_t, double> oldest_busy;
        scan_conns(tick.now_ns, oldest_req, oldest_unread, oldest_busy);
        collect_serving(snap);

        // ---- listeners and requests, per port ------------------------------------------
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
        for (uint32_t i = 0; i < nports; ++i) {
            const qs_port_stats& ps = b->port_stats[i];
            const uint16_t port = static_cast<uint16_t>(load(ps.port));
            if (!port) continue;
            PortWindow cum = port_cumulative(i);
            const PortWindow& base = port_base_[i];
            const bool listening = by_port.count(port) > 0;

            PortRequests pr;
            pr.port = port;
            pr.in_flight = u(load(ps.in_flight));
            pr.waiting_unread = u(load(ps.waiting_unread));
            for (int c = 0; c < QS_STATUS_CLASSES; ++c) {
                pr.completed_total += cum.status[c];
                pr.duration_total[c] = cum.hists[QS_PH_LATENCY + c];
            }
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
            Listener& l = by_port[port];
            l.accept_queue_max = std::max<uint32_t>(l.accept_queue, static_cast<uint32_t>(u(load(ps.accept_queue_max))));
            l.accepted_total = cum.accepted;
            l.accepted = cum.accepted - std::min(cum.accepted, base.accepted);
            l.overflows_total = cum.overflows;
            l.overflows = cum.overflows - std::min(cum.overflows, base.overflows);
            l.accept_wait_total = cum.hists[QS_PH_ACCEPT_WAIT];
            l.accept_wait = cum.hists[QS_PH_ACCEPT_WAIT].delta(base.hists[QS_PH_ACCEPT_WAIT]).quantiles();
        }
        for (auto& [port, l] : by_port) snap.listeners.push_back(std::move(l));
        r.latency = latency.quantiles();
        r.oldest_in_flight_seconds = oldest_req;
        r.oldest_unread_seconds = oldest_unread;
        if (tick.dt_seconds > 0) {
            const uint64_t total = completed_total();
            r.rate_per_second = (total - std::min(total, last_completed_)) / tick.dt_seconds;
            last_completed_ = total;
        }

        // ---- downstream peers ----------------------------------------------------------
        collect_peers(snap, oldest_busy);

        // ---- losses --------------------------------------------------------------------
        lost_.update("sock",
                     {{load(b->lost_conn_full), "connections not tracked (connection table full at --max-connections " +
                                                    std::to_string(cfg_.max_connections) + ")"},
                      {load(b->lost_port_full), "listening ports not measured (more than " +
                                                    std::to_string(QS_MAX_PORTS) + " ports)"}},
                     snap);
        if (listen_error_.size()) snap.partial.push_back("sock: listeners: " + listen_error_);
        // Not lost events: connections followed in read/write turns that are not requests.
        if (const uint64_t h2 = load(b->conns_h2))
            snap.partial.push_back("sock: " + std::to_string(h2) +
                                   " connections answer in HTTP/2 frames (since attach): counted per connection, "
                                   "not per stream (in flight, completed and latency are the connection's "
                                   "read/write turns; status unknown)");
        if (const uint64_t tls = load(b->conns_tls))
            snap.partial.push_back("sock: " + std::to_string(tls) +
                                   " connections answer in TLS records (since attach): status unknown, and HTTP/2 "
                                   "inside would be counted per connection, not per stream");
        snap.warnings.insert(snap.warnings.end(), warnings_.begin(), warnings_.end());
    }

private:
    using Skel = QSCOPE_SKEL_PTR(sock);

    struct Hook {
        bpf_program* prog;
        std::string what;       // for messages
        bool required;          // without it the requests section is meaningless
        bool available;
    };

    // A hook the kernel lacks is switched off before load (autoload false) with a warning;
    // without the core three the numbers would be wrong, so that is an error instead.
    void probe_features() {
        auto& p = skel_->progs;
        KernelTracepoints tps;
        std::vector<Hook> hooks = {
            {p.qs_set_state, "tp_btf/inet_sock_set_state", true, tps.has_btf("inet_sock_set_state")},
            {p.qs_recv, "tp_btf/sock_recv_length (Linux 6.3+)", true, tps.has_btf("sock_recv_length")},
            {p.qs_send, "tp_btf/sock_send_length (Linux 6.3+)", true, tps.has_btf("sock_send_length")},
            {p.qs_data_ready, "tp_btf/sk_data_ready (Linux 6.6+): no connector queue, no exact accept-queue peak",
             false, tps.has_btf("sk_data_ready")},
            {p.qs_accept4_exit, "tracepoint syscalls/sys_exit_accept4: no accept wait", false,
             tps.has_tracefs("syscalls", "sys_exit_accept4")},
            {p.qs_accept_exit, "tracepoint syscalls/sys_exit_accept: no accept wait for accept()", false,
             tps.has_tracefs("syscalls", "sys_exit_accept")},
            {p.qs_kfree_skb, "tp_btf/kfree_skb with rx_sk: ACK-stage overflows counted from sk_drops only", false,
             tps.btf_args("kfree_skb") >= 4},
            {p.qs_rst_in, "tp_btf/tcp_receive_reset: downstream resets received not counted", false,
             tps.has_btf("tcp_receive_reset")},
            {p.qs_rst_out, "tp_btf/tcp_send_reset: downstream resets sent not counted", false,
             tps.has_btf("tcp_send_reset")},
        };
        for (auto& h : hooks) {
            if (h.available) continue;
            if (h.required)
                throw Error(Exit::kernel, "sock: the kernel lacks " + h.what +
                                              ", needed to follow requests; qscope needs Linux 6.3 or later");
            bpf_program__set_autoload(h.prog, false);
            warnings_.push_back("sock: hook unavailable: " + h.what);
        }
    }

    void attach_all() {
        auto& p = skel_->progs;
        for (bpf_program* prog : {p.qs_set_state, p.qs_recv, p.qs_send, p.qs_data_ready, p.qs_accept4_exit,
                                  p.qs_accept_exit, p.qs_kfree_skb, p.qs_rst_in, p.qs_rst_out}) {
            if (!bpf_program__autoload(prog)) continue;
            Link l(bpf_program__attach(prog));
            if (!l) {
                const int err = errno;
                if (prog == p.qs_set_state || prog == p.qs_recv || prog == p.qs_send)
                    throw_bpf_error(std::string("sock: attaching ") + bpf_program__name(prog), err);
                warnings_.push_back(std::string("sock: could not attach ") + bpf_program__name(prog) + ": " +
                                    errno_text(err));
                continue;
            }
            links_.push_back(std::move(l));
        }
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
        const std::string what = std::string("sock: ") + bpf_program__section_name(prog);
        if (!link) {
            warnings_.push_back(what + " unavailable (" + errno_text(errno) + "): " + consequence);
            return;
        }
        const int fd = bpf_iter_create(bpf_link__fd(link.get()));
        if (fd < 0) {
            warnings_.push_back(what + ": " + errno_text(errno) + ": " + consequence);
            return;
        }
        char buf[256];
        while (read(fd, buf, sizeof(buf)) > 0) {
        }
        close(fd);
    }

    // Listeners the target holds: its processes' /proc/PID/fd socket inodes ∩ sock_diag
    // LISTEN sockets. A listener several workers share is one inode, counted once.
    // The machine's listeners come from one small sock_diag dump per tick; which of them are
    // the target's needs its fd table, which for a server with 10,000 connections is 10,000
    // readlinks: so it is read only when a listener appears that was never classified.
    void refresh_listeners() {
        listen_error_.clear();
        std::vector<DiagSocket> all;
        try {
            for (int fam : {AF_INET, AF_INET6})
                for (auto& d : sock_diag_dump(fam, kListenMask, true, pid_)) all.push_back(std::move(d));
        } catch (const Error& e) {
            listen_error_ = e.what();
            listen_diag_.clear();
            return;
        }
        bool unknown = false;
        for (const auto& d : all)
            if (!listen_sockets_.count(d.inode) && !not_ours_.count(d.inode)) unknown = true;
        if (unknown) {
            std::set<uint64_t> inodes;
            for (const auto& p : target_->processes()) inodes.merge(socket_inodes(p.pid));
            for (const auto& d : all)
                if (!inodes.count(d.inode)) not_ours_.insert(d.inode);
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
        if (bpf_map_update_elem(bpf_map__fd(skel_->maps.port_idx), &key, &idx, BPF_NOEXIST) != 0 &&
            bpf_map_lookup_elem(bpf_map__fd(skel_->maps.port_idx), &key, &idx) != 0)
            throw_bpf_error("sock: registering listening port " + std::to_string(port) + " in map port_idx", errno);
        port_index_[port] = idx;
    }

    // Overflows of a port since first sight: sk_drops of its sockets minus ACK-stage skb drops.
    uint64_t port_overflows(uint16_t port, uint64_t skb_drops) const {
        uint64_t drops = 0;
        for (const auto& [ino, ls] : listen_sockets_)
            if (ls.port == port) drops += ls.drops_now - std::min(ls.drops_now, ls.drops_at_first_sight);
        const uint64_t total = listen_overflows(drops, skb_drops);
        return std::max(total, overflow_floor_.count(port) ? overflow_floor_.at(port) : 0);
    }

    PortWindow port_cumulative(uint32_t i) {
        const qs_port_stats& ps = skel_->bss->port_stats[i];
        PortWindow w;
        w.accepted = load(ps.accepted);
        for (int c = 0; c < QS_STATUS_CLASSES; ++c) w.status[c] = load(ps.status[c]);
        for (int h = 0; h < QS_PORT_HISTS; ++h) w.hists[h] = Histogram::from_kernel(skel_->bss->port_hists[i * QS_PORT_HISTS + h]);
        const uint16_t port = static_cast<uint16_t>(load(ps.port));
        w.overflows = port_overflows(port, load(ps.overflow_skb_drops));
        // A listener that closes takes its sk_drops with it: never let the total go back.
        overflow_floor_[port] = w.overflows;
        return w;
    }

    PeerWindow peer_cumulative(uint32_t i) {
        const qs_peer_stats& ps = skel_->bss->peer_stats[i];
        PeerWindow w;
        w.calls = load(ps.calls);
        w.connect_failures = load(ps.connect_failures);
        w.resets = load(ps.resets);
        for (int h = 0; h < QS_PEER_HISTS; ++h) w.hists[h] = Histogram::from_kernel(skel_->bss->peer_hists[i * QS_PEER_HISTS + h]);
        return w;
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
    void rebase(const Tick&) {
        auto* b = skel_->bss;
        const uint32_t nports = std::min<uint64_t>(load(b->next_port_idx), QS_MAX_PORTS);
        for (uint32_t i = 0; i < nports; ++i) {
            qs_port_stats& ps = b->port_stats[i];
            port_base_[i] = port_cumulative(i);
            __atomic_store_n(&ps.in_flight_max, load(ps.in_flight), __ATOMIC_RELAXED);
            __atomic_store_n(&ps.waiting_unread_max, load(ps.waiting_unread), __ATOMIC_RELAXED);
            int64_t depth = 0;
            for (const auto& d : listen_diag_)
                if (d.sport == load(ps.port)) depth = std::max<int64_t>(depth, d.rqueue);
            __atomic_store_n(&ps.accept_queue_max, depth, __ATOMIC_RELAXED);
        }
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
        conns_.for_each(bpf_map__fd(skel_->maps.conns), [&](const __u64&, const qs_conn& c) {
            if (c.dir == QS_DIR_IN && c.server_tid && !(c.aflags & QS_A_CLOSED)) {
                ThreadServing& t = serving_now_[c.server_tid];
                t.connections++;
                if (c.state == QS_ST_REQUEST) t.in_flight++;
                if (c.aflags & QS_A_COUNTED) t.unread++;
            }
            if (c.dir == QS_DIR_IN) {
                if (c.state == QS_ST_REQUEST && c.t_req && now > c.t_req)
                    oldest_req = std::max(oldest_req, (now - c.t_req) / 1e9);
                if ((c.aflags & QS_A_COUNTED) && c.t_unread && now > c.t_unread)
                    oldest_unread = std::max(oldest_unread, (now - c.t_unread) / 1e9);
            } else if (c.dir == QS_DIR_OUT && c.state == QS_ST_BUSY && c.t_req && now > c.t_req) {
                double& o = oldest_busy[c.idx];
                o = std::max(o, (now - c.t_req) / 1e9);
            }
        });
    }

    void collect_peers(Snapshot& snap, const std::map<uint32_t, double>& oldest_busy) {
        auto* b = skel_->bss;
        struct Row {
            DownstreamPeer p;
            Histogram call_win, connect_win;
            bool other = false;
        };
        std::vector<Row> rows;
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
            p.peer = row.other ? "other" : peer_label(key);
            p.connections = u(load(ps.connections));
            p.busy = u(load(ps.busy));
            p.busy_max = std::max<uint64_t>(p.busy, u(load(ps.busy_max)));
            p.calls_total = cum.calls;
            p.calls = cum.calls - std::min(cum.calls, base.calls);
            p.connect_failures_total = cum.connect_failures;
            p.connect_failures = cum.connect_failures - std::min(cum.connect_failures, base.connect_failures);
            p.resets_total = cum.resets;
            p.resets = cum.resets - std::min(cum.resets, base.resets);
            p.call_total = cum.hists[QS_PEER_H_CALL];
            row.call_win = cum.hists[QS_PEER_H_CALL].delta(base.hists[QS_PEER_H_CALL]);
            row.connect_win = cum.hists[QS_PEER_H_CONNECT].delta(base.hists[QS_PEER_H_CONNECT]);
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
            o.call_total.merge(row.p.call_total);
            o.oldest_busy_seconds = std::max(o.oldest_busy_seconds, row.p.oldest_busy_seconds);
            other.call_win.merge(row.call_win);
            other.connect_win.merge(row.connect_win);
        }
        if (have_other) kept.push_back(std::move(other));
        for (auto& row : kept) {
            row.p.call = row.call_win.quantiles();
            row.p.connect = row.connect_win.quantiles();
            snap.downstream.push_back(std::move(row.p));
        }
    }

    Skel skel_;
    std::vector<Link> links_;
    MapReader<__u64, qs_conn> conns_;
    MapReader<__u32, qs_served> served_;
    std::map<uint32_t, ThreadServing> serving_now_;  // by server tid, from scan_conns

    // Inbound connections per serving thread, for event-loop detection (model/loops.h).
    void collect_serving(Snapshot& snap) {
        served_.for_each(bpf_map__fd(skel_->maps.served), [&](const __u32& tid, const qs_served& v) {
            ThreadServing t;
            auto it = serving_now_.find(tid);
            if (it != serving_now_.end()) t = it->second;
            t.tid = static_cast<int>(tid);
            t.pid = static_cast<int>(v.tgid);
            t.adopted_total = v.adopted;
            snap.serving.push_back(t);
        });
    }
    int pid_ = 0;  // the tree's root: its network namespace is the one whose listeners we dump
    const Target* target_ = nullptr;
    Config cfg_;
    uint64_t last_completed_ = 0;
    std::vector<std::string> warnings_;
    std::string listen_error_;
    std::vector<DiagSocket> listen_diag_;
    std::map<uint64_t, ListenSocket> listen_sockets_;  // the target's, by inode
    std::set<uint64_t> not_ours_;                      // other processes' listeners
    std::map<uint16_t, uint32_t> port_index_;
    std::map<uint16_t, uint64_t> overflow_floor_;
    std::map<uint32_t, PortWindow> port_base_;
    std::map<uint32_t, PeerWindow> peer_base_;
};

}  // namespace

std::unique_ptr<Source> make_sock_source() { return std::make_unique<SockSource>(); }

}  // namespace qscope
