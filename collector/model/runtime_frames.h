// Runtime frames versus application frames: ONE list, for naming a wait's gate (the first
// application frame), a wait site, and the VM waits of a carrier.
//
// Frames are the symbolizer's text: "function+0xOFF (module)". JIT code is "name (jit)" or
// a bare "0x..." address (no perf map); hand-built frames (tests) may omit the module.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace qscope {

// "pool_borrow()+0x3e (qs_server)" → "pool_borrow()"; "0x7f00 (libc.so.6)" → "0x7f00".
std::string frame_function(const std::string& frame);
// "... (libc.so.6)" → "libc.so.6"; "" when the frame names no module.
std::string frame_module(const std::string& frame);

// The C library, the dynamic loader, the C++ runtime, the JVM, the kernel.
bool is_runtime_module(std::string_view module);
// A frame of a runtime module; a frame without a module by its function's name (glibc's
// futex and pthread internals, HotSpot's parker). Bare addresses are JIT code: not runtime.
bool is_runtime_frame(const std::string& frame);

// Where the application asked to wait: the function of the first frame outside the
// runtime. When that frame is a bare JIT address, the runtime's entry point below it says
// more ("Unsafe_Park"). Empty when every frame is the runtime's.
std::string first_app_frame(const std::vector<std::string>& frames);

// A wait for another process or thread that, by its syscall, looks like a thread idle in its
// poll: PostgreSQL backends wait for a heavyweight lock (row, table, transaction) on their
// latch, in epoll_wait, under ProcSleep — not on a futex. Returns that frame's function
// ("ProcSleep"), or "" when the stack shows none of them. Verified on PostgreSQL 15.
std::string lock_wait_frame(const std::vector<std::string>& frames);
// An event loop's own machinery (libuv, nginx's event module, Redis's ae): where a loop's turn
// is dispatched from, never where it spent its time.
bool is_event_loop_frame(const std::string& frame);

// Go's runtime. An M (an OS thread of Go's scheduler) with no goroutine to run waits under
// one of these frames: parked on its note (runtime.stopm → mPark → notesleep, the
// templateThread, stopTheWorld's waits), the netpoller (runtime.netpoll in epoll_pwait), or
// sysmon between its rounds. Returns that frame's function ("runtime.stopm"), or "" when the
// stack shows none of them: a futex wait outside them (a cgo call's pthread lock) holds the
// goroutine it runs. Verified on Go 1.19.
std::string go_idle_frame(const std::vector<std::string>& frames);
// Tokio's runtime (Rust). A thread with no task to run parks under one of these frames: a
// worker in its scheduler's park (multi_thread::park, on a condvar, or the I/O driver's
// epoll_wait when it holds the driver), a thread in `block_on` (often main) on its own
// parker, a blocking-pool thread between jobs. Returns the innermost ("tokio::runtime::park::
// Inner::park"), or "" when the stack shows none: a worker's futex wait outside them (a
// std::sync::Mutex) holds the task it runs. Verified on Tokio 1.24.
std::string tokio_idle_frame(const std::vector<std::string>& frames);
// A thread of Tokio's blocking pool (spawn_blocking, tokio::fs, block_in_place) in a job:
// named as the workers are ("tokio-runtime-worker"), but what it blocks in is the job it was
// given, not a worker's.
bool tokio_blocking_pool(const std::vector<std::string>& frames);
// A worker of Tokio's multi-thread runtime, whatever the program named it: its scheduler's
// frames (multi_thread::worker::) innermost of Tokio's, a blocking-pool thread's being
// blocking:: (Tokio launches its workers as blocking tasks).
bool tokio_worker(const std::vector<std::string>& frames);
// A worker whose task blocks it outside Tokio's park (a std::sync::Mutex, a Condvar): a
// task's poll (tokio::runtime::task::) or the worker's own frames are there, none of the
// park's nor the blocking pool's. A task's frames can be large enough that a copied stack
// (8 KiB) ends at its poll, before the worker's frames. A stack cut short before any of
// Tokio's frames says nothing (false).
bool tokio_task_blocked(const std::vector<std::string>& frames);
// A goroutine's call into C (runtime.cgocall, runtime.asmcgocall): the M is held for its whole
// length, like a blocking syscall.
bool go_cgo_call(const std::vector<std::string>& frames);

}  // namespace qscope
