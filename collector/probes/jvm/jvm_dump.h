// On-demand JVM enrichment through jcmd: what the parked virtual threads wait in
// (Thread.dump_to_file -format=json, aggregated by top frames), JIT symbols
// (Compiler.perfmap), and the thread list of Thread.print (names → OS tids), which the
// tests use as an oracle and the carrier source as a fallback when class names cannot be
// read.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/snapshot.h"

namespace qscope::jvm {

struct CommandResult {
    int exit_status = -1;     // exit code, or -1 if killed/not run
    bool timed_out = false;
    std::string out, err;
    std::string error;        // could not run at all
};
// Runs argv (no shell) with stdin closed, killing it after timeout_seconds.
CommandResult run_command(const std::vector<std::string>& argv, double timeout_seconds);

// `jcmd PID Thread.dump_to_file -format=json`, aggregated (aggregate_thread_dump). Slow: a
// safepoint in the JVM and a file of every thread, seconds for a big one; the carrier source
// runs it on its own thread.
struct ThreadDump {
    std::vector<ParkedFrames> parked;
    std::string error;  // non-empty: no dump, and why
};
ThreadDump thread_dump(const std::string& jcmd, int pid, double timeout_seconds);

// "java.base/java.util.concurrent.SynchronousQueue.poll(SynchronousQueue.java:338)" →
// "java.util.concurrent.SynchronousQueue.poll"
std::string frame_method(const std::string& frame);

// Groups the dump's virtual threads that are not RUNNABLE by their top frames: the JDK
// call the application made plus the application frames under it (`depth` frames in all),
// e.g. [SynchronousQueue.poll, Carriers$Pool.getConnection, ...]. Park plumbing
// (VirtualThread.park*, LockSupport, queue internals) is skipped. Most threads first.
// Throws std::runtime_error on JSON that is not a thread dump.
std::vector<ParkedFrames> aggregate_thread_dump(const std::string& json_text, size_t depth = 3);

struct ThreadPrintEntry {
    std::string name;
    int nid = 0;          // OS tid
    uint64_t jt = 0;      // JavaThread* ("tid=0x...")
    bool is_daemon = false;
};
// The header lines of `jcmd PID Thread.print`: "name" #N [nid] ... tid=0x... nid=...
std::vector<ThreadPrintEntry> parse_thread_print(const std::string& text);

// Is this a virtual-thread carrier of the default scheduler by its Java name?
// "ForkJoinPool-1-worker-3" yes, "ForkJoinPool-1-delayScheduler" no.
bool is_carrier_name(const std::string& java_name);

}  // namespace qscope::jvm
