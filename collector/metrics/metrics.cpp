#include "metrics/metrics.h"

#include "model/loops.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

namespace qscope {

const std::vector<double> kAcceptWaitBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
// Requests, downstream calls and carrier stalls share a range: a 1 ms database call and a
// 60 s partner API with no read timeout both need a bucket of their own.
const std::vector<double> kRequestBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    30,   60};
const std::vector<double> kDownstreamBuckets = kRequestBuckets;
const std::vector<double> kStallBuckets = kRequestBuckets;

prom::HistogramValue to_prom_histogram(const Histogram& h, const std::vector<double>& bounds) {
    // Why not floor(count_le(bound)): count_le interpolates inside the slot that straddles
    // the bound, so a value sitting exactly on `le` would land below 1 and be floored away,
    // breaking `le` ("less or equal"). Counting the straddling slot whole keeps every value
    // <= le in its bucket, at the cost of also counting values up to one slot width
    // (<= 6.25%) above it — the kernel histogram's resolution either way.
    const auto& slots = h.slots();
    prom::HistogramValue out;
    out.sample_sum = h.sum_seconds();
    uint64_t total = 0;
    for (auto s : slots) total += s;
    out.sample_count = std::max<uint64_t>(h.count(), total);
    size_t next_slot = 0;
    uint64_t cum = 0;
    for (double b : bounds) {
        const double ns = std::round(b * 1e9);
        const auto last = ns >= 9.2e18 ? slots.size() - 1 : static_cast<size_t>(qs_hist_slot(static_cast<__u64>(ns)));
        for (; next_slot <= last && next_slot < slots.size(); ++next_slot) cum += slots[next_slot];
        out.buckets.push_back({b, std::min(cum, out.sample_count)});
    }
    return out;
}

const std::string LabelCapper::kOther = "other";

LabelCapper::LabelCapper(std::vector<std::pair<std::string, double>> kw, uint32_t cap) {
    // The same key may come twice (a port bound on 0.0.0.0 and ::): weigh it once, summed.
    std::map<std::string, double> sum;
    for (auto& [k, w] : kw) sum[k] += w;
    std::vector<std::pair<std::string, double>> v(sum.begin(), sum.end());
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    for (size_t i = 0; i < v.size() && i < cap; ++i) kept_.push_back(v[i].first);
    std::sort(kept_.begin(), kept_.end());
}

const std::string& LabelCapper::operator()(const std::string& key) const {
    auto it = std::lower_bound(kept_.begin(), kept_.end(), key);
    return it != kept_.end() && *it == key ? *it : kOther;
}

namespace {

using LabelValues = std::vector<std::string>;

// One family under construction: series keyed by their label values, so values that fold
// into the same labels ("other", one port on two addresses) add up instead of repeating a
// series, which Prometheus would reject.
class Fam {
public:
    Fam(std::string name, std::string help, prom::MetricType type, std::vector<std::string> label_names,
        const std::vector<double>* bounds = nullptr)
        : label_names_(std::move(label_names)), bounds_(bounds) {
        f_.name = std::move(name);
        f_.help = std::move(help);
        f_.type = type;
    }
    void add(const LabelValues& lv, double v) { values_[lv] += v; }
    void set_max(const LabelValues& lv, double v) {
        auto [it, fresh] = values_.emplace(lv, v);
        if (!fresh) it->second = std::max(it->second, v);
    }
    void add_hist(const LabelValues& lv, const Histogram& h) { hists_[lv].merge(h); }

    prom::MetricFamily finish() && {
        auto labels = [&](const LabelValues& lv) {
            std::vector<prom::Label> out;
            for (size_t i = 0; i < label_names_.size() && i < lv.size(); ++i)
                out.push_back({label_names_[i], lv[i]});
            return out;
        };
        for (auto& [lv, v] : values_) {
            prom::Metric m;
            m.labels = labels(lv);
            m.value = v;
            f_.metrics.push_back(std::move(m));
        }
        for (auto& [lv, h] : hists_) {
            prom::Metric m;
            m.labels = labels(lv);
            m.histogram = to_prom_histogram(h, *bounds_);
            f_.metrics.push_back(std::move(m));
        }
        return std::move(f_);
    }

private:
    prom::MetricFamily f_;
    std::vector<std::string> label_names_;
    const std::vector<double>* bounds_;
    std::map<LabelValues, double> values_;
    std::map<LabelValues, Histogram> hists_;
};

using prom::MetricType;
constexpr auto kGauge = MetricType::gauge;
constexpr auto kCounter = MetricType::counter;
constexpr auto kHist = MetricType::histogram;

const char* const kStatusClass[5] = {"2xx", "3xx", "4xx", "5xx", "unknown"};

using Families = std::vector<prom::MetricFamily>;

void target_families(const Snapshot& s, int64_t now_unix_ms, Families& out) {
    Fam info("qscope_target_info", "The observed process (fixed for the life of this qscope)", kGauge,
             {"pid", "comm"});
    info.add({std::to_string(s.target.pid), s.target.comm}, 1);
    out.push_back(std::move(info).finish());
    Fam th("qscope_target_threads", "Threads of the target now", kGauge, {});
    th.add({}, s.target.threads);
    out.push_back(std::move(th).finish());
    Fam age("qscope_snapshot_age_seconds", "Seconds since the snapshot served here was taken", kGauge, {});
    age.add({}, s.taken_at_unix_ms ? std::max<double>(0, (now_unix_ms - s.taken_at_unix_ms) / 1e3) : 0);
    out.push_back(std::move(age).finish());
    // Who pays for the socket arrivals: the target's cgroup alone, or every process and why.
    if (const auto scope = sock_scope(s.probe_attach)) {
        Fam sc("qscope_sock_scope_info",
               "Which processes run the socket arrival probe: mode=\"cgroup\" (the target's cgroup only) or "
               "\"global\" (every process; reason says why not scoped)",
               kGauge, {"mode", "cgroup", "reason"});
        sc.add({scope->mode(), scope->path, scope->why}, 1);
        out.push_back(std::move(sc).finish());
    }
    Fam lost("qscope_lost_events_total", "Kernel events qscope could not record (ring buffer or map full) since attach",
             kCounter, {});
    lost.add({}, static_cast<double>(s.lost_events));
    out.push_back(std::move(lost).finish());
}

// One port label set for listeners and requests, weighted by their cumulative traffic.
LabelCapper port_labels(const Snapshot& s, uint32_t cap) {
    std::vector<std::pair<std::string, double>> kw;
    for (const auto& l : s.listeners)
        kw.push_back({endpoint_name(l.port, l.unix_path), static_cast<double>(l.accepted_total + l.accept_queue)});
    for (const auto& p : s.requests.ports)
        kw.push_back({endpoint_name(p.port, p.unix_path), static_cast<double>(p.completed_total + p.in_flight + p.waiting_unread)});
    return LabelCapper(kw, cap);
}

void listener_families(const Snapshot& s, const LabelCapper& port_label, Families& out) {
    Fam qlen("qscope_accept_queue_length", "Connections handshaken but not yet accept()ed, now", kGauge, {"port"});
    Fam qmax("qscope_accept_queue_backlog", "Listen backlog: the accept queue's limit", kGauge, {"port"});
    Fam wait("qscope_accept_wait_seconds", "Time from handshake completion to accept() return", kHist, {"port"},
             &kAcceptWaitBuckets);
    Fam ovf("qscope_listen_overflows_total", "Connections dropped because the accept queue was full, since attach",
            kCounter, {"port"});
    Fam acc("qscope_accepted_connections_total", "Connections accepted, since attach", kCounter, {"port"});
    Fam conns("qscope_listener_connections", "Connections accepted from the listener and open, now", kGauge, {"port"});
    Fam cap("qscope_listener_connection_limit",
              "1 while the accept queue is full and nothing was accepted for a second (a server-side connection cap)",
              kGauge, {"port"});
    Fam wire("qscope_listener_connections_by_protocol_total",
             "Accepted connections by what their first response began with (http1, h2, tls, other), since attach",
             kCounter, {"port", "protocol"});
    for (const auto& l : s.listeners) {
        const LabelValues lv{port_label(endpoint_name(l.port, l.unix_path))};
        qlen.add(lv, l.accept_queue);
        qmax.add(lv, l.backlog);
        wait.add_hist(lv, l.accept_wait_total);
        ovf.add(lv, static_cast<double>(l.overflows_total));
        acc.add(lv, static_cast<double>(l.accepted_total));
        conns.add(lv, static_cast<double>(l.connections));
        cap.add(lv, connection_limit_reached(l) ? 1 : 0);
        for (const auto& [proto, n] : {std::pair{"http1", l.protocols.http1}, std::pair{"h2", l.protocols.h2},
                                       std::pair{"tls", l.protocols.tls}, std::pair{"other", l.protocols.other}})
            wire.add({lv[0], proto}, static_cast<double>(n));
    }
    for (auto* f : {&qlen, &qmax, &wait, &ovf, &acc, &conns, &cap, &wire}) out.push_back(std::move(*f).finish());
}

void request_families(const Snapshot& s, const LabelCapper& port_label, Families& out) {
    auto port = [&](uint16_t p, const std::string& unix_path = {}) { return port_label(endpoint_name(p, unix_path)); };
    Fam infl("qscope_requests_in_flight", "Requests read whose response is not yet written, now", kGauge, {"port"});
    Fam unread("qscope_requests_waiting_unread",
               "Accepted connections whose request bytes arrived but nobody has read them, now", kGauge, {"port"});
    Fam done("qscope_requests_completed_total", "Requests completed, since attach", kCounter, {"port"});
    Fam dropped("qscope_requests_dropped_total",
                "HTTP/1.x requests their connection's close dropped unanswered (drained by a lingering close, or "
                "left unread), since attach",
                kCounter, {"port"});
    Fam dur("qscope_request_duration_seconds", "Time from the first request byte read to the response written", kHist,
            {"port", "status_class"}, &kRequestBuckets);
    if (!s.requests.ports.empty()) {
        for (const auto& p : s.requests.ports) {
            const auto& pl = port(p.port, p.unix_path);
            infl.add({pl}, static_cast<double>(p.in_flight));
            unread.add({pl}, static_cast<double>(p.waiting_unread));
            done.add({pl}, static_cast<double>(p.completed_total));
            dropped.add({pl}, static_cast<double>(p.dropped_total));
            for (int c = 0; c < 5; ++c) dur.add_hist({pl, kStatusClass[c]}, p.duration_total[c]);
        }
    } else {
        // A source that does not break requests down by port: with one listening port
        // the totals are that port's; otherwise they belong to no port in particular.
        std::set<uint16_t> lports;
        for (const auto& l : s.listeners) lports.insert(l.port);
        const std::string pl = lports.size() == 1 ? port(*lports.begin()) : "all";
        if (lports.size() == 1 || s.requests.in_flight || s.requests.waiting_unread) {
            infl.add({pl}, static_cast<double>(s.requests.in_flight));
            unread.add({pl}, static_cast<double>(s.requests.waiting_unread));
        }
    }
    // Zero series for quiet listening ports, so panels read 0 rather than "no data".
    for (const auto& l : s.listeners) {
        infl.add({port(l.port, l.unix_path)}, 0);
        unread.add({port(l.port, l.unix_path)}, 0);
    }
    for (auto* f : {&infl, &unread, &done, &dropped, &dur}) out.push_back(std::move(*f).finish());

    Fam oldest("qscope_requests_oldest_in_flight_seconds", "Age of the oldest request in flight, now", kGauge, {});
    oldest.add({}, s.requests.oldest_in_flight_seconds);
    out.push_back(std::move(oldest).finish());
    Fam conns("qscope_server_connections", "Accepted connections open now", kGauge, {});
    conns.add({}, static_cast<double>(s.requests.connections));
    out.push_back(std::move(conns).finish());
    // Always present (0 until seen), so that a panel over them reads 0, not "no data".
    Fam tls("qscope_tls_connections_total", "Accepted connections answering in TLS records, since attach", kCounter,
            {});
    tls.add({}, static_cast<double>(s.requests.tls.connections));
    out.push_back(std::move(tls).finish());
    Fam plain("qscope_tls_plaintext_connections_total",
              "TLS connections whose responses' plaintext --tls classified, since attach", kCounter, {});
    plain.add({}, static_cast<double>(s.requests.tls.plaintext_connections));
    out.push_back(std::move(plain).finish());
    const Http2Seen& h = s.requests.h2;
    Fam conns2("qscope_http2_connections_total",
               "Accepted connections answering in HTTP/2 frames (h2c), since attach; followed=\"true\": their "
               "streams are the requests",
               kCounter, {"followed"});
    conns2.add({"true"}, static_cast<double>(h.followed_connections));
    conns2.add({"false"}, static_cast<double>(h.connections - std::min(h.connections, h.followed_connections)));
    out.push_back(std::move(conns2).finish());
    Fam resets("qscope_http2_stream_resets_total",
               "HTTP/2 streams reset before an answer (by=\"client\") or answered with RST_STREAM "
               "(by=\"server\"), since attach",
               kCounter, {"by"});
    resets.add({"client"}, static_cast<double>(h.client_resets));
    resets.add({"server"}, static_cast<double>(h.server_resets));
    out.push_back(std::move(resets).finish());
    Fam grpc("qscope_grpc_responses_total",
             "gRPC answers by their own status (grpc-status; code=\"unread\": behind an HPACK table entry not "
             "followed), since attach",
             kCounter, {"code"});
    for (const auto& [code, n] : h.grpc_status) grpc.add({code}, static_cast<double>(n));
    grpc.add({"unread"}, static_cast<double>(h.grpc_status_unread));
    out.push_back(std::move(grpc).finish());
}

void downstream_families(const Snapshot& s, uint32_t cap, Families& out) {
    std::vector<std::pair<std::string, double>> kw;
    for (const auto& d : s.downstream)
        kw.push_back({d.peer, static_cast<double>(d.calls_total + d.connections + d.busy)});
    LabelCapper peer(kw, cap);
    Fam conns("qscope_downstream_connections", "Outbound connections to the peer open now", kGauge, {"peer"});
    Fam busy("qscope_downstream_busy", "Outbound connections with a request sent and the reply not yet read, now",
             kGauge, {"peer"});
    Fam oldest("qscope_downstream_oldest_busy_seconds", "Age of the oldest call awaiting the peer's reply, now",
               kGauge, {"peer"});
    Fam calls("qscope_downstream_calls_total", "Calls to the peer completed, since attach", kCounter, {"peer"});
    Fam fails("qscope_downstream_connect_failures_total", "Connects to the peer refused or timed out, since attach",
              kCounter, {"peer"});
    Fam resets("qscope_downstream_resets_total", "Connections to the peer reset, since attach", kCounter, {"peer"});
    Fam dur("qscope_downstream_call_duration_seconds", "Time from a request sent to the peer to its reply read", kHist,
            {"peer"}, &kDownstreamBuckets);
    // Calls per request (model/fan_out.h): rate(calls) / rate(requests) is calls per request.
    Fam fan_req("qscope_downstream_fanout_requests_total",
                "Requests answered that called the peer, their calls tied to them (one thread from read to "
                "response), since attach",
                kCounter, {"peer"});
    Fam fan_calls("qscope_downstream_fanout_calls_total", "Calls to the peer made by those requests, since attach",
                  kCounter, {"peer"});
    Fam retries("qscope_downstream_retries_total",
                "Calls to the peer that followed a failed call to it in the same request, since attach", kCounter,
                {"peer"});
    Fam fail_req("qscope_downstream_failing_requests_total",
                 "Of the requests that called the peer, those answered 5xx, since attach", kCounter, {"peer"});
    Fam fail_calls("qscope_downstream_failing_request_calls_total",
                   "Calls to the peer made by requests answered 5xx, since attach", kCounter, {"peer"});
    Fam failed("qscope_downstream_failed_calls_total",
               "Calls to the peer that failed (reset, refused, given up, or a 5xx/429 reply), since attach", kCounter,
               {"peer"});
    Fam unknown("qscope_downstream_fanout_unknown",
                "1 when calls to the peer could not be tied to requests in the last window (event loop, virtual "
                "threads, async client)",
                kGauge, {"peer"});
    for (const auto& d : s.downstream) {
        const LabelValues lv{peer(d.peer)};
        conns.add(lv, static_cast<double>(d.connections));
        busy.add(lv, static_cast<double>(d.busy));
        oldest.set_max(lv, d.oldest_busy_seconds);
        calls.add(lv, static_cast<double>(d.calls_total));
        fails.add(lv, static_cast<double>(d.connect_failures_total));
        resets.add(lv, static_cast<double>(d.resets_total));
        dur.add_hist(lv, d.call_total);
        const FanOutCounts& t = d.fan_out.total;
        fan_req.add(lv, static_cast<double>(t.requests));
        fan_calls.add(lv, static_cast<double>(t.calls));
        retries.add(lv, static_cast<double>(t.retries));
        fail_req.add(lv, static_cast<double>(t.failing_requests));
        fail_calls.add(lv, static_cast<double>(t.failing_calls));
        failed.add(lv, static_cast<double>(t.failed_calls));
        unknown.set_max(lv, !d.fan_out.known && !d.fan_out.unknown_reason.empty() ? 1 : 0);
    }
    for (auto* f : {&conns, &busy, &oldest, &calls, &fails, &resets, &dur, &fan_req, &fan_calls, &retries, &fail_req,
                    &fail_calls, &failed, &unknown})
        out.push_back(std::move(*f).finish());
}

void thread_families(const Snapshot& s, uint32_t cap, Families& out) {
    std::vector<std::pair<std::string, double>> kw;
    // Threads now, with cumulative blocked time as a small tie-breaker.
    for (const auto& g : s.thread_groups) kw.push_back({g.name, g.threads + g.blocked_seconds_total * 1e-9});
    LabelCapper group(kw, cap);
    Fam threads("qscope_threads", "Threads of the target by group and scheduler state, now", kGauge,
                {"group", "state"});
    Fam blocked("qscope_threads_blocked", "Threads blocked in a syscall now, by group and syscall (futex: gates)",
                kGauge, {"group", "syscall"});
    Fam secs("qscope_blocked_seconds_total", "Seconds threads spent blocked off-CPU, by group and syscall", kCounter,
             {"group", "syscall"});
    // rate() of it is the average number of threads waiting for a CPU: the verdict's cpu rule
    // (waiting_for_cpu, kCpuStarvedThreads) over any range Grafana asks for.
    Fam runq("qscope_runqueue_wait_seconds_total",
             "Seconds threads spent runnable, waiting for a CPU, by group, since attach", kCounter, {"group"});
    for (const auto& g : s.thread_groups) {
        const auto& gl = group(g.name);
        runq.add({gl}, g.runqueue_wait_seconds);
        threads.add({gl, "running"}, g.running);
        threads.add({gl, "runnable"}, g.runnable);
        threads.add({gl, "blocked"}, g.blocked);
        // A syscall that ever blocked this group keeps a series (0 when nobody is in it
        // now), so gauges drop to 0 instead of going stale and panels never flap.
        for (const auto& [sc, t] : g.blocked_seconds_by_syscall_total) blocked.add({gl, sc}, 0);
        for (const auto& [sc, n] : g.blocked_by) blocked.add({gl, sc}, n);
        for (const auto& [sc, t] : g.blocked_seconds_by_syscall_total) secs.add({gl, sc}, t);
    }
    for (auto* f : {&threads, &blocked, &secs, &runq}) out.push_back(std::move(*f).finish());
}

void carrier_families(const Snapshot& s, Families& out) {
    const auto& c = s.carriers;
    Fam det("qscope_carriers_detected", "1 if the target runs carrier threads (a user-space scheduler's workers)",
            kGauge, {});
    det.add({}, c.detected ? 1 : 0);
    Fam st("qscope_carriers", "Carrier threads by state, now", kGauge, {"state"});
    st.add({contract_name(CarrierState::running)}, c.running);
    st.add({contract_name(CarrierState::idle)}, c.idle);
    st.add({contract_name(CarrierState::runnable)}, c.runnable);
    st.add({contract_name(CarrierState::stalled)}, c.stalled);
    Fam stalls("qscope_carrier_stalls_total", "Times a carrier blocked while it had work to run, since attach",
               kCounter, {});
    stalls.add({}, static_cast<double>(c.stall_events_total));
    Fam dur("qscope_carrier_stall_duration_seconds", "How long each carrier stall lasted", kHist, {}, &kStallBuckets);
    dur.add_hist({}, c.stall_total);
    for (auto* f : {&det, &st, &stalls, &dur}) out.push_back(std::move(*f).finish());
}

// Event loops, busiest first, at most `cap` of them: a loop is a thread, and its series goes
// with it (the families are built at scrape time from the latest snapshot).
void loop_families(const Snapshot& s, uint32_t cap, Families& out) {
    Fam n("qscope_loops", "Event loops detected (threads that wait in a poll and serve many connections), now", kGauge,
          {});
    n.add({}, static_cast<double>(s.carriers.loops.size()));
    const std::vector<std::string> lab = {"name", "tid"};
    Fam util("qscope_loop_utilization", "Share of the window an event loop was busy (not parked in its poll), 0-1",
             kGauge, lab);
    Fam busy("qscope_loop_busy_seconds_total", "Time an event loop spent in completed turns, since attach", kCounter, lab);
    Fam busy_rq("qscope_loop_runqueue_seconds_total",
                "Of an event loop's busy time, the part it was runnable and waiting for a CPU, since attach", kCounter,
                lab);
    Fam turns("qscope_loop_turns_total", "Event-loop turns (poll exit to next poll entry), since attach", kCounter, lab);
    Fam stalls("qscope_loop_stalls_total", "Event-loop turns at least the stall threshold long, since attach", kCounter,
               lab);
    Fam stalls_rq("qscope_loop_stalls_runqueue_total",
                  "Of the event-loop stalls, those a wait for a CPU made (under the threshold without it), since attach",
                  kCounter, lab);
    Fam longest("qscope_loop_longest_turn_seconds", "Longest event-loop turn in the window (or the one going on)",
                kGauge, lab);
    Fam waiting("qscope_loop_waiting", "Requests waiting behind an event loop now: unread, accept queue, read but not served",
                kGauge, lab);
    Fam dur("qscope_loop_turn_duration_seconds", "Event-loop turn lengths, since attach", kHist, lab, &kAcceptWaitBuckets);
    size_t i = 0;
    for (const auto& l : s.carriers.loops) {
        if (i++ >= cap) break;
        const std::vector<std::string> v = {l.name, std::to_string(l.tid)};
        util.add(v, l.utilization);
        busy.add(v, l.busy_seconds_total);
        busy_rq.add(v, l.runqueue_seconds_total);
        turns.add(v, static_cast<double>(l.turns_total));
        stalls.add(v, static_cast<double>(l.stalls_total));
        stalls_rq.add(v, static_cast<double>(l.stalls_runqueue_total));
        longest.add(v, l.longest_turn_seconds);
        waiting.add(v, static_cast<double>(loop_waiting(l)));
        dur.add_hist(v, l.turn_total);
    }
    for (auto* f : {&n, &util, &busy, &busy_rq, &turns, &stalls, &stalls_rq, &longest, &waiting, &dur}) out.push_back(std::move(*f).finish());
}

void verdict_families(const Snapshot& s, Families& out) {
    Fam v("qscope_verdict", "The current verdict: the stage where the limit lives, and where (1 for the current one)",
          kGauge, {"stage", "where"});
    v.add({contract_name(s.verdict.stage), s.verdict.where}, 1);
    Fam w("qscope_verdict_waiting", "Requests or threads waiting at the verdict's stage, now", kGauge, {});
    w.add({}, static_cast<double>(s.verdict.waiting));
    Fam stage("qscope_stage_waiting", "Requests or threads waiting at each stage, now", kGauge, {"stage"});
    for (const auto& r : s.verdict.ranking) stage.add({contract_name(r.stage)}, static_cast<double>(r.waiting));
    for (auto* f : {&v, &w, &stage}) out.push_back(std::move(*f).finish());
}

}  // namespace

// The contract's family order: up, target, listeners, requests, downstream, threads,
// carriers, verdict.
std::vector<prom::MetricFamily> snapshot_families(const Snapshot* snap, uint32_t cap, int64_t now_unix_ms) {
    Families out;
    Fam up("qscope_up", "1 while qscope has a snapshot of a live target; 0 before the first one or after it exited",
           kGauge, {});
    up.add({}, snap && !snap->target.exited ? 1 : 0);
    out.push_back(std::move(up).finish());
    if (!snap) return out;
    const Snapshot& s = *snap;
    target_families(s, now_unix_ms, out);
    const LabelCapper ports = port_labels(s, cap);
    listener_families(s, ports, out);
    request_families(s, ports, out);
    downstream_families(s, cap, out);
    thread_families(s, cap, out);
    carrier_families(s, out);
    loop_families(s, cap, out);
    verdict_families(s, out);
    return out;
}

std::vector<prom::MetricFamily> SnapshotCollectable::collect() const {
    const auto snap = latest_();
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    return snapshot_families(snap.get(), label_cap_, now);
}

}  // namespace qscope
