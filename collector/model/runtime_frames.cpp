#include "model/runtime_frames.h"

namespace qscope {
namespace {

// Module names by prefix: "libc.so.6", "libc-2.31.so", "ld-linux-x86-64.so.2", "libjvm.so",
// "kernel" (kernel frames; their modules are named by kallsyms), "[vdso]" (clock_gettime's
// fast path, where an on-CPU sample often lands).
constexpr std::string_view kRuntimeModules[] = {"libc.so",  "libc-",  "libpthread", "ld-linux", "libstdc++",
                                                "libgcc_s", "libjvm", "kernel",     "[vdso]"};
// Functions of those modules that say so by name, for frames without a module.
constexpr std::string_view kRuntimeFunctions[] = {"__futex", "futex_", "pthread_", "___pthread", "__GI_",
                                                  "syscall", "Unsafe_Park", "Parker::", "__lll_"};

}  // namespace

std::string frame_function(const std::string& frame) {
    std::string f = frame;
    const auto paren = f.rfind(" (");
    if (paren != std::string::npos && f.back() == ')') f = f.substr(0, paren);
    const auto plus = f.rfind("+0x");
    if (plus != std::string::npos) f = f.substr(0, plus);
    return f;
}

std::string frame_module(const std::string& frame) {
    const auto paren = frame.rfind(" (");
    if (paren == std::string::npos || frame.back() != ')') return {};
    return frame.substr(paren + 2, frame.size() - paren - 3);
}

bool is_runtime_module(std::string_view module) {
    for (auto p : kRuntimeModules)
        if (module.substr(0, p.size()) == p) return true;
    return false;
}

bool is_runtime_frame(const std::string& frame) {
    const std::string m = frame_module(frame);
    if (!m.empty()) return is_runtime_module(m);
    const std::string fn = frame_function(frame);
    for (auto p : kRuntimeFunctions)
        if (fn.find(p) != std::string::npos) return true;
    return false;
}

bool is_event_loop_frame(const std::string& frame) {
    static constexpr std::string_view kLoopMachinery[] = {"uv_", "uv__", "ngx_epoll_", "ngx_process_events",
                                                          "aeProcessEvents", "aeApiPoll", "aeMain"};
    const std::string fn = frame_function(frame);
    for (auto p : kLoopMachinery)
        if (fn.compare(0, p.size(), p) == 0) return true;
    return false;
}

std::string lock_wait_frame(const std::vector<std::string>& frames) {
    static constexpr std::string_view kLockWaits[] = {"ProcSleep"};
    for (const auto& f : frames) {
        const std::string fn = frame_function(f);
        for (auto l : kLockWaits)
            if (fn == l) return fn;
    }
    return {};
}

std::string go_idle_frame(const std::vector<std::string>& frames) {
    // The innermost match names the wait; any of them means the M holds no goroutine.
    static constexpr std::string_view kGoIdle[] = {
        "runtime.stopm",     "runtime.mPark",        "runtime.notesleep",   "runtime.notetsleepg",
        "runtime.notetsleep", "runtime.templateThread", "runtime.netpoll",   "runtime.sysmon",
        "runtime.gcstopm",   "runtime.stoplockedm",  "runtime.stopTheWorldWithSema"};
    for (const auto& f : frames) {
        const std::string fn = frame_function(f);
        for (auto idle : kGoIdle)
            if (fn == idle) return fn;
    }
    return {};
}

namespace {
// Tokio's modules, as prefixes of a frame's function.
constexpr std::string_view kTokioTask = "tokio::runtime::task::";  // a task's poll (Harness)
constexpr std::string_view kTokioWorker = "tokio::runtime::scheduler::multi_thread::worker::";
constexpr std::string_view kTokioBlocking = "tokio::runtime::blocking::";

enum class TokioThread { unknown, worker, blocking_pool };

// A worker runs under the blocking pool too (Tokio launches its workers as blocking tasks):
// the innermost of the two says which the thread is now.
TokioThread tokio_thread(const std::vector<std::string>& frames) {
    for (const auto& f : frames) {
        const std::string fn = frame_function(f);
        if (fn.starts_with(kTokioWorker)) return TokioThread::worker;
        if (fn.starts_with(kTokioBlocking)) return TokioThread::blocking_pool;
    }
    return TokioThread::unknown;
}
}  // namespace

std::string tokio_idle_frame(const std::vector<std::string>& frames) {
    // Exact functions where a module also runs tasks: block_on polls its future under
    // tokio::runtime::park::CachedParkThread::block_on, a current-thread runtime its tasks.
    static constexpr std::string_view kTokioIdle[] = {
        "tokio::runtime::park::Inner::park",                       // block_on's parker (often main)
        "tokio::runtime::park::CachedParkThread::park",
        "tokio::runtime::scheduler::multi_thread::park::",          // a worker's Parker, all of it
        "tokio::runtime::scheduler::current_thread::Context::park",
        "tokio::runtime::blocking::pool::Inner::run"};              // the blocking pool between jobs
    bool in_a_task = false;  // a frame inside the match runs a task: the pool's job, not its wait
    for (const auto& f : frames) {
        const std::string fn = frame_function(f);
        if (fn.starts_with(kTokioTask)) in_a_task = true;
        for (auto idle : kTokioIdle) {
            if (fn.compare(0, idle.size(), idle) != 0) continue;
            if (idle == kTokioIdle[4] && in_a_task) return {};
            return fn;
        }
    }
    return {};
}

bool tokio_blocking_pool(const std::vector<std::string>& frames) {
    return tokio_thread(frames) == TokioThread::blocking_pool;
}

bool tokio_worker(const std::vector<std::string>& frames) { return tokio_thread(frames) == TokioThread::worker; }

bool tokio_task_blocked(const std::vector<std::string>& frames) {
    if (!tokio_idle_frame(frames).empty() || tokio_blocking_pool(frames)) return false;
    for (const auto& f : frames) {
        const std::string fn = frame_function(f);
        if (fn.starts_with(kTokioTask) || fn.starts_with(kTokioWorker)) return true;
    }
    return false;
}

bool go_cgo_call(const std::vector<std::string>& frames) {
    for (const auto& f : frames) {
        const std::string fn = frame_function(f);
        if (fn == "runtime.cgocall" || fn == "runtime.asmcgocall") return true;
    }
    return false;
}

std::string first_app_frame(const std::vector<std::string>& frames) {
    std::string last_runtime;
    for (const auto& f : frames) {
        if (is_runtime_frame(f)) {
            last_runtime = frame_function(f);
            continue;
        }
        const std::string fn = frame_function(f);
        if (frame_module(f).empty() && fn.rfind("0x", 0) == 0 && !last_runtime.empty()) return last_runtime;
        return fn;
    }
    return {};
}

}  // namespace qscope
