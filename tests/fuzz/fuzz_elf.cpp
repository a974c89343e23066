// libFuzzer: ELF symbol lookup (libjvm's symbol tables) and module load bias from maps.
// Binaries on disk can be truncated, stripped, or replaced while the target runs.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "probes/jvm/jvm_vmstructs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const int fd = memfd_create("fuzz-elf", MFD_CLOEXEC);
    if (fd < 0) return 0;
    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    (void)qscope::jvm::elf_symbols(path, {"gHotSpotVMStructs", "gHotSpotVMTypes", "main", "_start"});
    // The same bytes as maps text naming that file, so module_base's ELF read is reached.
    const std::string maps(reinterpret_cast<const char*>(data), size);
    (void)qscope::jvm::module_base(maps, path);
    (void)qscope::jvm::module_base("7f00-7f10 r-xp 00000000 fd:01 42 " + path + "\n", path);
    return 0;
}
