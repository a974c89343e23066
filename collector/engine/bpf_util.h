// libbpf glue shared by every source: owners for every kernel object a source holds, feature
// checks that produce a clear error, map reads, and libbpf's log routed through ours.
#pragma once
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/errors.h"
#include "model/snapshot.h"

namespace qscope {

// Route libbpf's messages: warnings to stderr only with -v (libbpf's own hints, like
// "raise ulimit -l" on an EPERM load, mislead here), everything with -vv.
void init_libbpf_logging(int verbose);

// Throws Error(permission) unless we may load tracing programs, naming the capabilities.
void check_bpf_privileges();
// Throws Error(kernel) when /sys/kernel/btf/vmlinux is missing (CO-RE needs it).
void check_btf();

// Wraps a libbpf return (negative errno) into Error(kernel or permission) naming the step.
[[noreturn]] void throw_bpf_error(const std::string& what, int err);
inline void bpf_check(int err, const std::string& what) {
    if (err) throw_bpf_error(what, err);
}

// ---- owners: a source holds every kernel object through one of these, so a failed start
// or a destroyed source releases exactly what was created, in reverse order --------------

// unique_ptr with a libbpf destructor: Owned<bpf_link, bpf_link__destroy>.
template <typename T, auto Destroy>
struct LibbpfDeleter {
    void operator()(T* p) const {
        if (p) Destroy(p);
    }
};
template <typename T, auto Destroy>
using Owned = std::unique_ptr<T, LibbpfDeleter<T, Destroy>>;

// unique_ptr for a bpftool skeleton: QSCOPE_SKEL_PTR(sock) → unique_ptr<sock_bpf, ...>
#define QSCOPE_SKEL_PTR(name) ::qscope::Owned<name##_bpf, name##_bpf__destroy>

// An attached program (tracepoint, uprobe, iterator): detached when the owner goes.
using Link = Owned<bpf_link, bpf_link__destroy>;
// bpf_program__attach (null and errno on failure), except for a kretprobe: the kernel gives
// one kretprobe max(10, 2 x CPUs) return slots by default, one per thread inside the function
// at once (a read blocked in tcp_recvmsg holds one), and past them a return is missed. libbpf
// cannot ask for more, so a kretprobe is attached through a tracefs kprobe event of this
// process's, "r<N>:qscope/<function>_<pid>", with kRetprobeSlots (the kernel's most).
// Without tracefs's kprobe_events, libbpf's attach and the default slots. The events are
// removed at exit, and a dead process's at the next start.
bpf_link* attach_link(bpf_program* prog);
constexpr int kRetprobeSlots = 4096;  // KRETPROBE_MAXACTIVE_MAX; ~64 bytes of kernel memory each
// What this process's kretprobes got, for a lost-events cause: "4096 return slots", or the
// kernel's default, on which functions, and why tracefs made them no event of qscope's.
std::string kretprobe_slots_said();
// Throws naming `what` when the attach fails.
Link attach_program(bpf_program* prog, const std::string& what);
// Detaches every link at once and empties `links`. Detaching a syscall tracepoint waits out
// RCU grace periods in the kernel (tracepoint_synchronize_unregister: ~55 ms each here); one
// after another, the sched family's 16 poll hooks held qscope's exit for 0.9 s. From threads
// of their own the waits overlap. Never throws: without threads, links go one by one.
void detach_concurrently(std::vector<Link>& links) noexcept;

// How a program reaches its hook, from its section name, for the snapshot's probe_attach:
// "tp_btf/sched_switch" (hook and via sched_switch), "tracepoint/syscalls/sys_exit_read" (hook
// sys_exit_read, via syscalls/sys_exit_read), "iter.s/task" (hook task), "perf_event".
ProbeAttach program_attach(ProbeFamily family, const bpf_program* prog);
// A hook left off on this kernel or for this target, and why.
ProbeAttach hook_off(ProbeFamily family, std::string hook, std::string why);

// An array map of 64-bit words (BPF_F_MMAPABLE), mapped into this process: user space reads
// and changes its words with atomics, as the programs do. Unmapped when the owner goes.
class MappedWords {
public:
    MappedWords() = default;
    // Throws naming `what` when the map cannot be mapped.
    MappedWords(bpf_map* map, uint32_t words, const std::string& what);
    ~MappedWords();
    MappedWords(MappedWords&& o) noexcept;
    MappedWords& operator=(MappedWords&& o) noexcept;
    MappedWords(const MappedWords&) = delete;
    MappedWords& operator=(const MappedWords&) = delete;
    uint64_t* data() const { return words_; }
    uint32_t size() const { return size_; }

private:
    uint64_t* words_ = nullptr;
    uint32_t size_ = 0;
    size_t bytes_ = 0;  // page-rounded, as mapped
};

// Makes a skeleton's .bss map before its load, empty, as the kernel makes every array map.
// libbpf would make it and then copy the object's all-zero image into it, which for sock's
// histograms (3 MB) is 15-25 ms of the family's start on a quiet machine (a 3 MB copy from
// pages first touched by that read). Call after open; what is written to the skeleton's .bss
// before the load is then not loaded: write it after (the skeleton maps the kernel's then).
void make_empty_bss(bpf_map* bss, const std::string& what);

// A ring buffer's consumer. Its callback gets `ctx`, which must outlive the ring buffer.
using RingBuffer = Owned<ring_buffer, ring_buffer__free>;
// Throws naming `what` when the consumer cannot be set up.
RingBuffer open_ring_buffer(bpf_map* map, ring_buffer_sample_fn on_record, void* ctx, const std::string& what);

// Runs an attached iterator once and returns everything it wrote. Throws naming `what` when
// the run cannot be created or read.
std::vector<char> read_iter(bpf_link* link, const std::string& what);

// ---- which tracepoints the kernel has ---------------------------------------------------

// The kernel's BTF, parsed once for all who hold it at the same time: a parse costs ~15-50 ms
// of CPU (~100 ms on a busy 2-core machine) and ~20 MiB, so whoever asks while another holds
// it shares that parse, and the last holder frees it. Null when the kernel has none.
std::shared_ptr<btf> shared_vmlinux_btf();

// libbpf (1.1) parses the kernel's BTF for every object it loads and frees it before the load
// returns: ~6 MiB read and copied again, ~25 ms of CPU and page faults, at every object. While
// a loan lives, libbpf's parse in this thread is the shared one instead (bpf_util.cpp lends it
// through libbpf's own btf__load_vmlinux_btf, and each lend keeps it alive until libbpf's
// btf__free of it, which it spares). Hold one around a skeleton's load; a load without a loan
// parses its own, as before.
class KernelBtfLoan {
public:
    KernelBtfLoan();
    ~KernelBtfLoan();
    KernelBtfLoan(const KernelBtfLoan&) = delete;
    KernelBtfLoan& operator=(const KernelBtfLoan&) = delete;

private:
    std::shared_ptr<btf> held_;
    const std::shared_ptr<btf>* outer_;  // a loan this one is nested in, restored after
};

// The one place a source asks whether a tracepoint exists, for both kinds it attaches to.
// vmlinux BTF is taken on the first BTF question (shared_vmlinux_btf) and kept: one source
// asks about nine hooks.
class KernelTracepoints {
public:
    // tp_btf/<name>: the arguments the raw tracepoint passes (btf_trace_<name> is a typedef
    // of a pointer to a function whose first parameter is the context); -1 when the kernel
    // lacks it.
    int btf_args(const std::string& name);
    bool has_btf(const std::string& name) { return btf_args(name) >= 0; }
    // A kernel function with BTF (a target for fentry/fexit): its argument count, -1 without.
    int function_args(const std::string& name);
    bool has_function(const std::string& name) { return function_args(name) >= 0; }
    // enum <type> has the value <value> here (a CO-RE enum relocation would otherwise fail).
    bool has_enum_value(const std::string& type, const std::string& value);
    // tracepoint/<category>/<name>, listed by tracefs (mounted if needed). The per-syscall
    // events (syscalls/sys_exit_accept4) have no BTF of their own.
    static bool has_tracefs(const std::string& category, const std::string& name);
    // The kernel's BTF, parsed once for every question above and the feature probes
    // (engine/kernel_features.h); null when the kernel has none.
    btf* vmlinux();

private:
    std::shared_ptr<btf> vmlinux_;
    bool loaded_ = false;
};

// ---- map reads --------------------------------------------------------------------------

// Every entry of a BPF hash map, read in batches where the kernel allows (one syscall per
// `Chunk` entries instead of two per key: 10,000 keys cost 20,000 syscalls otherwise), else
// key by key. A kernel or map type that rejects batching is remembered and not asked again; a
// batch that fails otherwise (ENOSPC: a bucket larger than the chunk) is dropped and the read
// redone key by key, so the caller always gets one whole pass. Entries may come and go during
// a read; one that vanishes between its key and its value is skipped.
template <typename K, typename V, uint32_t Chunk = 1024>
class MapReader {
public:
    static_assert(sizeof(K) >= sizeof(__u32), "a hash map's batch token is a u32 in a key-sized buffer");

    template <typename Fn>  // Fn(const K&, const V&)
    void for_each(int fd, Fn&& visit) {
        if (batch_ok_) {
            if (const size_t n = read_batched(fd); n != kRedo) {
                for (size_t i = 0; i < n; ++i) visit(keys_[i], vals_[i]);
                return;
            }
        }
        K cur{}, next{};
        const void* prev = nullptr;
        V v;
        while (bpf_map_get_next_key(fd, prev, &next) == 0) {
            if (bpf_map_lookup_elem(fd, &next, &v) == 0) visit(next, v);
            cur = next;
            prev = &cur;
        }
    }

private:
    static constexpr size_t kRedo = static_cast<size_t>(-1);

    // The number of entries read into keys_/vals_, or kRedo. The buffers only grow, so a
    // steady map costs no allocation per read.
    size_t read_batched(int fd) {
        K in_batch{}, out_batch{};
        size_t have = 0;
        for (bool first = true;; first = false) {
            if (keys_.size() < have + Chunk) {
                keys_.resize(have + Chunk);
                vals_.resize(have + Chunk);
            }
            __u32 n = Chunk;
            const int err = bpf_map_lookup_batch(fd, first ? nullptr : &in_batch, &out_batch, keys_.data() + have,
                                                 vals_.data() + have, &n, nullptr);
            const int e = err ? errno : 0;
            have += n;
            if (err && e == ENOENT) return have;  // the end of the map
            if (err) {
                if (e == EINVAL || e == 524 /* ENOTSUPP */ || e == EOPNOTSUPP) batch_ok_ = false;
                return kRedo;
            }
            in_batch = out_batch;
        }
    }

    bool batch_ok_ = true;
    std::vector<K> keys_;
    std::vector<V> vals_;
};

}  // namespace qscope
