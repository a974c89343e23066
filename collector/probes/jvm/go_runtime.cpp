#include "probes/jvm/go_runtime.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <unistd.h>

#include <cstring>

#include "sys/proc_stat.h"

namespace qscope::go {
namespace {

constexpr char kBuildInfoMagic[] = "\xff Go buildinf:";  // 14 bytes, then ptrsize and flags
constexpr size_t kBuildInfoHeader = 32;
constexpr unsigned char kFlagsInlineStrings = 0x2;       // Go 1.18+: varint-prefixed strings follow

// Go 1.18+'s inline version string: a uvarint length, then the bytes.
std::string inline_version(const unsigned char* p, size_t n) {
    if (n < kBuildInfoHeader || std::memcmp(p, kBuildInfoMagic, 14) != 0) return {};
    if (!(p[15] & kFlagsInlineStrings)) return {};  // older: pointers into the binary (not read)
    uint64_t len = 0;
    size_t i = kBuildInfoHeader;
    for (int shift = 0; i < n && shift < 64; shift += 7) {
        const unsigned char b = p[i++];
        len |= static_cast<uint64_t>(b & 0x7f) << shift;
        if (!(b & 0x80)) break;
    }
    if (len == 0 || len > 64 || i + len > n) return {};
    return std::string(reinterpret_cast<const char*>(p + i), static_cast<size_t>(len));
}

}  // namespace

std::optional<GoBinary> read_go_binary(const std::string& path) {
    elf_version(EV_CURRENT);
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    std::optional<GoBinary> out;
    size_t shstrndx = 0;
    if (elf && elf_kind(elf) == ELF_K_ELF && elf_getshdrstrndx(elf, &shstrndx) == 0) {
        bool buildinfo = false;
        std::string version;
        Elf_Scn* scn = nullptr;
        while ((scn = elf_nextscn(elf, scn)) != nullptr) {
            GElf_Shdr sh;
            if (!gelf_getshdr(scn, &sh)) continue;
            const char* name = elf_strptr(elf, shstrndx, sh.sh_name);
            if (!name || std::strcmp(name, ".go.buildinfo") != 0) continue;
            buildinfo = true;
            if (Elf_Data* d = elf_getdata(scn, nullptr); d && d->d_buf)
                version = inline_version(static_cast<const unsigned char*>(d->d_buf), d->d_size);
            break;
        }
        elf_end(elf);
        elf = nullptr;
        const auto syms = jvm::elf_symbols(path, {"runtime.main", "runtime.gomaxprocs"});
        if (buildinfo || (syms.count("runtime.main") && syms.count("runtime.gomaxprocs"))) {
            GoBinary b;
            b.version = version;
            if (auto it = syms.find("runtime.gomaxprocs"); it != syms.end()) b.gomaxprocs = it->second;
            out = b;
        }
    }
    if (elf) elf_end(elf);
    close(fd);
    return out;
}

std::optional<GoProcess> find_go(int pid) {
    const std::string proc = "/proc/" + std::to_string(pid);
    GoProcess g;
    g.exe = proc + "/exe";
    char buf[4096];
    const ssize_t n = readlink(g.exe.c_str(), buf, sizeof buf - 1);
    if (n <= 0) return std::nullopt;
    g.path.assign(buf, static_cast<size_t>(n));
    auto bin = read_go_binary(g.exe);
    if (!bin) return std::nullopt;
    g.version = bin->version;
    if (!bin->gomaxprocs) {
        g.why = "the binary is stripped (no runtime.gomaxprocs symbol)";
        return g;
    }
    // A PIE binary is loaded at a bias: its offset-0 mapping minus its first PT_LOAD's vaddr.
    std::string maps;
    const auto vaddr = jvm::first_load_vaddr(g.exe);
    std::optional<uint64_t> base;
    if (read_file(proc + "/maps", maps)) base = jvm::module_base(maps, g.path);
    if (!vaddr || !base) {
        g.why = "cannot locate the executable in /proc/" + std::to_string(pid) + "/maps";
        return g;
    }
    g.gomaxprocs_addr = *bin->gomaxprocs + (*base - *vaddr);
    return g;
}

int read_gomaxprocs(const jvm::MemReader& mem, const GoProcess& g) {
    int32_t v = 0;
    if (!g.gomaxprocs_addr || !mem.i32(g.gomaxprocs_addr, v) || v <= 0 || v > 1 << 20) return -1;
    return v;
}

}  // namespace qscope::go
