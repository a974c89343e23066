// One exporter, several targets: the busiest hooks whose event names its process (socket
// reads and writes, switches and wakeups, the polls' entries and exits, accept and close), or
// a socket (arrivals, state changes, drops, resets), attached once for all of them
// (bpf/dispatch.bpf.c), not once per target. Each event goes to the program of the target that
// owns its process (bpf/owner.h: a byte per tgid, the target's slot + 1), with a tail call.
// Targets are given slots by the exporter; a target's process tree fills and clears its bytes
// (ProcessTree), and its sock and sched families put their programs in its slot (route()).
// Unshared, a host event on those hooks ran once per target and was rejected by all but one
// (docs/benchmarks.md, "Several targets in one exporter").
#pragma once
#include <bpf/libbpf.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/bpf_util.h"

namespace qscope {

class SharedHooks : public std::enable_shared_from_this<SharedHooks> {
public:
    enum class Hook {
        recv, send, wakeup, wakeup_new, poll_enter, poll_exit, sched_switch, accept4, accept, close,
        // The softirq hooks: their event names a socket, and goes to each target it concerns
        // (bpf/port_owner.h), each target's program handing it on to the next.
        data_ready, set_state, kfree_skb, rst_in, rst_out,
        // Before Linux 6.3 (reads, writes) and 6.6 (arrivals): the kernel functions behind the
        // tracepoints, by the way the sock family's attach plan chose (open()'s `fallbacks`).
        recv_fexit, send_fexit, recv_kprobe, recv_kretprobe, send_kprobe, send_kretprobe,
        data_ready_fentry, data_ready_kprobe
    };
    // Which targets a socket concerns (bpf/port_owner.h): those listening on its local port,
    // calling its remote port, or following Unix sockets (key 0).
    enum class PortOwners { listen, peer, unix_sockets };

    // Loads and attaches bpf/dispatch.bpf.c: each tracepoint hook this kernel has, the polls'
    // on the syscalls named (probes/sched/loops.h kLoopPolls) that it has, and the
    // `fallbacks` (recv_fexit .. data_ready_kprobe) the caller's plan takes where a tracepoint
    // is missing (probes/sock/attach_plan.h shared_fallbacks). Throws Error naming the step
    // that failed.
    static std::shared_ptr<SharedHooks> open(const std::vector<std::string>& polls,
                                             const std::vector<Hook>& fallbacks = {});
    ~SharedHooks();
    SharedHooks(const SharedHooks&) = delete;
    SharedHooks& operator=(const SharedHooks&) = delete;

    // The owner map, for tree.bpf.c's copy (bpf_map__reuse_fd, sized owner_words() first).
    int owner_map_fd() const;
    uint32_t owner_words() const { return words_; }
    static constexpr int kSlots = 64;  // bpf/owner.h QS_OWNER_SLOTS

    // tgid's owner byte from `from` to `to` (slot + 1, or 0). False when another owner holds it.
    bool swap_owner(int tgid, uint8_t from, uint8_t to);
    // Every byte `owner` holds back to 0: a target's attach ends.
    void release_all(uint8_t owner);
    // Slot `slot` among the targets `key` concerns (a port, or 0 for Unix sockets); and out of
    // every one (a target's sock family ends).
    void add_port_owner(PortOwners which, uint16_t key, int slot);
    void release_ports(int slot);

    // A program in a slot of a hook's table, taken out when this is destroyed (the table
    // would otherwise hold the program, and its object's maps, alive). Holds the tables too.
    class Route {
    public:
        Route() = default;
        Route(std::shared_ptr<SharedHooks> hooks, int table_fd, int key)
            : hooks_(std::move(hooks)), fd_(table_fd), key_(key) {}
        Route(Route&& o) noexcept : hooks_(std::move(o.hooks_)), fd_(o.fd_), key_(o.key_) { o.fd_ = -1; }
        Route& operator=(Route&& o) noexcept;
        Route(const Route&) = delete;
        Route& operator=(const Route&) = delete;
        ~Route() { clear(); }

    private:
        void clear() noexcept;
        std::shared_ptr<SharedHooks> hooks_;
        int fd_ = -1;
        int key_ = 0;
    };
    // Before `obj` loads: its owner map (bpf/owner.h qs_owner), its copies of the `hooks`'
    // tables (by the tables' names) and, when it reads them, of the port owners
    // (bpf/port_owner.h) become these, for programs that read owners and hand events on
    // themselves (sched.bpf.c's qs_sched_switch, sock.bpf.c's softirq programs). Throws Error
    // naming `family`.
    void share_maps(bpf_object* obj, std::initializer_list<Hook> hooks, const char* family) const;
    // The hook's shared program is attached (the kernel has its tracepoint); a target's own
    // program attaches itself where it is not.
    bool has(Hook hook) const;
    // `syscall`: for poll_exit, the poll's number (its exit program's place). Throws Error
    // when the kernel refuses the program in the table.
    Route route(Hook hook, int slot, const bpf_program* prog, int syscall = -1);
    // "sock_recv_length (shared by the exporter's targets: qs_all_recv, then qs_recv in slot
    // 1)": what the attach listing says of a hook a target reaches through the shared one.
    std::string via(const std::string& hook, Hook shared, const bpf_program* prog, int slot) const;

private:
    SharedHooks();
    struct Bpf;
    std::unique_ptr<Bpf> bpf_;
    std::vector<Hook> attached_;
    uint32_t words_ = 0;  // the owner map's
};

}  // namespace qscope
