// qs_downstream: the peer behind qs_server — a stand-in for a database or partner API.
// Thread per connection; each "\n"-terminated line gets "y\n" after --delay-ms. --silent
// reads forever and never answers, like a partner whose client has no read timeout.
// --counters-file F: its own count of requests in progress (a line received, its reply not
// yet written), the exact maximum, and replies written, as one JSON line replaced every 10 ms.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <string>

#include "target_util.h"

namespace {

using qs_target::sleep_ms;
using qs_target::write_all;

int g_port = -1;
std::string g_addr = "127.0.0.1";
long g_delay_ms = 0;
bool g_silent = false;
std::string g_counters_file;
std::atomic<long> g_in_progress{0}, g_in_progress_max{0}, g_answered{0};

void print_usage() {
    std::fprintf(stderr, "usage: qs_downstream --port P [--addr A] [--delay-ms D] [--silent] [--counters-file F]\n");
}

void request_started() {
    const long now = g_in_progress.fetch_add(1) + 1;
    for (long m = g_in_progress_max.load(); now > m && !g_in_progress_max.compare_exchange_weak(m, now);) {
    }
}

void* counters_main(void*) {
    pthread_setname_np(pthread_self(), "ds-counters");
    const std::string tmp = g_counters_file + ".tmp";
    for (;;) {
        if (FILE* f = std::fopen(tmp.c_str(), "w")) {
            std::fprintf(f, "{\"in_progress\":%ld,\"in_progress_max\":%ld,\"answered\":%ld}\n", g_in_progress.load(),
                         g_in_progress_max.load(), g_answered.load());
            std::fclose(f);
            std::rename(tmp.c_str(), g_counters_file.c_str());
        }
        sleep_ms(10);
    }
    return nullptr;
}

[[noreturn]] void usage(const char* why) {
    std::fprintf(stderr, "qs_downstream: %s\n", why);
    print_usage();
    std::exit(2);
}

void* conn_main(void* arg) {
    pthread_setname_np(pthread_self(), "ds-conn");
    int fd = static_cast<int>(reinterpret_cast<long>(arg));
    char buf[4096];
    for (;;) {
        ssize_t r = ::read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (g_silent) continue;
        // One reply per line, each after the full delay (requests on one connection are
        // serial, as on a real DB connection).
        bool ok = true;
        for (ssize_t i = 0; i < r && ok; ++i) {
            if (buf[i] != '\n') continue;
            request_started();
            sleep_ms(g_delay_ms);
            ok = write_all(fd, "y\n", 2);
            g_in_progress.fetch_sub(1);
            if (ok) g_answered.fetch_add(1);
        }
        if (!ok) break;
    }
    ::close(fd);
    return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
    qs_target::Args args(argc, argv, "qs_downstream", print_usage);
    while (args.next()) {
        if (args.is("--port")) g_port = static_cast<int>(args.num(0, 65535));
        else if (args.is("--addr")) g_addr = args.value();
        else if (args.is("--delay-ms")) g_delay_ms = args.num(0, 86400000);
        else if (args.is("--silent")) g_silent = true;
        else if (args.is("--counters-file")) g_counters_file = args.value();
        else args.unknown();
    }
    if (g_port < 0) usage("--port is required");
    signal(SIGPIPE, SIG_IGN);

    sockaddr_storage ss{};
    socklen_t len;
    int family;
    if (inet_pton(AF_INET, g_addr.c_str(), &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr) == 1) {
        auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
        sin->sin_family = family = AF_INET;
        sin->sin_port = htons(static_cast<uint16_t>(g_port));
        len = sizeof *sin;
    } else if (inet_pton(AF_INET6, g_addr.c_str(), &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr) == 1) {
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
        sin6->sin6_family = family = AF_INET6;
        sin6->sin6_port = htons(static_cast<uint16_t>(g_port));
        len = sizeof *sin6;
    } else {
        usage("bad --addr (want a numeric IPv4 or IPv6 address)");
    }
    int lfd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(lfd, 1024) != 0) {
        std::fprintf(stderr, "qs_downstream: cannot listen on %s:%d: %s\n", g_addr.c_str(), g_port,
                     std::strerror(errno));
        return 1;
    }
    sockaddr_storage bound{};
    socklen_t blen = sizeof bound;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&bound), &blen);
    int port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    std::printf("READY port=%d\n", port);
    std::fflush(stdout);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 128 * 1024);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (!g_counters_file.empty()) {
        pthread_t t;
        pthread_create(&t, &attr, counters_main, nullptr);
    }
    for (;;) {
        int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) sleep_ms(10);
            continue;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        pthread_t t;
        if (pthread_create(&t, &attr, conn_main, reinterpret_cast<void*>(static_cast<long>(fd))) != 0)
            ::close(fd);
    }
}
