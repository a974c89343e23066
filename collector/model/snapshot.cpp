#include "model/snapshot.h"

#include "model/loops.h"

#include <iterator>
#include <string>

namespace qscope {

std::string grpc_code_name(uint32_t code) {
    static const char* const kNames[] = {
        "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
        "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED",
        "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"};
    return code < std::size(kNames) ? kNames[code] : std::to_string(code);
}

const char* contract_name(Stage v) {
    switch (v) {
        case Stage::accept_queue: return "accept_queue";
        case Stage::connector: return "connector";
        case Stage::gate: return "gate";
        case Stage::downstream: return "downstream";
        case Stage::syscall: return "syscall";
        case Stage::carriers: return "carriers";
        case Stage::cpu: return "cpu";
        case Stage::none: return "none";
    }
    return "none";
}

const char* contract_name(Severity v) {
    switch (v) {
        case Severity::ok: return "ok";
        case Severity::warn: return "warn";
        case Severity::critical: return "critical";
    }
    return "ok";
}

const char* contract_name(WaitKind v) {
    switch (v) {
        case WaitKind::socket: return "socket";
        case WaitKind::file: return "file";
        case WaitKind::futex: return "futex";
        case WaitKind::other: return "other";
    }
    return "other";
}

const char* contract_name(CarrierState v) {
    switch (v) {
        case CarrierState::running: return "running";
        case CarrierState::idle: return "idle";
        case CarrierState::runnable: return "runnable";
        case CarrierState::stalled: return "stalled";
        case CarrierState::blocked: return "blocked";
    }
    return "running";
}

const char* contract_name(CarrierRuntime v) {
    switch (v) {
        case CarrierRuntime::none: return "";
        case CarrierRuntime::generic: return "generic";
        case CarrierRuntime::jvm: return "jvm";
        case CarrierRuntime::go: return "go";
        case CarrierRuntime::tokio: return "tokio";
    }
    return "";
}

std::optional<CarrierRuntime> carrier_runtime_named(std::string_view name) {
    for (auto r : {CarrierRuntime::none, CarrierRuntime::generic, CarrierRuntime::jvm, CarrierRuntime::go,
                   CarrierRuntime::tokio})
        if (name == contract_name(r)) return r;
    return std::nullopt;
}

const char* contract_name(ProbeFamily v) {
    switch (v) {
        case ProbeFamily::sock: return "sock";
        case ProbeFamily::sched: return "sched";
        case ProbeFamily::jvm: return "jvm";
        case ProbeFamily::tree: return "tree";
    }
    return "sock";
}

std::optional<WaitKind> wait_kind_named(std::string_view name) {
    for (auto k : {WaitKind::socket, WaitKind::file, WaitKind::futex, WaitKind::other})
        if (name == contract_name(k)) return k;
    return std::nullopt;
}

std::optional<ProbeFamily> probe_family_named(std::string_view name) {
    for (auto f : {ProbeFamily::sock, ProbeFamily::sched, ProbeFamily::jvm})
        if (name == contract_name(f)) return f;
    return std::nullopt;
}

std::vector<ProbeFamily> ProbeFamilies::list() const {
    std::vector<ProbeFamily> out;
    for (auto f : {ProbeFamily::sock, ProbeFamily::sched, ProbeFamily::jvm})
        if (has(f)) out.push_back(f);
    return out;
}

bool pool_saturated(const DownstreamPeer& d) {
    return d.connections > 0 && (d.busy >= d.connections || (d.busy_max >= d.connections && d.busy > 0));
}

bool connection_limit_reached(const Listener& l) {
    const bool full = (l.backlog > 0 && l.accept_queue >= l.backlog) || l.overflows > 0;
    return full && l.accept_queue > 0 && l.connections > 0 && l.seconds_since_accept >= 1.0;
}

std::string procs_label(const Carriers& c) {
    return c.runtime == CarrierRuntime::tokio ? std::to_string(c.procs) + " workers"
                                              : "GOMAXPROCS " + std::to_string(c.procs);
}

std::string procs_unit(const Carriers& c) { return c.runtime == CarrierRuntime::tokio ? "workers" : "Ps"; }

bool carriers_saturated(const Carriers& c) {
    return c.detected && c.procs > 0 && c.busy >= kLoopSaturated * c.procs;
}

}  // namespace qscope
