#include "sys/proc_tasks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string_view>

#include "model/thread_group.h"
#include "model/errors.h"
#include "sys/proc_stat.h"
#include "sys/sock_diag.h"

namespace qscope {

bool parse_proc_syscall(const std::string& text, ProcSyscall& out) {
    out = ProcSyscall{};
    std::istringstream in(text);
    std::vector<std::string> tok;
    std::string t;
    while (in >> t) tok.push_back(t);
    if (tok.empty()) return false;
    if (tok[0] == "running") {
        out.running = true;
        return true;
    }
    char* end = nullptr;
    const long long nr = std::strtoll(tok[0].c_str(), &end, 10);
    if (end == tok[0].c_str() || *end != '\0') return false;
    auto hex = [](const std::string& s, uint64_t& v) {
        char* e = nullptr;
        v = std::strtoull(s.c_str(), &e, 16);  // accepts the 0x prefix
        return e != s.c_str() && *e == '\0';
    };
    out.nr = nr;
    if (nr == -1) {
        // Blocked outside a syscall: only SP and PC follow.
        if (tok.size() != 3) return false;
        return hex(tok[1], out.sp) && hex(tok[2], out.pc);
    }
    if (tok.size() != 9) return false;
    for (int i = 0; i < 6; i++)
        if (!hex(tok[static_cast<size_t>(i) + 1], out.args[i])) return false;
    return hex(tok[7], out.sp) && hex(tok[8], out.pc);
}

namespace {
std::string task_dir(int pid, int tid) { return "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid); }
}  // namespace

std::vector<int> list_tids(int pid) {
    std::vector<int> tids;
    DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
    if (!d) return tids;
    while (auto* e = readdir(d))
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') tids.push_back(std::atoi(e->d_name));
    closedir(d);
    return tids;
}

std::string read_task_comm(int pid, int tid) {
    std::string s;
    if (!read_file(task_dir(pid, tid) + "/comm", s)) return {};
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    return s;
}

std::optional<ProcSyscall> read_task_syscall(int pid, int tid) {
    std::string text;
    ProcSyscall sc;
    if (!read_file(task_dir(pid, tid) + "/syscall", text) || !parse_proc_syscall(text, sc)) return std::nullopt;
    return sc;
}

std::vector<ProcTask> read_proc_tasks(int pid, bool with_syscall) {
    std::vector<ProcTask> out;
    for (int tid : list_tids(pid)) {
        std::string text;
        ProcStat st;
        if (!read_file(task_dir(pid, tid) + "/stat", text) || !parse_proc_stat(text, st)) continue;
        ProcTask t;
        t.tid = tid;
        t.comm = st.comm;
        t.state = st.state;
        if (with_syscall) {
            const auto sc = read_task_syscall(pid, tid);
            t.syscall_known = sc.has_value();
            if (sc) t.syscall = *sc;
        }
        out.push_back(std::move(t));
    }
    return out;
}

std::optional<uint64_t> parse_socket_inode(const std::string& link) {
    static const char prefix[] = "socket:[";
    if (link.compare(0, sizeof(prefix) - 1, prefix) != 0 || link.back() != ']') return std::nullopt;
    const std::string num = link.substr(sizeof(prefix) - 1, link.size() - sizeof(prefix));
    if (num.empty()) return std::nullopt;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(num.c_str(), &end, 10);
    if (*end != '\0') return std::nullopt;
    return v;
}

std::string read_fd_link(int pid, int fd) {
    char buf[4096];
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    const ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) return {};
    return std::string(buf, static_cast<size_t>(n));
}

static bool hex_u32(const std::string& s, size_t pos, uint32_t& v) {
    if (pos + 8 > s.size()) return false;
    char tmp[9];
    std::memcpy(tmp, s.data() + pos, 8);
    tmp[8] = 0;
    char* e = nullptr;
    v = static_cast<uint32_t>(std::strtoul(tmp, &e, 16));
    return e == tmp + 8;
}

std::string format_proc_net_addr(const std::string& hex, bool v6) {
    // The kernel prints each 32-bit word of the address in host byte order ("%08X"), so
    // on little-endian x86 each word's bytes come out reversed.
    char buf[INET6_ADDRSTRLEN] = {0};
    if (!v6) {
        uint32_t w;
        if (hex.size() != 8 || !hex_u32(hex, 0, w)) return {};
        in_addr a{};
        a.s_addr = w;  // host order of a little-endian word == network order bytes
        inet_ntop(AF_INET, &a, buf, sizeof(buf));
        return buf;
    }
    if (hex.size() != 32) return {};
    in6_addr a{};
    for (int i = 0; i < 4; i++) {
        uint32_t w;
        if (!hex_u32(hex, static_cast<size_t>(i) * 8, w)) return {};
        std::memcpy(&a.s6_addr[i * 4], &w, 4);
    }
    if (IN6_IS_ADDR_V4MAPPED(&a)) {
        in_addr v4{};
        std::memcpy(&v4.s_addr, &a.s6_addr[12], 4);
        inet_ntop(AF_INET, &v4, buf, sizeof(buf));
        return buf;
    }
    inet_ntop(AF_INET6, &a, buf, sizeof(buf));
    return std::string("[") + buf + "]";
}

static bool split_addr_port(std::string_view field, bool v6, std::string& addr, uint16_t& port) {
    const auto colon = field.find(':');
    if (colon == std::string_view::npos) return false;
    addr = format_proc_net_addr(std::string(field.substr(0, colon)), v6);
    if (addr.empty()) return false;
    const std::string_view ps = field.substr(colon + 1);
    if (ps.empty() || ps.size() > 4) return false;
    unsigned p = 0;
    for (char c : ps) {
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        p = p * 16 + static_cast<unsigned>(d);
    }
    port = static_cast<uint16_t>(p);
    return true;
}

// Hand-rolled (no streams): a netns with 10,000 connections has 20,000 lines here, and
// this runs on the way to the first `top` frame.
std::vector<TcpSocket> parse_proc_net_tcp(const std::string& text, bool v6) {
    std::vector<TcpSocket> out;
    const std::string_view all(text);
    bool header = true;
    std::string_view f[10];
    for (size_t pos = 0; pos < all.size();) {
        size_t eol = all.find('\n', pos);
        if (eol == std::string_view::npos) eol = all.size();
        const std::string_view line = all.substr(pos, eol - pos);
        pos = eol + 1;
        if (header) {  // "  sl  local_address rem_address   st tx_queue ..."
            header = false;
            if (line.find("local_address") != std::string_view::npos) continue;
        }
        // sl local remote st tx:rx tr:when retrnsmt uid timeout inode ...
        size_t n = 0;
        for (size_t i = 0; i < line.size() && n < 10;) {
            while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) i++;
            const size_t b = i;
            while (i < line.size() && line[i] != ' ' && line[i] != '\t') i++;
            if (i > b) f[n++] = line.substr(b, i - b);
        }
        if (n < 10) continue;
        TcpSocket s;
        std::string la, ra;
        if (!split_addr_port(f[1], v6, la, s.local_port)) continue;
        if (!split_addr_port(f[2], v6, ra, s.remote_port)) continue;
        s.local = la + ":" + std::to_string(s.local_port);
        s.remote = ra + ":" + std::to_string(s.remote_port);
        s.state = static_cast<int>(std::strtol(std::string(f[3]).c_str(), nullptr, 16));
        s.inode = std::strtoull(std::string(f[9]).c_str(), nullptr, 10);
        out.push_back(std::move(s));
    }
    return out;
}

void FdResolver::refresh() {
    tcp_loaded_this_tick_ = false;
    unix_loaded_this_tick_ = false;
    fd_cache_.clear();
    links_this_tick_ = 0;
    one_pass_read_ = false;
    one_pass_answered_ = false;
    socket_fds_.clear();
    own_tcp_.clear();
}

void FdResolver::set_tcp_tables(const std::vector<TcpSocket>& socks) {
    by_inode_.clear();
    listen_ports_.clear();
    for (const auto& s : socks) {
        if (s.inode) by_inode_[s.inode] = s;
        if (s.state == 10) listen_ports_[s.local_port] = true;
    }
    tcp_loaded_this_tick_ = true;
}

// One read() per 1 MiB instead of per stream buffer: /proc/net/tcp with 20,000 sockets is
// ~3 MB, and each read resumes the kernel's walk of the socket hash.
static bool read_big_file(const std::string& path, std::string& out) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    out.clear();
    std::vector<char> buf(1 << 20);
    for (;;) {
        const ssize_t n = ::read(fd, buf.data(), buf.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            ::close(fd);
            return n == 0;
        }
        out.append(buf.data(), static_cast<size_t>(n));
    }
}

std::vector<TcpSocket> tcp_sockets_proc(int pid) {
    std::vector<TcpSocket> all;
    std::string text;
    const std::string base = "/proc/" + std::to_string(pid) + "/net/";
    if (read_big_file(base + "tcp", text)) all = parse_proc_net_tcp(text, false);
    if (read_big_file(base + "tcp6", text)) {
        auto v6 = parse_proc_net_tcp(text, true);
        all.insert(all.end(), v6.begin(), v6.end());
    }
    return all;
}

TcpSocket tcp_socket_of(const TcpEnds& e, uint64_t inode) {
    TcpSocket s;
    s.local = format_endpoint(e.family, e.local.data(), e.local_port);
    s.remote = format_endpoint(e.family, e.remote.data(), e.remote_port);
    s.local_port = e.local_port;
    s.remote_port = e.remote_port;
    s.state = e.state;
    s.inode = inode;
    return s;
}

std::vector<TcpSocket> tcp_sockets_diag(int pid, uint32_t states) {
    std::vector<TcpSocket> all;
    for (const int family : {AF_INET, AF_INET6}) {
        for (const DiagSocket& d : sock_diag_dump(family, states, false, pid)) {
            TcpSocket s;
            // format_ip showed IPv4-mapped addresses as IPv4, as format_proc_net_addr does.
            s.local = format_endpoint(d.src, d.sport);
            s.remote = format_endpoint(d.dst, d.dport);
            s.local_port = d.sport;
            s.remote_port = d.dport;
            s.state = d.state;
            s.inode = d.inode;
            all.push_back(std::move(s));
        }
    }
    return all;
}

void FdResolver::load_tcp() {
    // The process's own TCP sockets from the one-pass read, and the namespace's listeners
    // (an accepted connection is "inbound" when its local port is one): with 20,000 sockets
    // in the namespace, ~1 ms where the dump of every one of them took ~40 ms.
    if (read_one_pass()) {
        try {
            std::vector<TcpSocket> socks = tcp_sockets_diag(pid_, kTcpListenState);
            socks.insert(socks.end(), own_tcp_.begin(), own_tcp_.end());
            set_tcp_tables(socks);
            return;
        } catch (const Error&) {
            // No inet_diag: the whole table from /proc below, as without the iterator.
        }
    }
    try {
        set_tcp_tables(tcp_sockets_diag(pid_));
    } catch (const Error&) {
        set_tcp_tables(tcp_sockets_proc(pid_));
    }
}

// A Unix socket is named by the listener it reaches: a client by its peer's name (the
// listener's, which every accepted socket shares), an accepted one by its own. Neither end
// named: a socketpair or an anonymous pair, internal signalling, left as "socket".
std::optional<FdResolver::Resource> FdResolver::name_unix(uint64_t inode) {
    auto it = unix_by_inode_.find(inode);
    if (it == unix_by_inode_.end() && !unix_loaded_this_tick_) {
        unix_loaded_this_tick_ = true;
        unix_by_inode_.clear();
        try {
            for (auto& u : unix_diag_dump(~0u, pid_)) unix_by_inode_[u.inode] = std::move(u);
        } catch (const Error&) {
            // No unix_diag (module absent, no permission): the socket stays unnamed.
        }
        it = unix_by_inode_.find(inode);
    }
    if (it == unix_by_inode_.end()) return std::nullopt;
    const UnixDiagSocket& u = it->second;
    if (u.state == 10 && !u.name.empty()) return Resource{"listen unix:" + u.name, "socket"};
    if (u.name.empty() && u.peer) {
        auto p = unix_by_inode_.find(*u.peer);
        if (p != unix_by_inode_.end() && !p->second.name.empty()) return Resource{"unix:" + p->second.name, "socket"};
    }
    if (!u.name.empty() && u.peer) return Resource{"inbound unix:" + u.name, "socket"};
    return std::nullopt;
}

FdResolver::Resource FdResolver::name_link(const std::string& link) {
    if (link.empty()) return {"closed fd", "other"};
    if (link[0] == '/') return {link, "file"};
    if (auto ino = parse_socket_inode(link)) {
        auto it = by_inode_.find(*ino);
        if (it == by_inode_.end() && !tcp_loaded_this_tick_) {
            load_tcp();
            it = by_inode_.find(*ino);
        }
        if (it == by_inode_.end()) {
            if (auto r = name_unix(*ino)) return *r;
            return {"socket", "socket"};  // udp, netlink, a socketpair, ...
        }
        const TcpSocket& s = it->second;
        if (s.state == 10) return {"listen :" + std::to_string(s.local_port), "socket"};
        // A connection accepted on one of our listening ports: its peer is a client with
        // an ephemeral port. Name the port, not the client, so one row stands for all
        // clients of a listener (bounded cardinality).
        if (listen_ports_.count(s.local_port)) return {"inbound :" + std::to_string(s.local_port), "socket"};
        return {s.remote, "socket"};
    }
    // "pipe:[123]", "anon_inode:[eventfd]", "anon_inode:[eventpoll]": kind, not identity.
    const auto colon = link.find(':');
    std::string kind = colon == std::string::npos ? link : link.substr(0, colon);
    if (kind == "anon_inode") {
        const auto lb = link.find('['), rb = link.rfind(']');
        if (lb != std::string::npos && rb != std::string::npos && rb > lb)
            kind = link.substr(lb + 1, rb - lb - 1);
        else
            kind = link.substr(colon + 1);
    }
    return {kind, "other"};
}

FdResolver::~FdResolver() {
    if (fd_dir_ >= 0) ::close(fd_dir_);
}

// readlinkat() on the open fd directory: a tick that names 10,000 fd waits (one thread per
// connection) would otherwise walk "/proc/PID/fd/N" from the root 10,000 times.
std::string FdResolver::read_link(int fd) {
    if (fd_dir_ < 0) {
        const std::string dir = "/proc/" + std::to_string(pid_) + "/fd";
        fd_dir_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd_dir_ < 0) return read_fd_link(pid_, fd);
    }
    char buf[4096];
    const ssize_t n = readlinkat(fd_dir_, std::to_string(fd).c_str(), buf, sizeof(buf) - 1);
    if (n <= 0) return {};
    return std::string(buf, static_cast<size_t>(n));
}

// The process's socket fds in one pass, at most once a tick; false when only /proc could
// have answered (no iterator here), which the caller reads a readlink at a time.
bool FdResolver::read_one_pass() {
    if (one_pass_read_) return one_pass_answered_;
    one_pass_read_ = true;
    auto fds = one_pass_ ? one_pass_() : std::nullopt;
    if (!fds) return false;
    one_pass_answered_ = true;
    for (const SocketFd& s : *fds) {
        socket_fds_[s.fd] = s.inode;
        // A socket never connected, or closed by its peer and reset, is in no TCP table
        // (the kernel unhashes it): left unnamed, as the dump would leave it.
        if (s.tcp && s.tcp->state != kTcpClose) own_tcp_.push_back(tcp_socket_of(*s.tcp, s.inode));
    }
    return true;
}

// A socket fd's link from the one-pass table once the tick has asked for enough fds (or
// named a TCP socket, which reads it); any other fd (a file, a pipe, an fd opened since the
// pass) from its readlink.
std::string FdResolver::link_of(int fd) {
    if (++links_this_tick_ > kOnePassAfter) read_one_pass();
    auto it = socket_fds_.find(fd);
    if (it != socket_fds_.end()) return "socket:[" + std::to_string(it->second) + "]";
    return read_link(fd);
}

FdResolver::Resource FdResolver::resolve(int fd) {
    auto it = fd_cache_.find(fd);
    if (it != fd_cache_.end()) return it->second;
    Resource r = name_link(link_of(fd));
    fd_cache_[fd] = r;
    return r;
}

}  // namespace qscope
