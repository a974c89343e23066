#include "probes/jvm/jvm_vmstructs.h"

#include <dirent.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "sys/proc_stat.h"

namespace qscope::jvm {

bool MemReader::cstring(uint64_t addr, std::string& out, size_t max) const {
    out.clear();
    if (!addr) return false;
    char buf[32];
    while (out.size() < max) {
        if (!read(addr + out.size(), buf, sizeof buf)) {
            // The last chunk may cross into an unmapped page: go byte by byte.
            char c;
            if (!read(addr + out.size(), &c, 1)) return false;
            if (c == 0) return true;
            out.push_back(c);
            continue;
        }
        for (char c : buf) {
            if (c == 0) return true;
            out.push_back(c);
            if (out.size() >= max) break;
        }
    }
    return false;
}

bool ProcessMemory::read(uint64_t addr, void* out, size_t n) const {
    iovec local{out, n};
    iovec remote{reinterpret_cast<void*>(addr), n};
    return process_vm_readv(pid_, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

// ---- symbols -----------------------------------------------------------------------------

const std::vector<std::string>& VmStructsSymbols::names() {
    static const std::vector<std::string> n = {
        "gHotSpotVMStructs",
        "gHotSpotVMStructEntryTypeNameOffset",
        "gHotSpotVMStructEntryFieldNameOffset",
        "gHotSpotVMStructEntryTypeStringOffset",
        "gHotSpotVMStructEntryIsStaticOffset",
        "gHotSpotVMStructEntryOffsetOffset",
        "gHotSpotVMStructEntryAddressOffset",
        "gHotSpotVMStructEntryArrayStride",
        "gHotSpotVMTypes",
        "gHotSpotVMTypeEntryTypeNameOffset",
        "gHotSpotVMTypeEntrySizeOffset",
        "gHotSpotVMTypeEntryArrayStride",
    };
    return n;
}

VmStructsSymbols VmStructsSymbols::from_symbols(const std::map<std::string, uint64_t>& syms, uint64_t bias) {
    auto at = [&](const char* n) -> uint64_t {
        auto it = syms.find(n);
        return it == syms.end() || it->second == 0 ? 0 : it->second + bias;
    };
    VmStructsSymbols s;
    s.structs = at("gHotSpotVMStructs");
    s.entry_type_name_offset = at("gHotSpotVMStructEntryTypeNameOffset");
    s.entry_field_name_offset = at("gHotSpotVMStructEntryFieldNameOffset");
    s.entry_type_string_offset = at("gHotSpotVMStructEntryTypeStringOffset");
    s.entry_is_static_offset = at("gHotSpotVMStructEntryIsStaticOffset");
    s.entry_offset_offset = at("gHotSpotVMStructEntryOffsetOffset");
    s.entry_address_offset = at("gHotSpotVMStructEntryAddressOffset");
    s.entry_array_stride = at("gHotSpotVMStructEntryArrayStride");
    s.types = at("gHotSpotVMTypes");
    s.type_entry_type_name_offset = at("gHotSpotVMTypeEntryTypeNameOffset");
    s.type_entry_size_offset = at("gHotSpotVMTypeEntrySizeOffset");
    s.type_entry_array_stride = at("gHotSpotVMTypeEntryArrayStride");
    return s;
}

bool VmStructsSymbols::complete() const {
    return structs && entry_type_name_offset && entry_field_name_offset && entry_type_string_offset &&
           entry_is_static_offset && entry_offset_offset && entry_address_offset && entry_array_stride;
}

// ---- tables ------------------------------------------------------------------------------

namespace {
// A real table has ~900 entries (Temurin 25); the cap only stops a runaway walk over
// memory that is not the table.
constexpr size_t kMaxEntries = 20000;
}  // namespace

std::optional<VmStructs> VmStructs::read(const MemReader& mem, const VmStructsSymbols& sym, std::string& why) {
    if (!sym.complete()) {
        why = "libjvm does not export the gHotSpotVMStructs symbols";
        return std::nullopt;
    }
    uint64_t base = 0, o_type = 0, o_field = 0, o_tstr = 0, o_static = 0, o_off = 0, o_addr = 0, stride = 0;
    if (!mem.u64(sym.structs, base) || !mem.u64(sym.entry_type_name_offset, o_type) ||
        !mem.u64(sym.entry_field_name_offset, o_field) || !mem.u64(sym.entry_type_string_offset, o_tstr) ||
        !mem.u64(sym.entry_is_static_offset, o_static) || !mem.u64(sym.entry_offset_offset, o_off) ||
        !mem.u64(sym.entry_address_offset, o_addr) || !mem.u64(sym.entry_array_stride, stride)) {
        why = "cannot read the gHotSpotVMStructs descriptors from the target's memory";
        return std::nullopt;
    }
    const uint64_t largest = std::max({o_type, o_field, o_tstr, o_static, o_off, o_addr});
    if (!base || stride < 8 || stride > 4096 || largest + 8 > stride) {
        why = "gHotSpotVMStructs descriptors look invalid (stride " + std::to_string(stride) + ")";
        return std::nullopt;
    }
    VmStructs vs;
    size_t i = 0;
    for (; i < kMaxEntries; i++) {
        const uint64_t e = base + i * stride;
        uint64_t p_type = 0, p_field = 0, p_tstr = 0, off = 0, addr = 0;
        int32_t is_static = 0;
        if (!mem.u64(e + o_type, p_type)) {
            why = "gHotSpotVMStructs entry " + std::to_string(i) + " unreadable";
            return std::nullopt;
        }
        if (p_type == 0) break;  // the terminator
        if (!mem.u64(e + o_field, p_field) || !mem.u64(e + o_tstr, p_tstr) || !mem.i32(e + o_static, is_static) ||
            !mem.u64(e + o_off, off) || !mem.u64(e + o_addr, addr)) {
            why = "gHotSpotVMStructs entry " + std::to_string(i) + " unreadable";
            return std::nullopt;
        }
        VmField f;
        if (!mem.cstring(p_type, f.type) || (p_field && !mem.cstring(p_field, f.field))) {
            why = "gHotSpotVMStructs entry " + std::to_string(i) + " has an unreadable name";
            return std::nullopt;
        }
        if (p_tstr) mem.cstring(p_tstr, f.type_string);
        f.is_static = is_static != 0;
        f.offset = off;
        f.address = addr;
        vs.fields_.emplace(std::make_pair(f.type, f.field), std::move(f));
    }
    if (i == kMaxEntries) {
        why = "gHotSpotVMStructs has no terminator within " + std::to_string(kMaxEntries) + " entries";
        return std::nullopt;
    }

    uint64_t tbase = 0, t_name = 0, t_size = 0, t_stride = 0;
    if (sym.types && sym.type_entry_type_name_offset && sym.type_entry_size_offset && sym.type_entry_array_stride &&
        mem.u64(sym.types, tbase) && mem.u64(sym.type_entry_type_name_offset, t_name) &&
        mem.u64(sym.type_entry_size_offset, t_size) && mem.u64(sym.type_entry_array_stride, t_stride) && tbase &&
        t_stride >= 8 && t_stride <= 4096) {
        for (size_t j = 0; j < kMaxEntries; j++) {
            const uint64_t e = tbase + j * t_stride;
            uint64_t p_name = 0, size = 0;
            if (!mem.u64(e + t_name, p_name) || p_name == 0) break;
            std::string name;
            if (!mem.cstring(p_name, name) || !mem.u64(e + t_size, size)) break;
            vs.types_[name] = size;
        }
    }
    return vs;
}

const VmField* VmStructs::field(const std::string& type, const std::string& name) const {
    auto it = fields_.find({type, name});
    return it == fields_.end() ? nullptr : &it->second;
}

std::optional<uint64_t> VmStructs::type_size(const std::string& type) const {
    auto it = types_.find(type);
    if (it == types_.end()) return std::nullopt;
    return it->second;
}

std::optional<JvmLayout> JvmLayout::from(const VmStructs& vs, std::string& why) {
    JvmLayout l;
    auto need = [&](const char* type, const char* name, bool is_static, uint64_t& out) {
        const VmField* f = vs.field(type, name);
        if (!f || f->is_static != is_static) {
            if (why.empty()) why = std::string("VMStructs has no ") + type + "::" + name;
            return false;
        }
        out = is_static ? f->address : f->offset;
        return true;
    };
    bool ok = need("ThreadsSMRSupport", "_java_thread_list", true, l.java_thread_list);
    ok &= need("ThreadsList", "_length", false, l.tl_length);
    ok &= need("ThreadsList", "_threads", false, l.tl_threads);
    // Thread::_osthread since JDK 19; JavaThread::_osthread before (JDK 17).
    if (const VmField* f = vs.field("JavaThread", "_osthread"); f && !f->is_static && !vs.field("Thread", "_osthread"))
        l.thread_osthread = f->offset;
    else
        ok &= need("Thread", "_osthread", false, l.thread_osthread);
    ok &= need("OSThread", "_thread_id", false, l.osthread_tid);
    ok &= need("JavaThread", "_threadObj", false, l.jt_threadobj);
    if (!ok) return std::nullopt;
    if (const VmField* f = vs.field("JavaThread", "_vthread"); f && !f->is_static) {
        l.jt_vthread = f->offset;
        l.has_vthread = true;
    }
    if (const VmField* f = vs.field("JavaThread", "_cont_entry"); f && !f->is_static) l.jt_cont_entry = f->offset;
    // Class names are a bonus (they tell carriers from other ForkJoinPool threads); missing
    // fields leave oop_klass 0 and callers fall back to names.
    std::string ignore;
    std::swap(ignore, why);
    const bool klass_ok = need("oopDesc", "_metadata._compressed_klass", false, l.oop_klass) &&
                          need("Klass", "_name", false, l.klass_name) &&
                          need("Symbol", "_length", false, l.symbol_length) &&
                          need("Symbol", "_body", false, l.symbol_body) &&
                          need("CompressedKlassPointers", "_base", true, l.narrow_klass_base) &&
                          need("CompressedKlassPointers", "_shift", true, l.narrow_klass_shift);
    if (!klass_ok) l.oop_klass = 0;
    why = ignore;
    return l;
}

std::map<int, uint64_t> java_threads(const MemReader& mem, const JvmLayout& l) {
    std::map<int, uint64_t> out;
    uint64_t list = 0, arr = 0;
    uint32_t n = 0;
    if (!mem.u64(l.java_thread_list, list) || !list || !mem.u32(list + l.tl_length, n) ||
        !mem.u64(list + l.tl_threads, arr) || !arr)
        return out;
    if (n > 1000000) return out;  // not a ThreadsList
    std::vector<uint64_t> jts(n);
    if (n && !mem.read(arr, jts.data(), n * sizeof(uint64_t))) return out;
    for (uint64_t jt : jts) {
        uint64_t ost = 0;
        int32_t tid = 0;
        if (!jt || !mem.u64(jt + l.thread_osthread, ost) || !ost || !mem.i32(ost + l.osthread_tid, tid) || tid <= 0)
            continue;
        out[tid] = jt;
    }
    return out;
}

namespace {
bool plausible_class_name(const std::string& s) {
    if (s.empty() || s.size() > 512) return false;
    for (unsigned char c : s)
        if (c < 0x21 || c > 0x7e) return false;
    return true;
}

std::string read_symbol(const MemReader& mem, const JvmLayout& l, uint64_t sym) {
    uint16_t len = 0;
    if (!sym || !mem.u16(sym + l.symbol_length, len) || len == 0 || len > 512) return {};
    std::string s(len, '\0');
    if (!mem.read(sym + l.symbol_body, s.data(), len)) return {};
    return plausible_class_name(s) ? s : std::string();
}
}  // namespace

std::string thread_class_name(const MemReader& mem, const JvmLayout& l, uint64_t jt) {
    if (!l.oop_klass) return {};
    uint64_t handle = 0, oop = 0, base = 0;
    int32_t shift = 0;
    if (!mem.u64(jt + l.jt_threadobj, handle) || !handle || !mem.u64(handle, oop) || !oop) return {};
    if (!mem.u64(l.narrow_klass_base, base) || !mem.i32(l.narrow_klass_shift, shift) || shift < 0 || shift > 32)
        return {};
    auto name_of_narrow = [&](uint32_t nk) -> std::string {
        if (!nk) return {};
        uint64_t klass = base + (static_cast<uint64_t>(nk) << shift), sym = 0;
        if (!mem.u64(klass + l.klass_name, sym)) return {};
        return read_symbol(mem, l, sym);
    };
    uint32_t nk = 0;
    if (mem.u32(oop + l.oop_klass, nk)) {
        std::string s = name_of_narrow(nk);
        if (!s.empty()) return s;
    }
    // Compact object headers (JDK 24+ flag): the narrow klass sits in the mark word's top
    // 22 bits (markWord::klass_shift = 42).
    uint64_t mark = 0;
    if (mem.u64(oop, mark)) return name_of_narrow(static_cast<uint32_t>(mark >> 42));
    return {};
}

int thread_mounted(const MemReader& mem, const JvmLayout& l, uint64_t jt) {
    if (l.jt_cont_entry) {
        uint64_t e = 0;
        if (!mem.u64(jt + *l.jt_cont_entry, e)) return -1;
        return e != 0;
    }
    if (!l.has_vthread) return -1;
    uint64_t pa = 0, pb = 0, a = 0, b = 0;
    if (!mem.u64(jt + l.jt_vthread, pa) || !mem.u64(jt + l.jt_threadobj, pb) || !pa || !pb || !mem.u64(pa, a) ||
        !mem.u64(pb, b))
        return -1;
    return a != b;
}

// ---- ELF and process discovery ----------------------------------------------------------

namespace {

// Calls fn(name, st_value) for each named, defined symbol of .dynsym and .symtab until it
// returns false. Unreadable or corrupt files have none.
template <typename Fn>
void for_each_elf_symbol(const std::string& path, Fn&& fn) {
    elf_version(EV_CURRENT);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    if (!elf) {
        close(fd);
        return;
    }
    bool more = true;
    Elf_Scn* scn = nullptr;
    while (more && (scn = elf_nextscn(elf, scn)) != nullptr) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || (sh.sh_type != SHT_DYNSYM && sh.sh_type != SHT_SYMTAB)) continue;
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (!data || !sh.sh_entsize) continue;
        const size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; more && i < n; i++) {
            GElf_Sym s;
            if (!gelf_getsym(data, static_cast<int>(i), &s) || s.st_value == 0) continue;
            const char* nm = elf_strptr(elf, sh.sh_link, s.st_name);
            if (nm && *nm) more = fn(std::string_view(nm), s.st_value);
        }
    }
    elf_end(elf);
    close(fd);
}

}  // namespace

std::map<std::string, uint64_t> elf_symbols(const std::string& path, const std::vector<std::string>& names) {
    std::map<std::string, uint64_t> out;
    for_each_elf_symbol(path, [&](std::string_view nm, uint64_t value) {
        for (const auto& want : names)
            if (want == nm) out.emplace(want, value);
        return true;
    });
    return out;
}

bool elf_has_symbol_containing(const std::string& path, std::string_view part) {
    bool found = false;
    for_each_elf_symbol(path, [&](std::string_view nm, uint64_t) {
        found = nm.find(part) != std::string_view::npos;
        return !found;
    });
    return found;
}

std::optional<uint64_t> first_load_vaddr(const std::string& path) {
    elf_version(EV_CURRENT);
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    Elf* elf = elf_begin(fd, ELF_C_READ, nullptr);
    std::optional<uint64_t> out;
    size_t n = 0;
    if (elf && elf_getphdrnum(elf, &n) == 0) {
        for (size_t i = 0; i < n; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD) {
                out = ph.p_vaddr - ph.p_offset;
                break;
            }
        }
    }
    if (elf) elf_end(elf);
    close(fd);
    return out;
}

std::optional<uint64_t> module_base(const std::string& maps_text, const std::string& module_path) {
    std::istringstream in(maps_text);
    std::string line;
    while (std::getline(in, line)) {
        unsigned long long start = 0, end = 0, off = 0;
        char perms[8] = {};
        int path_pos = 0;
        if (sscanf(line.c_str(), "%llx-%llx %7s %llx %*s %*s %n", &start, &end, perms, &off, &path_pos) < 4 ||
            path_pos <= 0)
            continue;
        std::string path = line.substr(path_pos);
        if (path == module_path && off == 0) return start;
    }
    return std::nullopt;
}

std::optional<JvmProcess> find_jvm(int pid) {
    std::string maps;
    if (!read_file("/proc/" + std::to_string(pid) + "/maps", maps)) return std::nullopt;
    std::istringstream in(maps);
    std::string line;
    JvmProcess p;
    while (std::getline(in, line)) {
        auto slash = line.find('/');
        if (slash == std::string::npos) continue;
        std::string path = line.substr(slash);
        auto base = path.rfind('/');
        if (path.compare(base + 1, std::string::npos, "libjvm.so") == 0) {
            p.libjvm = path;
            break;
        }
    }
    if (p.libjvm.empty()) return std::nullopt;
    p.libjvm_host = "/proc/" + std::to_string(pid) + "/root" + p.libjvm;
    if (access(p.libjvm_host.c_str(), R_OK) != 0) p.libjvm_host = p.libjvm;
    // .../lib/server/libjvm.so → JDK home
    std::string dir = p.libjvm.substr(0, p.libjvm.rfind('/'));
    for (int up = 0; up < 2 && dir.find('/') != std::string::npos; up++) dir = dir.substr(0, dir.rfind('/'));
    p.java_home = dir;
    auto base = module_base(maps, p.libjvm);
    auto vaddr = first_load_vaddr(p.libjvm_host);
    if (base && vaddr) {
        p.bias = *base - *vaddr;
        p.bias_known = true;
    }
    return p;
}

void load_vmstructs(int pid, JvmProcess& p) {
    auto names = VmStructsSymbols::names();
    names.push_back("JVM_VirtualThreadPinnedEvent");
    auto syms = elf_symbols(p.libjvm_host, names);
    p.has_pinned_event = syms.count("JVM_VirtualThreadPinnedEvent") > 0;
    if (!p.bias_known) {
        p.why = "cannot locate libjvm's load address in /proc/" + std::to_string(pid) + "/maps";
        return;
    }
    ProcessMemory mem(pid);
    std::string why;
    p.structs = VmStructs::read(mem, VmStructsSymbols::from_symbols(syms, p.bias), why);
    if (!p.structs) {
        p.why = why;
        return;
    }
    p.layout = JvmLayout::from(*p.structs, why);
    if (!p.layout) p.why = why;
}

std::string find_jcmd(const JvmProcess& p) {
    auto has = [](const std::string& home) { return !home.empty() && access((home + "/bin/jcmd").c_str(), X_OK) == 0; };
    if (has(p.java_home)) return p.java_home + "/bin/jcmd";
    std::string release, version;
    if (read_file(p.java_home + "/release", release)) {
        auto at = release.find("JAVA_VERSION=\"");
        if (at != std::string::npos) {
            at += 14;
            version = release.substr(at, release.find('"', at) - at);
        }
    }
    // A JRE without jcmd: any installed JDK of the same feature release can attach.
    const std::string feature = version.substr(0, version.find('.'));
    for (const char* root : {"/usr/lib/jvm", "/opt/java", "/usr/java"}) {
        std::vector<std::string> homes;
        if (auto* d = opendir(root)) {
            while (auto* e = readdir(d))
                if (e->d_name[0] != '.') homes.push_back(std::string(root) + "/" + e->d_name);
            closedir(d);
        }
        for (const auto& h : homes) {
            std::string rel;
            if (!has(h) || !read_file(h + "/release", rel)) continue;
            if (feature.empty() || rel.find("JAVA_VERSION=\"" + feature) != std::string::npos) return h + "/bin/jcmd";
        }
    }
    return {};
}

}  // namespace qscope::jvm
