#include "probes/probes.h"

#include "probes/jvm/jvm_source.h"
#include "probes/sched/sched_source.h"
#include "probes/sock/sock_source.h"

namespace qscope {

std::vector<std::unique_ptr<Source>> default_sources(const Config& cfg) {
    std::vector<std::unique_ptr<Source>> out;
    if (cfg.want_requests) out.push_back(make_sock_source());
    if (cfg.want_threads) {
        out.push_back(make_sched_source());
        out.push_back(make_jvm_source());
    }
    return out;
}

}  // namespace qscope
