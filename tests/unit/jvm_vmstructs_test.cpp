// VMStructs parsing over a byte buffer laid out as Temurin 25's libjvm lays out the tables
// (entry stride 48, field offsets 0/8/16/24/32/40) and its JavaThread field offsets (dumped
// from a live Temurin 25.0.3 JVM; see docs/kernel.md "JVM facts").
#include <catch2/catch.hpp>
#include <cstring>

#include "probes/jvm/jvm_vmstructs.h"

using namespace qscope::jvm;

namespace {

// Target memory: one contiguous region at `base`.
class Buffer final : public MemReader {
public:
    explicit Buffer(uint64_t base, size_t size) : base_(base), bytes_(size, 0) {}
    bool read(uint64_t addr, void* out, size_t n) const override {
        if (addr < base_ || addr + n > base_ + bytes_.size()) return false;
        std::memcpy(out, bytes_.data() + (addr - base_), n);
        return true;
    }
    void put(uint64_t addr, const void* p, size_t n) { std::memcpy(bytes_.data() + (addr - base_), p, n); }
    void u64(uint64_t addr, uint64_t v) { put(addr, &v, 8); }
    void u32(uint64_t addr, uint32_t v) { put(addr, &v, 4); }
    void u16(uint64_t addr, uint16_t v) { put(addr, &v, 2); }
    uint64_t str(const std::string& s) {
        uint64_t at = strings_;
        put(at, s.c_str(), s.size() + 1);
        strings_ += s.size() + 1;
        return at;
    }
    uint64_t base_;
    std::vector<uint8_t> bytes_;
    uint64_t strings_ = 0;
};

constexpr uint64_t kBase = 0x7f0000000000;

struct Entry {
    const char* type;
    const char* field;
    const char* tstr;
    int32_t is_static;
    uint64_t offset;
    uint64_t address;
};

// Builds the descriptor variables + entry array; returns the symbols.
VmStructsSymbols build_tables(Buffer& b, const std::vector<Entry>& entries, uint64_t stride = 48) {
    // descriptor variables at kBase + 0x0..0x100, entries at +0x1000, strings at +0x20000
    b.strings_ = kBase + 0x20000;
    const uint64_t vars = kBase, arr = kBase + 0x1000;
    VmStructsSymbols s;
    s.structs = vars + 0x00;
    s.entry_type_name_offset = vars + 0x08;
    s.entry_field_name_offset = vars + 0x10;
    s.entry_type_string_offset = vars + 0x18;
    s.entry_is_static_offset = vars + 0x20;
    s.entry_offset_offset = vars + 0x28;
    s.entry_address_offset = vars + 0x30;
    s.entry_array_stride = vars + 0x38;
    b.u64(s.structs, arr);
    b.u64(s.entry_type_name_offset, 0);
    b.u64(s.entry_field_name_offset, 8);
    b.u64(s.entry_type_string_offset, 16);
    b.u64(s.entry_is_static_offset, 24);
    b.u64(s.entry_offset_offset, 32);
    b.u64(s.entry_address_offset, 40);
    b.u64(s.entry_array_stride, stride);
    for (size_t i = 0; i < entries.size(); i++) {
        const auto& e = entries[i];
        const uint64_t at = arr + i * stride;
        b.u64(at + 0, b.str(e.type));
        b.u64(at + 8, b.str(e.field));
        b.u64(at + 16, b.str(e.tstr));
        b.u32(at + 24, static_cast<uint32_t>(e.is_static));
        b.u64(at + 32, e.offset);
        b.u64(at + 40, e.address);
    }
    // terminator: typeName NULL (the buffer is zeroed)
    return s;
}

// Temurin 25.0.3's values.
const uint64_t kThreadListVar = kBase + 0x40000;
const uint64_t kNarrowBase = kBase + 0x40010, kNarrowShift = kBase + 0x40018;
std::vector<Entry> temurin25_entries() {
    return {
        {"OopHandle", "_obj", "oop*", 0, 0, 0},
        {"ThreadsSMRSupport", "_java_thread_list", "ThreadsList*", 1, 0, kThreadListVar},
        {"ThreadsList", "_length", "const uint", 0, 4, 0},
        {"ThreadsList", "_threads", "JavaThread *const *const", 0, 16, 0},
        {"JavaThread", "_threadObj", "OopHandle", 0, 1120, 0},
        {"JavaThread", "_vthread", "OopHandle", 0, 1128, 0},
        {"JavaThread", "_thread_state", "JavaThreadState", 0, 1324, 0},
        {"JavaThread", "_cont_entry", "ContinuationEntry*", 0, 1560, 0},
        {"Thread", "_osthread", "OSThread*", 0, 1016, 0},
        {"OSThread", "_thread_id", "pid_t", 0, 12, 0},
        {"oopDesc", "_metadata._compressed_klass", "narrowKlass", 0, 8, 0},
        {"Klass", "_name", "Symbol*", 0, 24, 0},
        {"Symbol", "_length", "u2", 0, 4, 0},
        {"Symbol", "_body", "", 0, 6, 0},
        {"CompressedKlassPointers", "_base", "address", 1, 0, kNarrowBase},
        {"CompressedKlassPointers", "_shift", "int", 1, 0, kNarrowShift},
    };
}

}  // namespace

TEST_CASE("VMStructs: reads a Temurin 25 shaped table", "[jvm]") {
    Buffer b(kBase, 0x100000);
    auto sym = build_tables(b, temurin25_entries());
    std::string why;
    auto vs = VmStructs::read(b, sym, why);
    REQUIRE(vs);
    CHECK(why.empty());
    CHECK(vs->size() == temurin25_entries().size());
    const VmField* f = vs->field("JavaThread", "_cont_entry");
    REQUIRE(f);
    CHECK(f->offset == 1560);
    CHECK(f->type_string == "ContinuationEntry*");
    CHECK_FALSE(f->is_static);
    const VmField* s = vs->field("ThreadsSMRSupport", "_java_thread_list");
    REQUIRE(s);
    CHECK(s->is_static);
    CHECK(s->address == kThreadListVar);
    CHECK(vs->field("JavaThread", "_nope") == nullptr);

    auto l = JvmLayout::from(*vs, why);
    REQUIRE(l);
    CHECK(l->jt_threadobj == 1120);
    CHECK(l->jt_vthread == 1128);
    CHECK(l->has_vthread);
    REQUIRE(l->jt_cont_entry);
    CHECK(*l->jt_cont_entry == 1560);
    CHECK(l->thread_osthread == 1016);
    CHECK(l->osthread_tid == 12);
    CHECK(l->oop_klass == 8);
}

TEST_CASE("VMStructs: threads, mount state and carrier class through the layout", "[jvm]") {
    Buffer b(kBase, 0x100000);
    auto sym = build_tables(b, temurin25_entries());
    std::string why;
    auto vs = VmStructs::read(b, sym, why);
    REQUIRE(vs);
    auto l = JvmLayout::from(*vs, why);
    REQUIRE(l);

    // Heap-ish area: ThreadsList, 3 JavaThreads, OSThreads, oops, klasses, symbols.
    const uint64_t tl = kBase + 0x50000, arr = kBase + 0x50100;
    const uint64_t jt[3] = {kBase + 0x60000, kBase + 0x61000, kBase + 0x62000};
    const uint64_t ost[3] = {kBase + 0x70000, kBase + 0x70100, kBase + 0x70200};
    const int tids[3] = {9243, 9244, 7748};
    b.u64(kThreadListVar, tl);
    b.u32(tl + 4, 3);
    b.u64(tl + 16, arr);
    for (int i = 0; i < 3; i++) {
        b.u64(arr + 8 * i, jt[i]);
        b.u64(jt[i] + 1016, ost[i]);
        b.u32(ost[i] + 12, static_cast<uint32_t>(tids[i]));
    }
    auto threads = java_threads(b, *l);
    REQUIRE(threads.size() == 3);
    CHECK(threads.at(9243) == jt[0]);
    CHECK(threads.at(7748) == jt[2]);

    // Narrow klass decoding: klass = base + (nk << shift).
    const uint64_t kbase = kBase + 0x80000;
    b.u64(kNarrowBase, kbase);
    b.u32(kNarrowShift, 3);
    auto make_class = [&](uint64_t klass, uint64_t symaddr, const std::string& name) {
        b.u64(klass + 24, symaddr);
        b.u16(symaddr + 4, static_cast<uint16_t>(name.size()));
        b.put(symaddr + 6, name.data(), name.size());
    };
    const uint64_t carrier_klass = kbase + 0x100, sched_klass = kbase + 0x200;
    make_class(carrier_klass, kBase + 0x90000, "jdk/internal/misc/CarrierThread");
    make_class(sched_klass, kBase + 0x90100, "java/util/concurrent/DelayScheduler");
    const uint64_t oop[3] = {kBase + 0xa0000, kBase + 0xa0100, kBase + 0xa0200};
    const uint64_t handle[3] = {kBase + 0xb0000, kBase + 0xb0010, kBase + 0xb0020};
    const uint64_t vhandle[3] = {kBase + 0xb0100, kBase + 0xb0110, kBase + 0xb0120};
    const uint64_t klass_of[3] = {carrier_klass, carrier_klass, sched_klass};
    for (int i = 0; i < 3; i++) {
        b.u64(jt[i] + 1120, handle[i]);
        b.u64(handle[i], oop[i]);
        b.u32(oop[i] + 8, static_cast<uint32_t>((klass_of[i] - kbase) >> 3));
        b.u64(jt[i] + 1128, vhandle[i]);
    }
    CHECK(thread_class_name(b, *l, jt[0]) == "jdk/internal/misc/CarrierThread");
    CHECK(thread_class_name(b, *l, jt[2]) == "java/util/concurrent/DelayScheduler");

    // Carrier 0 carries a virtual thread: _cont_entry set, _vthread names another oop.
    b.u64(jt[0] + 1560, kBase + 0xc0000);
    b.u64(vhandle[0], kBase + 0xd0000);
    b.u64(vhandle[1], oop[1]);  // idle: _vthread == _threadObj
    CHECK(thread_mounted(b, *l, jt[0]) == 1);
    CHECK(thread_mounted(b, *l, jt[1]) == 0);

    // Without _cont_entry (JDK 21-style use): the OopHandles decide, and agree.
    JvmLayout no_cont = *l;
    no_cont.jt_cont_entry.reset();
    CHECK(thread_mounted(b, no_cont, jt[0]) == 1);
    CHECK(thread_mounted(b, no_cont, jt[1]) == 0);
    // Unreadable JavaThread → unknown, never a guess.
    CHECK(thread_mounted(b, *l, kBase + 0x200000) == -1);
    CHECK(thread_class_name(b, *l, kBase + 0x200000).empty());

    // Compact object headers: narrow klass in the mark word's top bits, no klass word.
    b.u32(oop[1] + 8, 0);
    b.u64(oop[1], (static_cast<uint64_t>((carrier_klass - kbase) >> 3) << 42) | 0x1);
    CHECK(thread_class_name(b, *l, jt[1]) == "jdk/internal/misc/CarrierThread");
}

TEST_CASE("VMStructs: damaged tables are refused with a reason", "[jvm]") {
    SECTION("missing descriptors") {
        Buffer b(kBase, 0x100000);
        VmStructsSymbols none;
        std::string why;
        CHECK_FALSE(VmStructs::read(b, none, why));
        CHECK(why.find("gHotSpotVMStructs") != std::string::npos);
    }
    SECTION("absurd stride") {
        Buffer b(kBase, 0x100000);
        auto sym = build_tables(b, temurin25_entries());
        b.u64(sym.entry_array_stride, 4);
        std::string why;
        CHECK_FALSE(VmStructs::read(b, sym, why));
        CHECK(why.find("stride") != std::string::npos);
    }
    SECTION("table runs off readable memory (no terminator)") {
        Buffer b(kBase, 0x100000);
        auto sym = build_tables(b, temurin25_entries());
        b.u64(sym.structs, kBase + 0x100000 - 48 * 2);  // two entries before the end
        b.u64(kBase + 0x100000 - 96, kBase + 0x20000);  // typeNames that read, no NULL after
        b.u64(kBase + 0x100000 - 48, kBase + 0x20000);
        std::string why;
        CHECK_FALSE(VmStructs::read(b, sym, why));
        CHECK_FALSE(why.empty());
    }
    SECTION("a JVM without the thread fields") {
        Buffer b(kBase, 0x100000);
        auto entries = temurin25_entries();
        entries.erase(entries.begin() + 9);  // OSThread::_thread_id
        auto sym = build_tables(b, entries);
        std::string why;
        auto vs = VmStructs::read(b, sym, why);
        REQUIRE(vs);
        CHECK_FALSE(JvmLayout::from(*vs, why));
        CHECK(why == "VMStructs has no OSThread::_thread_id");
    }
}

TEST_CASE("module_base finds the offset-0 mapping of a library", "[jvm]") {
    const std::string maps =
        "5581d5a00000-5581d5a01000 r--p 00000000 fe:00 1 /usr/lib/jvm/temurin-25-jdk-amd64/bin/java\n"
        "7f5253a00000-7f5253ce3000 r--p 00000000 fe:00 318543                     "
        "/usr/lib/jvm/temurin-25-jdk-amd64/lib/server/libjvm.so\n"
        "7f5253ce3000-7f5254d6f000 r-xp 002e3000 fe:00 318543                     "
        "/usr/lib/jvm/temurin-25-jdk-amd64/lib/server/libjvm.so\n";
    auto b = module_base(maps, "/usr/lib/jvm/temurin-25-jdk-amd64/lib/server/libjvm.so");
    REQUIRE(b);
    CHECK(*b == 0x7f5253a00000ULL);
    CHECK_FALSE(module_base(maps, "/lib/libc.so.6"));
}

TEST_CASE("VMStructs: JDK 17 layout (JavaThread::_osthread, no virtual threads)", "[jvm]") {
    // Debian OpenJDK 17's values.
    Buffer b(kBase, 0x100000);
    auto sym = build_tables(b, {
                                   {"ThreadsSMRSupport", "_java_thread_list", "ThreadsList*", 1, 0, kThreadListVar},
                                   {"ThreadsList", "_length", "const uint", 0, 4, 0},
                                   {"ThreadsList", "_threads", "JavaThread *const *const", 0, 16, 0},
                                   {"JavaThread", "_threadObj", "OopHandle", 0, 648, 0},
                                   {"JavaThread", "_osthread", "OSThread*", 0, 560, 0},
                                   {"OSThread", "_thread_id", "OSThread::thread_id_t", 0, 208, 0},
                               });
    std::string why;
    auto vs = VmStructs::read(b, sym, why);
    REQUIRE(vs);
    auto l = JvmLayout::from(*vs, why);
    REQUIRE(l);
    CHECK(l->thread_osthread == 560);
    CHECK(l->osthread_tid == 208);
    CHECK_FALSE(l->has_vthread);
    CHECK_FALSE(l->jt_cont_entry);
    CHECK(l->oop_klass == 0);  // no class names: callers fall back to Java names
    CHECK(thread_mounted(b, *l, kBase + 0x60000) == -1);
}

TEST_CASE("ELF symbols: by exact name, and by a part of a mangled name", "[jvm]") {
    // This test binary is an ELF file with a symbol table: its own function names are in it.
    const std::string self = "/proc/self/exe";
    CHECK(elf_has_symbol_containing(self, "elf_has_symbol_containing"));
    CHECK(elf_has_symbol_containing(self, "25elf_has_symbol_containing"));  // Itanium mangling's length prefix
    CHECK_FALSE(elf_has_symbol_containing(self, "7runtime9scheduler12multi_thread6worker"));
    CHECK_FALSE(elf_has_symbol_containing("/nonexistent", "main"));
    CHECK_FALSE(elf_has_symbol_containing("/proc/self/status", "main"));  // not ELF
    CHECK(elf_symbols(self, {"main"}).count("main") == 1);
}
