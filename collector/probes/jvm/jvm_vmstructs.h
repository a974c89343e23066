// HotSpot's self-description, read from outside: the exported gHotSpotVMStructs /
// gHotSpotVMTypes tables (the ones the serviceability agent uses) give the offsets of
// JavaThread, OSThread, ThreadsList... fields for the exact JVM build that is running, so
// nothing is hard-coded per JDK version and the target needs no agent or flag.
//
// Everything reads the target's memory through MemReader: ProcessMemory for a live PID
// (process_vm_readv), a byte buffer in the unit tests.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace qscope::jvm {

class MemReader {
public:
    virtual ~MemReader() = default;
    // All n bytes at addr, or false.
    virtual bool read(uint64_t addr, void* out, size_t n) const = 0;

    bool u64(uint64_t addr, uint64_t& v) const { return read(addr, &v, sizeof v); }
    bool u32(uint64_t addr, uint32_t& v) const { return read(addr, &v, sizeof v); }
    bool i32(uint64_t addr, int32_t& v) const { return read(addr, &v, sizeof v); }
    bool u16(uint64_t addr, uint16_t& v) const { return read(addr, &v, sizeof v); }
    // NUL-terminated string of at most max bytes; reads in small chunks so a string near
    // the end of a mapping still reads.
    bool cstring(uint64_t addr, std::string& out, size_t max = 256) const;
};

class ProcessMemory final : public MemReader {
public:
    explicit ProcessMemory(int pid) : pid_(pid) {}
    bool read(uint64_t addr, void* out, size_t n) const override;

private:
    int pid_;
};

// Addresses (in the target) of the exported variables that describe the tables.
struct VmStructsSymbols {
    uint64_t structs = 0;                 // &gHotSpotVMStructs (a VMStructEntry*)
    uint64_t entry_type_name_offset = 0;  // &gHotSpotVMStructEntryTypeNameOffset ...
    uint64_t entry_field_name_offset = 0;
    uint64_t entry_type_string_offset = 0;
    uint64_t entry_is_static_offset = 0;
    uint64_t entry_offset_offset = 0;
    uint64_t entry_address_offset = 0;
    uint64_t entry_array_stride = 0;
    uint64_t types = 0;                   // &gHotSpotVMTypes (optional: 0 skips types)
    uint64_t type_entry_type_name_offset = 0;
    uint64_t type_entry_size_offset = 0;
    uint64_t type_entry_array_stride = 0;

    // Fills the fields from ELF symbol values (vaddr) plus the module's load bias.
    static VmStructsSymbols from_symbols(const std::map<std::string, uint64_t>& syms, uint64_t bias);
    bool complete() const;
    static const std::vector<std::string>& names();
};

struct VmField {
    std::string type, field, type_string;
    bool is_static = false;
    uint64_t offset = 0;   // instance fields
    uint64_t address = 0;  // static fields: address in the target
};

class VmStructs {
public:
    // Walks the tables until the NULL-typeName terminator (bounded). Returns nullopt with
    // `why` set when the memory does not read or does not look like the tables.
    static std::optional<VmStructs> read(const MemReader& mem, const VmStructsSymbols& sym, std::string& why);

    const VmField* field(const std::string& type, const std::string& name) const;
    std::optional<uint64_t> type_size(const std::string& type) const;
    size_t size() const { return fields_.size(); }
    const std::map<std::pair<std::string, std::string>, VmField>& fields() const { return fields_; }

private:
    std::map<std::pair<std::string, std::string>, VmField> fields_;
    std::map<std::string, uint64_t> types_;
};

// The fields qscope uses, resolved from the tables.
struct JvmLayout {
    uint64_t java_thread_list = 0;   // &ThreadsSMRSupport::_java_thread_list (static)
    uint64_t tl_length = 0, tl_threads = 0;           // ThreadsList
    uint64_t thread_osthread = 0, osthread_tid = 0;   // Thread::_osthread, OSThread::_thread_id
    uint64_t jt_threadobj = 0, jt_vthread = 0;        // JavaThread OopHandles
    std::optional<uint64_t> jt_cont_entry;            // JavaThread::_cont_entry (JDK 21+)
    bool has_vthread = false;
    // Class of a thread's java.lang.Thread object (tells carriers from other threads).
    uint64_t oop_klass = 0;            // oopDesc::_metadata._compressed_klass
    uint64_t klass_name = 0;           // Klass::_name
    uint64_t symbol_length = 0, symbol_body = 0;
    uint64_t narrow_klass_base = 0, narrow_klass_shift = 0;  // static addresses; 0 if absent

    static std::optional<JvmLayout> from(const VmStructs& vs, std::string& why);
};

// tid → JavaThread*, by walking ThreadsSMRSupport::_java_thread_list. Racy against thread
// creation/exit by nature; entries that do not read are skipped.
std::map<int, uint64_t> java_threads(const MemReader& mem, const JvmLayout& l);

// Internal class name of the thread's java.lang.Thread object ("jdk/internal/misc/CarrierThread"),
// empty when unreadable. Handles compressed class pointers in the classic header and in
// the compact header (JDK 24+ -XX:+UseCompactObjectHeaders).
std::string thread_class_name(const MemReader& mem, const JvmLayout& l, uint64_t jt);

// 1 mounted (a virtual thread runs on it), 0 not, -1 unreadable/unknown.
int thread_mounted(const MemReader& mem, const JvmLayout& l, uint64_t jt);

// A JVM found in a live process: libjvm's location, its symbols, the tables.
struct JvmProcess {
    std::string libjvm;          // path as mapped in the target
    std::string libjvm_host;     // the same file as this process can open it (/proc/PID/root/...)
    uint64_t bias = 0;           // load bias of libjvm
    bool bias_known = false;
    std::string java_home;       // libjvm's JDK (for jcmd), may be empty
    bool has_pinned_event = false;   // exports JVM_VirtualThreadPinnedEvent (JDK 24+)
    std::optional<VmStructs> structs;
    std::optional<JvmLayout> layout;
    std::string why;             // why structs/layout are missing
};

// Does the target map libjvm.so? Returns nullopt if not (not a JVM).
std::optional<JvmProcess> find_jvm(int pid);
// Reads symbols and tables into p (sets p.why on failure).
void load_vmstructs(int pid, JvmProcess& p);

// ELF symbol values (st_value) for the given names from .dynsym and .symtab.
std::map<std::string, uint64_t> elf_symbols(const std::string& path, const std::vector<std::string>& names);
// Whether a defined symbol's (mangled) name there contains `part`: Rust's names keep their
// path's segments length-prefixed in both manglings ("7runtime9scheduler").
bool elf_has_symbol_containing(const std::string& path, std::string_view part);
// First PT_LOAD's vaddr minus its offset, as the loader maps it; the load bias is a
// module's offset-0 mapping (module_base) minus this.
std::optional<uint64_t> first_load_vaddr(const std::string& path);
// Load bias of a module from /proc/PID/maps text: start of its offset-0 mapping minus the
// vaddr of the first PT_LOAD (0 for a normal shared object).
std::optional<uint64_t> module_base(const std::string& maps_text, const std::string& module_path);

// The JDK directory whose bin/jcmd can talk to this JVM: libjvm's JDK, else any JDK under
// /usr/lib/jvm whose release has the same JAVA_VERSION. Empty if none.
std::string find_jcmd(const JvmProcess& p);

}  // namespace qscope::jvm
