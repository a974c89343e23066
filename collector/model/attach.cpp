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
    }
    return "none";
}

}  // namespace qscope
