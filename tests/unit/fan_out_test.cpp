// Calls per request: bpf/req_ctx.h (the very code sock.bpf.c runs, driven event by event as
// the kernel would see a thread serve), the judgement of model/fan_out.h, and the verdict's
// retry clause.

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "bpf_shim.h"
extern "C" {
#include "req_ctx.h"
}

#include "model/fan_out.h"
#include "model/verdict.h"
#include "tui_fixtures.h"

using namespace qscope;

namespace {

constexpr __u64 kConnA = 0xffff8880a0001000, kConnB = 0xffff8880a0002000;
constexpr __u16 kPartner = 3, kDb = 7;

bool failed_reply(const char* line) {
    return qs_reply_failed(reinterpret_cast<const unsigned char*>(line), static_cast<int>(std::strlen(line)));
}

// A worker serving one request: `attempts` calls to the partner, each answered 503.
void serve_failing(qs_req_ctx& x, __u64 conn, int attempts) {
    qs_req_begin(&x, conn);
    for (int i = 0; i < attempts; ++i) {
        REQUIRE(qs_req_call(&x, kPartner) == 0);
        qs_req_call_failed(&x, kPartner);
    }
}

}  // namespace

TEST_CASE("req_ctx: 3 x 3 x 3 failed attempts on one worker are 27 calls and 26 retries", "[fan_out]") {
    qs_req_ctx x{};
    serve_failing(x, kConnA, 27);
    REQUIRE(qs_req_call(&x, kDb) == 0);  // a second peer in the same request has its own slot
    REQUIRE(x.peers[0].idx == kPartner + 1);
    CHECK(x.peers[0].calls == 27);
    CHECK(x.peers[0].retries == 26);
    CHECK(x.peers[1].calls == 1);
    CHECK(x.peers[1].retries == 0);
    CHECK(qs_req_end(&x, kConnA) == 1);
    CHECK(x.conn == 0);
    // The next request on the same keep-alive connection starts from zero.
    qs_req_begin(&x, kConnA);
    REQUIRE(qs_req_call(&x, kPartner) == 0);
    CHECK(x.peers[0].calls == 1);
    CHECK(x.peers[0].retries == 0);
    CHECK(qs_req_end(&x, kConnA) == 1);
}

TEST_CASE("req_ctx: a call that succeeds after a failure is one retry, the next call is not", "[fan_out]") {
    qs_req_ctx x{};
    qs_req_begin(&x, kConnA);
    qs_req_call(&x, kPartner);
    qs_req_call_failed(&x, kPartner);
    qs_req_call(&x, kPartner);   // the retry, which succeeds
    qs_req_call(&x, kPartner);   // a later call after a success
    CHECK(x.peers[0].calls == 3);
    CHECK(x.peers[0].retries == 1);
    // A failure of another peer does not make a call to this one a retry.
    qs_req_call(&x, kDb);
    qs_req_call_failed(&x, kDb);
    qs_req_call(&x, kPartner);
    CHECK(x.peers[0].retries == 1);
}

TEST_CASE("req_ctx: one thread carrying two requests at once attributes neither", "[fan_out]") {
    qs_req_ctx x{};
    qs_req_begin(&x, kConnA);
    qs_req_call(&x, kPartner);
    qs_req_begin(&x, kConnB);   // an event loop reads B before answering A
    CHECK(x.overlap == 1);
    CHECK(qs_req_end(&x, kConnA) == 0);   // A answered while B is open: B overlapped too
    CHECK(x.conn == kConnB);
    CHECK(qs_req_end(&x, kConnB) == 0);
    CHECK(x.conn == 0);
    // Sequential requests on the same loop thread are attributed again.
    qs_req_begin(&x, kConnA);
    CHECK(x.overlap == 0);
    CHECK(qs_req_end(&x, kConnA) == 1);
}

TEST_CASE("req_ctx: a response written by a thread that did not read the request is not attributed",
          "[fan_out]") {
    qs_req_ctx reader{}, writer{};
    qs_req_begin(&reader, kConnA);
    qs_req_call(&reader, kPartner);
    CHECK(qs_req_end(&writer, kConnA) == 0);   // a virtual thread resumed on another carrier
    CHECK(writer.conn == 0);
}

TEST_CASE("req_ctx: calls with no open request, and a fifth distinct peer, are reported, not counted",
          "[fan_out]") {
    qs_req_ctx x{};
    CHECK(qs_req_call(nullptr, kPartner) == QS_REQ_CALL_OUTSIDE);
    CHECK(qs_req_call(&x, kPartner) == QS_REQ_CALL_OUTSIDE);
    qs_req_begin(&x, kConnA);
    for (__u16 p = 0; p < QS_REQ_PEERS; ++p) CHECK(qs_req_call(&x, p) == 0);
    CHECK(qs_req_call(&x, QS_REQ_PEERS) == QS_REQ_CALL_FULL);
}

TEST_CASE("a reply fails a call on 5xx and 429, from its status line only", "[fan_out]") {
    CHECK(failed_reply("HTTP/1.1 503 Service Unavailable\r\n"));
    CHECK(failed_reply("HTTP/1.0 500 Internal Server Error"));
    CHECK(failed_reply("HTTP/1.1 429 Too Many Requests"));
    CHECK_FALSE(failed_reply("HTTP/1.1 404 Not Found"));
    CHECK_FALSE(failed_reply("HTTP/1.1 200 OK\r\n"));
    CHECK_FALSE(failed_reply("HTTP/1.1 50"));   // 11 bytes: not a whole status code
    CHECK_FALSE(failed_reply("+OK\r\n"));
    CHECK_FALSE(failed_reply("HTTP/2 503 xx"));
}

TEST_CASE("judge_fan_out: known when the window's requests and calls stay on their threads", "[fan_out]") {
    FanOut f;
    f.window.requests = 100;
    f.window.calls = 2700;
    f.window.calls_in_requests = 2700;
    judge_fan_out(f, {100, 0});
    CHECK(f.known);
    CHECK(f.unknown_reason.empty());

    SECTION("requests across threads beyond 10%") {
        judge_fan_out(f, {88, 12});
        CHECK_FALSE(f.known);
        CHECK(f.unknown_reason.rfind("12 of 100 requests answered crossed threads", 0) == 0);
    }
    SECTION("replies read on another thread beyond 5%") {
        f.window.calls_moved = 200;
        judge_fan_out(f, {100, 0});
        CHECK_FALSE(f.known);
        CHECK(f.unknown_reason.rfind("200 of 2,700 calls had their reply read by another thread", 0) == 0);
    }
    SECTION("calls from threads serving no request beyond 10%") {
        f.window.calls_outside_requests = 400;
        judge_fan_out(f, {100, 0});
        CHECK_FALSE(f.known);
        CHECK(f.unknown_reason.rfind("400 of 3,100 calls were started by threads serving no request", 0) == 0);
    }
    SECTION("no calls and no requests: neither known nor a reason") {
        FanOut idle;
        judge_fan_out(idle, {100, 50});
        CHECK_FALSE(idle.known);
        CHECK(idle.unknown_reason.empty());
    }
}

TEST_CASE("calls per request from the histogram of counts: exact below 32", "[fan_out]") {
    Histogram h;
    for (int i = 0; i < 99; ++i) h.add(27);
    h.add(31);
    FanOut f;
    fill_per_request(f, h);
    CHECK(f.per_request_p50 == 27);
    CHECK(f.per_request_p99 == 27);
    CHECK(f.per_request_max == 31);
}

TEST_CASE("verdict: failing requests that retry are said after the limit, or ahead of 'no queue'",
          "[fan_out][verdict]") {
    Snapshot s = tui_fixtures::retry_storm();
    const std::string want = s.verdict.summary;
    compute_verdict(s);
    CHECK(s.verdict.summary == want);
    CHECK(s.verdict.severity == Severity::warn);

    SECTION("nothing waits: the amplification is the news") {
        Snapshot u = tui_fixtures::retry_storm();
        u.downstream[0].busy = 0;
        u.requests.in_flight = 0;
        compute_verdict(u);
        CHECK(u.verdict.summary ==
              "each failing request makes 27 calls to 10.0.0.9:8443 (26 retries); no queue: nothing is waiting");
        CHECK(u.verdict.severity == Severity::warn);
    }

    SECTION("not when the fan-out is unknown") {
        Snapshot u = tui_fixtures::retry_storm();
        u.downstream[0].fan_out.known = false;
        u.downstream[0].fan_out.unknown_reason = "x";
        compute_verdict(u);
        CHECK(u.verdict.summary.find("each failing request") == std::string::npos);
    }
    SECTION("not for one failing request making a single call") {
        Snapshot u = tui_fixtures::retry_storm();
        u.downstream[0].fan_out.window.failing_calls = u.downstream[0].fan_out.window.failing_requests;
        compute_verdict(u);
        CHECK(u.verdict.summary.find("each failing request") == std::string::npos);
    }
    SECTION("not at the first look") {
        Snapshot u = tui_fixtures::retry_storm();
        compute_verdict(u, Seen::first_look);
        CHECK(u.verdict.summary.find("each failing request") == std::string::npos);
    }
}

TEST_CASE("verdict: workers between calls on a CPU are not waiters at the pool their idle colleagues park beside",
          "[fan_out][verdict]") {
    // The retry scenario on platform threads: 8 workers each reuse their own keep-alive
    // connection, every one was busy at some point (so the peer looks like a saturated pool),
    // 6 await a reply and 2 run between calls; 186 idle workers park on the executor's futex.
    Snapshot s = tui_fixtures::retry_storm();
    s.downstream[0].busy_max = 8;
    compute_verdict(s);
    CHECK(s.verdict.stage == Stage::downstream);
    CHECK(s.verdict.summary.rfind("requests wait on 10.0.0.9:8443: 6 calls awaiting a reply", 0) == 0);
}
