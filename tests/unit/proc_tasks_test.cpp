// /proc parsers on real-shaped text, and on this process's own /proc entries (the oracle is
// what we just did: a thread we blocked in read(), a socket we connected).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>

#include "sys/proc_tasks.h"

using namespace qscope;

TEST_CASE("parse_proc_syscall: running, outside a syscall, in a syscall", "[proc]") {
    ProcSyscall s;
    REQUIRE(parse_proc_syscall("running\n", s));
    CHECK(s.running);

    REQUIRE(parse_proc_syscall("-1 0x7ffd5e1c2a38 0x55d0c7a4e1f0\n", s));
    CHECK_FALSE(s.running);
    CHECK(s.nr == -1);
    CHECK(s.sp == 0x7ffd5e1c2a38ULL);
    CHECK(s.pc == 0x55d0c7a4e1f0ULL);

    // A futex wait as the kernel prints it (glibc condvar: op 0x189 = WAIT_BITSET|PRIVATE|CLOCK_REALTIME).
    REQUIRE(parse_proc_syscall(
        "202 0x55f719232388 0x189 0x0 0x0 0x0 0xffffffff 0x7f3a2bffec50 0x7f3a2c89ed36\n", s));
    CHECK(s.nr == 202);
    CHECK(s.args[0] == 0x55f719232388ULL);
    CHECK(s.args[1] == 0x189);
    CHECK(s.args[5] == 0xffffffffULL);
    CHECK(s.sp == 0x7f3a2bffec50ULL);
    CHECK(s.pc == 0x7f3a2c89ed36ULL);
}

TEST_CASE("parse_proc_syscall rejects malformed text", "[proc]") {
    ProcSyscall s;
    CHECK_FALSE(parse_proc_syscall("", s));
    CHECK_FALSE(parse_proc_syscall("abc 0x1 0x2", s));
    CHECK_FALSE(parse_proc_syscall("0 0x1 0x2", s));          // too few fields for a syscall
    CHECK_FALSE(parse_proc_syscall("-1 0x1", s));             // too few for "outside"
    CHECK_FALSE(parse_proc_syscall("0 0x1 0x2 0x3 0x4 0x5 zz 0x7 0x8", s));
}

TEST_CASE("format_proc_net_addr decodes the kernel's per-word hex", "[proc]") {
    CHECK(format_proc_net_addr("0100007F", false) == "127.0.0.1");
    CHECK(format_proc_net_addr("00000000", false) == "0.0.0.0");
    CHECK(format_proc_net_addr("0101A8C0", false) == "192.168.1.1");
    CHECK(format_proc_net_addr("00000000000000000000000001000000", true) == "[::1]");
    CHECK(format_proc_net_addr("0000000000000000FFFF00000100007F", true) == "127.0.0.1");  // v4-mapped
    CHECK(format_proc_net_addr("B80D0120000000000000000001000000", true) == "[2001:db8::1]");
    CHECK(format_proc_net_addr("xyz", false).empty());
    CHECK(format_proc_net_addr("0100007F", true).empty());
}

namespace {
// A listener on loopback (IPv4, IPv6, or IPv6 dual-stack reached over IPv4), a client
// connected to it and the accepted end: {listener, client, accepted}, or {-1, -1, -1} when
// the family is not available here.
std::array<int, 3> loopback_trio(int listen_family, bool connect_v4) {
    const int l = socket(listen_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0) return {-1, -1, -1};
    sockaddr_storage ss{};
    socklen_t len;
    if (listen_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        len = sizeof(*a);
    } else {
        const int off = 0;
        setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        a->sin6_addr = connect_v4 ? in6addr_any : in6addr_loopback;
        len = sizeof(*a);
    }
    if (bind(l, reinterpret_cast<sockaddr*>(&ss), len) != 0 || listen(l, 4) != 0 ||
        getsockname(l, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
        close(l);
        return {-1, -1, -1};
    }
    const uint16_t port = listen_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                                   : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port;
    sockaddr_storage to{};
    socklen_t to_len;
    if (listen_family == AF_INET || connect_v4) {
        auto* a = reinterpret_cast<sockaddr_in*>(&to);
        a->sin_family = AF_INET;
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a->sin_port = port;
        to_len = sizeof(*a);
    } else {
        auto* a = reinterpret_cast<sockaddr_in6*>(&to);
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        a->sin6_port = port;
        to_len = sizeof(*a);
    }
    const int c = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c < 0 || connect(c, reinterpret_cast<sockaddr*>(&to), to_len) != 0) {
        if (c >= 0) close(c);
        close(l);
        return {-1, -1, -1};
    }
    return {l, c, accept4(l, nullptr, nullptr, SOCK_CLOEXEC)};
}

uint64_t inode_of(int fd) {
    struct stat st {};
    return fstat(fd, &st) == 0 ? st.st_ino : 0;
}
}  // namespace

// The two sources of the TCP tables the resolver names sockets from must agree, field for
// field, on real sockets: sock_diag (the fast one) against /proc/PID/net/tcp{,6}.
TEST_CASE("tcp_sockets_diag names every socket as /proc/PID/net/tcp does", "[proc]") {
    std::vector<int> fds;
    for (const auto& [family, v4] : std::vector<std::pair<int, bool>>{{AF_INET, true}, {AF_INET6, false}, {AF_INET6, true}}) {
        const auto trio = loopback_trio(family, v4);
        INFO("family " << family << (v4 ? " reached over IPv4" : ""));
        if (trio[0] < 0) {
            WARN("no loopback socket of this kind here");
            continue;
        }
        fds.insert(fds.end(), trio.begin(), trio.end());
    }
    REQUIRE(fds.size() >= 3);
    const auto diag = tcp_sockets_diag(getpid()), text = tcp_sockets_proc(getpid());
    const auto find = [](const std::vector<TcpSocket>& v, uint64_t inode) -> const TcpSocket* {
        for (const auto& s : v)
            if (s.inode == inode) return &s;
        return nullptr;
    };
    for (const int fd : fds) {
        const uint64_t inode = inode_of(fd);
        const TcpSocket *d = find(diag, inode), *t = find(text, inode);
        INFO("fd " << fd << " inode " << inode);
        REQUIRE(d != nullptr);
        REQUIRE(t != nullptr);
        CHECK(d->local == t->local);
        CHECK(d->remote == t->remote);
        CHECK(d->local_port == t->local_port);
        CHECK(d->remote_port == t->remote_port);
        CHECK(d->state == t->state);
    }
    // The dual-stack listener's IPv4 client is named as IPv4 on the accepted side, by both.
    if (fds.size() == 9) CHECK(find(diag, inode_of(fds[8]))->remote.rfind("127.0.0.1:", 0) == 0);
    for (const int fd : fds) close(fd);
}

TEST_CASE("parse_proc_net_tcp: listeners and connections, v4 and v6", "[proc]") {
    const std::string v4 =
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:4A38 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81234 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0100007F:C350 0100007F:4A39 01 00000000:00000000 02:000A7B2C 00000000     0        0 81301 1 0000000000000000 20 4 30 10 -1\n";
    auto s = parse_proc_net_tcp(v4, false);
    REQUIRE(s.size() == 2);
    CHECK(s[0].state == 10);
    CHECK(s[0].local == "127.0.0.1:19000");
    CHECK(s[0].local_port == 19000);
    CHECK(s[0].inode == 81234);
    CHECK(s[1].state == 1);
    CHECK(s[1].local_port == 50000);
    CHECK(s[1].remote == "127.0.0.1:19001");
    CHECK(s[1].inode == 81301);

    const std::string v6 =
        "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0000000000000000FFFF00000100007F:5A28 0000000000000000FFFF00000100007F:E8FE 01 00000000:00000000 00:00000000 00000000     0        0 81408 1 000000007569017e 20 4 30 10 -1\n"
        "   1: 00000000000000000000000001000000:1538 00000000000000000000000001000000:D431 01 00000000:00000000 00:00000000 00000000     0        0 99 1 000000007569017e 20 4 30 10 -1\n"
        "garbage line\n";
    auto t = parse_proc_net_tcp(v6, true);
    REQUIRE(t.size() == 2);
    CHECK(t[0].local == "127.0.0.1:23080");
    CHECK(t[0].remote == "127.0.0.1:59646");
    CHECK(t[1].remote == "[::1]:54321");
    CHECK(t[1].local == "[::1]:5432");
}

TEST_CASE("parse_socket_inode", "[proc]") {
    CHECK(parse_socket_inode("socket:[81301]") == std::optional<uint64_t>(81301));
    CHECK_FALSE(parse_socket_inode("pipe:[81301]"));
    CHECK_FALSE(parse_socket_inode("socket:[]"));
    CHECK_FALSE(parse_socket_inode("socket:[12x]"));
    CHECK_FALSE(parse_socket_inode("/tmp/socket:[1]"));
}

TEST_CASE("read_proc_tasks sees a thread blocked in read() on our pipe", "[proc]") {
    int p[2];
    REQUIRE(pipe(p) == 0);
    std::atomic<long> tid{0};
    std::thread t([&] {
        tid = syscall(SYS_gettid);
        char c;
        (void)!read(p[0], &c, 1);
    });
    // Wait until the kernel shows it asleep in read (oracle: what the thread does).
    bool seen = false;
    for (int i = 0; i < 200 && !seen; i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        for (const auto& task : read_proc_tasks(getpid())) {
            if (task.tid != tid.load()) continue;
            if (task.state == 'S' && task.syscall_known && !task.syscall.running &&
                task.syscall.nr == SYS_read && task.syscall.args[0] == static_cast<uint64_t>(p[0]))
                seen = true;
        }
    }
    (void)!write(p[1], "x", 1);
    t.join();
    close(p[0]);
    close(p[1]);
    CHECK(seen);
}

TEST_CASE("FdResolver names pipes, files, listeners, outbound and inbound sockets", "[proc]") {
    const int pid = getpid();
    int p[2];
    REQUIRE(pipe(p) == 0);
    char path[] = "/tmp/qscope-fdres-XXXXXX";
    const int f = mkstemp(path);
    REQUIRE(f >= 0);

    const int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;  // any free port: never collides with other tests
    REQUIRE(bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    REQUIRE(listen(l, 4) == 0);
    socklen_t al = sizeof(a);
    REQUIRE(getsockname(l, reinterpret_cast<sockaddr*>(&a), &al) == 0);
    const int port = ntohs(a.sin_port);
    const int c = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(connect(c, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    const int s = accept(l, nullptr, nullptr);
    REQUIRE(s >= 0);

    FdResolver r(pid);
    CHECK(r.resolve(p[0]).name == "pipe");
    CHECK(r.resolve(f).name == path);
    CHECK(r.resolve(f).kind == "file");
    CHECK(r.resolve(l).name == "listen :" + std::to_string(port));
    // The client side names its peer; the accepted side names the listener it came in on.
    CHECK(r.resolve(c).name == "127.0.0.1:" + std::to_string(port));
    CHECK(r.resolve(c).kind == "socket");
    CHECK(r.resolve(s).name == "inbound :" + std::to_string(port));
    CHECK(r.resolve(9999).name == "closed fd");

    // Where the fd-table iterator answers, each TCP socket's ends come from it (here from
    // getsockname/getpeername, what the iterator reads from the socket) and only the
    // namespace's listeners from sock_diag: every name must stay the same.
    const int bare = socket(AF_INET, SOCK_STREAM, 0);  // never connected: in no TCP table
    const auto ends = [](int fd, uint8_t state) {
        TcpEnds e;
        e.family = AF_INET;
        e.state = state;
        sockaddr_in me{}, peer{};
        socklen_t n = sizeof(me);
        getsockname(fd, reinterpret_cast<sockaddr*>(&me), &n);
        n = sizeof(peer);
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &n);
        e.local_port = ntohs(me.sin_port);
        e.remote_port = ntohs(peer.sin_port);
        std::memcpy(e.local.data(), &me.sin_addr, 4);
        std::memcpy(e.remote.data(), &peer.sin_addr, 4);
        return e;
    };
    const auto inode_of = [](int fd) {
        struct stat st {};
        fstat(fd, &st);
        return static_cast<uint64_t>(st.st_ino);
    };
    int passes = 0;
    FdResolver one(pid, [&]() -> std::optional<std::vector<SocketFd>> {
        ++passes;
        return std::vector<SocketFd>{{l, inode_of(l), ends(l, 10)},
                                     {c, inode_of(c), ends(c, 1)},
                                     {s, inode_of(s), ends(s, 1)},
                                     {bare, inode_of(bare), ends(bare, kTcpClose)}};
    });
    for (int fd : {l, c, s, bare, p[0], f}) CHECK(one.resolve(fd).name == r.resolve(fd).name);
    CHECK(one.resolve(bare).name == "socket");
    CHECK(passes == 1);  // once a tick, however many sockets it names
    one.refresh();  // a new tick: a socket not named yet reads the table again
    CHECK(one.resolve(bare).name == "socket");
    CHECK(passes == 2);

    close(bare);
    close(s);
    close(c);
    close(l);
    close(f);
    unlink(path);
    close(p[0]);
    close(p[1]);
}
