// Go targets, told from the binary itself (no configuration): the `.go.buildinfo` section the
// Go linker writes into every binary since Go 1.13, else the runtime's symbols. What the
// carrier family needs of a Go process: its executable and where runtime.gomaxprocs lives,
// the number of Ps (the goroutine-running slots the scheduler's Ms take turns on).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "probes/jvm/jvm_vmstructs.h"

namespace qscope::go {

struct GoProcess {
    std::string exe;                 // as this process can open it: /proc/PID/exe
    std::string path;                // as the target names it (readlink), for messages
    std::string version;             // "go1.19.8" from the build info, "" when unreadable
    uint64_t gomaxprocs_addr = 0;    // &runtime.gomaxprocs in the target, 0 when unknown
    std::string why;                 // why gomaxprocs_addr is 0
};

// Is this ELF file a Go program? (.go.buildinfo, or runtime.main and runtime.gomaxprocs in
// .symtab.) Also reads the Go version from the build info. nullopt for anything else,
// unreadable or corrupt files included.
struct GoBinary {
    std::string version;
    std::optional<uint64_t> gomaxprocs;  // st_value of runtime.gomaxprocs, when not stripped
};
std::optional<GoBinary> read_go_binary(const std::string& path);

// The Go program PID runs, or nullopt when it is not one.
std::optional<GoProcess> find_go(int pid);

// runtime.gomaxprocs now (an int32 the runtime keeps; runtime.GOMAXPROCS(n) changes it), or
// -1 when unreadable.
int read_gomaxprocs(const jvm::MemReader& mem, const GoProcess& g);

}  // namespace qscope::go
