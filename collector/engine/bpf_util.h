// libbpf glue shared by every source: RAII for skeletons, feature checks that produce a
// clear error, and libbpf's log routed through ours.
#pragma once
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <memory>
#include <string>

#include "model/errors.h"

namespace qscope {

// Route libbpf's messages: warnings to stderr only with -v (libbpf's own hints, like
// "raise ulimit -l" on an EPERM load, mislead here), everything with -vv.
void init_libbpf_logging(int verbose);

// Throws Error(permission) unless we may load tracing programs, naming the capabilities.
void check_bpf_privileges();
// Throws Error(kernel) when /sys/kernel/btf/vmlinux is missing (CO-RE needs it).
void check_btf();
// Does tracefs (or debugfs) list this tracepoint? Mounts tracefs if needed.
bool tracepoint_exists(const std::string& category, const std::string& name);
// Does the kernel's BTF know this raw tracepoint (btf_trace_<name>)? For tp_btf programs.
bool btf_tracepoint_exists(const std::string& name);

// unique_ptr for a bpftool skeleton: SKEL_PTR(sock) → unique_ptr<sock_bpf, ...>
template <typename T, void (*Destroy)(T*)>
struct SkelDeleter {
    void operator()(T* p) const {
        if (p) Destroy(p);
    }
};
#define QSCOPE_SKEL_PTR(name) \
    std::unique_ptr<name##_bpf, ::qscope::SkelDeleter<name##_bpf, name##_bpf__destroy>>

// Wraps a libbpf return (negative errno) into Error(kernel or permission) naming the step.
[[noreturn]] void throw_bpf_error(const std::string& what, int err);
inline void bpf_check(int err, const std::string& what) {
    if (err) throw_bpf_error(what, err);
}

// Look-ups that tolerate the entry vanishing between iteration and read.
template <typename K, typename V>
bool map_lookup(int fd, const K& key, V& value) {
    return bpf_map_lookup_elem(fd, &key, &value) == 0;
}

}  // namespace qscope
