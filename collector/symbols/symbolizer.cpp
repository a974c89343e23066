// Symbolization and DWARF unwinding for one target process, built on libdwfl.
//
// Why libdwfl: it already implements everything a symbolizer needs per module (.symtab,
// then the separate debug file found by build-id or .gnu_debuglink, then .dynsym and
// MiniDebugInfo) and a CFI unwinder with a frame-pointer fallback for code without CFI.
// We feed it modules from /proc/PID/maps ourselves (files opened through /proc/PID/root so
// a target in another mount namespace works; deleted files through /proc/PID/map_files)
// and a copied stack instead of ptrace, the way perf's unwind-libdw.c does.
//
// Cost: everything here runs in the collector thread, off the BPF hot path. One Dwfl per
// target is kept across calls (CFI tables and symbol tables are parsed once per module);
// it is rebuilt only when the set of executable file mappings changes (dlopen/dlclose).
#include "symbols/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string_view>
#include <utility>
#include <unordered_map>

#include "sys/proc_maps.h"

static_assert(sizeof(qs_ustack) == QS_NREGS * 8 + 8 + QS_USTACK_BYTES,
              "qs_ustack layout must match bpf/ustack.h");
static_assert(QS_REG_RIP == 16 && QS_REG_RSP == 7, "x86-64 DWARF register numbering");

namespace qscope {
namespace {

// Bounds on memory per target: a long-running JVM produces an open-ended set of addresses.
constexpr size_t kMaxCachedAddrs = 1 << 16;
// A kernel address further than this past the nearest symbol is not inside that symbol.
constexpr uint64_t kMaxKernelSymOffset = 1 << 20;

std::string read_file(const std::string& path, size_t limit = 64 << 20) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return {};
    std::string out;
    char buf[65536];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(buf, size_t(n));
        if (out.size() >= limit) break;
    }
    ::close(fd);
    return out;
}

std::string hex(uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%" PRIx64, v);
    return b;
}

std::string basename_of(std::string_view path) {
    size_t s = path.rfind('/');
    return std::string(s == std::string_view::npos ? path : path.substr(s + 1));
}

std::string frame_text(std::string_view func, uint64_t off, std::string_view module) {
    std::string s(func);
    s += '+';
    s += hex(off);
    if (!module.empty()) {
        s += " (";
        s += module;
        s += ')';
    }
    return s;
}

bool parse_hex_field(std::string_view s, uint64_t& out) {
    if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) s.remove_prefix(2);
    return parse_hex(s, out);
}

// Splits text into lines without copying; tolerates a missing final newline and CRLF.
template <class F>
void for_each_line(const std::string& text, F&& f) {
    std::string_view all(text);
    size_t b = 0;
    while (b < all.size()) {
        size_t e = all.find('\n', b);
        if (e == std::string_view::npos) e = all.size();
        std::string_view line = all.substr(b, e - b);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        f(line);
        b = e + 1;
    }
}

std::string_view take_field(std::string_view& line) {
    size_t b = line.find_first_not_of(" \t");
    if (b == std::string_view::npos) {
        line = {};
        return {};
    }
    line.remove_prefix(b);
    size_t e = line.find_first_of(" \t");
    std::string_view f = line.substr(0, e);
    line.remove_prefix(e == std::string_view::npos ? line.size() : e);
    return f;
}

}  // namespace

namespace {

// Rust's legacy mangling, after __cxa_demangle: a path ends with its crate's hash
// ("::h96ed1d0f37b0cd92"), which names nothing a reader knows and splits one function's
// frames between builds; and punctuation is escaped ("Core$LT$T$C$S$GT$::poll",
// "{{closure}}" as "$u7b$$u7b$closure$u7d$$u7d$"). Other names are left as they are.
void tidy_rust_legacy(std::string& s) {
    constexpr size_t kLen = 3 + 16;
    if (s.size() <= kLen || s.compare(s.size() - kLen, 3, "::h") != 0) return;
    for (size_t i = s.size() - 16; i < s.size(); ++i)
        if (!std::isxdigit(static_cast<unsigned char>(s[i]))) return;
    s.resize(s.size() - kLen);
    static constexpr std::pair<std::string_view, char> kEscapes[] = {
        {"$SP$", '@'}, {"$BP$", '*'}, {"$RF$", '&'}, {"$LT$", '<'}, {"$GT$", '>'}, {"$LP$", '('}, {"$RP$", ')'},
        {"$C$", ','}};
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        bool done = false;
        for (const auto& [esc, c] : kEscapes)
            if (s.compare(i, esc.size(), esc) == 0) {
                out += c;
                i += esc.size();
                done = true;
                break;
            }
        if (done) continue;
        if (s.compare(i, 2, "$u") == 0 && i + 4 < s.size() && s[i + 4] == '$' && std::isxdigit(static_cast<unsigned char>(s[i + 2])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 3]))) {
            out += static_cast<char>(std::stoi(s.substr(i + 2, 2), nullptr, 16));
            i += 5;
            continue;
        }
        if (s.compare(i, 2, "..") == 0) {
            out += "::";
            i += 2;
            continue;
        }
        out += s[i++];
    }
    s.swap(out);
}

}  // namespace

std::string demangle(const char* name) {
    // "pthread_cond_wait@@GLIBC_2.3.2": the symbol version is noise in a stack, and would
    // split otherwise equal frames between builds.
    if (const char* at = std::strchr(name, '@'); at && at != name) {
        std::string plain(name, at);
        return demangle(plain.c_str());
    }
    // "_ZN5tokio…E.llvm.3720632788608573848": LLVM's suffix on a symbol it made local (LTO,
    // Rust's codegen units) is no part of the mangled name, and __cxa_demangle refuses it.
    if (const char* llvm = std::strstr(name, ".llvm."); llvm && name[0] == '_' && name[1] == 'Z') {
        std::string plain(name, llvm);
        return demangle(plain.c_str());
    }
    if (name[0] == '_' && name[1] == 'Z') {
        int status = 0;
        char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
        if (d && status == 0) {
            std::string s(d);
            std::free(d);
            tidy_rust_legacy(s);
            return s;
        }
        std::free(d);
    }
    return name;
}


// ---- kernel symbols: one table per collector process, loaded on first use ------------
const KernelSymbols& kernel_symbols() {
    static std::once_flag once;
    static KernelSymbols syms;
    std::call_once(once, [] { syms = parse_kallsyms(read_file("/proc/kallsyms")); });
    return syms;
}

// ---- parsers (free functions: unit-tested and fuzzed directly) -------------------------

std::vector<PerfMapEntry> parse_perf_map(const std::string& text) {
    std::vector<PerfMapEntry> out;
    for_each_line(text, [&](std::string_view line) {
        PerfMapEntry e;
        if (!parse_hex_field(take_field(line), e.start)) return;
        if (!parse_hex_field(take_field(line), e.size) || e.size == 0) return;
        if (e.start + e.size < e.start) return;  // wraps: garbage
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string_view::npos) return;
        line.remove_prefix(b);
        while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
        e.name = std::string(line);
        out.push_back(std::move(e));
    });
    // The file is append-only: a later entry for the same start is recompiled code that
    // replaced the earlier one, so it wins.
    std::stable_sort(out.begin(), out.end(),
                     [](const PerfMapEntry& a, const PerfMapEntry& b) { return a.start < b.start; });
    std::vector<PerfMapEntry> dedup;
    dedup.reserve(out.size());
    for (auto& e : out) {
        if (!dedup.empty() && dedup.back().start == e.start) dedup.back() = std::move(e);
        else dedup.push_back(std::move(e));
    }
    return dedup;
}

const PerfMapEntry* find_perf_map_entry(const std::vector<PerfMapEntry>& map, uint64_t addr) {
    auto it = std::upper_bound(map.begin(), map.end(), addr,
                               [](uint64_t a, const PerfMapEntry& e) { return a < e.start; });
    if (it == map.begin()) return nullptr;
    --it;
    return addr - it->start < it->size ? &*it : nullptr;
}

KernelSymbols::Entry KernelSymbols::operator[](size_t i) const {
    const Sym& s = syms_[i];
    return {s.addr, std::string_view(names_).substr(s.name, s.name_len), modules_[s.module]};
}

KernelSymbols::Text KernelSymbols::text_of(std::string_view name) const {
    for (size_t i = 0; i + 1 < syms_.size(); ++i)
        if ((*this)[i].name == name) return {syms_[i].addr, syms_[i + 1].addr};
    return {};
}

KernelSymbols parse_kallsyms(const std::string& text) {
    KernelSymbols out;
    out.names_.reserve(text.size() / 2);
    out.syms_.reserve(text.size() / 40);  // ~45 bytes a line
    for_each_line(text, [&](std::string_view line) {
        KernelSymbols::Sym e{};
        std::string_view a = take_field(line);
        // Kernel addresses are exactly 16 hex digits on 64-bit; reject anything shorter
        // that might be a fragment.
        if (a.size() != 16 || !parse_hex_field(a, e.addr)) return;
        std::string_view type = take_field(line);
        if (type.size() != 1) return;
        char t = type[0];
        if (t != 't' && t != 'T' && t != 'w' && t != 'W') return;
        std::string_view name = take_field(line);
        if (name.empty() || name.size() > UINT16_MAX) return;
        if (name.substr(0, 8) == "__start_" || name.substr(0, 7) == "__stop_") return;
        std::string_view mod = take_field(line);
        if (mod.size() > 2 && mod.front() == '[' && mod.back() == ']') {
            mod = mod.substr(1, mod.size() - 2);
            // A module's symbols come together: the last one named is the likely match.
            auto& mods = out.modules_;
            auto it = mods.back() == mod ? mods.end() - 1 : std::find(mods.begin() + 1, mods.end(), mod);
            if (it == mods.end()) {
                if (mods.size() > UINT16_MAX) return;
                it = mods.emplace(mods.end(), mod);
            }
            e.module = static_cast<uint16_t>(it - mods.begin());
        }
        e.name = static_cast<uint32_t>(out.names_.size());
        e.name_len = static_cast<uint16_t>(name.size());
        out.names_.append(name);
        out.syms_.push_back(e);
    });
    // Stable: of the aliases at one address, the first listed is kept below.
    std::stable_sort(out.syms_.begin(), out.syms_.end(),
                     [](const KernelSymbols::Sym& a, const KernelSymbols::Sym& b) { return a.addr < b.addr; });
    out.syms_.erase(std::unique(out.syms_.begin(), out.syms_.end(),
                                [](const KernelSymbols::Sym& a, const KernelSymbols::Sym& b) { return a.addr == b.addr; }),
                    out.syms_.end());
    // With kptr_restrict every address reads as 0: nothing is resolvable.
    if (!out.syms_.empty() && out.syms_.back().addr == 0) out = KernelSymbols();
    out.syms_.shrink_to_fit();
    out.names_.shrink_to_fit();
    return out;
}

std::string symbolize_kernel_addr(const KernelSymbols& syms, uint64_t addr) {
    auto it = std::upper_bound(syms.syms_.begin(), syms.syms_.end(), addr,
                               [](uint64_t a, const KernelSymbols::Sym& s) { return a < s.addr; });
    if (it == syms.syms_.begin()) return hex(addr);
    const KernelSymbols::Entry e = syms[static_cast<size_t>(it - syms.syms_.begin()) - 1];
    uint64_t off = addr - e.addr;
    if (off > kMaxKernelSymOffset) return hex(addr);
    return frame_text(e.name, off, e.module.empty() ? "kernel" : e.module);
}

// ---- per-target state -----------------------------------------------------------------
namespace {
struct UnwindCtx {
    const qs_ustack* sample = nullptr;  // set only during unwind()
};
}  // namespace

struct Symbolizer::Impl {
    int pid;
    std::string proc;  // "/proc/PID"
    std::string debuginfo_path;
    char* debuginfo_path_c = nullptr;
    Dwfl_Callbacks callbacks{};
    Dwfl* dwfl = nullptr;
    bool attached = false;  // dwfl_attach_state done on the current dwfl
    std::string modules_sig;  // identity of the executable file mappings `dwfl` reflects
    std::vector<MapEntry> exec_maps;  // every executable mapping, sorted by start

    // addr (bit 63 set = "return address") → frame text. Module frames live in `cache`
    // until the modules change; frames outside modules (JIT) in `jit_cache`, dropped
    // whenever the perf map is reloaded.
    std::unordered_map<uint64_t, std::string> cache, jit_cache;

    std::string perf_map_path;
    std::vector<PerfMapEntry> perf_map;
    struct timespec perf_mtime {};
    off_t perf_size = -1;
    ino_t perf_ino = 0;

    UnwindCtx unwind_ctx;  // the libdwfl thread callbacks' argument

    explicit Impl(int p) : pid(p), proc("/proc/" + std::to_string(p)) {
        // Empty entry = next to the module file (reached through /proc/PID/root, so the
        // target's own copy), ".debug" below it, then the host's and the target's
        // /usr/lib/debug (build-id and debuglink lookups).
        debuginfo_path = ":.debug:/usr/lib/debug:" + proc + "/root/usr/lib/debug";
        debuginfo_path_c = debuginfo_path.data();
        callbacks.find_elf = dwfl_linux_proc_find_elf;
        callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
        callbacks.section_address = dwfl_offline_section_address;
        callbacks.debuginfo_path = &debuginfo_path_c;
        perf_map_path = proc + "/root/tmp/perf-" + std::to_string(ns_pid()) + ".map";
    }
    ~Impl() {
        if (dwfl) dwfl_end(dwfl);
    }

    // The target's pid in its own namespace: a JVM in a container writes
    // /tmp/perf-<its pid>.map.
    int ns_pid() const {
        std::string status = read_file(proc + "/status", 1 << 16);
        size_t p = status.find("\nNSpid:");
        if (p == std::string::npos) return pid;
        size_t e = status.find('\n', p + 1);
        std::string_view line(status.data() + p + 7, (e == std::string::npos ? status.size() : e) - p - 7);
        int last = pid;
        for (std::string_view f = take_field(line); !f.empty(); f = take_field(line)) {
            int v = 0;
            bool ok = true;
            for (char c : f) {
                if (c < '0' || c > '9') { ok = false; break; }
                v = v * 10 + (c - '0');
            }
            if (ok) last = v;
        }
        return last;
    }

    // Opens the file behind a mapping the way the target sees it. map_files gives the exact
    // inode mapped (also when deleted or replaced on disk) but needs CAP_SYS_ADMIN; the
    // root path works unprivileged for our own children.
    int open_mapped(const MapEntry& m, std::string& used_path) const {
        int by_path = -1;
        std::string root_path = proc + "/root" + m.path;
        if (!m.deleted) {
            by_path = ::open(root_path.c_str(), O_RDONLY | O_CLOEXEC);
            struct stat st;
            if (by_path >= 0 && ::fstat(by_path, &st) == 0 && st.st_ino == m.inode) {
                used_path = root_path;
                return by_path;
            }
        }
        char b[96];
        std::snprintf(b, sizeof b, "/map_files/%" PRIx64 "-%" PRIx64, m.start, m.end);
        used_path = proc + b;
        int fd = ::open(used_path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            if (by_path >= 0) ::close(by_path);
            return fd;
        }
        // Inode differs but the path is not "(deleted)": typically overlayfs, whose maps
        // show the lower layer's inode. A replaced file (package upgrade renames over it)
        // would show "(deleted)" and never get here.
        used_path = root_path;
        return by_path;
    }

    // Load bias of the module whose executable segment is mapped by `m`: the runtime
    // address of file offset m.offset minus the link-time address of that offset.
    static bool load_bias(int fd, const MapEntry& m, uint64_t& bias) {
        Elf* elf = elf_begin(fd, ELF_C_READ_MMAP, nullptr);
        if (!elf) return false;
        bool ok = false;
        GElf_Ehdr eh;
        size_t phnum = 0;
        if (elf_kind(elf) == ELF_K_ELF && gelf_getehdr(elf, &eh) && elf_getphdrnum(elf, &phnum) == 0) {
            if (eh.e_type == ET_EXEC) {
                bias = 0;
                ok = true;
            } else {
                const uint64_t page = uint64_t(sysconf(_SC_PAGESIZE));
                for (size_t i = 0; i < phnum && !ok; ++i) {
                    GElf_Phdr ph;
                    if (!gelf_getphdr(elf, int(i), &ph) || ph.p_type != PT_LOAD) continue;
                    uint64_t seg_off = ph.p_offset & ~(page - 1);
                    if (m.offset < seg_off || m.offset >= ph.p_offset + std::max<uint64_t>(ph.p_filesz, 1))
                        continue;
                    bias = m.start + ph.p_offset - m.offset - ph.p_vaddr;
                    ok = true;
                }
            }
        }
        elf_end(elf);
        return ok;
    }

    // The vDSO is not a file: copy its image (from the target, else our own identical one
    // — the kernel maps the same image into every process) into a memfd for libdwfl.
    int vdso_fd(const MapEntry& m) const {
        std::string img;
        img.resize(m.end - m.start);
        int mem = ::open((proc + "/mem").c_str(), O_RDONLY | O_CLOEXEC);
        bool ok = false;
        if (mem >= 0) {
            ok = ::pread(mem, img.data(), img.size(), off_t(m.start)) == ssize_t(img.size());
            ::close(mem);
        }
        if (!ok) {
            for (const auto& own : parse_proc_maps(read_file("/proc/self/maps"))) {
                if (own.path == "[vdso]" && own.end - own.start == img.size()) {
                    std::memcpy(img.data(), reinterpret_cast<const void*>(own.start), img.size());
                    ok = true;
                }
            }
        }
        if (!ok || img.size() < 4 || std::memcmp(img.data(), ELFMAG, SELFMAG) != 0) return -1;
        int fd = int(::syscall(SYS_memfd_create, "vdso", 1u /* MFD_CLOEXEC */));
        if (fd < 0) return -1;
        if (::write(fd, img.data(), img.size()) != ssize_t(img.size())) {
            ::close(fd);
            return -1;
        }
        return fd;
    }

    void report(const MapEntry& m) {
        std::string path;
        int fd = m.path == "[vdso]" ? vdso_fd(m) : open_mapped(m, path);
        if (m.path == "[vdso]") path = "[vdso]";
        if (fd < 0) return;
        uint64_t bias = 0;
        if (!load_bias(fd, m, bias)) {
            ::close(fd);
            return;
        }
        // add_p_vaddr=true makes `base` the bias; on success libdwfl owns fd.
        if (!dwfl_report_elf(dwfl, m.path.c_str(), path.c_str(), fd, bias, true)) ::close(fd);
    }

    void rebuild(const std::vector<MapEntry>& maps) {
        if (dwfl) dwfl_end(dwfl);
        attached = false;
        cache.clear();
        jit_cache.clear();
        dwfl = dwfl_begin(&callbacks);
        if (!dwfl) return;
        dwfl_report_begin(dwfl);
        // One module per file even when it has several executable mappings: reporting it
        // twice makes libdwfl flag the overlap and drop the module.
        std::vector<std::string> seen;
        for (const auto& m : maps) {
            if (!m.executable() || !(m.file_backed() || m.path == "[vdso]")) continue;
            std::string id = m.dev + ':' + std::to_string(m.inode) + ':' + m.path;
            if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
            seen.push_back(std::move(id));
            report(m);
        }
        dwfl_report_end(dwfl, nullptr, nullptr);
    }

    std::chrono::steady_clock::time_point last_refresh{};

    // Callers need not call refresh(): an address outside every known executable mapping
    // means the maps changed (dlopen, new JIT region). Rate-limited, since a garbage
    // address from a broken unwind would otherwise re-read the maps on every call.
    void refresh_if_unknown(uint64_t addr) {
        if (exec_map_of(addr)) return;
        auto now = std::chrono::steady_clock::now();
        if (now - last_refresh < std::chrono::seconds(1)) return;
        refresh();
    }

    static std::string signature_of(const std::vector<MapEntry>& maps) {
        std::string sig;
        for (const auto& m : maps)
            if (m.executable() && (m.file_backed() || m.path == "[vdso]"))
                sig += hex(m.start) + ' ' + hex(m.offset) + ' ' + std::to_string(m.inode) + ' ' + m.path + '\n';
        return sig;
    }

    void refresh() {
        last_refresh = std::chrono::steady_clock::now();
        auto maps = parse_proc_maps(read_file(proc + "/maps"));
        std::string sig = signature_of(maps);
        exec_maps.clear();
        for (const auto& m : maps)
            if (m.executable()) exec_maps.push_back(m);
        if (sig != modules_sig || !dwfl) {
            modules_sig = std::move(sig);
            rebuild(maps);
        }
        reload_perf_map();
    }

    void reload_perf_map() {
        struct stat st;
        if (::stat(perf_map_path.c_str(), &st) != 0) {
            if (perf_size >= 0) jit_cache.clear();
            perf_map.clear();
            perf_size = -1;
            return;
        }
        if (st.st_size == perf_size && st.st_ino == perf_ino &&
            st.st_mtim.tv_sec == perf_mtime.tv_sec && st.st_mtim.tv_nsec == perf_mtime.tv_nsec)
            return;
        perf_map = parse_perf_map(read_file(perf_map_path));
        jit_cache.clear();
        perf_size = st.st_size;
        perf_ino = st.st_ino;
        perf_mtime = st.st_mtim;
    }

    const MapEntry* exec_map_of(uint64_t addr) const {
        auto it = std::upper_bound(exec_maps.begin(), exec_maps.end(), addr,
                                   [](uint64_t a, const MapEntry& m) { return a < m.start; });
        if (it == exec_maps.begin()) return nullptr;
        --it;
        return addr < it->end ? &*it : nullptr;
    }

    // in_module=false: resolved from the perf map or not at all (JIT code moves and gets
    // replaced, so such results are cached only until the perf map changes).
    std::string symbolize_one(uint64_t addr, bool is_return, bool& in_module) {
        in_module = true;
        // A return address points after the call, possibly into the next function when
        // the call was the last instruction (noreturn callee); look up the call itself.
        uint64_t lookup = is_return && addr > 0 ? addr - 1 : addr;
        if (dwfl) {
            if (Dwfl_Module* mod = dwfl_addrmodule(dwfl, lookup)) {
                const char* modname = dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr,
                                                       nullptr, nullptr, nullptr);
                std::string module = basename_of(modname ? modname : "");
                GElf_Off off = 0;
                GElf_Sym sym;
                const char* name =
                    dwfl_module_addrinfo(mod, lookup, &off, &sym, nullptr, nullptr, nullptr);
                if (name && *name) return frame_text(demangle(name), off + (addr - lookup), module);
                return hex(addr) + " (" + module + ")";
            }
        }
        // Not in any ELF module: anonymous JIT code, or a JIT's memfd/shm code mapping.
        in_module = false;
        if (const PerfMapEntry* e = find_perf_map_entry(perf_map, lookup))
            return frame_text(e->name, addr - e->start, "jit");
        const MapEntry* m = exec_map_of(lookup);
        if (m && !m->path.empty()) return hex(addr) + " (" + basename_of(m->path) + ")";
        return hex(addr);
    }
};

Symbolizer::Symbolizer(int pid) : impl_(std::make_unique<Impl>(pid)) {
    static std::once_flag once;
    std::call_once(once, [] {
        elf_version(EV_CURRENT);
        // Debian's profile sets DEBUGINFOD_URLS; libdwfl would then download debug info
        // for every module without a local copy, blocking the collector thread for
        // seconds per module. Local files only, unless asked.
        if (!std::getenv("QSCOPE_DEBUGINFOD")) ::unsetenv("DEBUGINFOD_URLS");
    });
    impl_->refresh();
}

Symbolizer::~Symbolizer() = default;

std::string Symbolizer::modules_signature(int pid) {
    return Impl::signature_of(parse_proc_maps(read_file("/proc/" + std::to_string(pid) + "/maps")));
}

const std::string& Symbolizer::signature() const { return impl_->modules_sig; }

int Symbolizer::pid() const { return impl_->pid; }

bool Symbolizer::has_perf_map() const { return impl_->perf_size >= 0; }

void Symbolizer::refresh() { impl_->refresh(); }

std::vector<std::string> Symbolizer::symbolize_user(const std::vector<uint64_t>& ips) {
    std::vector<std::string> out;
    out.reserve(ips.size());
    bool perf_checked = false;
    for (size_t i = 0; i < ips.size(); ++i) {
        uint64_t addr = ips[i];
        bool is_return = i > 0;
        uint64_t key = addr | (is_return ? (1ull << 63) : 0);
        auto it = impl_->cache.find(key);
        if (it != impl_->cache.end()) {
            out.push_back(it->second);
            continue;
        }
        impl_->refresh_if_unknown(addr);
        if (!perf_checked && !(impl_->dwfl && dwfl_addrmodule(impl_->dwfl, addr))) {
            // Unknown or anonymous code: JIT output may be new since the last refresh.
            // Checked before the JIT cache so a rewritten perf map is seen at once.
            impl_->reload_perf_map();
            perf_checked = true;
        }
        it = impl_->jit_cache.find(key);
        if (it != impl_->jit_cache.end()) {
            out.push_back(it->second);
            continue;
        }
        bool in_module = true;
        std::string s = impl_->symbolize_one(addr, is_return, in_module);
        auto& cache = in_module ? impl_->cache : impl_->jit_cache;
        if (cache.size() >= kMaxCachedAddrs) cache.clear();
        cache.emplace(key, s);
        out.push_back(std::move(s));
    }
    return out;
}

std::vector<std::string> Symbolizer::symbolize_kernel(const std::vector<uint64_t>& ips) {
    const auto& syms = kernel_symbols();
    std::vector<std::string> out;
    out.reserve(ips.size());
    for (uint64_t a : ips) out.push_back(symbolize_kernel_addr(syms, a));
    return out;
}

// ---- unwinding --------------------------------------------------------------------------
namespace {

pid_t cb_next_thread(Dwfl*, void*, void**) { return 0; }

bool cb_get_thread(Dwfl*, pid_t, void* arg, void** thread_argp) {
    *thread_argp = arg;
    return true;
}

bool cb_memory_read(Dwfl*, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
    const qs_ustack* s = static_cast<UnwindCtx*>(arg)->sample;
    if (!s) return false;
    uint64_t base = s->regs[QS_REG_RSP];
    uint32_t size = std::min<uint32_t>(s->size, QS_USTACK_BYTES);
    // Only the copied bytes exist: the live process has moved on since the sample.
    if (addr < base || addr - base > size || size - (addr - base) < sizeof(Dwarf_Word)) return false;
    std::memcpy(result, s->data + (addr - base), sizeof(Dwarf_Word));
    return true;
}

bool cb_set_initial_registers(Dwfl_Thread* thread, void* arg) {
    const qs_ustack* s = static_cast<UnwindCtx*>(arg)->sample;
    if (!s) return false;
    Dwarf_Word regs[QS_NREGS];
    for (int i = 0; i < QS_NREGS; ++i) regs[i] = s->regs[i];
    // x86-64 DWARF 0..16 includes the return-address column (RIP) as 16.
    return dwfl_thread_state_registers(thread, 0, QS_NREGS, regs);
}

const Dwfl_Thread_Callbacks kThreadCallbacks = {
    cb_next_thread, cb_get_thread, cb_memory_read, cb_set_initial_registers, nullptr, nullptr,
};

struct FrameCollector {
    std::vector<uint64_t>* out;
    size_t max;
};

int cb_frame(Dwfl_Frame* state, void* arg) {
    auto* fc = static_cast<FrameCollector*>(arg);
    Dwarf_Addr pc = 0;
    bool activation = false;
    if (!dwfl_frame_pc(state, &pc, &activation) || pc == 0) return DWARF_CB_ABORT;
    fc->out->push_back(pc);
    return fc->out->size() >= fc->max ? DWARF_CB_ABORT : DWARF_CB_OK;
}

}  // namespace

std::vector<uint64_t> Symbolizer::unwind(const qs_ustack& sample, size_t max_frames) {
    std::vector<uint64_t> out;
    if (max_frames == 0) return out;
    Impl& im = *impl_;
    if (sample.regs[QS_REG_RIP] == 0) return out;
    if (!im.dwfl) im.refresh();
    else im.refresh_if_unknown(sample.regs[QS_REG_RIP]);
    if (im.dwfl && !im.attached) {
        // elf=nullptr: libdwfl takes the architecture from the first reported module.
        im.attached = dwfl_attach_state(im.dwfl, nullptr, im.pid, &kThreadCallbacks, &im.unwind_ctx);
    }
    if (im.attached) {
        im.unwind_ctx.sample = &sample;
        FrameCollector fc{&out, max_frames};
        pid_t tid = sample.tid ? pid_t(sample.tid) : pid_t(im.pid);
        // Returns -1 at the end of the stack as well as on errors: frames so far are kept.
        dwfl_getthread_frames(im.dwfl, tid, cb_frame, &fc);
        im.unwind_ctx.sample = nullptr;
    }
    if (out.empty()) out.push_back(sample.regs[QS_REG_RIP]);
    return out;
}

}  // namespace qscope
