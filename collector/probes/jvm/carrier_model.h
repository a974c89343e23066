// Carrier-state classification and stall labels: pure functions over what the BPF side
// and /proc report, so the rules are unit-tested without a kernel.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/snapshot.h"

struct qs_carrier;

namespace qscope::carrier {

// What is known about one carrier at a tick.
struct Observation {
    uint32_t bpf_state = 0;     // enum qs_carrier_run_state (0: no event since registration)
    char proc_state = 0;        // /proc/PID/task/TID/stat state, 0 if unread
    int mounted_now = -1;       // JVM: JavaThread mount fields read now; -1 unknown
    int64_t proc_syscall = -2;  // /proc/.../syscall: nr, -1 running, -2 unknown
    bool generic = false;       // not a JVM: "mounted" = blocked in a non-idle syscall
    bool go = false;            // with generic: a Go M, also idle in a sleep (go_idle_syscall)
};

// running, runnable, idle or stalled (never blocked: that takes a stack, see jvm_source).
// The BPF state (exact, event-driven) wins; /proc (which cannot tell running from
// runnable) only covers carriers that have not switched since qscope attached. A generic
// runtime's carrier is idle in carrier_idle_syscall() (model/syscall_table.h), else stalled.
CarrierState classify(const Observation& o);

// Nanoseconds the carrier spent on a CPU or runnable up to now_ns (CLOCK_MONOTONIC), from its
// BPF record: the time of the states it left plus the one it is in, when that one is busy.
uint64_t busy_ns(const qs_carrier& k, uint64_t now_ns);
// Busy share of [from_ns, now_ns] given busy_ns() at both ends, 0..1.
double utilization(uint64_t busy_from, uint64_t busy_now, uint64_t from_ns, uint64_t now_ns);

// The syscall a carrier blocked in: its name (model/syscall_table.h), "-" for none.
std::string syscall_label(int64_t nr);

// Why a carrier stalled: "pinned park" (the JVM reported a pinned park right after),
// "cgo call" (a Go M's stack in runtime.cgocall), "lock wait" (a Tokio task blocked in futex,
// on a std::sync::Mutex or the like, by its stack: model/runtime_frames.h tokio_task_blocked),
// "native call" (sleep; on a Tokio worker "blocking call", a task's), "blocking io",
// "futex wait" (class init, VM lock, a park the JVM did not report), "blocked syscall".
// The stack (innermost first) may be empty: the reason is then the syscall's.
std::string stall_reason(int64_t syscall_nr, bool jvm_reported_pinned, CarrierRuntime runtime,
                         const std::vector<std::string>& stack = {});

// A mounted block that the VM caused, not the virtual thread's code: the carrier waits for a
// safepoint, a VM operation (GC pause), a GC allocation slow path or the JIT compile queue
// lock. JFR does not call these pins and an operator cannot unpin them. Decided from the
// symbolized native frames at the top of the stack (innermost first, "func+0xOFF (module)"),
// up to the first frame outside the runtime (model/runtime_frames.h). Returns "vm: gc", "vm: safepoint",
// "vm: jit compile queue", "vm: vm operation", or "" when the stack shows none of them
// (or is missing: an unexplained block stays a stall).
std::string vm_wait_reason(const std::vector<std::string>& stack);

// What a pool's numbered thread names share: the name less its trailing digits
// ("api-worker-3" → "api-worker-"), or the whole name when it is all digits or has none.
std::string name_family(std::string_view comm);
// Whether a thread's name is of a family: the family's name then digits only ("qs-api-7" is of
// "qs-api-", "qs-api-metrics" is not).
bool in_name_family(std::string_view comm, std::string_view family);

}  // namespace qscope::carrier
