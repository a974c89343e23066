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
    }
    return "none";
}

}  // namespace qscope
