// The sched family's pure half: kernel records and frame text turned into the model's names
// and histograms (sched_source.h declares them). No skeleton and no libbpf here: a fuzzer
// (tests/fuzz/fuzz_frames.cpp) compiles this file alone, without the BPF objects.
#include <algorithm>
#include <cstring>

#include "probes/sched/sched_source.h"
#include "model/runtime_frames.h"

namespace qscope {

std::string kernel_group_name(const std::string& comm) {
    char c[QS_COMM_LEN] = {0}, g[QS_COMM_LEN] = {0};
    std::memcpy(c, comm.data(), std::min(comm.size(), sizeof(c) - 1));
    qs_group_from_comm(c, g);
    return std::string(g, strnlen(g, sizeof(g)));
}

ThreadState thread_state(const qs_thread_rec& r) {
    if (r.state != 0) return ThreadState::blocked;
    return (r.flags & QS_TREC_ON_CPU) ? ThreadState::running : ThreadState::runnable;
}

void add_wait_slots(Histogram& h, const uint32_t* slots, size_t n) {
    for (size_t i = 0; i < n && i < QS_WHIST_SLOTS; i++) {
        if (!slots[i]) continue;
        const uint64_t lo = qs_whist_slot_low(static_cast<uint32_t>(i));
        const uint64_t hi = i + 1 < QS_WHIST_SLOTS ? qs_whist_slot_low(static_cast<uint32_t>(i + 1)) : lo * 2;
        h.add((lo + hi) / 2, slots[i]);
    }
}

std::string short_function(const std::string& func) {
    std::string f = func;
    static const std::string anon = "(anonymous namespace)::";
    for (size_t p; (p = f.find(anon)) != std::string::npos;) f.erase(p, anon.size());
    for (const char* q : {" const", " volatile", " &&", " &"})
        if (f.size() > std::strlen(q) && f.compare(f.size() - std::strlen(q), std::string::npos, q) == 0)
            f.erase(f.size() - std::strlen(q));
    if (!f.empty() && f.back() == ')') {  // drop the parameter list, matching parentheses
        int depth = 0;
        for (size_t i = f.size(); i-- > 0;) {
            if (f[i] == ')') depth++;
            else if (f[i] == '(' && --depth == 0) {
                if (i > 0) f.erase(i);
                break;
            }
        }
    }
    return f;
}

std::string wait_site_signature(const std::vector<std::string>& frames) {
    std::string sig;
    bool app = false;
    for (const auto& f : frames) {
        // Frames without a module are JIT/interpreter code: application frames, and their
        // addresses are the same for every thread running that code.
        if (!app && is_runtime_frame(f)) continue;
        app = true;
        sig += frame_function(f);
        sig += ';';
    }
    return sig;
}

const std::string& LabelCap::label(const std::string& name) {
    auto it = labels_.find(name);
    if (it != labels_.end()) return it->second;
    if (name.empty() || name == "other" || labels_.size() >= cap_) return other_;
    return labels_.emplace(name, name).first->second;
}

}  // namespace qscope
