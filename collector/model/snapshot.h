// The model every view renders: one immutable Snapshot per refresh (docs/design.md; the JSON
// contract is docs/json.md). Field names mirror the JSON contract; add fields freely, never rename.
//
// What the contract spells as a fixed set of strings is an enum here. Its strings live in
// one contract_name() per enum, called only where the contract is written (output/ for
// JSON and the report, metrics/ for /metrics) and for labels a view displays.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/fan_out.h"
#include "model/histogram.h"

namespace qscope {

// The stage of the request path where requests wait (the verdict's "stage").
enum class Stage { accept_queue, connector, gate, downstream, syscall, carriers, cpu, none };
enum class Severity { ok, warn, critical };
// What a blocked thread waits on: the wait's resource is a socket, a file, a futex, or other.
enum class WaitKind { socket, file, futex, other };
// A carrier thread now. blocked: mounted but held by the VM (safepoint, GC), not a stall.
enum class CarrierState { running, idle, runnable, stalled, blocked };
// A probe family (the collector's sources). Declaration order is the JSON "probes" order.
enum class ProbeFamily { sock, sched, jvm, tree };  // tree: the process-tree filter every family shares

// How a probe reached its kernel hook: the tracepoint itself, or on an older kernel that
// lacks it the kernel function behind it (docs/kernel.md "Older kernels"; model/attach.cpp).
// cgroup_skb: a program attached to the target's cgroup (docs/kernel.md "Scoped to the
// target's cgroup"), which only that cgroup's sockets run. tail_call: a program entered from
// another's (the HTTP/2 frame walk, from the reads' and the writes').
enum class AttachType { tp_btf, tracepoint, fentry, fexit, kprobe, kretprobe, iterator, none, uprobe, perf_event, cgroup_skb, tail_call };
// The last value of each enum: recordings (collector/record) refuse a byte beyond it as
// corruption, so a value appended to an enum is appended here too, in the same commit.
constexpr Stage kLastStage = Stage::none;
constexpr Severity kLastSeverity = Severity::critical;
constexpr WaitKind kLastWaitKind = WaitKind::other;
constexpr CarrierState kLastCarrierState = CarrierState::blocked;
constexpr ProbeFamily kLastProbeFamily = ProbeFamily::tree;
constexpr AttachType kLastAttachType = AttachType::tail_call;
const char* contract_name(AttachType v);

// The contract's string for each value: "accept_queue", "critical", "futex", "stalled", "sock".
const char* contract_name(Stage v);
const char* contract_name(Severity v);
const char* contract_name(WaitKind v);
const char* contract_name(CarrierState v);
const char* contract_name(ProbeFamily v);
// What runs a target's tasks on carrier threads: a JVM's virtual-thread scheduler, Go's Ms,
// Tokio's workers, or the threads a --carriers pattern names (generic); none when no carriers
// are watched. Its contract name is "" for none.
enum class CarrierRuntime { none, generic, jvm, go, tokio };
const char* contract_name(CarrierRuntime v);
std::optional<CarrierRuntime> carrier_runtime_named(std::string_view name);
// Inverses, for input that arrives as those strings (a /proc fd kind, a source's name).
std::optional<WaitKind> wait_kind_named(std::string_view name);
std::optional<ProbeFamily> probe_family_named(std::string_view name);

// The probe families that measured a snapshot. A section whose family is absent was not
// observed: its zeros would read as "no queue", so views say so instead.
class ProbeFamilies {
public:
    ProbeFamilies() = default;
    ProbeFamilies(std::initializer_list<ProbeFamily> fs) {
        for (auto f : fs) add(f);
    }
    void add(ProbeFamily f) { bits_ |= bit(f); }
    bool has(ProbeFamily f) const { return (bits_ & bit(f)) != 0; }
    bool empty() const { return bits_ == 0; }
    std::vector<ProbeFamily> list() const;  // in declaration order

private:
    static constexpr unsigned bit(ProbeFamily f) { return 1u << static_cast<unsigned>(f); }
    unsigned bits_ = 0;
};

// One hook of a probe family and how it was attached ("probe_attach" in the JSON).
struct ProbeAttach {
    ProbeFamily family{};
    std::string hook;                   // the fact's tracepoint: "sock_recv_length"
    AttachType attach = AttachType::none;
    std::string via;                    // what it attached to: the tracepoint or a kernel function
    std::string off;                    // with attach none: why the hook is off
};

// Which processes run the sock family's arrival program, read back from probe_attach (its one
// home): "cgroup" when it is attached to the target's cgroup (`cgroup` names it), "global"
// when the sk_data_ready hook serves every process on the machine (`why`: why not scoped).
// nullopt: the sock family is not attached.
struct SockScopeView {
    bool cgroup = false;
    std::string path;                   // the cgroup, as /proc/PID/cgroup names it
    std::string why;                    // global: the reason
    const char* mode() const { return cgroup ? "cgroup" : "global"; }
};
// The probe_attach row that says why arrivals are not scoped (hook name kScopeHook, attach none).
inline constexpr const char* kScopeHook = "cgroup_skb/ingress";
std::optional<SockScopeView> sock_scope(const std::vector<ProbeAttach>& rows);

// One process of the target's tree: nginx's master and workers, PostgreSQL's postmaster and
// backends. The root (the PID given) comes first.
struct ProcessInfo {
    int pid = 0;
    std::string comm;
    std::string role;               // "worker process", "client backend", "main", "child"
    int threads = 0;
};

struct TargetInfo {
    int pid = 0;                    // the root: the PID given
    std::string comm;
    std::string cmdline;
    int threads = 0;                // over every process observed
    std::vector<ProcessInfo> processes;
    bool follows_children = false;  // descendants join as they are forked (not --no-children)
    uint64_t start_time_ticks = 0;  // /proc/PID/stat field 22: detects PID reuse
    bool exited = false;            // the target went away during the run
    std::string exit_note;          // what happened, for the marked output
};

struct StatusCounts {
    uint64_t c2xx = 0, c3xx = 0, c4xx = 0, c5xx = 0, unknown = 0;
    uint64_t total() const { return c2xx + c3xx + c4xx + c5xx + unknown; }
};

// A listening endpoint as people name it: "8080" for a TCP port, "unix:/run/php/fpm.sock"
// for a Unix-domain listener (unix_path non-empty; its port is 0). The metrics' port label.
inline std::string endpoint_name(uint16_t port, const std::string& unix_path) {
    return unix_path.empty() ? std::to_string(port) : "unix:" + unix_path;
}

// Connections by what their first response began with (bpf/sock.h QS_WIRE_*), since attach:
// what qscope can read on a listener (HTTP/1.x status lines, HTTP/2 frames) and what it cannot
// without help (TLS records: --tls), or only as read/write turns (other protocols).
struct ProtocolMix {
    uint64_t http1 = 0;
    uint64_t h2 = 0;
    uint64_t tls = 0;
    uint64_t other = 0;
    uint64_t total() const { return http1 + h2 + tls + other; }
    void add(const ProtocolMix& o) {
        http1 += o.http1;
        h2 += o.h2;
        tls += o.tls;
        other += o.other;
    }
};

struct Listener {
    uint16_t port = 0;
    std::string addr;                 // bound address, "0.0.0.0", "::", "127.0.0.1"
    std::string unix_path;            // a Unix-domain listener's name ("@name" if abstract); port 0
    uint32_t backlog = 0;             // sk_max_ack_backlog (sock_diag wqueue)
    uint32_t accept_queue = 0;        // now (sock_diag rqueue)
    uint32_t accept_queue_max = 0;    // max over the window
    uint64_t accepted = 0;            // in the window
    Quantiles accept_wait;            // window
    uint64_t overflows = 0;           // in the window
    uint32_t processes = 0;           // processes of the target holding the port's listening socket(s)
    uint32_t workers = 0;             // of them, other than the tree's root (a prefork server's supervisor)
    uint64_t connections = 0;         // accepted from it and open now
    // Since its accept count last moved, or the attach when none was seen. A server at its
    // connection limit (Tomcat's maxConnections) parks its acceptor on a latch: no accepts.
    double seconds_since_accept = 0;
    // cumulative since attach (exporter)
    uint64_t accepted_total = 0;
    uint64_t overflows_total = 0;
    Histogram accept_wait_total;
    ProtocolMix protocols;            // cumulative since attach
};

// Per listening port: the server side of the request path, for per-port metrics.
struct PortRequests {
    uint16_t port = 0;
    std::string unix_path;            // requests of a Unix-domain listener (port 0)
    uint64_t in_flight = 0;
    uint64_t waiting_unread = 0;
    uint64_t completed_total = 0;
    // index: 0 2xx, 1 3xx, 2 4xx, 3 5xx, 4 unknown; cumulative since attach
    Histogram duration_total[5];
    uint64_t dropped_total = 0;       // cumulative since attach; see Requests::dropped
};

// Inbound TLS: how many connections encrypt their responses, and how many of those --tls
// read the plaintext of through the target's libssl. Cumulative since attach.
struct TlsSeen {
    bool probing = false;                // --tls given
    std::vector<std::string> libraries;  // probed libraries, as the target maps them
    uint64_t connections = 0;            // answering in TLS records
    uint64_t plaintext_connections = 0;  // of them, a response's plaintext classified (--tls)
    uint64_t h2_connections = 0;         // of those, HTTP/2 inside TLS
    uint64_t h2_followed_connections = 0;  // of those, streams followed in the plaintext (in requests.h2 too)
    uint64_t h2_per_connection() const { return h2_connections - std::min(h2_connections, h2_followed_connections); }
    bool present() const { return probing || connections > 0; }
};

// Inbound HTTP/2, in cleartext (h2c) or inside TLS (--tls): its requests are streams (bpf/h2.h).
// Cumulative since attach.
struct Http2Seen {
    uint64_t connections = 0;           // answering in HTTP/2 frames
    uint64_t followed_connections = 0;  // of them, followed per stream (the rest: per connection)
    uint64_t joined_connections = 0;    // of those, met mid-way: streams open at the attach not seen
    uint64_t client_resets = 0;         // streams the client reset before an answer
    uint64_t server_resets = 0;         // streams answered with RST_STREAM (status unknown)
    uint64_t lost_sync = 0;             // frame boundaries lost, then found again
    uint64_t trailers = 0;              // streams answered with trailers (gRPC's status is in them)
    // gRPC's own status of the streams whose grpc-status was read (bpf/hpack.h), by code name
    // (grpc_code_name); their status class is the code's (qs_grpc_class), not :status's.
    std::map<std::string, uint64_t> grpc_status;
    uint64_t grpc_status_unread = 0;    // gRPC answers whose grpc-status could not be read
    bool present() const { return connections > 0; }
};

// gRPC's status code's name (grpc/status.h: "OK", "CANCELLED" ... "UNAUTHENTICATED"), or its
// number for one past 16.
std::string grpc_code_name(uint32_t code);

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
    // Window: HTTP/1.x requests their connection's close dropped unanswered, never in flight
    // nor completed: read after the server shut its sending side (a lingering close), or left
    // unread at the close of a connection that had answered in HTTP/1.x. The client sees its
    // connection end (wrk: a read error). A lower bound: one per drain read or close however
    // many requests it held, and a connection's first request is not known to be HTTP/1.x.
    uint64_t dropped = 0;
    uint64_t connections = 0;           // open accepted connections now
    std::vector<PortRequests> ports;
    TlsSeen tls;
    // Requests answered whose calls could be tied to them, and the rest (model/fan_out.h):
    // window, and since attach. Counted once the target has a downstream peer.
    RequestAttribution attribution;
    RequestAttribution attribution_total;
    Http2Seen h2;
};

struct DownstreamPeer {
    std::string peer;                   // "ip:port", IPv6 as "[::1]:5432", "unix:/path"
    uint64_t connections = 0;           // open now
    uint64_t busy = 0;                  // request sent, reply not yet read, now
    // Of busy, calls whose reply has come and waits unread: the peer has answered, and their
    // requests wait on the caller (a proxy's loop in a long turn), not on the peer.
    uint64_t replied = 0;
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
    FanOut fan_out;                     // calls per inbound request and retries (model/fan_out.h)
    // Connections to the peer seen speaking HTTP/2, since attach, and of them those whose streams
    // are the calls (bpf/h2.h). The rest (met mid-way, or no room to follow them) count each
    // connection as one call at a time.
    uint64_t h2_connections = 0;
    uint64_t h2_followed_connections = 0;
    uint64_t h2_per_connection() const { return h2_connections - std::min(h2_connections, h2_followed_connections); }
    ProtocolMix protocols;              // connections by what the peer's first bytes began with, since attach
};

// Every connection busy at some point in the window, and some busy now. "Busy now" alone
// flickers: between a reply and the next query a pooled connection is idle for
// microseconds, and a snapshot landing there must not lose the pool. The one rule for
// "pool saturated", for the verdict and every view.
bool pool_saturated(const DownstreamPeer& d);

// The server stopped accepting at a limit of its own: its accept queue is full (or overflowed
// in the window), connections are open, and nothing was accepted for a second. A slow
// acceptor still accepts; one parked at a cap (Tomcat's maxConnections) does not. The one
// rule, for the verdict and every view.
bool connection_limit_reached(const Listener& l);

struct ThreadGroup {
    std::string name;                   // comm with trailing digits stripped
    int threads = 0, running = 0, runnable = 0, blocked = 0;
    std::map<std::string, int> blocked_by;   // syscall name → threads now
    Quantiles runqueue_wait;            // window: runnable → running
    double runqueue_wait_seconds = 0;   // window total
    // Threads waiting for a CPU on average over the last tick: their runqueue wait per second.
    // The verdict's cpu rule reads this, not `runnable`: two threads caught runnable at one
    // instant is what a busy host looks like, a second's average is starvation or not.
    double waiting_for_cpu = 0;
    double blocked_seconds_total = 0;   // since attach
    std::map<std::string, double> blocked_seconds_by_syscall_total;  // since attach
    std::map<int, int> futex_by_pid;    // process → threads blocked on a futex now (model/loops.h)
    std::vector<int> on_cpu_tids;       // the running and runnable threads now; not rendered
};

// Threads waiting for a CPU, on average over a tick, from which the host starves the service:
// one thread waiting all the time is a CPU's worth of delay every second. The one threshold,
// for the verdict's cpu stage and every view's warning.
inline constexpr double kCpuStarvedThreads = 1.0;
// Half a thread waiting: below the stage, named beside a queue at the door (a single-threaded
// server starved by other processes never reaches a whole thread).
inline constexpr double kCpuShortThreads = 0.5;

struct Wait {
    std::string group, syscall, resource;
    WaitKind kind = WaitKind::other;
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
    CarrierState state = CarrierState::running;
    double utilization = 0;             // window: share on a CPU or runnable (holding its work), 0..1
};

// An event loop's turn that lasted at least the stall threshold: where its time went.
struct LoopStall {
    double seconds = 0;                 // poll exit → next poll entry
    double on_cpu_seconds = 0;          // running
    double blocked_seconds = 0;         // asleep outside its poll
    std::string syscall;                // its longest block; "" when it never blocked
    std::string resource;
    // The on-CPU stack sampled in the turn (CPU-bound), or the longest block's stack.
    std::vector<std::string> stack;
    double runqueue_seconds = 0;        // runnable, waiting for a CPU (the rest of seconds)
};

// A thread that waits in a poll (epoll_wait, poll, select) and serves many inbound
// connections: an event loop, a carrier (model/loops.h). A turn runs from leaving the poll
// to entering it again; the loop is busy for its whole length, on a CPU or blocked outside
// the poll.
struct EventLoop {
    int tid = 0, pid = 0;
    std::string name;                   // the thread's comm
    std::string poll;                   // the syscall it waits in
    // idle: in its poll; running / runnable; stalled: blocked outside its poll, or in a turn
    // >= the stall threshold
    CarrierState state = CarrierState::idle;
    std::string blocked_in;             // the syscall it is blocked in now, outside its poll
    double utilization = 0;             // window: share of the window not parked in its poll, 0..1
    uint64_t turns = 0;                 // window
    double turns_per_second = 0;        // window
    double longest_turn_seconds = 0;    // window, exact
    double p99_turn_seconds = 0;        // window
    double current_turn_seconds = 0;    // the turn going on now; 0 when in its poll
    double current_turn_runqueue_seconds = 0;  // of it, runnable, waiting for a CPU
    uint64_t stalls = 0;                // window: turns >= stall_threshold_seconds
    uint64_t stalls_total = 0;          // since attach
    // window: of the stalls, those a wait for a CPU made (their time outside the run queue was
    // under the threshold): the CPU's limit, not the loop's
    uint64_t stalls_runqueue = 0;
    uint64_t stalls_runqueue_total = 0;  // since attach
    uint64_t connections = 0;           // inbound connections it serves, open now
    uint64_t connections_served_total = 0;  // since attach: inbound connections it took over
    uint64_t connections_max = 0;       // since attach: the most it held open at once (per tick)
    uint64_t in_flight = 0;             // requests read on those connections, not yet answered
    uint64_t calling = 0;               // calls out in progress from it now (ThreadServing's)
    uint64_t unread = 0;                // requests arrived on them, unread
    uint64_t accept_queue = 0;          // in its process's listeners' accept queues now
    // window: requests unread on its connections or read behind the one in hand, averaged over
    // the window's last kWaitingAveragedTicks ticks (one instant can fall between a busy loop's
    // turns, when every reply is written and the next requests are not yet sent)
    double waiting_average = 0;
    double waiting_average_seconds = 0;  // the span that average covers (ThreadServing's)
    std::vector<LoopStall> recent_stalls;  // longest first
    Histogram turn_total;               // since attach (exporter)
    uint64_t turns_total = 0;           // since attach
    double busy_seconds_total = 0;      // since attach
    // window: share of the window its completed turns spent runnable, waiting for a CPU (part
    // of utilization: a loop starved of a CPU is busy without working)
    double runqueue_share = 0;
    double runqueue_seconds_total = 0;  // since attach
};

// How many of a window's last ticks a serving thread's waiting is averaged over: all of a
// snapshot's (a few seconds), and in an exporter or `top`, whose window runs since the attach
// for weeks, the last ten, so a spike long gone never reads as a queue now.
inline constexpr size_t kWaitingAveragedTicks = 10;

// Inbound connections per serving thread (the sock family), joined to the polling threads
// (the sched family) by settle_loops() (model/loops.h). Not part of the contract.
// Requests a serving thread has read and not answered that wait on it: all but the one in
// hand and those whose call out is in progress.
inline uint64_t read_behind(uint64_t in_flight, uint64_t calling) {
    return in_flight > 1 + calling ? in_flight - 1 - calling : 0;
}

struct ThreadServing {
    int tid = 0, pid = 0;
    uint64_t adopted_total = 0;         // since attach: connections it took over
    uint64_t connections_max = 0;       // since attach: the most it held open at once (per tick)
    uint64_t connections = 0, in_flight = 0, unread = 0;  // now
    // Calls out in progress from it now: the requests they serve wait on a peer, not on it (a
    // proxy's loop holds them in flight while the upstream answers).
    uint64_t calling = 0;
    // Sampled at each tick since attach: the ticks it was seen at, and the sum of waiting() at them.
    uint64_t waiting_samples_total = 0, waiting_sum_total = 0;
    double waiting_average = 0;         // window: waiting() averaged over its last kWaitingAveragedTicks ticks
    double waiting_average_seconds = 0; // the span those ticks cover: the window's, or less in a long one

    // What waits on the thread now: requests unread, and those read behind the one in hand.
    uint64_t waiting() const { return unread + read_behind(in_flight, calling); }
    // The average of waiting() over the ticks since `base` (these totals at the window's start).
    double waiting_average_since(const ThreadServing& base) const {
        const uint64_t n = waiting_samples_total - std::min(waiting_samples_total, base.waiting_samples_total);
        const uint64_t sum = waiting_sum_total - std::min(waiting_sum_total, base.waiting_sum_total);
        return n ? static_cast<double>(sum) / static_cast<double>(n) : 0;
    }
};

struct Carriers {
    bool detected = false;
    std::string pattern;                // the regex or the built-in pattern's name
    CarrierRuntime runtime = CarrierRuntime::none;
    bool mount_state_known = false;     // JavaThread fields read (JDK 21+)
    int threads = 0, running = 0, idle = 0, runnable = 0, stalled = 0;
    uint64_t stall_events = 0;          // window
    uint64_t stall_events_total = 0;    // since attach
    uint64_t vm_waits = 0;              // window: mounted blocks >= 20 ms the VM caused (safepoint,
                                        // GC, VM operation, JIT queue), not in stall_events
    std::vector<CarrierStall> stalls;   // longest recent first
    std::vector<CarrierThread> per_carrier;
    Histogram stall_total;              // since attach
    double busy = 0;                    // window: carriers on a CPU or runnable, on average (sum of utilization)
    int procs = 0;                      // Go: GOMAXPROCS now (runtime.gomaxprocs); Tokio: its workers; 0 otherwise or unread
    // Event loops (any runtime), busiest first; JVM carriers above are unaffected.
    std::vector<EventLoop> loops;
    double loop_stall_threshold_seconds = 0.02;
};

// What runs the runtime's tasks, counted: "GOMAXPROCS 2" and "Ps" (Go), "2 workers" and
// "workers" (Tokio).
std::string procs_label(const Carriers& c);
std::string procs_unit(const Carriers& c);

// Go: every P is taken — the carriers were on a CPU or runnable, on average, for as many
// threads as GOMAXPROCS for the saturated share of the window (model/loops.h kLoopSaturated).
// Goroutines beyond them wait in the runtime's run queues for a P. Tokio: every worker.
bool carriers_saturated(const Carriers& c);

struct StageCount {
    Stage stage = Stage::none;
    std::string where;
    uint64_t waiting = 0;
};

// Requests queued in front of a saturated connection pool: the gate stage's facts, so views
// draw them without reading the summary.
struct PoolGate {
    std::string peer;                   // the pool's peer, "ip:port"
    uint64_t busy = 0;                  // its connections busy now
    uint64_t connections = 0;           // its connections open now
    uint64_t waiters = 0;               // threads waiting at the gate + requests parked in the runtime
};

struct Verdict {
    Stage stage = Stage::none;
    std::string where;
    uint64_t waiting = 0;
    std::string summary;
    Severity severity = Severity::ok;
    std::vector<StageCount> ranking;    // every stage with waiters, most first
    // Set when the gate stage (the limit or not) is a saturated pool; its ranking entry
    // counts waiters + busy, every request held up by the pool.
    std::optional<PoolGate> pool;
    // The span the verdict was computed over when it is not the snapshot's window: `export`
    // and `top`, whose windows run from the attach, take theirs over the last
    // --verdict-window (record/recent.h). 0: the snapshot's window.
    double window_seconds = 0;
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
    std::vector<ThreadServing> serving; // sock → settle_loops(); not rendered
    // sock: the threads whose outbound calls are in progress now (each call's starter), so the
    // verdict counts a thread on a CPU with a call of its own once; not rendered
    std::vector<int> calling_tids;

    uint64_t lost_events = 0;           // since attach, all sources
    std::vector<std::string> partial;   // sections whose numbers are incomplete, and why
    std::vector<std::string> warnings;  // e.g. a probe that could not attach
    ProbeFamilies probes;               // which probe families ran
    std::vector<ProbeAttach> probe_attach;  // how each hook whose attach type varies was reached
};

}  // namespace qscope
