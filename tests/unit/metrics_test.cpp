// Snapshot → metric families: the metric contract (docs/grafana.md), bucket edges, label caps.
#include <catch2/catch.hpp>
#include <map>
#include <set>
#include <string>

#include "metrics/metrics.h"
#include "prom/prom.h"

using namespace qscope;

namespace {

const prom::MetricFamily* find(const std::vector<prom::MetricFamily>& fams, const std::string& name) {
    for (const auto& f : fams)
        if (f.name == name) return &f;
    return nullptr;
}

std::string label(const prom::Metric& m, const std::string& name) {
    for (const auto& l : m.labels)
        if (l.name == name) return l.value;
    return "<absent>";
}

// value of the one series of `name` whose labels include all of `want`
double value(const std::vector<prom::MetricFamily>& fams, const std::string& name,
             const std::map<std::string, std::string>& want = {}) {
    const auto* f = find(fams, name);
    REQUIRE(f);
    const prom::Metric* hit = nullptr;
    for (const auto& m : f->metrics) {
        bool ok = true;
        for (const auto& [k, v] : want) ok = ok && label(m, k) == v;
        if (ok) {
            REQUIRE_FALSE(hit);
            hit = &m;
        }
    }
    REQUIRE(hit);
    return hit->value;
}

uint64_t bucket(const prom::HistogramValue& h, double le) {
    for (const auto& b : h.buckets)
        if (b.upper_bound == le) return b.cumulative_count;
    FAIL("no bucket le=" << le);
    return 0;
}

Snapshot busy_snapshot() {
    Snapshot s;
    s.target.pid = 4242;
    s.target.comm = "qs_server";
    s.target.threads = 12;
    s.taken_at_unix_ms = 1000000;
    Listener l;
    l.port = 8080;
    l.addr = "0.0.0.0";
    l.backlog = 128;
    l.accept_queue = 7;
    l.accepted_total = 100;
    l.overflows_total = 3;
    l.accept_wait_total.add(200000, 5);  // 200 µs
    s.listeners.push_back(l);
    l.addr = "::";  // the same port on IPv6: one series, summed
    l.accept_queue = 2;
    s.listeners.push_back(l);
    PortRequests p;
    p.port = 8080;
    p.in_flight = 9;
    p.waiting_unread = 4;
    p.completed_total = 50;
    p.dropped_total = 3;
    p.duration_total[0].add(3000000, 40);   // 3 ms 2xx
    p.duration_total[3].add(2000000000, 10);  // 2 s 5xx
    s.requests.ports.push_back(p);
    s.requests.in_flight = 9;
    s.requests.waiting_unread = 4;
    DownstreamPeer d;
    d.peer = "127.0.0.1:5432";
    d.connections = 10;
    d.busy = 10;
    d.calls_total = 77;
    d.call_total.add(50000000, 77);
    s.downstream.push_back(d);
    ThreadGroup g;
    g.name = "worker";
    g.threads = 8;
    g.running = 1;
    g.runnable = 2;
    g.blocked = 5;
    g.blocked_by = {{"futex", 4}, {"read", 1}};
    g.blocked_seconds_by_syscall_total = {{"futex", 12.5}, {"read", 0.25}, {"nanosleep", 3}};
    g.runqueue_wait_seconds = 4.75;
    g.waiting_for_cpu = 0.5;  // the last tick's average: the JSON's, not a metric's (rate() gives it)
    s.thread_groups.push_back(g);
    s.carriers.detected = true;
    s.carriers.threads = 2;
    s.carriers.running = 1;
    s.carriers.stalled = 1;
    s.carriers.stall_events_total = 6;
    s.carriers.stall_total.add(20000000, 6);
    s.verdict.stage = Stage::downstream;
    s.verdict.where = "pool to 127.0.0.1:5432";
    s.verdict.waiting = 9;
    s.verdict.ranking = {{Stage::downstream, "pool to 127.0.0.1:5432", 9}, {Stage::connector, "", 4}};
    s.lost_events = 2;
    return s;
}

}  // namespace

TEST_CASE("a value exactly on a bucket bound is counted in that bucket, not the one below", "[metrics]") {
    for (const auto* bounds : {&kAcceptWaitBuckets, &kRequestBuckets, &kDownstreamBuckets, &kStallBuckets}) {
        for (size_t i = 0; i < bounds->size(); ++i) {
            const double b = (*bounds)[i];
            Histogram h;
            h.add(static_cast<uint64_t>(std::llround(b * 1e9)));
            const auto p = to_prom_histogram(h, *bounds);
            INFO("le=" << b);
            CHECK(bucket(p, b) == 1);
            if (i > 0) CHECK(bucket(p, (*bounds)[i - 1]) == 0);
        }
    }
}

TEST_CASE("histogram buckets are cumulative integers, monotonic in le, +Inf == count", "[metrics]") {
    Histogram h;
    h.add(50000, 3);         // 50 µs: below the first accept-wait bound
    h.add(999000, 4);        // 0.999 ms
    h.add(1100000, 5);       // 1.1 ms: beyond 1 ms by more than a slot width
    h.add(7000000000ULL, 2); // 7 s
    h.add(30000000000ULL, 1);  // 30 s: beyond 10 s
    const auto p = to_prom_histogram(h, kAcceptWaitBuckets);
    REQUIRE(p.buckets.size() == kAcceptWaitBuckets.size());
    CHECK(bucket(p, 0.0001) == 3);
    CHECK(bucket(p, 0.001) == 7);
    CHECK(bucket(p, 0.0025) == 12);
    CHECK(bucket(p, 5) == 12);
    CHECK(bucket(p, 10) == 14);
    CHECK(p.sample_count == 15);
    CHECK(p.sample_count == h.count());
    CHECK(p.sample_sum == Approx(h.sum_seconds()));
    for (size_t i = 1; i < p.buckets.size(); ++i) {
        CHECK(p.buckets[i].upper_bound > p.buckets[i - 1].upper_bound);
        CHECK(p.buckets[i].cumulative_count >= p.buckets[i - 1].cumulative_count);
    }
    CHECK(p.buckets.back().cumulative_count <= p.sample_count);

    const auto empty = to_prom_histogram(Histogram{}, kRequestBuckets);
    CHECK(empty.sample_count == 0);
    for (const auto& b : empty.buckets) CHECK(b.cumulative_count == 0);
}

TEST_CASE("histogram buckets from kernel-shaped slots agree with count_le at slot edges", "[metrics]") {
    // Many values spread over 1 µs .. 100 s: at every bound the bucket must hold at least
    // the interpolated count_le and at most count_le plus the one straddling slot.
    Histogram h;
    for (uint64_t v = 1000; v < 100000000000ULL; v = v * 21 / 20 + 7) h.add(v, 3);
    const auto p = to_prom_histogram(h, kRequestBuckets);
    for (const auto& b : p.buckets) {
        const double interp = h.count_le(b.upper_bound);
        const auto slot = qs_hist_slot(static_cast<uint64_t>(std::llround(b.upper_bound * 1e9)));
        INFO("le=" << b.upper_bound);
        CHECK(static_cast<double>(b.cumulative_count) >= std::floor(interp));
        CHECK(static_cast<double>(b.cumulative_count) <= std::ceil(interp) + h.slots()[slot]);
    }
}

TEST_CASE("label capper keeps the heaviest values and folds the rest into other", "[metrics]") {
    LabelCapper c({{"a", 5}, {"b", 50}, {"c", 1}, {"d", 20}, {"a", 100}}, 2);
    CHECK(c("a") == "a");  // 105 in all
    CHECK(c("b") == "b");
    CHECK(c("d") == "other");
    CHECK(c("c") == "other");
    CHECK(c("never-seen") == "other");
    LabelCapper none({{"a", 1}}, 0);
    CHECK(none("a") == "other");
}

TEST_CASE("peers and groups beyond the cap fold into other, values summed", "[metrics]") {
    Snapshot s = busy_snapshot();
    s.downstream.clear();
    s.thread_groups.clear();
    uint64_t other_busy = 0, other_calls = 0, other_hist = 0;
    for (int i = 0; i < 60; ++i) {
        DownstreamPeer d;
        d.peer = "10.0.0." + std::to_string(i) + ":443";
        d.busy = 1;
        d.calls_total = 1000 - i;  // lower index = heavier
        d.call_total.add(1000000, static_cast<uint64_t>(i + 1));
        if (i >= 50) {
            other_busy += d.busy;
            other_calls += d.calls_total;
            other_hist += i + 1;
        }
        s.downstream.push_back(d);
        ThreadGroup g;
        g.name = "pool-" + std::to_string(i);
        g.threads = 100 - i;
        g.blocked = 1;
        g.blocked_seconds_by_syscall_total["futex"] = 1.5;
        g.runqueue_wait_seconds = 0.25;
        s.thread_groups.push_back(g);
    }
    const auto fams = snapshot_families(&s, 50, s.taken_at_unix_ms);
    const auto* busy = find(fams, "qscope_downstream_busy");
    REQUIRE(busy);
    CHECK(busy->metrics.size() == 51);
    std::set<std::string> peers;
    for (const auto& m : busy->metrics) peers.insert(label(m, "peer"));
    CHECK(peers.count("other") == 1);
    CHECK(peers.count("10.0.0.0:443") == 1);
    CHECK(peers.count("10.0.0.49:443") == 1);
    CHECK(peers.count("10.0.0.50:443") == 0);
    CHECK(value(fams, "qscope_downstream_busy", {{"peer", "other"}}) == other_busy);
    CHECK(value(fams, "qscope_downstream_calls_total", {{"peer", "other"}}) == other_calls);
    const auto* hist = find(fams, "qscope_downstream_call_duration_seconds");
    REQUIRE(hist);
    for (const auto& m : hist->metrics)
        if (label(m, "peer") == "other") CHECK(m.histogram.sample_count == other_hist);

    const auto* blocked = find(fams, "qscope_blocked_seconds_total");
    REQUIRE(blocked);
    CHECK(blocked->metrics.size() == 51);
    CHECK(value(fams, "qscope_blocked_seconds_total", {{"group", "other"}, {"syscall", "futex"}}) == Approx(15));
    CHECK(value(fams, "qscope_threads", {{"group", "other"}, {"state", "blocked"}}) == 10);
    CHECK(find(fams, "qscope_runqueue_wait_seconds_total")->metrics.size() == 51);
    CHECK(value(fams, "qscope_runqueue_wait_seconds_total", {{"group", "other"}}) == Approx(2.5));
}

TEST_CASE("the metric contract: every family, HELP and TYPE, _total counters, values", "[metrics]") {
    const Snapshot s = busy_snapshot();
    const auto fams = snapshot_families(&s, 50, s.taken_at_unix_ms + 2500);
    const std::set<std::string> contract = {
        "qscope_accept_queue_length",     "qscope_accept_queue_backlog",   "qscope_accept_wait_seconds",
        "qscope_listen_overflows_total",  "qscope_requests_in_flight",     "qscope_requests_waiting_unread",
        "qscope_request_duration_seconds", "qscope_downstream_connections", "qscope_downstream_busy",
        "qscope_downstream_call_duration_seconds", "qscope_threads",      "qscope_blocked_seconds_total",
        "qscope_runqueue_wait_seconds_total", "qscope_carriers",                "qscope_carrier_stalls_total",   "qscope_verdict",
        "qscope_lost_events_total",       "qscope_target_info"};
    std::set<std::string> names;
    for (const auto& f : fams) {
        INFO(f.name);
        CHECK(names.insert(f.name).second);  // each family once
        CHECK(prom::valid_metric_name(f.name));
        CHECK_FALSE(f.help.empty());
        if (f.type == prom::MetricType::counter) CHECK(f.name.size() > 6);
        if (f.type == prom::MetricType::counter) CHECK(f.name.substr(f.name.size() - 6) == "_total");
        if (f.name.size() > 6 && f.name.substr(f.name.size() - 6) == "_total")
            CHECK(f.type == prom::MetricType::counter);
    }
    for (const auto& n : contract) {
        INFO(n);
        CHECK(names.count(n) == 1);
    }
    CHECK(find(fams, "qscope_accept_wait_seconds")->type == prom::MetricType::histogram);
    CHECK(find(fams, "qscope_request_duration_seconds")->type == prom::MetricType::histogram);

    CHECK(value(fams, "qscope_up") == 1);
    CHECK(value(fams, "qscope_target_info", {{"pid", "4242"}, {"comm", "qs_server"}}) == 1);
    CHECK(value(fams, "qscope_snapshot_age_seconds") == Approx(2.5));
    CHECK(value(fams, "qscope_accept_queue_length", {{"port", "8080"}}) == 9);  // 7 + 2
    CHECK(value(fams, "qscope_accept_queue_backlog", {{"port", "8080"}}) == 256);
    CHECK(value(fams, "qscope_listen_overflows_total", {{"port", "8080"}}) == 6);
    CHECK(value(fams, "qscope_requests_in_flight", {{"port", "8080"}}) == 9);
    CHECK(value(fams, "qscope_requests_waiting_unread", {{"port", "8080"}}) == 4);
    CHECK(value(fams, "qscope_requests_completed_total", {{"port", "8080"}}) == 50);
    CHECK(value(fams, "qscope_requests_dropped_total", {{"port", "8080"}}) == 3);
    CHECK(value(fams, "qscope_downstream_busy", {{"peer", "127.0.0.1:5432"}}) == 10);
    CHECK(value(fams, "qscope_threads", {{"group", "worker"}, {"state", "blocked"}}) == 5);
    CHECK(value(fams, "qscope_threads_blocked", {{"group", "worker"}, {"syscall", "futex"}}) == 4);
    CHECK(value(fams, "qscope_blocked_seconds_total", {{"group", "worker"}, {"syscall", "futex"}}) == 12.5);
    CHECK(value(fams, "qscope_runqueue_wait_seconds_total", {{"group", "worker"}}) == 4.75);
    // A syscall that blocked the group before but holds nobody now reads 0, not stale.
    CHECK(value(fams, "qscope_threads_blocked", {{"group", "worker"}, {"syscall", "nanosleep"}}) == 0);
    CHECK(value(fams, "qscope_carriers", {{"state", "stalled"}}) == 1);
    CHECK(value(fams, "qscope_carrier_stalls_total") == 6);
    CHECK(value(fams, "qscope_verdict", {{"stage", "downstream"}, {"where", "pool to 127.0.0.1:5432"}}) == 1);
    CHECK(find(fams, "qscope_verdict")->metrics.size() == 1);
    CHECK(value(fams, "qscope_stage_waiting", {{"stage", "connector"}}) == 4);
    CHECK(value(fams, "qscope_lost_events_total") == 2);

    const auto* dur = find(fams, "qscope_request_duration_seconds");
    std::map<std::string, uint64_t> by_class;
    for (const auto& m : dur->metrics) by_class[label(m, "status_class")] = m.histogram.sample_count;
    CHECK(by_class == std::map<std::string, uint64_t>{{"2xx", 40}, {"3xx", 0}, {"4xx", 0}, {"5xx", 10}, {"unknown", 0}});
    for (const auto& m : dur->metrics)
        if (label(m, "status_class") == "5xx") {
            CHECK(bucket(m.histogram, 1) == 0);
            CHECK(bucket(m.histogram, 2.5) == 10);
            CHECK(m.histogram.sample_sum == Approx(20));
        }

    // The serialized form has no duplicate series (Prometheus rejects the scrape if so).
    const std::string text = prom::serialize(fams);
    std::set<std::string> series;
    size_t pos = 0;
    while (pos < text.size()) {
        const auto nl = text.find('\n', pos);
        const std::string line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.empty() || line[0] == '#') continue;
        INFO(line);
        CHECK(series.insert(line.substr(0, line.rfind(' '))).second);
    }
}

TEST_CASE("no snapshot yet: qscope_up 0 and nothing else", "[metrics]") {
    const auto fams = snapshot_families(nullptr, 50, 0);
    REQUIRE(fams.size() == 1);
    CHECK(fams[0].name == "qscope_up");
    CHECK(fams[0].metrics.at(0).value == 0);
}

TEST_CASE("an exited target reads qscope_up 0", "[metrics]") {
    Snapshot s = busy_snapshot();
    s.target.exited = true;
    const auto fams = snapshot_families(&s, 50, s.taken_at_unix_ms);
    CHECK(value(fams, "qscope_up") == 0);
}

TEST_CASE("request totals without a per-port breakdown land on the one listening port", "[metrics]") {
    Snapshot s = busy_snapshot();
    s.requests.ports.clear();
    s.requests.in_flight = 3;
    s.requests.waiting_unread = 1;
    auto fams = snapshot_families(&s, 50, s.taken_at_unix_ms);
    CHECK(value(fams, "qscope_requests_in_flight", {{"port", "8080"}}) == 3);
    CHECK(value(fams, "qscope_requests_waiting_unread", {{"port", "8080"}}) == 1);

    Listener other;
    other.port = 9090;
    s.listeners.push_back(other);
    fams = snapshot_families(&s, 50, s.taken_at_unix_ms);
    CHECK(value(fams, "qscope_requests_in_flight", {{"port", "all"}}) == 3);
    CHECK(value(fams, "qscope_requests_in_flight", {{"port", "9090"}}) == 0);
}

TEST_CASE("an empty snapshot still renders every family it can, all zero", "[metrics]") {
    Snapshot s;
    const auto fams = snapshot_families(&s, 50, 0);
    CHECK(value(fams, "qscope_carrier_stalls_total") == 0);
    CHECK(value(fams, "qscope_verdict", {{"stage", "none"}}) == 1);
    const auto* stall = find(fams, "qscope_carrier_stall_duration_seconds");
    REQUIRE(stall);
    REQUIRE(stall->metrics.size() == 1);
    CHECK(stall->metrics[0].histogram.sample_count == 0);
    CHECK_NOTHROW(prom::serialize(fams));
}

TEST_CASE("a Unix listener's port label and a Unix peer's label carry the path", "[metrics][unix]") {
    Snapshot s;
    s.taken_at_unix_ms = 1000;
    Listener l;
    l.unix_path = "/run/php/php8.2-fpm.sock";
    l.accept_queue = 6;
    l.backlog = 511;
    s.listeners.push_back(l);
    PortRequests pr;
    pr.unix_path = l.unix_path;
    pr.in_flight = 4;
    s.requests.ports.push_back(pr);
    DownstreamPeer d;
    d.peer = "unix:/var/run/postgresql/.s.PGSQL.5432";
    d.busy = 3;
    s.downstream.push_back(d);
    const auto fams = snapshot_families(&s, 50, s.taken_at_unix_ms);
    CHECK(value(fams, "qscope_accept_queue_length", {{"port", "unix:/run/php/php8.2-fpm.sock"}}) == 6);
    CHECK(value(fams, "qscope_requests_in_flight", {{"port", "unix:/run/php/php8.2-fpm.sock"}}) == 4);
    CHECK(value(fams, "qscope_downstream_busy", {{"peer", "unix:/var/run/postgresql/.s.PGSQL.5432"}}) == 3);
}
