#include "model/snapshot.h"

namespace qscope {

const char* contract_name(AttachType v) {
    switch (v) {
        case AttachType::tp_btf: return "tp_btf";
        case AttachType::tracepoint: return "tracepoint";
        case AttachType::fentry: return "fentry";
        case AttachType::fexit: return "fexit";
        case AttachType::kprobe: return "kprobe";
        case AttachType::kretprobe: return "kretprobe";
        case AttachType::iterator: return "iterator";
        case AttachType::none: return "none";
        case AttachType::uprobe: return "uprobe";
        case AttachType::perf_event: return "perf_event";
        case AttachType::cgroup_skb: return "cgroup_skb";
        case AttachType::tail_call: return "tail_call";
    }
    return "none";
}

std::optional<SockScopeView> sock_scope(const std::vector<ProbeAttach>& rows) {
    const auto row = [&](const std::string& hook) -> const ProbeAttach* {
        for (const ProbeAttach& a : rows)
            if (a.family == ProbeFamily::sock && a.hook == hook) return &a;
        return nullptr;
    };
    const ProbeAttach* arrivals = row("sk_data_ready");
    if (!arrivals) return std::nullopt;
    if (arrivals->attach == AttachType::cgroup_skb) return SockScopeView{true, arrivals->via, ""};
    const ProbeAttach* unscoped = row(kScopeHook);
    return SockScopeView{false, "", unscoped ? unscoped->off : ""};
}

}  // namespace qscope
