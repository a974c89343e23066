#include "engine/shared_hooks.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <string>

#include "dispatch.skel.h"
#include "engine/kernel_features.h"
#include "model/errors.h"
#include "owner.h"

namespace qscope {

static_assert(SharedHooks::kSlots == QS_OWNER_SLOTS, "bpf/owner.h: QS_OWNER_SLOTS");

namespace {
constexpr uint32_t kPorts = 65536;  // the port owners' entries (bpf/port_owner.h)
}

struct SharedHooks::Bpf {
    QSCOPE_SKEL_PTR(dispatch) skel;
    std::vector<Link> links;
    MappedWords owner;  // the owner map
    MappedWords listen_owners, peer_owners, unix_owners;  // bpf/port_owner.h
    MappedWords& port_owners(PortOwners which) {
        switch (which) {
            case PortOwners::listen: return listen_owners;
            case PortOwners::peer: return peer_owners;
            case PortOwners::unix_sockets: break;
        }
        return unix_owners;
    }
};

SharedHooks::SharedHooks() : bpf_(std::make_unique<Bpf>()) {}

SharedHooks::~SharedHooks() = default;

namespace {

struct HookProgram {
    SharedHooks::Hook hook;
    const char* tracepoint;  // its BTF tracepoint, or its syscall tracepoint ("sys_enter_close")
};

// A hook's shared program and the table it jumps through.
struct HookParts {
    bpf_program* prog;
    bpf_map* table;
};

HookParts parts_of(dispatch_bpf* skel, SharedHooks::Hook hook) {
    auto& p = skel->progs;
    auto& m = skel->maps;
    switch (hook) {
        case SharedHooks::Hook::recv: return {p.qs_all_recv, m.recv_targets};
        case SharedHooks::Hook::send: return {p.qs_all_send, m.send_targets};
        case SharedHooks::Hook::wakeup: return {p.qs_all_wakeup, m.wakeup_targets};
        case SharedHooks::Hook::wakeup_new: return {p.qs_all_wakeup_new, m.wakeup_new_targets};
        case SharedHooks::Hook::poll_enter: return {p.qs_all_poll_in, m.poll_enter_targets};
        case SharedHooks::Hook::poll_exit: return {p.qs_all_poll_out, m.poll_exit_targets};
        case SharedHooks::Hook::sched_switch: return {p.qs_all_switch, m.switch_targets};
        case SharedHooks::Hook::accept4: return {p.qs_all_accept4, m.accept4_targets};
        case SharedHooks::Hook::accept: return {p.qs_all_accept, m.accept_targets};
        case SharedHooks::Hook::close: return {p.qs_all_close, m.close_targets};
        case SharedHooks::Hook::data_ready: return {p.qs_all_data_ready, m.data_ready_targets};
        case SharedHooks::Hook::set_state: return {p.qs_all_set_state, m.set_state_targets};
        case SharedHooks::Hook::kfree_skb: return {p.qs_all_kfree_skb, m.kfree_skb_targets};
        case SharedHooks::Hook::rst_in: return {p.qs_all_rst_in, m.rst_in_targets};
        case SharedHooks::Hook::rst_out: return {p.qs_all_rst_out, m.rst_out_targets};
        case SharedHooks::Hook::recv_fexit: return {p.qs_all_recv_fexit, m.recv_fexit_targets};
        case SharedHooks::Hook::send_fexit: return {p.qs_all_send_fexit, m.send_fexit_targets};
        case SharedHooks::Hook::recv_kprobe: return {p.qs_all_recv_kprobe, m.recv_kprobe_targets};
        case SharedHooks::Hook::recv_kretprobe: return {p.qs_all_recv_kretprobe, m.recv_kretprobe_targets};
        case SharedHooks::Hook::send_kprobe: return {p.qs_all_send_kprobe, m.send_kprobe_targets};
        case SharedHooks::Hook::send_kretprobe: return {p.qs_all_send_kretprobe, m.send_kretprobe_targets};
        case SharedHooks::Hook::data_ready_fentry: return {p.qs_all_data_ready_fentry, m.data_ready_fentry_targets};
        case SharedHooks::Hook::data_ready_kprobe: return {p.qs_all_data_ready_kprobe, m.data_ready_kprobe_targets};
    }
    return {nullptr, nullptr};
}

bpf_program* program_of(dispatch_bpf* skel, SharedHooks::Hook hook) { return parts_of(skel, hook).prog; }
bpf_map* table_of(dispatch_bpf* skel, SharedHooks::Hook hook) { return parts_of(skel, hook).table; }

constexpr SharedHooks::Hook kFallbacks[] = {
    SharedHooks::Hook::recv_fexit,     SharedHooks::Hook::send_fexit,        SharedHooks::Hook::recv_kprobe,
    SharedHooks::Hook::recv_kretprobe, SharedHooks::Hook::send_kprobe,       SharedHooks::Hook::send_kretprobe,
    SharedHooks::Hook::data_ready_fentry, SharedHooks::Hook::data_ready_kprobe};
}  // namespace

std::shared_ptr<SharedHooks> SharedHooks::open(const std::vector<std::string>& polls, const std::vector<Hook>& fallbacks) {
    std::shared_ptr<SharedHooks> h(new SharedHooks());
    // A byte per possible tgid, as the tree's bitmap has a bit (process_tree.cpp).
    h->words_ = static_cast<uint32_t>((pid_max() + 7) / 8);
    auto& b = *h->bpf_;
    b.skel.reset(dispatch_bpf::open());
    if (!b.skel) throw_bpf_error("shared hooks: opening BPF object", errno ? errno : EINVAL);
    bpf_check(bpf_map__set_max_entries(b.skel->maps.qs_owner, h->words_), "shared hooks: sizing map qs_owner");
    for (bpf_map* m : {b.skel->maps.qs_listen_owners, b.skel->maps.qs_peer_owners})
        bpf_check(bpf_map__set_max_entries(m, kPorts), std::string("shared hooks: sizing map ") + bpf_map__name(m));
    // What this kernel has: a hook it lacks is not loaded, and each target attaches its own
    // program there (the one the sock family's attach plan chose: fexit, a kprobe).
    KernelTracepoints tps;
    std::vector<std::string> here;
    for (const std::string& p : polls)
        if (KernelTracepoints::has_tracefs("syscalls", "sys_enter_" + p) && KernelTracepoints::has_tracefs("syscalls", "sys_exit_" + p))
            here.push_back(p);
    const HookProgram btf_hooks[] = {{Hook::recv, "sock_recv_length"}, {Hook::send, "sock_send_length"},
                                     {Hook::wakeup, "sched_wakeup"}, {Hook::wakeup_new, "sched_wakeup_new"},
                                     {Hook::sched_switch, "sched_switch"}, {Hook::data_ready, "sk_data_ready"},
                                     {Hook::set_state, "inet_sock_set_state"}, {Hook::rst_in, "tcp_receive_reset"},
                                     {Hook::rst_out, "tcp_send_reset"}, {Hook::kfree_skb, "kfree_skb"}};
    const HookProgram syscall_hooks[] = {
        {Hook::accept4, "sys_exit_accept4"}, {Hook::accept, "sys_exit_accept"}, {Hook::close, "sys_enter_close"}};
    for (const HookProgram& hp : btf_hooks)
        if (!tps.has_btf(hp.tracepoint)) bpf_program__set_autoload(program_of(b.skel.get(), hp.hook), false);
    if (!kfree_skb_tells_overflows(tps)) bpf_program__set_autoload(b.skel->progs.qs_all_kfree_skb, false);
    for (const HookProgram& hp : syscall_hooks)
        if (!KernelTracepoints::has_tracefs("syscalls", hp.tracepoint))
            bpf_program__set_autoload(program_of(b.skel.get(), hp.hook), false);
    if (here.empty())
        for (Hook hk : {Hook::poll_enter, Hook::poll_exit}) bpf_program__set_autoload(program_of(b.skel.get(), hk), false);
    // A fallback's function may be missing, or in a shape the programs do not know: only the
    // ways the caller's plan took, which its own programs load on.
    for (Hook hk : kFallbacks)
        bpf_program__set_autoload(program_of(b.skel.get(), hk),
                                  std::find(fallbacks.begin(), fallbacks.end(), hk) != fallbacks.end());
    const KernelBtfLoan loan;
    if (int err = dispatch_bpf::load(b.skel.get()))
        throw_bpf_error("shared hooks: loading BPF programs (dispatch.bpf.c)", err);
    b.owner = MappedWords(b.skel->maps.qs_owner, h->words_, "shared hooks: mmap of map qs_owner");
    b.listen_owners = MappedWords(b.skel->maps.qs_listen_owners, kPorts, "shared hooks: mmap of map qs_listen_owners");
    b.peer_owners = MappedWords(b.skel->maps.qs_peer_owners, kPorts, "shared hooks: mmap of map qs_peer_owners");
    b.unix_owners = MappedWords(b.skel->maps.qs_unix_owners, 1, "shared hooks: mmap of map qs_unix_owners");
    std::vector<Hook> single;
    for (const HookProgram& hp : btf_hooks) single.push_back(hp.hook);
    for (const HookProgram& hp : syscall_hooks) single.push_back(hp.hook);
    single.insert(single.end(), std::begin(kFallbacks), std::end(kFallbacks));
    for (Hook hook : single) {
        bpf_program* p = program_of(b.skel.get(), hook);
        if (!bpf_program__autoload(p)) continue;
        b.links.push_back(attach_program(p, std::string("shared hooks: attaching ") + bpf_program__name(p)));
        h->attached_.push_back(hook);
    }
    for (const std::string& name : here)
        for (const auto& [hk, dir] : {std::pair{Hook::poll_enter, "sys_enter_"}, std::pair{Hook::poll_exit, "sys_exit_"}}) {
            Link l(bpf_program__attach_tracepoint(program_of(b.skel.get(), hk), "syscalls", (dir + name).c_str()));
            if (!l) throw_bpf_error(std::string("shared hooks: attaching tracepoint syscalls/") + dir + name, errno);
            b.links.push_back(std::move(l));
        }
    if (!here.empty()) h->attached_.insert(h->attached_.end(), {Hook::poll_enter, Hook::poll_exit});
    return h;
}

void SharedHooks::share_maps(bpf_object* obj, std::initializer_list<Hook> hooks, const char* family) const {
    const std::string f = family;
    const auto share = [&](const bpf_map* ours, bool required) {
        bpf_map* theirs = bpf_object__find_map_by_name(obj, bpf_map__name(ours));
        if (!theirs) {
            if (required) throw Error(Exit::failure, f + ": BPF object lacks the shared hooks' map " + bpf_map__name(ours));
            return;
        }
        // Sized as ours first: libbpf checks a reused map's size against the object's.
        bpf_check(bpf_map__set_max_entries(theirs, bpf_map__max_entries(ours)), f + ": sizing map " + bpf_map__name(ours));
        bpf_check(bpf_map__reuse_fd(theirs, bpf_map__fd(ours)), f + ": sharing map " + bpf_map__name(ours));
    };
    auto& m = bpf_->skel->maps;
    share(m.qs_owner, true);
    for (Hook hook : hooks) share(table_of(bpf_->skel.get(), hook), true);
    for (const bpf_map* owners : {m.qs_listen_owners, m.qs_peer_owners, m.qs_unix_owners}) share(owners, false);
}

bool SharedHooks::has(Hook hook) const {
    return std::find(attached_.begin(), attached_.end(), hook) != attached_.end();
}

int SharedHooks::owner_map_fd() const { return bpf_map__fd(bpf_->skel->maps.qs_owner); }

// As bpf/owner.h's qs_owner_swap, from user space: the same words, the same atomics.
bool SharedHooks::swap_owner(int tgid, uint8_t from, uint8_t to) {
    const uint32_t w = static_cast<uint32_t>(tgid) >> 3;
    if (tgid < 0 || w >= words_) return false;
    uint64_t* owner = bpf_->owner.data();
    const unsigned shift = (static_cast<uint32_t>(tgid) & 7) * 8;
    uint64_t cur = __atomic_load_n(&owner[w], __ATOMIC_SEQ_CST);
    for (;;) {
        const auto byte = static_cast<uint8_t>((cur >> shift) & 0xff);
        if (byte != from) return byte == to;
        const uint64_t next = (cur & ~(0xffULL << shift)) | (static_cast<uint64_t>(to) << shift);
        if (__atomic_compare_exchange_n(&owner[w], &cur, next, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) return true;
    }
}

void SharedHooks::release_all(uint8_t owner) {
    if (!owner) return;
    for (uint32_t w = 0; w < words_; ++w) {
        if (__atomic_load_n(&bpf_->owner.data()[w], __ATOMIC_RELAXED) == 0) continue;
        for (int i = 0; i < 8; ++i) swap_owner(static_cast<int>(w * 8 + i), owner, 0);
    }
}

void SharedHooks::add_port_owner(PortOwners which, uint16_t key, int slot) {
    MappedWords& words = bpf_->port_owners(which);
    if (slot < 0 || slot >= kSlots || key >= words.size()) return;
    __atomic_fetch_or(&words.data()[key], 1ULL << slot, __ATOMIC_RELEASE);
}

void SharedHooks::release_ports(int slot) {
    if (slot < 0 || slot >= kSlots) return;
    const uint64_t keep = ~(1ULL << slot);
    for (PortOwners which : {PortOwners::listen, PortOwners::peer, PortOwners::unix_sockets}) {
        MappedWords& words = bpf_->port_owners(which);
        for (uint32_t i = 0; i < words.size(); ++i)
            if (__atomic_load_n(&words.data()[i], __ATOMIC_RELAXED) & ~keep) __atomic_fetch_and(&words.data()[i], keep, __ATOMIC_RELEASE);
    }
}

SharedHooks::Route SharedHooks::route(Hook hook, int slot, const bpf_program* prog, int syscall) {
    if (slot < 0 || slot >= kSlots) throw Error(Exit::failure, "shared hooks: no slot " + std::to_string(slot));
    __u32 key = static_cast<__u32>(slot);
    if (hook == Hook::poll_exit) {
        const int i = qs_poll_index(syscall);
        if (i < 0) throw Error(Exit::failure, "shared hooks: syscall " + std::to_string(syscall) + " is no poll");
        key = static_cast<__u32>(slot * QS_OWNER_POLLS + i);
    }
    const int fd = bpf_map__fd(table_of(bpf_->skel.get(), hook));
    const __u32 value = static_cast<__u32>(bpf_program__fd(prog));
    if (bpf_map_update_elem(fd, &key, &value, BPF_ANY))
        throw_bpf_error(std::string("shared hooks: routing ") + bpf_program__name(program_of(bpf_->skel.get(), hook)) +
                            " to " + bpf_program__name(prog),
                        errno);
    return Route(shared_from_this(), fd, static_cast<int>(key));
}

std::string SharedHooks::via(const std::string& hook, Hook shared, const bpf_program* prog, int slot) const {
    return hook + " (shared by the exporter's targets: " + bpf_program__name(program_of(bpf_->skel.get(), shared)) +
           ", then " + bpf_program__name(prog) + " in slot " + std::to_string(slot) + ")";
}

SharedHooks::Route& SharedHooks::Route::operator=(Route&& o) noexcept {
    if (this != &o) {
        clear();
        hooks_ = std::move(o.hooks_);
        fd_ = o.fd_;
        key_ = o.key_;
        o.fd_ = -1;
    }
    return *this;
}

void SharedHooks::Route::clear() noexcept {
    if (fd_ < 0) return;
    const __u32 key = static_cast<__u32>(key_);
    bpf_map_delete_elem(fd_, &key);  // hooks_ keeps the table's fd open until here
    fd_ = -1;
    hooks_.reset();
}

}  // namespace qscope
