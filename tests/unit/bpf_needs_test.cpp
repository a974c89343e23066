// The BPF needs list (engine/kernel_features.h) against the built objects: every helper newer
// than Linux 5.10 that a family's programs call is a need of that family (or switched off where
// missing), every listed need is really used, and the atomics need is listed exactly for the
// objects holding fetch/or/and atomics. A program that starts calling a newer helper without a
// line here would make `qscope check` say "can run" on a kernel that refuses the object.
#include <catch2/catch.hpp>
#include <elf.h>
#include <sys/stat.h>
#include <linux/bpf.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/bpf_util.h"
#include "engine/kernel_features.h"

using namespace qscope;

namespace {

struct ObjectUse {
    std::set<int> helpers;      // helper ids called (BPF_CALL with src_reg 0)
    bool fetch_atomics = false; // a BPF_ATOMIC other than the plain add 5.10 already had (fetch, or, and, cmpxchg)
};

// Scans the executable sections of a BPF ELF object (programs and subprograms alike).
ObjectUse scan_object(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    REQUIRE(bytes.size() > sizeof(Elf64_Ehdr));
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
    REQUIRE(eh->e_ident[EI_CLASS] == ELFCLASS64);
    REQUIRE(eh->e_shoff + size_t(eh->e_shnum) * sizeof(Elf64_Shdr) <= bytes.size());
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + eh->e_shoff);
    ObjectUse use;
    for (int i = 0; i < eh->e_shnum; ++i) {
        if (!(sh[i].sh_flags & SHF_EXECINSTR) || sh[i].sh_type != SHT_PROGBITS) continue;
        REQUIRE(sh[i].sh_offset + sh[i].sh_size <= bytes.size());
        const auto* insn = reinterpret_cast<const bpf_insn*>(bytes.data() + sh[i].sh_offset);
        for (size_t k = 0; k < sh[i].sh_size / sizeof(bpf_insn); ++k) {
            if (insn[k].code == (BPF_JMP | BPF_CALL) && insn[k].src_reg == 0) use.helpers.insert(insn[k].imm);
            if (BPF_CLASS(insn[k].code) == BPF_STX && BPF_MODE(insn[k].code) == BPF_ATOMIC && insn[k].imm != BPF_ADD)
                use.fetch_atomics = true;
        }
    }
    return use;
}

// enum bpf_func_id of this (newest) kernel: name -> id.
std::map<std::string, int> helper_ids(btf* b) {
    std::map<std::string, int> out;
    const int id = btf__find_by_name_kind(b, "bpf_func_id", BTF_KIND_ENUM);
    if (id <= 0) return out;
    const btf_type* t = btf__type_by_id(b, id);
    const struct btf_enum* e = btf_enum(t);
    for (int i = 0; i < btf_vlen(t); ++i) out[btf__name_by_offset(b, e[i].name_off)] = e[i].val;
    return out;
}

bool listed_for(const BpfNeed& n, ProbeFamily f) {
    return std::find(n.families.begin(), n.families.end(), f) != n.families.end();
}

}  // namespace

TEST_CASE("bpf needs: the list matches the helpers and atomics the built objects use", "[kernel-features]") {
    KernelTracepoints kernel;
    btf* b = kernel.vmlinux();
    if (!b) {
        WARN("skipped: no kernel BTF on this host to name the helpers");
        return;
    }
    const std::map<std::string, int> ids = helper_ids(b);
    REQUIRE(ids.count("BPF_FUNC_redirect_peer"));
    const int last_of_5_10 = ids.at("BPF_FUNC_redirect_peer");  // the last helper Linux 5.10 has
    std::map<int, std::string> names;
    for (const auto& [name, id] : ids) names[id] = name;
    const auto switched_in = [](ProbeFamily f, const std::string& helper) {
        const auto& sw = bpf_switched_helpers();
        return std::any_of(sw.begin(), sw.end(), [&](const SwitchedHelper& s) { return s.family == f && helper == s.helper; });
    };

    const std::vector<std::pair<ProbeFamily, const char*>> objects = {
        {ProbeFamily::tree, "tree"}, {ProbeFamily::sock, "sock"}, {ProbeFamily::sched, "sched"}, {ProbeFamily::jvm, "carrier"}};
    for (const auto& [family, name] : objects) {
        const ObjectUse use = scan_object(std::string(QSCOPE_BINARY_DIR) + "/bpf/" + name + ".bpf.o");
        INFO(name << ".bpf.o");
        CHECK(!use.helpers.empty());
        std::set<std::string> called;
        for (int h : use.helpers) {
            REQUIRE(names.count(h));
            called.insert(names[h]);
            if (h <= last_of_5_10 || switched_in(family, names[h])) continue;
            INFO("calls " << names[h] << ", newer than Linux 5.10");
            const auto& needs = bpf_needs();
            CHECK(std::any_of(needs.begin(), needs.end(), [&](const BpfNeed& n) {
                return n.helper && names[h] == n.helper && listed_for(n, family);
            }));
        }
        for (const BpfNeed& n : bpf_needs()) {
            if (!listed_for(n, family)) continue;
            INFO("listed need: " << n.what);
            if (n.helper)
                CHECK(called.count(n.helper));
            else
                CHECK(use.fetch_atomics);
        }
        const auto& needs = bpf_needs();
        const bool atomics_listed = std::any_of(needs.begin(), needs.end(), [&](const BpfNeed& n) {
            return !n.helper && listed_for(n, family);
        });
        CHECK(use.fetch_atomics == atomics_listed);
    }
}

TEST_CASE("bpf needs: this host has them all, and the texts name the release", "[kernel-features]") {
    KernelTracepoints kernel;
    if (!kernel.vmlinux()) {
        WARN("skipped: no kernel BTF");
        return;
    }
    // The development kernel (6.18) is far past every need: a missing one here is a wrong probe.
    CHECK(missing_bpf_needs(kernel).empty());
    CHECK(missing_needs_text({}).empty());
    const BpfNeed& first = bpf_needs().front();
    const std::string text = missing_needs_text({&first});
    // A need listed for the tree is every family's; one listed for sock alone is not sched's.
    const auto& all = bpf_needs();
    std::vector<const BpfNeed*> every;
    for (const BpfNeed& n : all) every.push_back(&n);
    for (const BpfNeed* n : needs_of(every, ProbeFamily::jvm)) {
        const bool tree = std::find(n->families.begin(), n->families.end(), ProbeFamily::tree) != n->families.end();
        CHECK((tree || listed_for(*n, ProbeFamily::jvm)));
    }
    CHECK(needs_of(every, ProbeFamily::jvm).size() < all.size());
    CHECK(text.find("this kernel (Linux ") == 0);
    CHECK(text.find(std::string(first.what) + " (Linux " + first.since + "+)") != std::string::npos);
}

TEST_CASE("the kernel's BTF: one parse for whoever holds it at the same time, freed with the last holder",
          "[kernel-features]") {
    std::shared_ptr<btf> first = shared_vmlinux_btf();
    if (!first) {
        WARN("skipped: no kernel BTF");
        return;
    }
    // The collector's early parse and a source's questions, at once, from another thread.
    KernelTracepoints kernel;
    btf* asked = nullptr;
    std::thread([&] { asked = kernel.vmlinux(); }).join();
    CHECK(asked == first.get());
    CHECK(kernel.has_btf("sched_switch"));
    // Nobody else holds it: the last holder frees it, and the next asker parses anew.
    const std::weak_ptr<btf> kept = first;
    first.reset();
    CHECK(!kept.expired());  // the KernelTracepoints still holds it
    kernel = KernelTracepoints();
    CHECK(kept.expired());
    CHECK(shared_vmlinux_btf() != nullptr);
}

// Bytes this process has read through read() and its kind (/proc/self/io's rchar): a parse of
// the kernel's BTF reads the whole of it.
static uint64_t bytes_read() {
    std::ifstream io("/proc/self/io");
    std::string key;
    uint64_t value = 0;
    while (io >> key >> value)
        if (key == "rchar:") return value;
    return 0;
}

TEST_CASE("a loan of the kernel's BTF: libbpf's own parse in a load is the shared one, and libbpf's free spares it",
          "[kernel-features]") {
    struct stat st {};
    std::shared_ptr<btf> shared = shared_vmlinux_btf();
    if (!shared || stat("/sys/kernel/btf/vmlinux", &st) != 0) {
        WARN("skipped: no kernel BTF in /sys/kernel/btf");
        return;
    }
    // libbpf_find_vmlinux_btf_id parses the kernel's BTF in libbpf (btf__load_vmlinux_btf, through
    // its PLT), looks the name up and frees the parse (btf__free), as an object's load does.
    uint64_t before = bytes_read();
    const int alone = libbpf_find_vmlinux_btf_id("sched_switch", BPF_TRACE_RAW_TP);
    const uint64_t alone_read = bytes_read() - before;
    int lent = 0;
    uint64_t lent_read = 0;
    {
        const KernelBtfLoan loan;
        before = bytes_read();
        lent = libbpf_find_vmlinux_btf_id("sched_switch", BPF_TRACE_RAW_TP);
        lent_read = bytes_read() - before;
    }
    CHECK(alone > 0);
    CHECK(lent == alone);
    CHECK(alone_read >= static_cast<uint64_t>(st.st_size));  // without a loan: libbpf's own parse
    CHECK(lent_read < static_cast<uint64_t>(st.st_size) / 10);  // with one: no read of it at all
    // libbpf's free of what it was lent did not free it (a second free, at the last holder's
    // release below, would abort under the sanitizers): it still answers.
    CHECK(btf__find_by_name_kind(shared.get(), "btf_trace_sched_switch", BTF_KIND_TYPEDEF) == alone);
    // Outside a loan again, libbpf parses its own.
    before = bytes_read();
    CHECK(libbpf_find_vmlinux_btf_id("sched_switch", BPF_TRACE_RAW_TP) == alone);
    CHECK(bytes_read() - before >= static_cast<uint64_t>(st.st_size));
    // A libbpf that kept what it was lent past the load (to the object's close) holds it alive
    // until its free, loan and holders gone or not; then the last release frees it.
    btf* kept = nullptr;
    {
        const KernelBtfLoan loan;
        kept = btf__load_vmlinux_btf();  // libbpf's call, made from here
    }
    shared.reset();
    before = bytes_read();
    CHECK(shared_vmlinux_btf().get() == kept);  // the same parse, not a new one
    CHECK(bytes_read() - before < static_cast<uint64_t>(st.st_size) / 10);
    btf__free(kept);
    before = bytes_read();
    CHECK(shared_vmlinux_btf() != nullptr);  // nobody held it any more: parsed anew
    CHECK(bytes_read() - before >= static_cast<uint64_t>(st.st_size));
}
