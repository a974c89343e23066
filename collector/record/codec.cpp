#include "record/codec.h"

#include <cstring>
#include <limits>
#include <type_traits>

namespace qscope::record {
namespace {

// The last value of each enum the format stores: a byte beyond it is corruption.
constexpr uint64_t last_value(Stage) { return static_cast<uint64_t>(kLastStage); }
constexpr uint64_t last_value(Severity) { return static_cast<uint64_t>(kLastSeverity); }
constexpr uint64_t last_value(WaitKind) { return static_cast<uint64_t>(kLastWaitKind); }
constexpr uint64_t last_value(CarrierState) { return static_cast<uint64_t>(kLastCarrierState); }
constexpr uint64_t last_value(ProbeFamily) { return static_cast<uint64_t>(kLastProbeFamily); }
constexpr uint64_t last_value(AttachType) { return static_cast<uint64_t>(kLastAttachType); }

// ---- the field lists: one per struct, in declaration order; append new fields at the end ----
template <class V> void fields(V& v, RecordHeader& x) {
    v(x.qscope_version); v(x.selector); v(x.pid); v(x.comm); v(x.cmdline); v(x.start_time_ticks);
    v(x.hostname); v(x.interval_seconds); v(x.started_unix_ms);
}
template <class V> void fields(V& v, ProbeAttach& x) { v(x.family); v(x.hook); v(x.attach); v(x.via); v(x.off); }
template <class V> void fields(V& v, ProcessInfo& x) { v(x.pid); v(x.comm); v(x.role); v(x.threads); }
template <class V> void fields(V& v, TargetInfo& x) {
    v(x.pid); v(x.comm); v(x.cmdline); v(x.threads); v(x.processes); v(x.follows_children);
    v(x.start_time_ticks); v(x.exited); v(x.exit_note);
}
template <class V> void fields(V& v, StatusCounts& x) { v(x.c2xx); v(x.c3xx); v(x.c4xx); v(x.c5xx); v(x.unknown); }
template <class V> void fields(V& v, Quantiles& x) { v(x.p50); v(x.p90); v(x.p99); v(x.max); }
template <class V> void fields(V& v, ProtocolMix& x) { v(x.http1); v(x.h2); v(x.tls); v(x.other); }
template <class V> void fields(V& v, Listener& x) {
    v(x.port); v(x.addr); v(x.unix_path); v(x.backlog); v(x.accept_queue); v(x.accept_queue_max); v(x.accepted);
    v(x.accept_wait); v(x.overflows); v(x.processes); v(x.workers); v(x.accepted_total); v(x.overflows_total);
    v(x.accept_wait_total); v(x.connections); v(x.seconds_since_accept); v(x.protocols);
}
template <class V> void fields(V& v, PortRequests& x) {
    v(x.port); v(x.unix_path); v(x.in_flight); v(x.waiting_unread); v(x.completed_total);
    for (auto& h : x.duration_total) v(h);
    v(x.dropped_total);
}
template <class V> void fields(V& v, Requests& x) {
    v(x.in_flight); v(x.in_flight_max); v(x.waiting_unread); v(x.waiting_unread_max); v(x.completed);
    v(x.rate_per_second); v(x.latency); v(x.oldest_in_flight_seconds); v(x.oldest_unread_seconds); v(x.status);
    v(x.connections); v(x.ports); v(x.tls); v(x.attribution); v(x.attribution_total); v(x.h2);
    v(x.dropped);
}
template <class V> void fields(V& v, Http2Seen& x) {
    v(x.connections); v(x.followed_connections); v(x.joined_connections); v(x.client_resets);
    v(x.server_resets); v(x.lost_sync); v(x.trailers); v(x.grpc_status); v(x.grpc_status_unread);
}
template <class V> void fields(V& v, RequestAttribution& x) { v(x.attributed); v(x.across_threads); }
template <class V> void fields(V& v, FanOutCounts& x) {
    v(x.requests); v(x.calls); v(x.retries); v(x.failing_requests); v(x.failing_calls); v(x.failing_retries);
    v(x.failed_calls); v(x.calls_in_requests); v(x.calls_outside_requests); v(x.calls_moved);
}
template <class V> void fields(V& v, FanOut& x) {
    v(x.window); v(x.total); v(x.per_request_total); v(x.per_request_p50); v(x.per_request_p99);
    v(x.per_request_max); v(x.known); v(x.unknown_reason);
}
template <class V> void fields(V& v, TlsSeen& x) {
    v(x.probing); v(x.libraries); v(x.connections); v(x.plaintext_connections); v(x.h2_connections);
    v(x.h2_followed_connections);
}
template <class V> void fields(V& v, DownstreamPeer& x) {
    v(x.peer); v(x.connections); v(x.busy); v(x.busy_max); v(x.calls); v(x.call); v(x.oldest_busy_seconds);
    v(x.connect); v(x.connect_failures); v(x.resets); v(x.calls_total); v(x.connect_failures_total);
    v(x.resets_total); v(x.call_total); v(x.fan_out); v(x.h2_connections);
    v(x.h2_followed_connections); v(x.protocols); v(x.replied);
}
template <class V> void fields(V& v, ThreadGroup& x) {
    v(x.name); v(x.threads); v(x.running); v(x.runnable); v(x.blocked); v(x.blocked_by); v(x.runqueue_wait);
    v(x.runqueue_wait_seconds); v(x.blocked_seconds_total); v(x.blocked_seconds_by_syscall_total);
    v(x.futex_by_pid); v(x.waiting_for_cpu); v(x.on_cpu_tids);
}
template <class V> void fields(V& v, Wait& x) {
    v(x.group); v(x.syscall); v(x.resource); v(x.kind); v(x.threads_now); v(x.blocked_seconds); v(x.count);
    v(x.waiters_now); v(x.wait); v(x.stack); v(x.kernel_stack);
}
template <class V> void fields(V& v, CarrierStall& x) {
    v(x.tid); v(x.syscall); v(x.reason); v(x.seconds); v(x.ongoing); v(x.stack);
}
template <class V> void fields(V& v, CarrierThread& x) { v(x.tid); v(x.name); v(x.state); v(x.utilization); }
template <class V> void fields(V& v, LoopStall& x) {
    v(x.seconds); v(x.on_cpu_seconds); v(x.blocked_seconds); v(x.syscall); v(x.resource); v(x.stack);
    v(x.runqueue_seconds);
}
template <class V> void fields(V& v, EventLoop& x) {
    v(x.tid); v(x.pid); v(x.name); v(x.poll); v(x.state); v(x.blocked_in); v(x.utilization); v(x.turns);
    v(x.turns_per_second); v(x.longest_turn_seconds); v(x.p99_turn_seconds); v(x.current_turn_seconds);
    v(x.stalls); v(x.stalls_total); v(x.connections); v(x.connections_served_total); v(x.connections_max);
    v(x.in_flight); v(x.unread); v(x.accept_queue); v(x.recent_stalls); v(x.turn_total); v(x.turns_total);
    v(x.busy_seconds_total); v(x.waiting_average); v(x.stalls_runqueue); v(x.stalls_runqueue_total);
    v(x.runqueue_seconds_total); v(x.current_turn_runqueue_seconds); v(x.calling);
}
template <class V> void fields(V& v, ThreadServing& x) {
    v(x.tid); v(x.pid); v(x.adopted_total); v(x.connections_max); v(x.connections); v(x.in_flight); v(x.unread);
    v(x.waiting_samples_total); v(x.waiting_sum_total); v(x.waiting_average);
    v(x.waiting_average_seconds); v(x.calling);
}
template <class V> void fields(V& v, Carriers& x) {
    v(x.detected); v(x.pattern); v(x.runtime); v(x.mount_state_known); v(x.threads); v(x.running); v(x.idle);
    v(x.runnable); v(x.stalled); v(x.stall_events); v(x.stall_events_total); v(x.vm_waits); v(x.stalls);
    v(x.per_carrier); v(x.stall_total); v(x.loops); v(x.loop_stall_threshold_seconds); v(x.busy); v(x.procs);
}
template <class V> void fields(V& v, StageCount& x) { v(x.stage); v(x.where); v(x.waiting); }
template <class V> void fields(V& v, PoolGate& x) { v(x.peer); v(x.busy); v(x.connections); v(x.waiters); }
template <class V> void fields(V& v, Verdict& x) {
    v(x.stage); v(x.where); v(x.waiting); v(x.summary); v(x.severity); v(x.ranking); v(x.pool);
    v(x.window_seconds);
}
template <class V> void fields(V& v, ParkedFrames& x) { v(x.frames); v(x.count); }
template <class V> void fields(V& v, Snapshot& x) {
    v(x.target); v(x.window_seconds); v(x.attached_seconds); v(x.taken_at_unix_ms); v(x.tick); v(x.listeners);
    v(x.requests); v(x.downstream); v(x.thread_groups); v(x.waits); v(x.carriers); v(x.verdict);
    v(x.parked_virtual_threads); v(x.parked_in_runtime); v(x.serving); v(x.lost_events); v(x.partial);
    v(x.warnings); v(x.probes); v(x.probe_attach); v(x.calling_tids);
}

template <class T, class = void> struct is_record : std::false_type {};
template <class T> struct is_record<T, std::void_t<decltype(fields(std::declval<int&>(), std::declval<T&>()))>>
    : std::true_type {};

// ---- writing ---------------------------------------------------------------------------------
class Encoder {
public:
    std::string out;

    void varint(uint64_t v) {
        while (v >= 0x80) {
            out.push_back(static_cast<char>(v | 0x80));
            v >>= 7;
        }
        out.push_back(static_cast<char>(v));
    }
    void operator()(bool v) { varint(v ? 1 : 0); }
    template <class T> std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T>> operator()(T v) { varint(v); }
    template <class T> std::enable_if_t<std::is_integral_v<T> && std::is_signed_v<T>> operator()(T v) {
        const int64_t s = v;
        varint((static_cast<uint64_t>(s) << 1) ^ static_cast<uint64_t>(s >> 63));  // zigzag
    }
    template <class T> std::enable_if_t<std::is_enum_v<T>> operator()(T v) { varint(static_cast<uint64_t>(v)); }
    void operator()(double v) {
        char b[8];
        std::memcpy(b, &v, 8);
        out.append(b, 8);
    }
    void operator()(const std::string& v) {
        varint(v.size());
        out += v;
    }
    // By name, as recordings did when it was a string: "" (none), "generic", "jvm", "go", "tokio".
    void operator()(CarrierRuntime r) { (*this)(std::string(contract_name(r))); }
    // Sparse: most of a histogram's 640 slots are empty.
    void operator()(const Histogram& h) {
        const auto& slots = h.slots();
        uint64_t used = 0;
        for (uint64_t s : slots) used += s != 0;
        varint(used);
        uint64_t last = 0;
        for (size_t i = 0; i < slots.size(); ++i)
            if (slots[i]) {
                varint(i - last);
                varint(slots[i]);
                last = i;
            }
        varint(h.sum_ns());
        varint(h.max_ns());
    }
    void operator()(const ProbeFamilies& p) {
        const auto l = p.list();
        varint(l.size());
        for (auto f : l) (*this)(f);
    }
    template <class T> void operator()(const std::vector<T>& v) {
        varint(v.size());
        for (const auto& x : v) (*this)(x);
    }
    template <class K, class T> void operator()(const std::map<K, T>& m) {
        varint(m.size());
        for (const auto& [k, x] : m) {
            (*this)(k);
            (*this)(x);
        }
    }
    template <class T> void operator()(const std::optional<T>& o) {
        (*this)(o.has_value());
        if (o) (*this)(*o);
    }
    template <class T> std::enable_if_t<std::is_class_v<T> && is_record<T>::value> operator()(const T& x) {
        Encoder inner;
        fields(inner, const_cast<T&>(x));  // the field lists serve both directions; writing only reads
        varint(inner.out.size());
        out += inner.out;
    }
};

// ---- reading ---------------------------------------------------------------------------------
// A struct's fields end where its length says: fields past that end (written by an older
// qscope) keep their defaults. Anything malformed sets `bad`, after which every read is a no-op.
class Decoder {
public:
    Decoder(const char* p, const char* end, bool* bad) : p_(p), end_(end), bad_(bad) {}

    bool varint(uint64_t& v) {
        v = 0;
        if (*bad_ || p_ == end_) return false;  // past the struct's end: the default stays
        for (int shift = 0; shift < 64; shift += 7) {
            if (p_ == end_) return fail();
            const auto b = static_cast<uint8_t>(*p_++);
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return true;
        }
        return fail();
    }
    void operator()(bool& v) {
        uint64_t x;
        if (!varint(x)) return;
        if (x > 1) return (void)fail();
        v = x;
    }
    template <class T> std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T>> operator()(T& v) {
        uint64_t x;
        if (!varint(x)) return;
        if (x > std::numeric_limits<T>::max()) return (void)fail();
        v = static_cast<T>(x);
    }
    template <class T> std::enable_if_t<std::is_integral_v<T> && std::is_signed_v<T>> operator()(T& v) {
        uint64_t x;
        if (!varint(x)) return;
        const int64_t s = static_cast<int64_t>(x >> 1) ^ -static_cast<int64_t>(x & 1);
        if (s < std::numeric_limits<T>::min() || s > std::numeric_limits<T>::max()) return (void)fail();
        v = static_cast<T>(s);
    }
    template <class T> std::enable_if_t<std::is_enum_v<T>> operator()(T& v) {
        uint64_t x;
        if (!varint(x)) return;
        if (x > last_value(T{})) return (void)fail();
        v = static_cast<T>(x);
    }
    void operator()(double& v) {
        if (*bad_ || p_ == end_) return;
        if (end_ - p_ < 8) return (void)fail();
        std::memcpy(&v, p_, 8);
        p_ += 8;
    }
    void operator()(std::string& v) {
        uint64_t n;
        if (!varint(n)) return;
        if (n > static_cast<uint64_t>(end_ - p_)) return (void)fail();
        v.assign(p_, n);
        p_ += n;
    }
    void operator()(CarrierRuntime& r) {
        std::string name;
        (*this)(name);
        if (*bad_) return;
        const auto known = carrier_runtime_named(name);
        if (!known) return (void)fail();
        r = *known;
    }
    void operator()(Histogram& h) {
        uint64_t used;
        if (!varint(used)) return;
        if (used > QS_HIST_SLOTS) return (void)fail();
        std::vector<uint64_t> slots(QS_HIST_SLOTS, 0);
        uint64_t at = 0;
        for (uint64_t i = 0; i < used; ++i) {
            uint64_t step, n;
            if (!varint(step) || !varint(n)) return (void)fail();
            at += step;
            if (step > QS_HIST_SLOTS || at >= QS_HIST_SLOTS) return (void)fail();
            slots[at] = n;
        }
        uint64_t sum = 0, max = 0;
        varint(sum);
        varint(max);
        if (!*bad_) Histogram::from_slots(slots, sum, max, h);
    }
    void operator()(ProbeFamilies& p) {
        uint64_t n;
        if (!varint(n)) return;
        if (n > last_value(ProbeFamily{}) + 1) return (void)fail();
        p = ProbeFamilies{};
        for (uint64_t i = 0; i < n && !*bad_; ++i) {
            ProbeFamily f{};
            (*this)(f);
            p.add(f);
        }
    }
    template <class T> void operator()(std::vector<T>& v) {
        uint64_t n;
        if (!varint(n)) return;
        if (n > static_cast<uint64_t>(end_ - p_)) return (void)fail();  // every element takes a byte
        v.clear();
        for (uint64_t i = 0; i < n && !*bad_; ++i) {
            T x{};
            (*this)(x);
            v.push_back(std::move(x));
        }
    }
    template <class K, class T> void operator()(std::map<K, T>& m) {
        uint64_t n;
        if (!varint(n)) return;
        if (n > static_cast<uint64_t>(end_ - p_)) return (void)fail();
        m.clear();
        for (uint64_t i = 0; i < n && !*bad_; ++i) {
            K k{};
            T x{};
            (*this)(k);
            (*this)(x);
            m[std::move(k)] = std::move(x);
        }
    }
    template <class T> void operator()(std::optional<T>& o) {
        bool has = false;
        (*this)(has);
        if (!has || *bad_) return;
        o.emplace();
        (*this)(*o);
    }
    template <class T> std::enable_if_t<std::is_class_v<T> && is_record<T>::value> operator()(T& x) {
        uint64_t n;
        if (!varint(n)) return;
        if (n > static_cast<uint64_t>(end_ - p_)) return (void)fail();
        Decoder inner(p_, p_ + n, bad_);
        fields(inner, x);
        p_ += n;
    }

private:
    bool fail() {
        *bad_ = true;
        return false;
    }
    const char* p_;
    const char* end_;
    bool* bad_;
};

template <class T> std::string encode_record(const T& x) {
    Encoder e;
    e(x);
    return std::move(e.out);
}

template <class T> bool decode_record(std::string_view bytes, T& out) {
    bool bad = false;
    Decoder d(bytes.data(), bytes.data() + bytes.size(), &bad);
    out = T{};
    d(out);
    return !bad;
}

}  // namespace

std::string encode(const Snapshot& s) { return encode_record(s); }
std::string encode(const RecordHeader& h) { return encode_record(h); }
bool decode(std::string_view bytes, Snapshot& out) { return decode_record(bytes, out); }
bool decode(std::string_view bytes, RecordHeader& out) { return decode_record(bytes, out); }

}  // namespace qscope::record
