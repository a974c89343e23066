// What the user asked for, shared by every subcommand and handed to every source.
#pragma once
#include <cstdint>
#include <string>

namespace qscope {

// Which processes run the socket probes' arrival program (--scope): `cgroup` attaches it to
// the target's cgroup alone, `global` to the sk_data_ready tracepoint every process runs,
// `automatic` takes cgroup when the target's sockets are all charged to a cgroup of its own.
enum class SockScope { automatic, cgroup, global };

struct Config {
    int pid = 0;
    // Observe the PID's descendants too (forked before or after the attach): nginx, PostgreSQL,
    // gunicorn and php-fpm serve from children of the PID an operator has at hand.
    bool follow_children = true;
    double interval_seconds = 1.0;      // collector tick
    std::string carriers_regex;         // empty: auto-detect (JVM ForkJoinPool carriers)
    // Which probe families to attach: each costs something on every event of its kind.
    bool want_requests = true;          // accept queue, connector, in flight, downstream
    bool want_threads = true;           // thread groups, waits, runqueue, carriers
    bool want_stacks = true;            // user/kernel stacks for waits
    double stack_min_block_seconds = 0.001;  // only waits at least this long capture stacks
    double loop_stall_seconds = 0.02;   // an event-loop turn this long is a stall (--loop-stall-ms)
    uint32_t max_connections = 65536;   // BPF map sizes
    uint32_t max_threads = 32768;
    uint32_t label_cap = 50;            // peers/groups/ports beyond this fold into "other"
    bool jvm_dump = false;              // one-off jcmd Thread.dump_to_file enrichment
    bool jvm_perfmap = false;           // run jcmd Compiler.perfmap for JIT symbols
    bool tls = false;                   // uprobes on the target's libssl: status classes inside TLS (--tls)
    SockScope scope = SockScope::automatic;
    // top: the first frame before what only refines it, which loads after (Source::after_first_tick):
    // the HTTP/2 frame walk. The other commands load it all before their window opens.
    bool quick_start = false;
    int verbose = 0;
};

}  // namespace qscope
