// The sched probe family: thread groups (live states), off-CPU waits by (group, syscall,
// resource, stack), runqueue wait per group. make_sched_source() (below) builds it.
//
// The pieces that turn raw kernel records into Snapshot sections are free functions here so
// unit tests can feed them real-shaped records without root.
#pragma once
#include <linux/types.h>

#include <cstdint>
#include <memory>
#include <map>
#include <string>
#include <vector>

extern "C" {
#include "hist.h"
#include "qs_sched.h"
}
#include "model/histogram.h"
#include "model/runtime_frames.h"
#include "model/snapshot.h"

#include "engine/source.h"

namespace qscope {

static_assert(sizeof(qs_wait_key) == 32, "qs_wait_key layout must match bpf/qs_sched.h");
static_assert(sizeof(qs_group_key) == QS_COMM_LEN + 4, "qs_group_key layout must match bpf/qs_sched.h");
static_assert(sizeof(qs_wait_val) == 24 + 4 * QS_WHIST_SLOTS, "qs_wait_val layout");
static_assert(sizeof(qs_thread_rec) == 80, "qs_thread_rec layout must match bpf/qs_sched.h");
static_assert(sizeof(qs_stack_event) == 32 + QS_COMM_LEN + 8 * QS_KSTACK_DEPTH + sizeof(qs_ustack),
              "qs_stack_event layout must match bpf/qs_sched.h");

// The group name the kernel computes from comm (bpf/qs_sched.h), as a std::string.
std::string kernel_group_name(const std::string& comm);

// A thread's live state from a task-iterator record (or /proc): what thread_groups count.
enum class ThreadState { running, runnable, blocked };
ThreadState thread_state(const qs_thread_rec& r);

// Adds a compact kernel wait histogram (qs_wait_val.slots) to a Histogram, each slot's
// count at the slot's midpoint.
void add_wait_slots(Histogram& h, const uint32_t* slots, size_t n);

// Frame text: frame_function, frame_module, first_app_frame (model/runtime_frames.h).

// "(anonymous namespace)::serve_connection(int)" → "serve_connection"; "Foo::bar() const"
// → "Foo::bar": short enough for a resource label.
std::string short_function(const std::string& func);
// Identity of a wait site: the function names (offsets dropped) of the frames from the
// first application frame outward. Two futex waits with the same site are one gate even
// when their futex words differ (a JVM parks each thread on its own futex word; a glibc
// condvar re-locks its mutex after waking).
std::string wait_site_signature(const std::vector<std::string>& frames);

// Sticky label assignment with a cap: the first `cap` names keep their own label for the
// life of the source, later ones fold into "other", so counters exported per label stay
// monotonic and the label set stays bounded.
class LabelCap {
public:
    explicit LabelCap(size_t cap) : cap_(cap) {}
    const std::string& label(const std::string& name);
    size_t size() const { return labels_.size(); }

private:
    size_t cap_;
    std::map<std::string, std::string> labels_;
    std::string other_ = "other";
};

std::unique_ptr<Source> make_sched_source();

}  // namespace qscope
