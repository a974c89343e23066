// Which processes pay for the sock family's arrivals (--scope). The sk_data_ready tracepoint
// fires for every socket on the machine; a cgroup_skb program attached to the target's cgroup
// runs only for the sockets charged to it (docs/kernel.md "Scoped to the target's cgroup").
// That is exact when every socket the target serves from is charged to that cgroup: a socket
// is charged to the cgroup of the process that created it, and an accepted connection to its
// listener's. choose_scope() is pure, so each reason to stay global is unit-tested.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"

namespace qscope {

struct ScopeFacts {
    SockScope asked = SockScope::automatic;
    std::string kernel_missing;              // why this kernel cannot ("": it can)
    std::optional<std::string> mount;        // where cgroup2 is mounted
    std::set<std::string> cgroups;           // the target's processes' cgroup v2 paths
    bool unix_listener = false;              // the target listens on a Unix-domain socket
    std::vector<std::string> listeners_outside;  // the target's TCP listeners charged elsewhere
};

struct ScopeChoice {
    std::optional<std::string> cgroup;       // scoped to this cgroup (as /proc/PID/cgroup says)
    std::string why;                         // otherwise: why the hook stays global
};

ScopeChoice choose_scope(const ScopeFacts& f);

// Why a listener charged to cgroup `id` breaks the scope, or "" when `id` is in `subtree`
// (the cgroup ids of the scoped cgroup and its descendants). `where`: "127.0.0.1:8080".
std::string listener_outside(const std::string& where, uint64_t id, const std::set<uint64_t>& subtree);

// Why this kernel cannot scope arrivals ("" when it can): cgroup_skb programs that may turn a
// packet's socket into its tcp_sock (bpf_skc_to_tcp_sock, Linux 5.9). Asks the kernel.
std::string scoped_arrivals_unsupported();

// The cgroup ids (cgroupfs inode numbers) of `dir` and every cgroup below it; empty when
// `dir` cannot be read.
std::set<uint64_t> cgroup_subtree_ids(const std::string& dir);

}  // namespace qscope
