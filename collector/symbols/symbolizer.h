// Stack symbolization for one target process: ELF symbols (.symtab/.dynsym/debuglink via
// libdw), JIT frames from /tmp/perf-PID.map, kernel frames from /proc/kallsyms, and DWARF
// unwinding of a copied user stack (bpf/ustack.h). Owned by the symbolizer; used by the
// sched and carrier sources.
#pragma once
#include <linux/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
#include "ustack.h"
}

namespace qscope {

// Not thread-safe: owned and called by one collector thread. Never throws for a target
// that is gone or unreadable; its frames just come out as hex.
class Symbolizer {
public:
    explicit Symbolizer(int pid);
    ~Symbolizer();
    Symbolizer(const Symbolizer&) = delete;
    Symbolizer& operator=(const Symbolizer&) = delete;

    // "func+0xoff (module)" per frame, innermost first; unknown frames as "0xADDR (module)"
    // or "0xADDR"; JIT frames from the perf map as "name+0xoff (jit)". ips[0] is taken as
    // an exact address (the sampled IP), ips[1..] as return addresses (looked up at addr-1,
    // so a call that ends a function is not blamed on the next one): pass whole stacks.
    // Results are cached per address.
    std::vector<std::string> symbolize_user(const std::vector<uint64_t>& ips);
    std::vector<std::string> symbolize_kernel(const std::vector<uint64_t>& ips);
    // Unwind a copied stack into return addresses (innermost first): DWARF CFI where the
    // module has it, frame pointers where it does not (e.g. libjvm, JIT code).
    std::vector<uint64_t> unwind(const qs_ustack& sample, size_t max_frames = 64);
    // Re-read /proc/PID/maps (new libraries, JIT map updates). Cheap to call per tick.
    void refresh();

    // The identity of a process's executable file mappings (address, offset, inode, path;
    // "" when unreadable). Processes with equal signatures map the same code at the same
    // addresses (a prefork server's workers, forked without exec): one symbolizer serves
    // them all, unless one has a perf map of JIT code of its own.
    static std::string modules_signature(int pid);
    const std::string& signature() const;
    int pid() const;
    bool has_perf_map() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// A symbol's name as a reader knows it: C++ and Rust (legacy mangling, with its hash and
// escapes tidied; LLVM's ".llvm.N" suffix dropped) demangled, a symbol version dropped.
std::string demangle(const char* name);

// One line of /tmp/perf-PID.map: "START SIZE name" (hex, optional 0x).
struct PerfMapEntry {
    uint64_t start = 0, size = 0;
    std::string name;
};
// Tolerant of garbage lines. Sorted by start; for duplicate starts the later line wins
// (the file is append-only, so it describes the code that replaced the earlier one).
std::vector<PerfMapEntry> parse_perf_map(const std::string& text);
// Binary search in a parse_perf_map() result; nullptr when no entry covers addr.
const PerfMapEntry* find_perf_map_entry(const std::vector<PerfMapEntry>& map, uint64_t addr);

// The kernel's text symbols (t/T/w/W) of /proc/kallsyms, sorted by address. The names are
// kept in one block, 16 bytes a symbol beside it: ~120,000 symbols held as two std::strings
// each took 13.2 MiB for the collector's life and 75-124 ms to build (docs/benchmarks.md).
class KernelSymbols {
public:
    struct Entry {
        uint64_t addr = 0;
        std::string_view name;
        std::string_view module;  // "" for vmlinux, else the loadable module's name
    };
    size_t size() const { return syms_.size(); }
    bool empty() const { return syms_.empty(); }
    Entry operator[](size_t i) const;
    Entry back() const { return (*this)[size() - 1]; }
    // A function's code: from its address to the next symbol's. Empty (start == end) when no
    // symbol of that name is listed, or it is the last one (its end is unknown).
    struct Text {
        uint64_t start = 0, end = 0;
        bool contains(uint64_t addr) const { return addr >= start && addr < end; }
        bool empty() const { return start >= end; }
    };
    Text text_of(std::string_view name) const;

private:
    friend KernelSymbols parse_kallsyms(const std::string& text);
    friend std::string symbolize_kernel_addr(const KernelSymbols& syms, uint64_t addr);
    struct Sym {
        uint64_t addr;
        uint32_t name;      // offset in names_
        uint16_t name_len;  // KSYM_NAME_LEN is 512
        uint16_t module;    // index in modules_; 0 is vmlinux
    };
    std::string names_;
    std::vector<Sym> syms_;
    std::vector<std::string> modules_{""};
};
// Drops __start_*/__stop_* markers (they alias real functions) and, at one address, every
// name but the first listed (the kernel's canonical one). Empty when the addresses are hidden.
KernelSymbols parse_kallsyms(const std::string& text);
// This process's /proc/kallsyms, read and parsed once, on first use, by whichever thread asks
// first (the sock family's, after tick 0; kernel stacks are named from tick 1): ~0.1 s.
const KernelSymbols& kernel_symbols();
// "func+0xoff (kernel|module)" or "0xADDR" when no symbol covers addr.
std::string symbolize_kernel_addr(const KernelSymbols& syms, uint64_t addr);

}  // namespace qscope
