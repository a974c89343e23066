// libFuzzer: what target selectors read from outside: a --config file, a pidfile, the
// cgroup v2 line of /proc/PID/cgroup and the cgroup2 mount in /proc/mounts, and a cgroup
// path given by the user.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cli/targets.h"
#include "engine/selector.h"
#include "model/errors.h"
#include "sys/proc_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    try {
        (void)qscope::parse_targets_file(text, "fuzz.conf");
    } catch (const qscope::Error&) {
        // a malformed file is reported, never a crash
    }
    int pid = 0;
    (void)qscope::parse_pidfile(text, pid);
    (void)qscope::parse_cgroup_v2_line(text);
    if (auto m = qscope::parse_cgroup2_mount(text)) (void)qscope::normalize_cgroup_path(text, *m);
    (void)qscope::normalize_cgroup_path(text, "/sys/fs/cgroup/unified");
    return 0;
}
