// The model every view renders: one immutable Snapshot per refresh (docs/design.md; the JSON
// contract is docs/json.md). Field names mirror the JSON contract; add fields freely, never rename.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/histogram.h"

namespace qscope {

struct TargetInfo {
    int pid = 0;
    std::string comm;
    std::string cmdline;
    int threads = 0;
    uint64_t start_time_ticks = 0;  // /proc/PID/stat field 22: detects PID reuse
    bool exited = false;            // the target went away during the run
    std::string exit_note;          // what happened, for the marked output
};

struct StatusCounts {
    uint64_t c2xx = 0, c3xx = 0, c4xx = 0, c5xx = 0, unknown = 0;
    uint64_t total() const { return c2xx + c3xx + c4xx + c5xx + unknown; }
};

struct Listener {
    uint16_t port = 0;
    std::string addr;                 // bound address, "0.0.0.0", "::", "127.0.0.1"
    uint32_t backlog = 0;             // sk_max_ack_backlog (sock_diag wqueue)
    uint32_t accept_queue = 0;        // now (sock_diag rqueue)
    uint32_t accept_queue_max = 0;    // max over the window
    uint64_t accepted = 0;            // in the window
    Quantiles accept_wait;            // window
    uint64_t overflows = 0;           // in the window
    // cumulative since attach (exporter)
    uint64_t accepted_total = 0;
    uint64_t overflows_total = 0;
    Histogram accept_wait_total;
};

// Per listening port: the server side of the request path, for per-port metrics.
struct PortRequests {
    uint16_t port = 0;
    uint64_t in_flight = 0;
    uint64_t waiting_unread = 0;
    uint64_t completed_total = 0;
    // index: 0 2xx, 1 3xx, 2 4xx, 3 5xx, 4 unknown; cumulative since attach
    Histogram duration_total[5];
};

struct Requests {
    uint64_t in_flight = 0;
    uint64_t in_flight_max = 0;         // window
    uint64_t waiting_unread = 0;        // connector queue now
    uint64_t waiting_unread_max = 0;    // window
    uint64_t completed = 0;             // window
    double rate_per_second = 0;         // completions over the last tick
    Quantiles latency;                  // window: first request byte read → response written
    double oldest_in_flight_seconds = 0;
    double oldest_unread_seconds = 0;
    StatusCounts status;                // window
    uint64_t connections = 0;           // open accepted connections now
    std::vector<PortRequests> ports;
};

struct DownstreamPeer {
    std::string peer;                   // "ip:port", IPv6 as "[::1]:5432"
    uint64_t connections = 0;           // open now
    uint64_t busy = 0;                  // request sent, reply not yet read, now
    uint64_t busy_max = 0;              // window
    uint64_t calls = 0;                 // completed in the window
    Quantiles call;                     // window
    double oldest_busy_seconds = 0;
    Quantiles connect;                  // window: SYN_SENT → ESTABLISHED
    uint64_t connect_failures = 0;      // window: refused / timed out
    uint64_t resets = 0;                // window
    // cumulative since attach (exporter)
    uint64_t calls_total = 0;
    uint64_t connect_failures_total = 0;
    uint64_t resets_total = 0;
    Histogram call_total;
};

struct ThreadGroup {
    std::string name;                   // comm with trailing digits stripped
    int threads = 0, running = 0, runnable = 0, blocked = 0;
    std::map<std::string, int> blocked_by;   // syscall name → threads now
    Quantiles runqueue_wait;            // window: runnable → running
    double runqueue_wait_seconds = 0;   // window total
    double blocked_seconds_total = 0;   // since attach
    std::map<std::string, double> blocked_seconds_by_syscall_total;  // since attach
};

struct Wait {
    std::string group, syscall, resource;
    std::string kind;                   // "socket", "file", "futex", "other"
    int threads_now = 0;
    double blocked_seconds = 0;         // window
    uint64_t count = 0;                 // window: completed waits
    int waiters_now = 0;                // futex gates: threads waiting on it now
    Quantiles wait;                     // window
    std::vector<std::string> stack;     // symbolized, innermost first; user then kernel
    std::vector<std::string> kernel_stack;
};

struct CarrierStall {
    int tid = 0;
    std::string syscall;                // what the carrier blocked in
    std::string reason;                 // "pinned park", "native call", "class init", "blocking io", ...
    double seconds = 0;
    bool ongoing = false;
    std::vector<std::string> stack;
};

struct CarrierThread {
    int tid = 0;
    std::string name;
    std::string state;                  // running | idle | runnable | stalled | blocked
};

struct Carriers {
    bool detected = false;
    std::string pattern;                // the regex or the built-in pattern's name
    std::string runtime;                // "jvm" or "generic"
    bool mount_state_known = false;     // JavaThread fields read (JDK 21+)
    int threads = 0, running = 0, idle = 0, runnable = 0, stalled = 0;
    uint64_t stall_events = 0;          // window
    uint64_t stall_events_total = 0;    // since attach
    uint64_t vm_waits = 0;              // window: mounted blocks >= 20 ms the VM caused (safepoint,
                                        // GC, VM operation, JIT queue), not in stall_events
    std::vector<CarrierStall> stalls;   // longest recent first
    std::vector<CarrierThread> per_carrier;
    Histogram stall_total;              // since attach
};

struct StageCount {
    std::string stage, where;
    uint64_t waiting = 0;
};

struct Verdict {
    std::string stage = "none";         // accept_queue connector gate downstream syscall carriers cpu none
    std::string where;
    uint64_t waiting = 0;
    std::string summary;
    std::string severity = "ok";        // ok | warn | critical
    std::vector<StageCount> ranking;    // every stage with waiters, most first
};

// On-demand JVM enrichment (jcmd Thread.dump_to_file): what parked virtual threads wait in.
struct ParkedFrames {
    std::vector<std::string> frames;    // top frames, innermost first
    uint64_t count = 0;
};

struct Snapshot {
    TargetInfo target;
    double window_seconds = 0;          // since attach or the last reset
    double attached_seconds = 0;
    int64_t taken_at_unix_ms = 0;
    uint64_t tick = 0;

    std::vector<Listener> listeners;
    Requests requests;
    std::vector<DownstreamPeer> downstream;
    std::vector<ThreadGroup> thread_groups;
    std::vector<Wait> waits;
    Carriers carriers;
    Verdict verdict;
    std::vector<ParkedFrames> parked_virtual_threads;
    uint64_t parked_in_runtime = 0;     // in flight not explained by threads/sockets/CPU

    uint64_t lost_events = 0;           // since attach, all sources
    std::vector<std::string> partial;   // sections whose numbers are incomplete, and why
    std::vector<std::string> warnings;  // e.g. a probe that could not attach
    std::vector<std::string> sources;   // which probe families ran
};

}  // namespace qscope
