// /proc readers for the sched source and for tests that use /proc as the oracle:
// /proc/PID/task/*/{stat,syscall,comm}, /proc/PID/fd links, /proc/PID/net/tcp{,6}.
// Parsers are pure functions of the text (unit-tested on real-shaped input); readers are
// thin wrappers that tolerate a thread or fd vanishing mid-read.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sys/proc_fds.h"
#include "sys/unix_diag.h"

namespace qscope {

// /proc/PID/task/TID/syscall: "running", "-1 SP PC" (blocked outside a syscall), or
// "NR ARG1..ARG6 SP PC" (hex arguments).
struct ProcSyscall {
    bool running = false;
    int64_t nr = -1;
    uint64_t args[6] = {0, 0, 0, 0, 0, 0};
    uint64_t sp = 0, pc = 0;
};
bool parse_proc_syscall(const std::string& text, ProcSyscall& out);

// PID's thread ids as /proc/PID/task lists them (empty when PID is gone).
std::vector<int> list_tids(int pid);
// /proc/PID/task/TID/comm without its newline; empty when the thread is gone.
std::string read_task_comm(int pid, int tid);
// /proc/PID/task/TID/syscall, parsed; nullopt when the thread is gone or the text is not one.
std::optional<ProcSyscall> read_task_syscall(int pid, int tid);

// One thread as /proc shows it.
struct ProcTask {
    int tid = 0;
    std::string comm;
    char state = '?';          // R S D T t Z X I ...
    bool syscall_known = false;
    ProcSyscall syscall;       // meaningful when syscall_known
};
// All threads of PID; threads that exit mid-read are skipped. With `with_syscall`, also
// reads each thread's syscall file (needs root or ptrace access).
std::vector<ProcTask> read_proc_tasks(int pid, bool with_syscall = true);

// "socket:[123]" → 123; anything else → nullopt.
std::optional<uint64_t> parse_socket_inode(const std::string& link);
// readlink(/proc/PID/fd/N); empty when the fd is closed.
std::string read_fd_link(int pid, int fd);

// One row of /proc/net/tcp or tcp6.
struct TcpSocket {
    std::string local, remote;     // "127.0.0.1:8080", "[::1]:5432"
    uint16_t local_port = 0, remote_port = 0;
    int state = 0;                 // TCP_ESTABLISHED = 1, TCP_LISTEN = 10, ...
    uint64_t inode = 0;
};
// Parses the whole file (header line skipped). IPv4-mapped IPv6 addresses are printed as
// IPv4, so a peer has one name whichever socket family reached it.
std::vector<TcpSocket> parse_proc_net_tcp(const std::string& text, bool v6);
// "0100007F" → "127.0.0.1"; 32 hex digits → "[::1]"-style (bracketed) IPv6.
std::string format_proc_net_addr(const std::string& hex, bool v6);

// Not TIME_WAIT (6) nor NEW_SYN_RECV (12): no fd holds them (their inode reads 0), and a busy
// server has tens of thousands in TIME_WAIT.
inline constexpr uint32_t kTcpHeldStates = ~((1u << 6) | (1u << 12));
inline constexpr uint32_t kTcpListenState = 1u << 10;
inline constexpr uint8_t kTcpClose = 7;  // TCP_CLOSE: unhashed, in no dump
// A socket's ends named as parse_proc_net_tcp names them.
TcpSocket tcp_socket_of(const TcpEnds& e, uint64_t inode);
// Every TCP socket an fd can hold (both families; not TIME_WAIT) in the network namespace of
// pid, named as parse_proc_net_tcp names them. From sock_diag: with 20,000 sockets (10,000
// loopback connections) it took 29 ms where /proc/PID/net/tcp{,6} took 54, on the way to the
// first frame. Throws Error when sock_diag fails (no inet_diag, namespace not entered).
std::vector<TcpSocket> tcp_sockets_diag(int pid, uint32_t states = kTcpHeldStates);
// The same from /proc/PID/net/tcp and tcp6, which need nothing but procfs; empty when unreadable.
std::vector<TcpSocket> tcp_sockets_proc(int pid);

// Names the resource behind an fd of the target, caching by fd and socket inode. The
// TCP tables are re-read at most once per refresh() and only when an unknown socket
// inode is asked for, so a tick with nothing new costs one readlink per fd looked up. A tick
// that names many fds (one thread per connection: 10,000 socket waits) reads the process's
// socket fds in one pass instead, when the caller can (`one_pass`), and readlinks the rest.
class FdResolver {
public:
    using OnePass = std::function<std::optional<std::vector<SocketFd>>()>;
    explicit FdResolver(int pid, OnePass one_pass = {}) : pid_(pid), one_pass_(std::move(one_pass)) {}
    ~FdResolver();
    FdResolver(const FdResolver&) = delete;
    FdResolver& operator=(const FdResolver&) = delete;
    struct Resource {
        std::string name;      // "127.0.0.1:5432", "inbound :8080", "listen :8080", "/var/log/x", "pipe",
                               // "unix:/run/php/fpm.sock" (a Unix peer), "inbound unix:/path", "listen unix:/path"
        std::string kind;      // "socket", "file", "other"
    };
    Resource resolve(int fd);
    // New tick: allow one more TCP table read; drop fd names (fds get reused).
    void refresh();
    // For tests: feed tables directly.
    void set_tcp_tables(const std::vector<TcpSocket>& socks);

private:
    Resource name_link(const std::string& link);
    bool read_one_pass();
    void load_tcp();
    std::optional<Resource> name_unix(uint64_t inode);
    std::string read_link(int fd);
    std::string link_of(int fd);
    // Past this many readlinks in one tick, the one-pass read is cheaper (it costs about as
    // much as 30 readlinks on a 10,000-fd table; ~1 µs against ~5 µs per fd).
    static constexpr int kOnePassAfter = 64;
    int pid_;
    OnePass one_pass_;
    int links_this_tick_ = 0;
    bool one_pass_read_ = false;               // this tick
    bool one_pass_answered_ = false;           // the iterator (not /proc) read it, this tick
    std::unordered_map<int, uint64_t> socket_fds_;  // from the one-pass read, this tick
    std::vector<TcpSocket> own_tcp_;                // the same read's TCP sockets, this tick
    int fd_dir_ = -1;  // /proc/PID/fd, opened on first use: links are read relative to it
    bool tcp_loaded_this_tick_ = false;
    std::unordered_map<int, Resource> fd_cache_;
    std::unordered_map<uint64_t, TcpSocket> by_inode_;
    std::map<uint16_t, bool> listen_ports_;
    bool unix_loaded_this_tick_ = false;
    std::unordered_map<uint64_t, UnixDiagSocket> unix_by_inode_;
};

}  // namespace qscope
