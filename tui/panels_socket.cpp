// The panels fed by the socket probes: listeners, requests, downstream peers.
#include "tui/format.h"
#include "tui/panels.h"
#include "tui/sorting.h"

namespace qscope::tui {
namespace {

Row listener_row(const Listener& l, bool u) {
    const bool full = l.backlog && l.accept_queue >= l.backlog;
    const std::string name = !l.unix_path.empty() ? "unix:" + l.unix_path
                                                  : (l.addr.empty() ? std::string("*") : l.addr) + ":" + std::to_string(l.port);
    // At a connection cap the queue is a symptom: the row says what the limit is.
    const bool capped = connection_limit_reached(l);
    return {{capped ? name + " at conn limit " + fmt_count(l.connections) : name, capped ? Role::critical : Role::normal},
            {fmt_count(l.accept_queue), full ? Role::critical : count_role(l.accept_queue, Role::warn)},
            {fmt_count(l.accept_queue_max), Role::normal},
            {fmt_count(l.backlog), Role::normal},
            {fmt_count(l.accepted), Role::normal},
            {fmt_secs(l.accept_wait.p50, u), Role::normal},
            {fmt_secs(l.accept_wait.p99, u), Role::normal},
            {fmt_count(l.overflows), count_role(l.overflows, Role::critical)}};
}

Line rate_line(const Requests& r, const std::string& d) {
    return {{"rate ", Role::dim},
            {fmt_rate(r.rate_per_second), Role::normal},
            {d + "in flight ", Role::dim},
            {fmt_count(r.in_flight), Role::normal},
            {" (max " + fmt_count(r.in_flight_max) + ")", Role::dim},
            {d + "unread ", Role::dim},
            {fmt_count(r.waiting_unread), count_role(r.waiting_unread, Role::warn)},
            {" (max " + fmt_count(r.waiting_unread_max) + ")", Role::dim},
            {d + "conns ", Role::dim},
            {fmt_count(r.connections), Role::normal},
            {d + "done ", Role::dim},
            {fmt_count(r.completed), Role::normal}};
}

Line latency_line(const Requests& r, const std::string& d, bool u) {
    return {{"latency p50 ", Role::dim},
            {fmt_secs(r.latency.p50, u), Role::normal},
            {" p90 ", Role::dim},
            {fmt_secs(r.latency.p90, u), Role::normal},
            {" p99 ", Role::dim},
            {fmt_secs(r.latency.p99, u), Role::normal},
            {" max ", Role::dim},
            {fmt_secs(r.latency.max, u), Role::normal},
            {d + "oldest in flight ", Role::dim},
            {fmt_secs(r.oldest_in_flight_seconds, u), r.oldest_in_flight_seconds >= 5 ? Role::warn : Role::normal}};
}

Line status_line(const StatusCounts& st) {
    return {{"status 2xx ", Role::dim},
            {fmt_count(st.c2xx), Role::normal},
            {"  3xx ", Role::dim},
            {fmt_count(st.c3xx), Role::normal},
            {"  4xx ", Role::dim},
            {fmt_count(st.c4xx), count_role(st.c4xx, Role::warn)},
            {"  5xx ", Role::dim},
            {fmt_count(st.c5xx), count_role(st.c5xx, Role::critical)},
            {"  other ", Role::dim},
            {fmt_count(st.unknown), Role::normal}};
}

// TLS connections and how many of them --tls read the plaintext of (a warning colour while
// some stay encrypted: their statuses are among "other").
void add_tls(Line& l, const TlsSeen& t) {
    if (!t.present()) return;
    const bool hidden = t.plaintext_connections < t.connections;
    l.push_back({"  tls conns ", Role::dim});
    l.push_back({fmt_count(t.connections), Role::normal});
    l.push_back({" (plaintext " + fmt_count(t.plaintext_connections) + (t.probing ? ")" : ", --tls off)"),
                 hidden ? Role::warn : Role::dim});
}

// Requests their connection's close dropped unanswered (Requests::dropped): the clients saw
// their connections end. Shown only once there are some.
void add_dropped(Line& l, uint64_t dropped) {
    if (!dropped) return;
    l.push_back({"  dropped ", Role::dim});
    l.push_back({fmt_count(dropped), Role::critical});
}

// HTTP/2 connections, whose streams are the requests counted above (a warning colour while
// some are counted per connection instead).
void add_h2(Line& l, const Http2Seen& h) {
    if (!h.present()) return;
    l.push_back({"  h2 conns ", Role::dim});
    l.push_back({fmt_count(h.connections), Role::normal});
    if (h.followed_connections < h.connections)
        l.push_back({" (per stream " + fmt_count(h.followed_connections) + ")", Role::warn});
    else
        l.push_back({" (per stream)", Role::dim});
}

// gRPC's own status, whose failures :status (200 for all) does not show: the codes read, the
// unread in a warning colour. Empty when no gRPC answer was seen.
Line grpc_line(const Http2Seen& h) {
    uint64_t read = 0;
    for (const auto& [code, n] : h.grpc_status) read += n;
    if (!read && !h.grpc_status_unread) return {};
    const auto ok = h.grpc_status.find("OK");
    const uint64_t failed = read - (ok == h.grpc_status.end() ? 0 : ok->second);
    Line l = {{"gRPC failed ", Role::dim}, {fmt_count(failed) + "/" + fmt_count(read), count_role(failed, Role::warn)}};
    for (const auto& [code, n] : h.grpc_status)
        if (code != "OK") l.push_back({"  " + code + " " + fmt_count(n), Role::normal});
    if (h.grpc_status_unread) l.push_back({"  unread " + fmt_count(h.grpc_status_unread), Role::warn});
    return l;
}

Line port_line(const PortRequests& p) {
    return {{p.unix_path.empty() ? ":" + std::to_string(p.port) : "unix:" + p.unix_path, Role::normal},
            {"  in flight ", Role::dim},
            {fmt_count(p.in_flight), Role::normal},
            {"  unread ", Role::dim},
            {fmt_count(p.waiting_unread), count_role(p.waiting_unread, Role::warn)},
            {"  completed ", Role::dim},
            {fmt_count(p.completed_total), Role::normal}};
}

// Calls per request (p50) and retries in the window: "?" when they cannot be tied to
// requests (model/fan_out.h), "-" when no request called the peer.
Cell per_request_cell(const FanOut& f) {
    if (!f.known) return {f.unknown_reason.empty() ? "-" : "?", Role::dim};
    if (!f.window.requests) return {"-", Role::dim};
    return {fmt_count(f.per_request_p50), f.window.failing_retries ? Role::critical : count_role(f.window.retries, Role::warn)};
}

Cell retries_cell(const FanOut& f) {
    if (!f.known) return {f.unknown_reason.empty() ? "-" : "?", Role::dim};
    return {fmt_count(f.window.retries), count_role(f.window.retries, Role::warn)};
}

Row peer_row(const DownstreamPeer& d, bool u) {
    const Role oldest = d.oldest_busy_seconds >= 10 ? Role::critical
                        : d.oldest_busy_seconds >= 1 ? Role::warn
                                                     : Role::normal;
    return {{d.peer, Role::normal},
            {fmt_count(d.connections), Role::normal},
            {fmt_count(d.busy), pool_saturated(d) ? Role::critical : count_role(d.busy, Role::warn)},
            {fmt_count(d.busy_max), Role::normal},
            {fmt_count(d.calls), Role::normal},
            {fmt_secs(d.call.p50, u), Role::normal},
            {fmt_secs(d.call.p99, u), Role::normal},
            {fmt_secs(d.oldest_busy_seconds, u), oldest},
            {fmt_count(d.connect_failures), count_role(d.connect_failures, Role::critical)},
            {fmt_count(d.resets), count_role(d.resets, Role::warn)},
            per_request_cell(d.fan_out),
            retries_cell(d.fan_out)};
}

}  // namespace

PanelBody listeners_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    if (s.listeners.empty()) {
        b.title = {{"none found (is the target listening on TCP?)", Role::dim}};
        add_text_row(b, {{"no listeners", Role::dim}});
        return b;
    }
    uint64_t q = 0, backlog = 0, ovf = 0;
    ProtocolMix mix;
    for (const auto& l : s.listeners) {
        q += l.accept_queue;
        backlog += l.backlog;
        ovf += l.overflows;
        mix.add(l.protocols);
    }
    b.title = {{std::to_string(s.listeners.size()) + (s.listeners.size() == 1 ? " port" : " ports"), Role::normal},
               {dot(ui.unicode) + "queue ", Role::normal},
               {fmt_count(q), count_role(q, Role::warn)},
               {"/" + fmt_count(backlog), Role::normal}};
    if (ovf) b.title.push_back({dot(ui.unicode) + "overflows " + fmt_count(ovf), Role::critical});
    // What the accepted connections speak (since attach): TLS in a warning colour while its
    // status classes are hidden (no --tls).
    for (const auto& [name, n] : {std::pair{"http1 ", mix.http1}, std::pair{"h2 ", mix.h2}, std::pair{"tls ", mix.tls},
                                  std::pair{"other ", mix.other}})
        if (n)
            b.title.push_back({dot(ui.unicode) + name + fmt_count(n),
                               std::string(name) == "tls " && !s.requests.tls.probing ? Role::warn : Role::dim});
    const std::vector<Col> cols = {
        {"listener", "listener", 8, false, 0},  {"queue", "q", 6, true, 0},      {"max", "max", 6, true, 1},
        {"backlog", "blog", 7, true, 1},        {"accepted", "acc", 8, true, 3}, {"wait p50", "p50", 8, true, 4},
        {"wait p99", "p99", 8, true, 2},        {"overflows", "ovf", 9, true, 0},
    };
    std::vector<Row> rows;
    for (size_t k : sorted_order(s, Panel::listeners, ui.sort[static_cast<int>(Panel::listeners)]))
        rows.push_back(listener_row(s.listeners[k], ui.unicode));
    add_table(b, layout_table(cols, rows, width, ui.unicode));
    return b;
}

PanelBody requests_panel(const Snapshot& s, const UiState& ui, int) {
    PanelBody b;
    const auto& r = s.requests;
    const std::string d = dot(ui.unicode);
    const bool u = ui.unicode;
    b.title = {{fmt_rate(r.rate_per_second), Role::normal},
               {d + "p99 " + fmt_secs(r.latency.p99, u), Role::normal},
               {d + "in flight " + fmt_count(r.in_flight), Role::normal}};
    if (r.status.c5xx) b.title.push_back({d + "5xx " + fmt_count(r.status.c5xx), Role::critical});
    add_text_row(b, rate_line(r, d));
    add_text_row(b, latency_line(r, d, u));
    Line status = status_line(r.status);
    add_dropped(status, r.dropped);
    add_tls(status, r.tls);
    add_h2(status, r.h2);
    add_text_row(b, status);
    if (Line g = grpc_line(r.h2); !g.empty()) add_text_row(b, g);
    if (r.ports.size() > 1)
        for (const auto& p : r.ports) add_text_row(b, port_line(p));
    return b;
}

PanelBody downstream_panel(const Snapshot& s, const UiState& ui, int width) {
    PanelBody b;
    const int sk = ui.sort[static_cast<int>(Panel::downstream)];
    if (s.downstream.empty()) {
        b.title = {{"no outbound connections seen", Role::dim}};
        add_text_row(b, {{"no downstream peers", Role::dim}});
        return b;
    }
    uint64_t busy = 0, conns = 0;
    for (const auto& d : s.downstream) {
        busy += d.busy;
        conns += d.connections;
    }
    const auto& keys = sort_keys(Panel::downstream);
    b.title = {{std::to_string(s.downstream.size()) + (s.downstream.size() == 1 ? " peer" : " peers"), Role::normal},
               {dot(ui.unicode) + "busy ", Role::normal},
               {fmt_count(busy) + "/" + fmt_count(conns), count_role(busy, Role::warn)},
               {dot(ui.unicode) + "by " + keys[sk % keys.size()], Role::dim}};
    const std::vector<Col> cols = {
        {"peer", "peer", 10, false, 0}, {"conns", "conn", 5, true, 0},  {"busy", "busy", 5, true, 0},
        {"max", "max", 5, true, 2},     {"calls", "calls", 6, true, 1}, {"p50", "p50", 7, true, 4},
        {"p99", "p99", 7, true, 1},     {"oldest", "old", 7, true, 0},  {"fail", "fail", 5, true, 3},
        {"resets", "rst", 6, true, 3},  {"per req", "/req", 7, true, 5}, {"retries", "rtry", 7, true, 5},
    };
    std::vector<Row> rows;
    for (size_t k : sorted_order(s, Panel::downstream, sk)) rows.push_back(peer_row(s.downstream[k], ui.unicode));
    add_table(b, layout_table(cols, rows, width, ui.unicode));
    return b;
}

}  // namespace qscope::tui
