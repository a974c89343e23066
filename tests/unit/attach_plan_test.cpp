// The sock family's attach strategy (probes/sock/attach_plan.h): given what a kernel offers,
// which attach type each hook gets and what the output warns about. The offers below are
// the kernels we know: this development kernel (6.18: tracepoints, no fentry, no kprobes),
// Debian 12's 6.1 (no sock_*_length, no sk_data_ready; fentry and kprobes), and made-up
// corners (kprobes only, syscall tracepoints only, nothing at all).
#include <catch2/catch.hpp>

#include "model/errors.h"
#include "probes/sock/attach_plan.h"

using namespace qscope;

namespace {

const std::set<std::string> kAllFunctions = {"tcp_recvmsg", "tcp_sendmsg", "sock_def_readable"};

KernelOffer dev_6_18() {
    KernelOffer o;
    o.tracepoints = {"sock_recv_length", "sock_send_length", "sk_data_ready"};
    o.functions = kAllFunctions;
    o.syscall_exits = true;
    return o;  // fentry fails with EPERM, CONFIG_KPROBES off
}

KernelOffer debian_6_1() {
    KernelOffer o;
    o.functions = kAllFunctions;
    o.fentry = true;
    o.kprobes = true;
    o.syscall_exits = true;
    return o;
}

bool any_warning_has(const SockAttachPlan& p, const std::string& needle) {
    for (const auto& w : p.warnings)
        if (w.find(needle) != std::string::npos) return true;
    return false;
}

}  // namespace

TEST_CASE("attach plan: every tracepoint present -> tp_btf everywhere, no warnings", "[attach]") {
    const SockAttachPlan p = plan_sock_attach(dev_6_18());
    REQUIRE(p.error.empty());
    REQUIRE(p.hooks.size() == 3);
    for (const auto& h : p.hooks) {
        CHECK(h.attach == AttachType::tp_btf);
        CHECK(h.via == h.tracepoint);
        CHECK(h.caveat.empty());
    }
    CHECK(p.of(SockHook::recv).tracepoint == "sock_recv_length");
    CHECK(p.of(SockHook::send).tracepoint == "sock_send_length");
    CHECK(p.of(SockHook::data_ready).tracepoint == "sk_data_ready");
    CHECK(p.warnings.empty());
    CHECK(shared_fallbacks(p).empty());  // the tracepoints are shared as such
}

TEST_CASE("attach plan: Debian 12 (6.1) -> fexit on tcp_recvmsg/tcp_sendmsg, fentry on sock_def_readable",
          "[attach]") {
    const SockAttachPlan p = plan_sock_attach(debian_6_1());
    REQUIRE(p.error.empty());
    CHECK(p.of(SockHook::recv).attach == AttachType::fexit);
    CHECK(p.of(SockHook::recv).via == "tcp_recvmsg");
    CHECK(p.of(SockHook::send).attach == AttachType::fexit);
    CHECK(p.of(SockHook::send).via == "tcp_sendmsg");
    CHECK(p.of(SockHook::data_ready).attach == AttachType::fentry);
    CHECK(p.of(SockHook::data_ready).via == "sock_def_readable");
    // Every TCP read and write passes tcp_recvmsg/tcp_sendmsg: exact, nothing to warn about.
    // sock_def_readable misses sockets whose callback was replaced: that one warns.
    CHECK(p.of(SockHook::recv).caveat.empty());
    CHECK(p.of(SockHook::send).caveat.empty());
    REQUIRE(p.warnings.size() == 1);
    CHECK(any_warning_has(p, "sk_data_ready via fentry sock_def_readable (no tracepoint sk_data_ready (Linux 6.6+))"));
    CHECK(any_warning_has(p, "kTLS"));
    // What an exporter of several targets then shares: the three functions' programs.
    using H = SharedHooks::Hook;
    CHECK(shared_fallbacks(p) == std::vector<H>{H::recv_fexit, H::send_fexit, H::data_ready_fentry});
}

TEST_CASE("attach plan: 6.3-6.5 (sock_*_length but no sk_data_ready) mixes tp_btf and fentry", "[attach]") {
    KernelOffer o = debian_6_1();
    o.tracepoints = {"sock_recv_length", "sock_send_length"};
    const SockAttachPlan p = plan_sock_attach(o);
    REQUIRE(p.error.empty());
    CHECK(p.of(SockHook::recv).attach == AttachType::tp_btf);
    CHECK(p.of(SockHook::send).attach == AttachType::tp_btf);
    CHECK(p.of(SockHook::data_ready).attach == AttachType::fentry);
    CHECK(p.warnings.size() == 1);
    // An exporter shares the tracepoints anyway; of the fallbacks, the arrivals' fentry.
    CHECK(shared_fallbacks(p) == std::vector<SharedHooks::Hook>{SharedHooks::Hook::data_ready_fentry});
}

TEST_CASE("attach plan: no fentry (e.g. EPERM) but kprobes -> kretprobe / kprobe", "[attach]") {
    KernelOffer o = debian_6_1();
    o.fentry = false;
    const SockAttachPlan p = plan_sock_attach(o);
    REQUIRE(p.error.empty());
    CHECK(p.of(SockHook::recv).attach == AttachType::kretprobe);
    CHECK(p.of(SockHook::send).attach == AttachType::kretprobe);
    CHECK(p.of(SockHook::data_ready).attach == AttachType::kprobe);
    CHECK(p.of(SockHook::data_ready).via == "sock_def_readable");
    CHECK(p.of(SockHook::recv).via == "tcp_recvmsg");
    CHECK(any_warning_has(p, "sk_data_ready via kprobe sock_def_readable"));
    using H = SharedHooks::Hook;
    CHECK(shared_fallbacks(p) ==
          std::vector<H>{H::recv_kprobe, H::recv_kretprobe, H::send_kprobe, H::send_kretprobe, H::data_ready_kprobe});
}

TEST_CASE("attach plan: a function without BTF is not a way in", "[attach]") {
    KernelOffer o = debian_6_1();
    o.functions.erase("sock_def_readable");
    const SockAttachPlan p = plan_sock_attach(o);
    REQUIRE(p.error.empty());   // sk_data_ready is optional
    CHECK(p.of(SockHook::data_ready).attach == AttachType::none);
    CHECK(any_warning_has(p, "hook unavailable: tracepoint sk_data_ready (Linux 6.6+) (no BTF for kernel function "
                             "sock_def_readable): no connector queue"));
}

TEST_CASE("attach plan: no tracepoint, no fentry, no kprobes -> the syscalls' exits for reads and writes",
          "[attach]") {
    // A kernel with kprobes compiled out and fentry refused (this development kernel, had it
    // no sock_*_length tracepoints).
    KernelOffer o;
    o.functions = kAllFunctions;
    o.syscall_exits = true;
    const SockAttachPlan p = plan_sock_attach(o);
    REQUIRE(p.error.empty());
    CHECK(p.of(SockHook::recv).attach == AttachType::tracepoint);
    CHECK(p.of(SockHook::recv).via == "syscalls/sys_exit_{read,readv,recvfrom,recvmsg}");
    CHECK(p.of(SockHook::send).attach == AttachType::tracepoint);
    CHECK(p.of(SockHook::send).via == "syscalls/sys_exit_{write,writev,sendto,sendmsg,sendfile64}");
    // No syscall tells when bytes arrive: the connector queue is lost, and said so.
    CHECK(p.of(SockHook::data_ready).attach == AttachType::none);
    // What the syscalls miss is named: recvmmsg/sendmmsg, splice, io_uring, sendfile's status.
    REQUIRE(p.warnings.size() == 3);
    CHECK(any_warning_has(p, "sock_recv_length via tracepoint syscalls/sys_exit_{read,readv,recvfrom,recvmsg} "
                             "(no tracepoint sock_recv_length (Linux 6.3+)): reads by recvmmsg, splice or io_uring"));
    CHECK(any_warning_has(p, "writes by sendmmsg, splice or io_uring are not seen"));
    CHECK(any_warning_has(p, "sendfile has no status"));
    CHECK(any_warning_has(p, "hook unavailable: tracepoint sk_data_ready (Linux 6.6+)"));
    // Each target keeps its own syscall exits: none shared.
    CHECK(shared_fallbacks(p).empty());
}

TEST_CASE("attach plan: kprobes are preferred to the syscalls' exits", "[attach]") {
    KernelOffer o = debian_6_1();
    o.fentry = false;
    const SockAttachPlan p = plan_sock_attach(o);
    CHECK(p.of(SockHook::recv).attach == AttachType::kretprobe);
    CHECK(p.of(SockHook::send).attach == AttachType::kretprobe);
}

TEST_CASE("attach plan: no tracepoint, no fentry, no kprobes, no syscall exits -> an error naming what is missing",
          "[attach]") {
    KernelOffer o;
    o.functions = kAllFunctions;
    const SockAttachPlan p = plan_sock_attach(o);
    CHECK(p.of(SockHook::recv).attach == AttachType::none);
    CHECK(p.of(SockHook::send).attach == AttachType::none);
    REQUIRE_FALSE(p.error.empty());
    CHECK(p.error.find("no tracepoint sock_recv_length (Linux 6.3+)") != std::string::npos);
    CHECK(p.error.find("fentry/fexit do not load here and there are no kprobes") != std::string::npos);
    CHECK(p.error.find("tracefs lacks syscalls/sys_exit_{read,readv,recvfrom,recvmsg}") != std::string::npos);
    CHECK(p.error.find("--no-requests") != std::string::npos);
}

TEST_CASE("attach plan: QSCOPE_SOCK_ATTACH restricts the offer (to exercise fallbacks)", "[attach]") {
    CHECK(plan_sock_attach(restrict_offer(dev_6_18(), "")).of(SockHook::recv).attach == AttachType::tp_btf);
    CHECK(plan_sock_attach(restrict_offer(dev_6_18(), "tp_btf")).of(SockHook::recv).attach == AttachType::tp_btf);
    KernelOffer all = debian_6_1();
    all.tracepoints = dev_6_18().tracepoints;
    const SockAttachPlan f = plan_sock_attach(restrict_offer(all, "fentry"));
    CHECK(f.of(SockHook::recv).attach == AttachType::fexit);
    CHECK(f.of(SockHook::data_ready).attach == AttachType::fentry);
    const SockAttachPlan k = plan_sock_attach(restrict_offer(all, "kprobe"));
    CHECK(k.of(SockHook::recv).attach == AttachType::kretprobe);
    CHECK(k.of(SockHook::data_ready).attach == AttachType::kprobe);
    // On this development kernel: tracepoints dropped, and fentry and kprobes are absent anyway.
    const SockAttachPlan sc = plan_sock_attach(restrict_offer(all, "syscall"));
    CHECK(sc.of(SockHook::recv).attach == AttachType::tracepoint);
    CHECK(sc.of(SockHook::send).attach == AttachType::tracepoint);
    CHECK(sc.of(SockHook::data_ready).attach == AttachType::none);
    CHECK(plan_sock_attach(restrict_offer(dev_6_18(), "syscall")).of(SockHook::recv).attach == AttachType::tracepoint);
    CHECK_THROWS_AS(restrict_offer(all, "uprobe"), Error);
}
