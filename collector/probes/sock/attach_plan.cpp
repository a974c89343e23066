#include "probes/sock/attach_plan.h"

#include <cstdlib>
#include <iterator>
#include <map>
#include <mutex>

#include "engine/kernel_features.h"
#include "model/errors.h"

namespace qscope {

namespace {

struct HookSpec {
    SockHook hook;
    const char* tracepoint;
    const char* since;            // the kernel that added the tracepoint
    const char* function;         // the kernel function every event of the tracepoint passes
    bool at_exit;                 // needs the return value: fexit / kretprobe
    bool required;                // without it the requests section would be wrong
    const char* fallback_caveat;  // what the function misses that the tracepoint sees ("": nothing)
    const char* missing;          // what is lost when there is no way in at all
    const char* syscalls;         // the syscall exits that give the same fact ("": none do)
    const char* syscall_caveat;   // what those miss
};

// One row per hook; the order is SockHook's.
constexpr HookSpec kSpecs[] = {
    // tcp_*msg, not sock_*msg: Debian 12's 6.1 inlines sock_sendmsg into its callers
    // (docs/kernel.md "Older kernels"). Every TCP read and write reaches these.
    {SockHook::recv, "sock_recv_length", "6.3", "tcp_recvmsg", true, true, "", "the app's reads",
     "syscalls/sys_exit_{read,readv,recvfrom,recvmsg}",
     "reads by recvmmsg, splice or io_uring are not seen (a connection read only that way looks idle)"},
    {SockHook::send, "sock_send_length", "6.3", "tcp_sendmsg", true, true, "", "the app's writes",
     "syscalls/sys_exit_{write,writev,sendto,sendmsg,sendfile64}",
     "writes by sendmmsg, splice or io_uring are not seen (their requests never complete); a response "
     "sent with sendfile has no status"},
    {SockHook::data_ready, "sk_data_ready", "6.6", "sock_def_readable", false, false,
     "sockets whose data-ready callback was replaced (kTLS, sockmap) show no connector queue",
     "no connector queue (requests.waiting_unread), no exact accept-queue peak (sampled from sock_diag)", "", ""},
};

}  // namespace

SockAttachPlan plan_sock_attach(const KernelOffer& offer) {
    SockAttachPlan plan;
    for (const HookSpec& s : kSpecs) {
        HookChoice c;
        c.hook = s.hook;
        c.tracepoint = s.tracepoint;
        const bool fn = offer.functions.count(s.function) > 0;
        if (offer.tracepoints.count(s.tracepoint)) {
            c.attach = AttachType::tp_btf;
            c.via = s.tracepoint;
        } else if (fn && offer.fentry) {
            c.attach = s.at_exit ? AttachType::fexit : AttachType::fentry;
            c.via = s.function;
        } else if (fn && offer.kprobes) {
            c.attach = s.at_exit ? AttachType::kretprobe : AttachType::kprobe;
            c.via = s.function;
        } else if (*s.syscalls && offer.syscall_exits) {
            c.attach = AttachType::tracepoint;
            c.via = s.syscalls;
        }
        const std::string tp = std::string("tracepoint ") + s.tracepoint + " (Linux " + s.since + "+)";
        if (c.attach == AttachType::tp_btf) {
            // exact: nothing to say
        } else if (c.attach != AttachType::none) {
            c.caveat = c.attach == AttachType::tracepoint ? s.syscall_caveat : s.fallback_caveat;
            // A fallback that sees every event the tracepoint would (for TCP, all the family
            // follows) is named in probe_attach only; one that misses some is a warning too.
            if (!c.caveat.empty())
                c.warning = std::string("sock: ") + s.tracepoint + " via " + contract_name(c.attach) + " " + c.via +
                            " (no " + tp + "): " + c.caveat;
        } else {
            // Here the function exists only if neither fentry nor kprobes work.
            std::string why = fn ? "fentry/fexit do not load here and there are no kprobes"
                                 : std::string("no BTF for kernel function ") + s.function;
            if (*s.syscalls) why += ", and tracefs lacks " + std::string(s.syscalls);
            c.caveat = s.missing;
            if (s.required && plan.error.empty())  // the first (the reads) says it all
                plan.error = std::string("sock: the kernel offers no way to see ") + s.missing + ": no " + tp +
                             ", and " + why + "; follow the threads alone with --no-requests";
            else if (!s.required)
                c.warning = std::string("sock: hook unavailable: ") + tp + " (" + why + "): " + s.missing;
        }
        if (!c.warning.empty()) plan.warnings.push_back(c.warning);
        plan.hooks.push_back(std::move(c));
    }
    return plan;
}

KernelOffer probe_sock_offer(KernelTracepoints& tps, const std::string& at_most, bool always) {
    KernelOffer offer;
    for (const HookSpec& s : kSpecs)
        if (tps.has_btf(s.tracepoint)) offer.tracepoints.insert(s.tracepoint);
    offer = restrict_offer(std::move(offer), at_most);
    if (!always && offer.tracepoints.size() == std::size(kSpecs)) return offer;
    for (const HookSpec& s : kSpecs) {
        const int n = tps.function_args(s.function);
        // tcp_recvmsg: (sk, msg, len, flags, addr_len) since 5.19, with `nonblock` before
        // flags until then; another shape would be read wrong, so it is no way in.
        if (n < 0 || (s.hook == SockHook::recv && n != 5 && n != 6)) continue;
        offer.functions.insert(s.function);
    }
    offer.fentry_error = fentry_probe(tps, "tcp_sendmsg");
    offer.fentry = offer.fentry_error.empty();
    offer.kprobes = kprobes_available();
    offer.syscall_exits = true;
    const auto have_exits = [&](const auto& names) {
        for (const char* name : names)
            offer.syscall_exits &= KernelTracepoints::has_tracefs("syscalls", std::string("sys_exit_") + name);
    };
    have_exits(kSyscallReads);
    have_exits(kSyscallWrites);
    if (!at_most.empty()) offer = restrict_offer(std::move(offer), at_most);
    return offer;
}

namespace {
// QSCOPE_SOCK_ATTACH's value, "" when unset: what every plan of this process is restricted to.
std::string sock_attach_limit() {
    const char* at_most = std::getenv("QSCOPE_SOCK_ATTACH");
    return at_most ? at_most : "";
}
}  // namespace

KernelOffer sock_offer(KernelTracepoints& tps) {
    static std::mutex mutex;
    static std::map<std::string, KernelOffer> offers;  // by sock_attach_limit(), set by tests
    const std::string at_most = sock_attach_limit();
    const std::lock_guard lock(mutex);
    auto it = offers.find(at_most);
    if (it == offers.end()) it = offers.emplace(at_most, probe_sock_offer(tps, at_most)).first;
    return it->second;
}

std::vector<SharedHooks::Hook> shared_fallbacks(const SockAttachPlan& plan) {
    using H = SharedHooks::Hook;
    std::vector<H> out;
    const auto take = [&](SockHook hook, std::initializer_list<H> trampoline, std::initializer_list<H> probes) {
        switch (plan.of(hook).attach) {
            case AttachType::fentry:
            case AttachType::fexit: out.insert(out.end(), trampoline); break;
            case AttachType::kprobe:
            case AttachType::kretprobe: out.insert(out.end(), probes); break;
            default: break;
        }
    };
    take(SockHook::recv, {H::recv_fexit}, {H::recv_kprobe, H::recv_kretprobe});
    take(SockHook::send, {H::send_fexit}, {H::send_kprobe, H::send_kretprobe});
    take(SockHook::data_ready, {H::data_ready_fentry}, {H::data_ready_kprobe});
    return out;
}

KernelOffer restrict_offer(KernelOffer offer, const std::string& at_most) {
    if (at_most.empty() || at_most == "tp_btf") return offer;
    if (at_most != "fentry" && at_most != "kprobe" && at_most != "syscall")
        throw Error(Exit::usage, "QSCOPE_SOCK_ATTACH=" + at_most + ": expected tp_btf, fentry, kprobe or syscall");
    for (const HookSpec& s : kSpecs) offer.tracepoints.erase(s.tracepoint);
    if (at_most != "fentry") offer.fentry = false;
    if (at_most == "syscall") offer.kprobes = false;
    return offer;
}

}  // namespace qscope
