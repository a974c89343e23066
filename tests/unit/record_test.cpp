// The recording format (collector/record/): round trips, damaged files, and windows of a
// recording computed as the live collector computes them. Oracles: the JSON contract's
// renderer (a decoded snapshot renders to the same JSON as the original), the frame
// boundaries the writer produced, and windows worked out by hand from cumulative values.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <random>

#include "model/verdict.h"
#include "output/json_writer.h"
#include "record/format.h"
#include "record/recent.h"
#include "record/ring.h"
#include "record/window.h"
#include "tui_fixtures.h"

using namespace qscope;
using namespace qscope::record;

namespace {

Snapshot rich() {
    Snapshot s = tui_fixtures::pool_saturated();
    s.listeners[0].accept_wait_total.add(2'000'000, 40);
    s.downstream[1].call_total.add(250'000'000, 3187);
    s.downstream[1].call_total.set_max_ns(262'000'000);
    PortRequests p;
    p.port = 8080;
    p.in_flight = 200;
    p.duration_total[0].add(2'600'000'000, 3150);
    p.duration_total[3].add(2'900'000'000, 37);
    s.requests.ports = {p};
    s.serving = {{101, 4242, 7, 3, 2, 1, 0}};
    s.thread_groups[0].futex_by_pid = {{4242, 189}};
    s.partial = {"sched: something"};
    s.probe_attach = {{ProbeFamily::sock, "sock_recv_length", AttachType::fexit, "tcp_recvmsg"}};
    s.target.processes = {{4242, "qs_server", "main", 11}};
    return s;
}

RecordHeader header() {
    RecordHeader h;
    h.qscope_version = "0.1.0";
    h.selector = "pid:4242";
    h.pid = 4242;
    h.comm = "qs_server";
    h.started_unix_ms = 1764459600000;
    h.interval_seconds = 1;
    return h;
}

// A recording of `n` ticks; `frame_ends` gets the offset just past each tick's frame.
std::string recording(int n, std::vector<size_t>* frame_ends = nullptr) {
    std::string bytes = file_header() + header_frame(header());
    for (int i = 0; i < n; ++i) {
        Snapshot s = rich();
        s.tick = i;
        s.taken_at_unix_ms = 1764459600000 + 1000 * i;
        bytes += tick_frame(s);
        if (frame_ends) frame_ends->push_back(bytes.size());
    }
    return bytes;
}

}  // namespace

TEST_CASE("record: a snapshot survives the codec field for field", "[record]") {
    for (const Snapshot& s : {rich(), tui_fixtures::carriers_stalled(), tui_fixtures::silent_partner(),
                              tui_fixtures::target_exited(), Snapshot{}}) {
        Snapshot back;
        REQUIRE(decode(encode(s), back));
        CHECK(render_json(back) == render_json(s));
        CHECK(encode(back) == encode(s));  // the fields JSON does not render (serving, histograms) too
    }
    RecordHeader h;
    REQUIRE(decode(encode(header()), h));
    CHECK(h.selector == "pid:4242");
    CHECK(h.started_unix_ms == 1764459600000);
}

TEST_CASE("record: a file cut anywhere replays its whole ticks and says where it stops", "[record]") {
    std::vector<size_t> ends;
    const std::string whole = recording(5, &ends);
    ends.insert(ends.begin(), file_header().size() + header_frame(header()).size());  // header only: whole, no tick
    const Recording full = parse(whole);
    REQUIRE_FALSE(full.stopped);
    REQUIRE(full.ticks.size() == 5);
    CHECK(full.header.comm == "qs_server");
    for (size_t cut = 0; cut < whole.size(); ++cut) {
        const Recording r = parse(std::string_view(whole).substr(0, cut));
        const size_t whole_ticks = std::count_if(ends.begin() + 1, ends.end(), [&](size_t e) { return e <= cut; });
        INFO("cut at " << cut);
        REQUIRE(r.ticks.size() == whole_ticks);
        if (std::find(ends.begin(), ends.end(), cut) == ends.end()) {
            REQUIRE(r.stopped);
            CHECK(r.readable_bytes <= cut);
        }
    }
}

TEST_CASE("record: a flipped byte stops the replay at its frame, never before", "[record]") {
    std::vector<size_t> ends;
    const std::string whole = recording(4, &ends);
    std::mt19937 rng(18);
    for (int trial = 0; trial < 400; ++trial) {
        std::string bytes = whole;
        const size_t at = rng() % bytes.size();
        bytes[at] = static_cast<char>(bytes[at] ^ (1 + rng() % 255));
        const Recording r = parse(bytes);
        const size_t intact = std::count_if(ends.begin(), ends.end(), [&](size_t e) { return e <= at; });
        INFO("flipped byte " << at);
        REQUIRE(r.stopped);
        CHECK(r.ticks.size() == intact);
    }
}

TEST_CASE("record: another version or no signature is refused in one line", "[record]") {
    std::string bytes = recording(2);
    bytes[8] = 2;
    Recording r = parse(bytes);
    CHECK(r.ticks.empty());
    REQUIRE(r.stopped);
    CHECK(*r.stopped == "recording format version 2, this qscope reads version 1");
    r = parse("{\"verdict\": {}}");
    CHECK(r.ticks.empty());
    CHECK(r.stopped->find("not a qscope recording") == 0);
}

TEST_CASE("record: a later window is the difference of cumulative ticks", "[record]") {
    // Three ticks of one live window (since attach), as the collector publishes them.
    std::vector<Snapshot> ticks(3);
    for (int i = 0; i < 3; ++i) {
        Snapshot& s = ticks[i];
        s.probes = {ProbeFamily::sock};
        s.tick = i;
        s.taken_at_unix_ms = 1000 * (i + 1);
        s.window_seconds = i + 0.5;  // attached half a second before tick 0
        PortRequests p;
        p.port = 8080;
        for (int k = 0; k <= i; ++k) p.duration_total[0].add(1'000'000 * (k + 1) * 10, 100);  // 10, 20, 30 ms
        p.dropped_total = std::vector<uint64_t>{2, 3, 7}[i];
        s.requests.ports = {p};
        s.requests.completed = 100 * (i + 1);
        DownstreamPeer d;
        d.peer = "127.0.0.1:5432";
        d.connections = 4;
        d.calls_total = d.calls = 50 * (i + 1);
        d.busy = i == 2 ? 4 : 1;
        d.busy_max = i == 0 ? 2 : 4;  // rose to 4 during tick 1
        s.downstream = {d};
        s.requests.in_flight = 3;
        s.requests.in_flight_max = 9;  // reached before tick 0: not inside a later window
        // A loop thread's waiting requests sampled at the ticks: 5, 10, 20.
        ThreadServing t;
        t.tid = 77;
        t.waiting_samples_total = i + 1;
        t.waiting_sum_total = std::vector<uint64_t>{5, 15, 35}[i];
        s.serving = {t};
    }
    const WindowResult w = window(ticks, {2500, 3000});  // ticks (1, 2]
    REQUIRE(w.snap);
    const Snapshot& s = *w.snap;
    CHECK(s.window_seconds == 1);
    CHECK(s.requests.completed == 100);
    CHECK(s.requests.status.c2xx == 100);
    CHECK(s.requests.dropped == 4);
    CHECK(s.requests.latency.p50 == Approx(0.030).epsilon(0.07));  // only the 30 ms requests
    CHECK(s.downstream[0].calls == 50);
    CHECK(s.downstream[0].busy_max == 4);  // sampled at tick 2
    CHECK(s.requests.in_flight_max == 3);  // 9 is older than the window: the sampled gauge, and said so
    CHECK(std::any_of(s.partial.begin(), s.partial.end(),
                      [](const std::string& p) { return p.find("maxima") != std::string::npos; }));
    REQUIRE(s.serving.size() == 1);
    CHECK(s.serving[0].waiting_average == Approx(20));  // tick 2's sample alone
    CHECK(s.serving[0].waiting_average_seconds == Approx(1));  // from tick 1 to tick 2
    CHECK(s.verdict.stage != Stage::none);  // computed again on the window
    CHECK(s.verdict.summary.find("127.0.0.1:5432") != std::string::npos);

    const WindowResult rose = window(ticks, {1200, 2000});  // ticks (0, 1]: busy max rose to 4 inside
    REQUIRE(rose.snap);
    CHECK(rose.snap->downstream[0].busy_max == 4);
    CHECK(rose.snap->downstream[0].busy == 1);

    // From the attach: the tick itself, untouched.
    const WindowResult all = window(ticks, {std::nullopt, 3000});
    REQUIRE(all.snap);
    CHECK(render_json(*all.snap) == render_json(ticks[2]));
    CHECK_FALSE(window(ticks, {2100, 2900}).snap);  // no tick inside
    CHECK_FALSE(rose.snap->partial.empty());
    CHECK_FALSE(window(ticks, {std::nullopt, 500}).snap);
}

TEST_CASE("record: a loop thread's waiting is averaged over the window's last ten ticks, as live", "[record]") {
    // 14 ticks: 20 requests waiting at each of the first 4, none after. Over the window's last
    // 10 ticks nothing waited: a spike long gone is not averaged into the window's end.
    std::vector<Snapshot> ticks(14);
    uint64_t sum = 0;
    for (size_t i = 0; i < ticks.size(); ++i) {
        Snapshot& s = ticks[i];
        s.tick = i;
        s.taken_at_unix_ms = 1000 * (i + 1);
        s.window_seconds = i + 0.5;
        sum += i < 4 ? 20 : 0;
        ThreadServing t;
        t.tid = 77;
        t.waiting_samples_total = i + 1;
        t.waiting_sum_total = sum;
        s.serving = {t};
    }
    const WindowResult all = window(ticks, {1000, 14000});  // ticks (0, 13]
    REQUIRE(all.snap);
    CHECK(all.snap->serving[0].waiting_average == 0);
    const WindowResult spike = window(ticks, {1000, 9000});  // ticks (0, 8]: 3 of its last 8 samples
    REQUIRE(spike.snap);
    CHECK(spike.snap->serving[0].waiting_average == Approx(60.0 / 8));
}

// An exporter's tick `t` seconds after its attach: one event loop 20% busy, with 22 requests
// unread on its connections now, which stalled 3 times in its first seconds and again
// `late_stalls` times from t = 80 on. Its verdict is the live collector's, since the attach.
static Snapshot exporter_tick(int t, uint64_t late_stalls = 0) {
    Snapshot s;
    s.probes = {ProbeFamily::sock, ProbeFamily::sched};
    s.tick = static_cast<uint64_t>(t);
    s.taken_at_unix_ms = 1'000'000 + 1000 * t;
    s.window_seconds = t + 0.5;
    s.requests.in_flight = 1;
    s.requests.waiting_unread = 22;
    ThreadGroup g;
    g.name = "node";
    g.threads = 1;
    g.blocked = 1;
    g.blocked_by["epoll_pwait"] = 1;
    s.thread_groups.push_back(g);
    EventLoop l;
    l.tid = l.pid = 100;
    l.name = "node";
    l.poll = "epoll_pwait";
    l.state = CarrierState::idle;
    l.turns_total = l.turns = 100 * static_cast<uint64_t>(t);
    l.busy_seconds_total = 0.2 * s.window_seconds;
    l.utilization = 0.2;
    l.stalls_total = l.stalls = (t >= 2 ? 3 : 0) + (t >= 80 ? late_stalls : 0);
    l.longest_turn_seconds = l.stalls ? 1.0 : 0.004;
    s.carriers.loops.push_back(l);
    ThreadServing sv;
    sv.tid = sv.pid = 100;
    sv.connections = sv.connections_max = 23;
    sv.in_flight = 1;
    sv.unread = 22;
    s.serving.push_back(sv);
    compute_verdict(s);
    return s;
}

TEST_CASE("record: an exporter's verdict looks back over its horizon, not to the attach", "[record]") {
    RecentVerdict recent(60);
    std::shared_ptr<const Snapshot> out;
    for (int t = 0; t <= 100; ++t) {
        auto live = std::make_shared<const Snapshot>(exporter_tick(t));
        out = recent.apply(live);
        REQUIRE(out);
        // Within the first horizon the attach is recent: the live verdict stands.
        if (t == 30) CHECK(out->verdict.summary == live->verdict.summary);
    }
    // Since the attach the loop has stalled: the live verdict names it 98 s later.
    const Snapshot live = exporter_tick(100);
    CHECK(live.verdict.stage == Stage::carriers);
    CHECK(live.verdict.where.find("event loop of node") != std::string::npos);
    // Over the last minute it never stalled and was 20% busy: the loop is not the limit.
    CHECK(out->verdict.where.find("event loop") == std::string::npos);
    CHECK(out->verdict.stage != Stage::none);  // the 22 unread requests still are a queue
    CHECK(out->carriers.loops[0].stalls == 3);  // only the verdict changes; the rest is live
    // ... and says so: its span, one to one and a quarter horizons (ticks kept 15 s apart).
    CHECK(out->verdict.window_seconds >= 60);
    CHECK(out->verdict.window_seconds <= 75);
    CHECK(out->window_seconds > 99);

    // A stall inside the horizon names the loop again.
    RecentVerdict again(60);
    for (int t = 0; t <= 100; ++t) out = again.apply(std::make_shared<const Snapshot>(exporter_tick(t, 2)));
    CHECK(out->verdict.stage == Stage::carriers);

    // A re-attach starts the window again: its first ticks' verdicts are their own.
    const auto fresh = std::make_shared<const Snapshot>(exporter_tick(1));
    CHECK(again.apply(fresh)->verdict.summary == fresh->verdict.summary);
    CHECK(again.apply(fresh)->verdict.window_seconds == 0);
    CHECK_FALSE(again.apply(nullptr));
}

TEST_CASE("record: times are seconds since the start, @unix seconds or a UTC time of day", "[record]") {
    const int64_t start = 1764459600000;  // 2025-11-29 23:40:00 UTC
    CHECK(parse_time("12.5", start) == start + 12500);
    CHECK(parse_time("@1764459601.25", start) == 1764459601250);
    CHECK(parse_time("23:41:07", start) == 1764459667000);
    CHECK_FALSE(parse_time("soon", start));
    CHECK_FALSE(parse_time("-3", start));
    CHECK_FALSE(parse_time("25:00:00", start));
    CHECK_FALSE(parse_time("@", start));
}

// tests/unit/fixtures/recording.qsrec: a version-1 file, and recording_tick.bin: one tick's
// payload, written once by this case (hidden:
// `qscope_unit_tests "[.write-fixture]"`). Files written by an older qscope must keep
// replaying; the fuzzer seeds from it too.
TEST_CASE("record: write the version-1 fixture", "[.write-fixture]") {
    std::ofstream(QSCOPE_SOURCE_DIR "/tests/unit/fixtures/recording.qsrec", std::ios::binary) << recording(3);
    // A tick's payload alone (the fuzzer's framed mode).
    std::ofstream(QSCOPE_SOURCE_DIR "/tests/unit/fixtures/recording_tick.bin", std::ios::binary) << encode(rich());
}

TEST_CASE("record: a version-1 file from the fixtures still replays", "[record]") {
    std::ifstream f(QSCOPE_SOURCE_DIR "/tests/unit/fixtures/recording.qsrec", std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const Recording r = parse(bytes);
    REQUIRE_FALSE(r.stopped);
    REQUIRE(r.ticks.size() == 3);
    CHECK(r.header.selector == "pid:4242");
    CHECK(render_json(r.ticks[2]).find("pool to 127.0.0.1:5432") != std::string::npos);
    CHECK(r.ticks[2].downstream[1].call_total.count() == 3187);
}

TEST_CASE("record: the ring keeps the last span of ticks, bounded in bytes, as a whole recording", "[record]") {
    Ring ring(2.5);
    ring.set_header(header());
    for (int i = 0; i < 10; ++i) {
        Snapshot s = rich();
        s.tick = i;
        s.taken_at_unix_ms = 1764459600000 + 1000 * i;
        ring.push(s);
    }
    const Recording r = parse(ring.file());
    REQUIRE_FALSE(r.stopped);
    REQUIRE(r.ticks.size() == 3);  // ticks 7, 8, 9: within 2.5 s of the newest
    CHECK(r.ticks.front().tick == 7);
    CHECK(r.header.started_unix_ms == r.ticks.front().taken_at_unix_ms);
    // The byte bound wins over the span: the newest tick always stays.
    Ring small(3600, 1);
    small.set_header(header());
    for (int i = 0; i < 3; ++i) small.push(rich());
    CHECK(small.ticks() == 1);
    CHECK(parse_span("10m") == 600);
    CHECK(parse_span("90s") == 90);
    CHECK(parse_span("1h") == 3600);
    CHECK(parse_span("45") == 45);
    CHECK_FALSE(parse_span("0"));
    CHECK_FALSE(parse_span("10 minutes"));
    CHECK_FALSE(parse_span(""));
}
