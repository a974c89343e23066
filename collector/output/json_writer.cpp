#include "output/json_writer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "model/format.h"
#include "model/processes.h"
#include "model/verdict.h"

namespace qscope {

using json = nlohmann::ordered_json;

// Seconds rounded to the microsecond: keeps golden files stable and output short.
static double secs(double s) { return std::round(s * 1e6) / 1e6; }

static json q_json(const Quantiles& q, bool p90) {
    json j = {{"p50", secs(q.p50)}, {"p99", secs(q.p99)}, {"max", secs(q.max)}};
    if (p90) j["p90"] = secs(q.p90);
    return j;
}

static json target_json(const TargetInfo& t) {
    json j = {{"pid", t.pid}, {"comm", t.comm}, {"threads", t.threads}, {"exited", t.exited}};
    if (!t.exit_note.empty()) j["note"] = t.exit_note;
    if (!t.processes.empty()) {
        json members = json::array();
        for (const auto& p : t.processes)
            members.push_back({{"pid", p.pid}, {"name", p.comm}, {"role", p.role}, {"threads", p.threads}});
        j["processes"] = {{"count", t.processes.size()},
                          {"follows_children", t.follows_children},
                          {"members", std::move(members)}};
    }
    return j;
}

static json protocols_json(const ProtocolMix& m) {
    return {{"http1", m.http1}, {"h2", m.h2}, {"tls", m.tls}, {"other", m.other}};
}

static json listeners_json(const std::vector<Listener>& listeners) {
    json ls = json::array();
    for (const auto& l : listeners) {
        ls.push_back({{"port", l.port},
                      {"addr", l.addr},
                      {"backlog", l.backlog},
                      {"accept_queue", l.accept_queue},
                      {"accept_queue_max", l.accept_queue_max},
                      {"accepted", l.accepted},
                      {"accept_wait_seconds", q_json(l.accept_wait, false)},
                      {"overflows", l.overflows},
                      {"processes", l.processes},
                      {"workers", l.workers},
                      {"connections", l.connections},
                      {"seconds_since_accept", secs(l.seconds_since_accept)},
                      {"connection_limit", connection_limit_reached(l)},
                      {"protocols", protocols_json(l.protocols)}});
        if (!l.unix_path.empty()) ls.back()["unix_path"] = l.unix_path;
    }
    return ls;
}

static json tls_json(const TlsSeen& t) {
    return {{"probing", t.probing},
            {"libraries", t.libraries},
            {"connections", t.connections},
            {"plaintext_connections", t.plaintext_connections},
            {"h2_connections", t.h2_connections},
            {"h2_followed_connections", t.h2_followed_connections}};
}

static json h2_json(const Http2Seen& h) {
    return {{"connections", h.connections},
            {"followed_connections", h.followed_connections},
            {"joined_connections", h.joined_connections},
            {"client_resets", h.client_resets},
            {"server_resets", h.server_resets},
            {"lost_sync", h.lost_sync},
            {"trailers", h.trailers},
            {"grpc_status", h.grpc_status},
            {"grpc_status_unread", h.grpc_status_unread}};
}

static json requests_json(const Requests& r) {
    json j = {{"in_flight", r.in_flight},
            {"in_flight_max", r.in_flight_max},
            {"waiting_unread", r.waiting_unread},
            {"waiting_unread_max", r.waiting_unread_max},
            {"completed", r.completed},
            {"rate_per_second", std::round(r.rate_per_second * 10) / 10},
            {"connections", r.connections},
            {"latency_seconds", q_json(r.latency, true)},
            {"oldest_in_flight_seconds", secs(r.oldest_in_flight_seconds)},
            {"oldest_unread_seconds", secs(r.oldest_unread_seconds)},
            {"status",
             {{"2xx", r.status.c2xx},
              {"3xx", r.status.c3xx},
              {"4xx", r.status.c4xx},
              {"5xx", r.status.c5xx},
              {"unknown", r.status.unknown}}},
            {"dropped", r.dropped}};
    if (r.tls.present()) j["tls"] = tls_json(r.tls);
    if (r.h2.present()) j["h2"] = h2_json(r.h2);
    j["attribution"] = {{"attributed", r.attribution.attributed}, {"across_threads", r.attribution.across_threads}};
    return j;
}

static json fan_out_json(const FanOut& f) {
    const FanOutCounts& w = f.window;
    json j = {{"known", f.known}};
    if (!f.known && !f.unknown_reason.empty()) j["unknown_reason"] = f.unknown_reason;
    j["requests"] = w.requests;
    j["calls"] = w.calls;
    j["retries"] = w.retries;
    j["per_request"] = {{"p50", f.per_request_p50}, {"p99", f.per_request_p99}, {"max", f.per_request_max}};
    j["failing_requests"] = w.failing_requests;
    j["failing_calls"] = w.failing_calls;
    j["failing_retries"] = w.failing_retries;
    j["failed_calls"] = w.failed_calls;
    j["calls_outside_requests"] = w.calls_outside_requests;
    j["calls_moved"] = w.calls_moved;
    return j;
}

static json downstream_json(const std::vector<DownstreamPeer>& peers) {
    json ds = json::array();
    for (const auto& d : peers) {
        ds.push_back({{"peer", d.peer},
                      {"connections", d.connections},
                      {"busy", d.busy},
                      {"replied", d.replied},
                      {"busy_max", d.busy_max},
                      {"calls", d.calls},
                      {"call_seconds", q_json(d.call, false)},
                      {"oldest_busy_seconds", secs(d.oldest_busy_seconds)},
                      {"connect_seconds", q_json(d.connect, false)},
                      {"connect_failures", d.connect_failures},
                      {"resets", d.resets},
                      {"fan_out", fan_out_json(d.fan_out)},
                      {"h2_connections", d.h2_connections},
                      {"h2_followed_connections", d.h2_followed_connections},
                      {"protocols", protocols_json(d.protocols)}});
    }
    return ds;
}

static json thread_groups_json(const std::vector<ThreadGroup>& groups) {
    json tg = json::array();
    for (const auto& g : groups) {
        json by = json::object();
        for (const auto& [k, v] : g.blocked_by) by[k] = v;
        tg.push_back({{"name", g.name},
                      {"threads", g.threads},
                      {"running", g.running},
                      {"runnable", g.runnable},
                      {"blocked", g.blocked},
                      {"blocked_by", by},
                      {"runqueue_wait_seconds", secs(g.runqueue_wait_seconds)},
                      {"waiting_for_cpu", std::round(g.waiting_for_cpu * 100) / 100},
                      {"runqueue_wait", q_json(g.runqueue_wait, false)}});
    }
    return tg;
}

static json waits_json(const std::vector<Wait>& waits) {
    json ws = json::array();
    for (const auto& w : waits) {
        json wj = {{"group", w.group},
                   {"syscall", w.syscall},
                   {"resource", w.resource},
                   {"kind", contract_name(w.kind)},
                   {"threads_now", w.threads_now},
                   {"blocked_seconds", secs(w.blocked_seconds)},
                   {"count", w.count},
                   {"stack", w.stack}};
        if (w.kind == WaitKind::futex) {
            wj["waiters_now"] = w.waiters_now;
            wj["wait_seconds"] = q_json(w.wait, false);
        }
        if (!w.kernel_stack.empty()) wj["kernel_stack"] = w.kernel_stack;
        ws.push_back(wj);
    }
    return ws;
}

static json loops_json(const std::vector<EventLoop>& loops) {
    json out = json::array();
    for (const auto& l : loops) {
        json stalls = json::array();
        for (const auto& st : l.recent_stalls)
            stalls.push_back({{"seconds", secs(st.seconds)},
                              {"on_cpu_seconds", secs(st.on_cpu_seconds)},
                              {"blocked_seconds", secs(st.blocked_seconds)},
                              {"runqueue_seconds", secs(st.runqueue_seconds)},
                              {"syscall", st.syscall},
                              {"resource", st.resource},
                              {"stack", st.stack}});
        out.push_back({{"tid", l.tid},
                       {"pid", l.pid},
                       {"name", l.name},
                       {"poll", l.poll},
                       {"state", contract_name(l.state)},
                       {"blocked_in", l.blocked_in},
                       {"utilization", secs(l.utilization)},
                       {"turns", l.turns},
                       {"turns_per_second", secs(l.turns_per_second)},
                       {"longest_turn_seconds", secs(l.longest_turn_seconds)},
                       {"p99_turn_seconds", secs(l.p99_turn_seconds)},
                       {"current_turn_seconds", secs(l.current_turn_seconds)},
                       {"current_turn_runqueue_seconds", secs(l.current_turn_runqueue_seconds)},
                       {"stalls", l.stalls},
                       {"stalls_total", l.stalls_total},
                       {"stalls_runqueue", l.stalls_runqueue},
                       {"runqueue_share", secs(l.runqueue_share)},
                       {"connections", l.connections},
                       {"connections_served_total", l.connections_served_total},
                       {"in_flight", l.in_flight},
                       {"calls_in_progress", l.calling},
                       {"unread", l.unread},
                       {"accept_queue", l.accept_queue},
                       {"waiting_average", secs(l.waiting_average)},
                       {"waiting_average_seconds", secs(l.waiting_average_seconds)},
                       {"recent_stalls", stalls}});
    }
    return out;
}

static json carriers_json(const Carriers& c) {
    json stalls = json::array();
    for (const auto& st : c.stalls)
        stalls.push_back({{"tid", st.tid},
                          {"syscall", st.syscall},
                          {"reason", st.reason},
                          {"seconds", secs(st.seconds)},
                          {"ongoing", st.ongoing},
                          {"stack", st.stack}});
    json per = json::array();
    for (const auto& t : c.per_carrier)
        per.push_back({{"tid", t.tid}, {"name", t.name}, {"state", contract_name(t.state)},
                       {"utilization", t.utilization}});
    return {{"detected", c.detected},
            {"pattern", c.pattern},
            {"runtime", contract_name(c.runtime)},
            {"mount_state_known", c.mount_state_known},
            {"threads", c.threads},
            {"running", c.running},
            {"idle", c.idle},
            {"runnable", c.runnable},
            {"stalled", c.stalled},
            {"stall_events", c.stall_events},
            {"stall_events_total", c.stall_events_total},
            {"vm_waits", c.vm_waits},
            {"stalls", stalls},
            {"per_carrier", per},
            {"loops", loops_json(c.loops)},
            {"busy", c.busy},
            {"procs", c.procs},
            {"loop_stall_threshold_seconds", secs(c.loop_stall_threshold_seconds)}};
}

static json verdict_json(const Verdict& v) {
    json rk = json::array();
    for (const auto& st : v.ranking)
        rk.push_back({{"stage", contract_name(st.stage)}, {"where", st.where}, {"waiting", st.waiting}});
    json j = {{"stage", contract_name(v.stage)},
              {"where", v.where},
              {"waiting", v.waiting},
              {"summary", v.summary},
              {"severity", contract_name(v.severity)},
              {"ranking", rk}};
    if (v.window_seconds > 0) j["window_seconds"] = secs(v.window_seconds);
    return j;
}

static json probes_json(const ProbeFamilies& probes) {
    json ps = json::array();
    for (ProbeFamily f : probes.list()) ps.push_back(contract_name(f));
    return ps;
}

// One line per section, in the contract's key order (docs/json.md).
json to_json(const Snapshot& s) {
    json j;
    j["target"] = target_json(s.target);
    j["window_seconds"] = secs(s.window_seconds);
    j["taken_at_unix_ms"] = s.taken_at_unix_ms;  // lines a snapshot up with other clocks (oracles)
    j["listeners"] = listeners_json(s.listeners);
    j["requests"] = requests_json(s.requests);
    j["downstream"] = downstream_json(s.downstream);
    j["thread_groups"] = thread_groups_json(s.thread_groups);
    j["waits"] = waits_json(s.waits);
    j["carriers"] = carriers_json(s.carriers);
    j["verdict"] = verdict_json(s.verdict);
    j["parked_in_runtime"] = s.parked_in_runtime;
    if (!s.parked_virtual_threads.empty()) {
        json pv = json::array();
        for (const auto& p : s.parked_virtual_threads) pv.push_back({{"frames", p.frames}, {"count", p.count}});
        j["parked_virtual_threads"] = pv;
    }
    j["probes"] = probes_json(s.probes);
    json pa = json::array();
    for (const auto& a : s.probe_attach) {
        pa.push_back({{"family", contract_name(a.family)}, {"hook", a.hook}, {"attach", contract_name(a.attach)},
                      {"via", a.via}});
        if (!a.off.empty()) pa.back()["off"] = a.off;
    }
    j["probe_attach"] = pa;
    j["lost_events"] = s.lost_events;
    j["partial"] = s.partial;
    j["warnings"] = s.warnings;
    return j;
}

// Thread names and paths come from the target and need not be UTF-8: replace, never fail.
std::string render_json(const Snapshot& s, int indent) {
    return to_json(s).dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

static std::string ms(double s) {
    char b[32];
    if (s >= 1)
        std::snprintf(b, sizeof b, "%.2fs", s);
    else
        std::snprintf(b, sizeof b, "%.1fms", s * 1e3);
    return b;
}

// One line under a peer: its calls per request, or why they cannot be told; nothing when
// no request called it.
static void render_fan_out(std::ostringstream& o, const FanOut& f) {
    const FanOutCounts& w = f.window;
    if (!f.known) {
        if (!f.unknown_reason.empty()) o << "    per request: unknown: " << f.unknown_reason << "\n";
        return;
    }
    if (!w.requests) return;
    o << "    per request: " << counted(f.per_request_p50, "call") << " (p50), p99 " << f.per_request_p99 << ", max "
      << f.per_request_max << ", " << counted(w.retries, "retry", "retries") << " over "
      << counted(w.requests, "request");
    if (w.failing_requests)
        o << "; answered 5xx: " << counted(w.failing_requests, "request") << ", " << counted(w.failing_calls, "call")
          << ", " << counted(w.failing_retries, "retry", "retries");
    o << "; failed calls " << fmt_count(w.failed_calls) << "\n";
}

// "http1 12, tls 3" for the kinds seen, "" when none.
static std::string protocol_mix_text(const ProtocolMix& m) {
    std::string t;
    for (const auto& [name, n] : {std::pair{"http1", m.http1}, std::pair{"h2", m.h2}, std::pair{"tls", m.tls},
                                  std::pair{"other", m.other}})
        if (n) t += (t.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(n);
    return t;
}

static void render_requests(std::ostringstream& o, const Snapshot& s) {
    o << "\nLISTENERS\n";
    if (s.listeners.empty()) o << "  (none)\n";
    for (const auto& l : s.listeners) {
        o << "  " << (l.unix_path.empty() ? ":" + std::to_string(l.port) + " " + l.addr : "unix:" + l.unix_path) << "  queue " << l.accept_queue << " (max " << l.accept_queue_max
          << ") of backlog " << l.backlog << ", accepted " << l.accepted << ", wait p50 "
          << ms(l.accept_wait.p50) << " p99 " << ms(l.accept_wait.p99) << ", overflows " << l.overflows
          << (l.processes > 1 ? ", held by " + std::to_string(l.processes) + " processes" : std::string())
          << ", " << l.connections << " connections open"
          << (connection_limit_reached(l) ? ": at a connection limit, nothing accepted for " + ms(l.seconds_since_accept)
                                          : std::string())
          << "\n";
        if (const std::string mix = protocol_mix_text(l.protocols); !mix.empty())
            o << "    connections by protocol since attach: " << mix << "\n";
    }

    const auto& r = s.requests;
    o << "\nREQUESTS\n  in flight " << r.in_flight << " (max " << r.in_flight_max << "), unread in connector "
      << r.waiting_unread << " (max " << r.waiting_unread_max << "), completed " << r.completed << "\n"
      << "  latency p50 " << ms(r.latency.p50) << " p90 " << ms(r.latency.p90) << " p99 " << ms(r.latency.p99)
      << " max " << ms(r.latency.max) << ", oldest in flight " << ms(r.oldest_in_flight_seconds) << "\n"
      << "  status 2xx " << r.status.c2xx << "  3xx " << r.status.c3xx << "  4xx " << r.status.c4xx << "  5xx "
      << r.status.c5xx << "  unknown " << r.status.unknown << "\n";
    if (r.dropped)
        o << "  " << dropped_text(r.dropped) << " (drained by a lingering close, or left unread)\n";
    if (r.tls.present())
        o << "  tls " << r.tls.connections << " connections, plaintext seen on " << r.tls.plaintext_connections
          << " (HTTP/2 " << r.tls.h2_connections << ", streams followed on " << r.tls.h2_followed_connections << ")"
          << (r.tls.probing ? "" : ", --tls off") << "\n";
    if (r.h2.present())
        o << "  http/2 " << r.h2.connections << " connections, streams followed on " << r.h2.followed_connections
          << ", resets by client " << r.h2.client_resets << " by server " << r.h2.server_resets << "\n";
    if (!r.h2.grpc_status.empty() || r.h2.grpc_status_unread) {
        o << "  gRPC status";
        for (const auto& [name, n] : r.h2.grpc_status) o << " " << name << " " << n;
        if (r.h2.grpc_status_unread) o << ", unread " << r.h2.grpc_status_unread;
        o << "\n";
    }

    o << "\nDOWNSTREAM\n";
    if (s.downstream.empty()) o << "  (none)\n";
    for (const auto& d : s.downstream) {
        o << "  " << d.peer << "  conns " << d.connections << ", busy " << d.busy << " (max " << d.busy_max
          << "), calls " << d.calls << ", p50 " << ms(d.call.p50) << " p99 " << ms(d.call.p99) << ", oldest busy "
          << ms(d.oldest_busy_seconds) << ", connect failures " << d.connect_failures << ", resets " << d.resets
          << "\n";
        if (const std::string mix = protocol_mix_text(d.protocols); !mix.empty())
            o << "    connections by protocol since attach: " << mix << "\n";
        render_fan_out(o, d.fan_out);
    }
}

static void render_threads(std::ostringstream& o, const Snapshot& s) {
    o << "\nTHREAD GROUPS\n";
    for (const auto& g : s.thread_groups) {
        o << "  " << g.name << ": " << counted(g.threads, "thread") << ", " << g.running << " running, " << g.runnable
          << " runnable, " << g.blocked << " blocked";
        for (const auto& [k, v] : g.blocked_by) o << " " << k << "=" << v;
        o << "\n";
    }

    o << "\nTOP WAITS\n";
    int n = 0;
    for (const auto& w : s.waits) {
        if (n++ == 10) break;
        o << "  " << w.group << " " << w.syscall << " " << w.resource << ": " << w.threads_now << " now, "
          << ms(w.blocked_seconds) << " blocked over " << w.count << " waits\n";
        int f = 0;
        for (const auto& fr : w.stack) {
            if (f++ == 6) break;
            o << "      " << fr << "\n";
        }
    }

    const auto& c = s.carriers;
    o << "\nCARRIERS\n";
    if (!c.detected && c.loops.empty())
        o << "  (none detected)\n";
    else if (c.detected) {  // the runtime's carriers; a loop-only target has none to sum up
        o << "  " << c.pattern << ": " << c.threads << " carriers, " << c.running << " running, " << c.idle
          << " idle, " << c.runnable << " runnable, " << c.stalled << " stalled; " << c.stall_events
          << " stall events\n";
        if (c.procs > 0) {
            char busy[32];
            std::snprintf(busy, sizeof busy, "%.2f", c.busy);
            o << "    " << procs_label(c) << ": carriers busy " << busy << " on average over the window\n";
        }
        for (const auto& st : c.stalls)
            o << "    tid " << st.tid << " " << st.reason << " in " << st.syscall << " for " << ms(st.seconds)
              << (st.ongoing ? " (ongoing)" : "") << "\n";
    }
    for (const auto& l : c.loops) {
        char busy[16];
        std::snprintf(busy, sizeof busy, "%.0f%%", l.utilization * 100);
        // The parts a wait for a CPU made, where there are any: most loops have none.
        char rq[48] = "";
        if (l.runqueue_share >= 0.005)
            std::snprintf(rq, sizeof rq, " (%.0f%% waiting for a CPU)", l.runqueue_share * 100);
        const std::string rq_stalls =
            l.stalls_runqueue ? " (" + std::to_string(l.stalls_runqueue) + " made by a wait for a CPU)" : "";
        o << "  event loop " << l.name << " (pid " << l.pid << ", tid " << l.tid << ", " << l.poll << "): "
          << contract_name(l.state) << ", busy " << busy << rq << ", " << l.turns << " turns, longest " << ms(l.longest_turn_seconds)
          << ", p99 " << ms(l.p99_turn_seconds) << ", " << l.stalls << " stalls" << rq_stalls << "; " << l.connections << " connections, "
          << l.unread << " unread, " << l.accept_queue << " in the accept queue";
        // A proxy's requests waiting on its upstream are in flight, not behind the loop.
        if (l.calling) o << "; " << l.calling << " calls out in progress";
        o << "\n";
        for (const auto& st : l.recent_stalls) {
            o << "    stall " << ms(st.seconds) << ": on CPU " << ms(st.on_cpu_seconds);
            if (st.runqueue_seconds > 0) o << ", waiting for a CPU " << ms(st.runqueue_seconds);
            o << ", blocked " << ms(st.blocked_seconds);
            if (!st.syscall.empty()) o << " (longest in " << st.syscall << ")";
            if (!st.stack.empty()) o << " at " << st.stack.front();
            o << "\n";
        }
    }
}

std::string render_report(const Snapshot& s) {
    std::ostringstream o;
    o << "qscope: " << s.target.comm << " (pid " << s.target.pid << ", " << s.target.threads
      << " threads), observed " << ms(s.window_seconds) << "\n";
    if (const std::string procs = describe_processes(s.target); !procs.empty()) o << "  " << procs << "\n";
    if (s.target.exited) o << "  !! " << s.target.exit_note << "\n";
    o << "\nVERDICT  [" << contract_name(s.verdict.stage) << "] " << s.verdict.summary << "\n";

    // A section whose probes were not loaded says so: zeros there would read as "no queue".
    if (s.probes.has(ProbeFamily::sock)) render_requests(o, s);
    else o << "\nLISTENERS, REQUESTS, DOWNSTREAM\n  (not observed: --no-requests)\n";
    if (s.probes.has(ProbeFamily::sched)) render_threads(o, s);
    else o << "\nTHREAD GROUPS, TOP WAITS, CARRIERS\n  (not observed: --no-threads)\n";

    if (s.lost_events) o << "\nLOST EVENTS " << s.lost_events << " (figures marked partial)\n";
    for (const auto& p : s.partial) o << "  partial: " << p << "\n";
    for (const auto& w : s.warnings) o << "  warning: " << w << "\n";
    return o.str();
}

}  // namespace qscope
