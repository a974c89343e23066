#include "probes/sock/scope.h"

#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <filesystem>

namespace qscope {

ScopeChoice choose_scope(const ScopeFacts& f) {
    const auto global = [](std::string why) { return ScopeChoice{std::nullopt, std::move(why)}; };
    if (f.asked == SockScope::global) return global("--scope global");
    if (!f.kernel_missing.empty()) return global(f.kernel_missing);
    if (!f.mount) return global("no cgroup v2 hierarchy is mounted (a cgroup v1-only host)");
    if (f.cgroups.empty()) return global("the target's cgroup v2 path could not be read (/proc/PID/cgroup)");
    if (f.cgroups.size() > 1)
        return global("the target's processes are in " + std::to_string(f.cgroups.size()) + " cgroups");
    const std::string& path = *f.cgroups.begin();
    if (path == "/") return global("the target is in the root cgroup, which every process on the host shares");
    if (f.unix_listener)
        return global("the target listens on a Unix-domain socket, whose arrivals only the sk_data_ready "
                      "tracepoint sees");
    if (!f.listeners_outside.empty()) return global(f.listeners_outside.front());
    return ScopeChoice{path, ""};
}

std::string listener_outside(const std::string& where, uint64_t id, const std::set<uint64_t>& subtree) {
    if (subtree.count(id)) return "";
    return "the target's listener " + where + " is charged to another cgroup (id " + std::to_string(id) +
           ", where it was created: systemd socket activation, a process moved after it bound, a parent that "
           "passed it down), so its connections' packets never reach the target's cgroup";
}

std::string scoped_arrivals_unsupported() {
    if (libbpf_probe_bpf_helper(BPF_PROG_TYPE_CGROUP_SKB, BPF_FUNC_skc_to_tcp_sock, nullptr) != 1)
        return "this kernel's cgroup_skb programs cannot call bpf_skc_to_tcp_sock (Linux 5.9)";
    return "";
}

std::set<uint64_t> cgroup_subtree_ids(const std::string& dir) {
    std::set<uint64_t> ids;
    struct stat st {};
    if (stat(dir.c_str(), &st) != 0) return ids;
    ids.insert(st.st_ino);
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(
             dir, std::filesystem::directory_options::skip_permission_denied, ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
        if (it->is_directory(ec) && stat(it->path().c_str(), &st) == 0) ids.insert(st.st_ino);
    }
    return ids;
}

}  // namespace qscope
