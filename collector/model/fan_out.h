// Calls to a downstream peer per inbound request, and retries (bpf/req_ctx.h counts them).
//
// The kernel ties a call to the request its thread is serving, which holds only where one
// thread carries a request from its read to its response. Where it does not (event loops
// serving many requests at once, virtual threads resumed on another carrier, async clients
// calling from their own threads) a per-request number would be confidently wrong, so
// judge_fan_out() measures how often the model failed in the window and says "unknown, and
// why" beyond small shares. Pure.
#pragma once
#include <cstdint>
#include <string>

#include "model/histogram.h"

namespace qscope {

struct FanOutCounts {
    uint64_t requests = 0;          // requests answered that called the peer (their calls counted)
    uint64_t calls = 0;             // their calls to it
    uint64_t retries = 0;           // of those, calls that followed a failed call to it in the same request
    uint64_t failing_requests = 0;  // of the requests, answered 5xx
    uint64_t failing_calls = 0;
    uint64_t failing_retries = 0;
    uint64_t failed_calls = 0;      // calls that failed: reset while busy, refused, given up, a 5xx/429 reply
    uint64_t calls_in_requests = 0; // calls started by a thread serving a request
    uint64_t calls_outside_requests = 0;  // started by a thread serving none
    uint64_t calls_moved = 0;       // reply read by another thread than sent the request

    FanOutCounts since(const FanOutCounts& before) const;  // clamped at 0 per field
    void add(const FanOutCounts& o);
};

// Requests answered whose whole life ran on one thread with nothing else in between (their
// calls are counted), and the rest (crossed threads, or overlapped another on one thread).
struct RequestAttribution {
    uint64_t attributed = 0;
    uint64_t across_threads = 0;
    RequestAttribution since(const RequestAttribution& before) const;
};

struct FanOut {
    FanOutCounts window;
    FanOutCounts total;             // since attach (exporter)
    Histogram per_request_total;    // since attach: calls per request, one value per request
    // window: calls per request that called the peer (counts; 0 when none)
    uint64_t per_request_p50 = 0, per_request_p99 = 0, per_request_max = 0;
    bool known = false;             // the window's calls can be tied to requests
    std::string unknown_reason;     // when !known and calls were made
};

// Shares beyond which per-thread attribution is not trusted for the window.
constexpr double kMaxAcrossThreads = 0.10;   // of requests answered
constexpr double kMaxCallsMoved = 0.05;      // of calls started
constexpr double kMaxCallsOutside = 0.10;    // of calls started

// Sets the window's per-request quantiles from its histogram of calls per request.
void fill_per_request(FanOut& f, const Histogram& window);
// Sets known / unknown_reason from the window's counts and the target's request attribution.
void judge_fan_out(FanOut& f, const RequestAttribution& window);

// The window's failing requests' mean calls and retries to the peer, rounded; worth saying
// ("retries multiply calls") when known, a few requests failed, and each made several calls
// of which some were retries.
struct RetryAmplification {
    uint64_t calls_per_failing_request = 0;
    uint64_t retries_per_failing_request = 0;
};
bool retry_amplification(const FanOut& f, RetryAmplification& out);

}  // namespace qscope
