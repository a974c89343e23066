// qs_server: a thread-per-connection HTTP/1.1 server shaped like Tomcat's BIO/NIO connector
// (one acceptor, a queue of accepted connections, N workers each owning one connection at a
// time), with knobs to put the bottleneck at a known stage: the accept queue, the connector
// queue, the worker pool, a downstream pool, or a silent downstream. It publishes its own
// counters so integration tests have an oracle that does not depend on qscope.
//
// Dependency-free on purpose: every integration test drives it, so it must build anywhere.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "target_util.h"

namespace {

using qs_target::sleep_ms;
using qs_target::write_all;

struct Options {
    int port = 0;
    std::string addr = "127.0.0.1";
    int backlog = 128;
    int workers = 8;
    long service_ms = 0;
    long service_jitter_ms = 0;  // service time uniform in service_ms ± this
    long cpu_ms = 0;
    long accept_delay_ms = 0;
    std::string accept_pause_file;
    std::string downstream;  // HOST:PORT
    int pool = 0;            // 0 = default (workers) when --downstream without per-request
    bool downstream_per_request = false;
    int status = 200;
    std::string counters_file;
    bool keepalive = true;
    bool fork_per_connection = false;  // a process per connection (inetd, Apache prefork-like)
};

Options g_opt;

// The service time of one request: --service-ms, spread uniformly over ±--service-jitter-ms.
// Without a spread, requests started together finish together, and clients that answer at
// once keep moving in lockstep waves.
long service_time_ms() {
    if (g_opt.service_jitter_ms <= 0) return g_opt.service_ms;
    thread_local unsigned seed = static_cast<unsigned>(pthread_self()) ^ static_cast<unsigned>(time(nullptr));
    const long span = 2 * g_opt.service_jitter_ms + 1;
    return std::max(0L, g_opt.service_ms - g_opt.service_jitter_ms + static_cast<long>(rand_r(&seed) % span));
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
    std::fprintf(stderr, "qs_server: ");
    va_list ap;
    va_start(ap, fmt);
    std::vfprintf(stderr, fmt, ap);
    va_end(ap);
    std::fprintf(stderr, "\n");
    std::exit(2);
}

void usage() {
    std::fprintf(stderr,
                 "usage: qs_server --port P [--addr 127.0.0.1|::1|::|0.0.0.0] [--backlog B]\n"
                 "         [--workers N] [--service-ms S] [--service-jitter-ms J] [--cpu-ms C] [--accept-delay-ms D]\n"
                 "         [--accept-pause-file F] [--downstream HOST:PORT [--pool K]]\n"
                 "         [--downstream-per-request] [--status CODE] [--counters-file F]\n"
                 "         [--keepalive=0|1] [--fork-per-connection]\n");
    std::exit(2);
}

void parse_args(int argc, char** argv) {
    bool have_port = false;
    qs_target::Args args(argc, argv, "qs_server", usage);
    while (args.next()) {
        if (args.is("--port")) {
            g_opt.port = static_cast<int>(args.num(0, 65535));
            have_port = true;
        } else if (args.is("--addr")) {
            g_opt.addr = args.value();
        } else if (args.is("--backlog")) {
            g_opt.backlog = static_cast<int>(args.num(0, 1 << 20));
        } else if (args.is("--workers")) {
            g_opt.workers = static_cast<int>(args.num(1, 20000));
        } else if (args.is("--service-ms")) {
            g_opt.service_ms = args.num(0, 86400000);
        } else if (args.is("--service-jitter-ms")) {
            g_opt.service_jitter_ms = args.num(0, 86400000);
        } else if (args.is("--cpu-ms")) {
            g_opt.cpu_ms = args.num(0, 86400000);
        } else if (args.is("--accept-delay-ms")) {
            g_opt.accept_delay_ms = args.num(0, 86400000);
        } else if (args.is("--accept-pause-file")) {
            g_opt.accept_pause_file = args.value();
        } else if (args.is("--downstream")) {
            g_opt.downstream = args.value();
        } else if (args.is("--pool")) {
            g_opt.pool = static_cast<int>(args.num(1, 100000));
        } else if (args.is("--downstream-per-request")) {
            g_opt.downstream_per_request = true;
        } else if (args.is("--status")) {
            g_opt.status = static_cast<int>(args.num(100, 599));
        } else if (args.is("--counters-file")) {
            g_opt.counters_file = args.value();
        } else if (args.is("--keepalive")) {
            g_opt.keepalive = args.has_inline_value() ? args.num(0, 1) != 0 : true;
        } else if (args.is("--fork-per-connection")) {
            g_opt.fork_per_connection = true;
        } else if (args.is("--help") || args.is("-h")) {
            usage();
        } else {
            args.unknown();
        }
    }
    if (!have_port) die("--port is required");
    if (g_opt.fork_per_connection && (!g_opt.counters_file.empty() || !g_opt.downstream.empty()))
        die("--fork-per-connection takes neither --counters-file nor --downstream (per-process state)");
    if (g_opt.pool > 0 && g_opt.downstream.empty()) die("--pool needs --downstream");
    if (g_opt.downstream_per_request && g_opt.downstream.empty())
        die("--downstream-per-request needs --downstream");
    if (!g_opt.downstream.empty() && !g_opt.downstream_per_request && g_opt.pool == 0)
        g_opt.pool = g_opt.workers;
}

// ---- counters ------------------------------------------------------------------------

struct Counters {
    std::atomic<long> accepted{0};
    std::atomic<long> queued_conns{0};
    std::atomic<long> in_flight{0};
    std::atomic<long> in_flight_max{0};
    std::atomic<long> completed{0};
    std::atomic<long> pool_busy{0};
    std::atomic<long> pool_busy_max{0};
    std::atomic<long> pool_waiters{0};
    std::atomic<long> pool_waiters_max{0};
    std::atomic<long> workers_busy{0};
};
Counters g_ctr;

// Durations, the last kSamples of them: their median is the oracle for qscope's p50 where a
// nominal delay is not (an emulated guest overshoots its sleeps by milliseconds, more when its
// host is busy). Downstream calls: the call's write -> its reply's first byte read. Requests:
// the read that returns a request's first bytes -> its response written.
class Durations {
public:
    void note(long us) {
        std::lock_guard<std::mutex> g(mu_);
        if (us_.size() < kSamples)
            us_.push_back(us);
        else
            us_[next_++ % kSamples] = us;
    }
    long p50() const {
        std::vector<long> v;
        {
            std::lock_guard<std::mutex> g(mu_);
            v = us_;
        }
        if (v.empty()) return 0;
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
    }

private:
    static constexpr size_t kSamples = 4096;
    mutable std::mutex mu_;
    std::vector<long> us_;  // a ring once full
    size_t next_ = 0;
};
Durations g_calls, g_requests;

long now_us() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

// Maxima are maintained at every increment, not sampled, so a short spike is never missed.
void inc_with_max(std::atomic<long>& v, std::atomic<long>& mx) {
    long now = v.fetch_add(1) + 1;
    long seen = mx.load();
    while (now > seen && !mx.compare_exchange_weak(seen, now)) {
    }
}

void write_counters(bool force = false) {
    if (g_opt.counters_file.empty()) return;
    char buf[512];
    int n = std::snprintf(
        buf, sizeof buf,
        "{\"accepted\":%ld,\"queued_conns\":%ld,\"in_flight\":%ld,\"in_flight_max\":%ld,"
        "\"completed\":%ld,\"pool_busy\":%ld,\"pool_busy_max\":%ld,\"pool_waiters\":%ld,"
        "\"pool_waiters_max\":%ld,\"workers_busy\":%ld,\"call_p50_us\":%ld,\"request_p50_us\":%ld}\n",
        g_ctr.accepted.load(), g_ctr.queued_conns.load(), g_ctr.in_flight.load(),
        g_ctr.in_flight_max.load(), g_ctr.completed.load(), g_ctr.pool_busy.load(),
        g_ctr.pool_busy_max.load(), g_ctr.pool_waiters.load(), g_ctr.pool_waiters_max.load(),
        g_ctr.workers_busy.load(), g_opt.downstream.empty() ? 0L : g_calls.p50(), g_requests.p50());
    // Unchanged counters are not rewritten: each rewrite is file I/O in the target's main
    // thread, which an observer of the target would otherwise see 100 times a second.
    static std::string last;
    if (last == buf && !force) return;
    last = buf;
    // Readers must never see a half-written file: write a sibling, then rename over.
    std::string tmp = g_opt.counters_file + ".tmp." + std::to_string(getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ssize_t w = ::write(fd, buf, static_cast<size_t>(n));
    ::close(fd);
    if (w == n) ::rename(tmp.c_str(), g_opt.counters_file.c_str());
    else ::unlink(tmp.c_str());
}

// ---- small utilities -------------------------------------------------------------------

// Burns thread CPU time (not wall time), so a descheduled worker still does the full work.
void burn_cpu_ms(long ms) {
    if (ms <= 0) return;
    timespec start{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    const long long want = ms * 1000000LL;
    volatile unsigned long x = 0;
    for (;;) {
        for (int i = 0; i < 20000; ++i) x = x * 2862933555777941757ULL + 3037000493ULL;
        timespec now{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        long long used = (now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec);
        if (used >= want) break;
    }
}

const char* reason(int code) {
    switch (code) {
        case 200: return "OK";
        case 201: return "Created";
        case 204: return "No Content";
        case 301: return "Moved Permanently";
        case 302: return "Found";
        case 400: return "Bad Request";
        case 404: return "Not Found";
        case 429: return "Too Many Requests";
        case 500: return "Internal Server Error";
        case 502: return "Bad Gateway";
        case 503: return "Service Unavailable";
        case 504: return "Gateway Timeout";
        default: return "Status";
    }
}

std::string g_ds_host;
std::string g_ds_port;

int connect_downstream() {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(g_ds_host.c_str(), g_ds_port.c_str(), &hints, &res) != 0 || !res) return -1;
    int fd = -1;
    for (addrinfo* ai = res; ai; ai = ai->ai_next) {
        fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        ::close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

// One downstream call: "x\n" out, one line back. Blocking, no timeout — like a JDBC driver
// or HTTP client configured without one.
bool downstream_call(int fd) {
    const long t0 = now_us();
    if (!write_all(fd, "x\n", 2)) return false;
    char c;
    bool first = true;
    for (;;) {
        ssize_t r = ::read(fd, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        if (first) g_calls.note(now_us() - t0);
        first = false;
        if (c == '\n') return true;
    }
}

// ---- downstream pool (pthread mutex + condvar: waiters block in futex) -----------------

struct Pool {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    std::vector<int> free_fds;
};
Pool g_pool;

int pool_borrow() {
    pthread_mutex_lock(&g_pool.mu);
    if (g_pool.free_fds.empty()) {
        inc_with_max(g_ctr.pool_waiters, g_ctr.pool_waiters_max);
        while (g_pool.free_fds.empty()) pthread_cond_wait(&g_pool.cv, &g_pool.mu);
        g_ctr.pool_waiters.fetch_sub(1);
    }
    int fd = g_pool.free_fds.back();
    g_pool.free_fds.pop_back();
    inc_with_max(g_ctr.pool_busy, g_ctr.pool_busy_max);
    pthread_mutex_unlock(&g_pool.mu);
    return fd;
}

void pool_return(int fd) {
    pthread_mutex_lock(&g_pool.mu);
    g_pool.free_fds.push_back(fd);
    g_ctr.pool_busy.fetch_sub(1);
    pthread_cond_signal(&g_pool.cv);
    pthread_mutex_unlock(&g_pool.mu);
}

// Returns false when the downstream failed (the request then gets a 502).
bool do_downstream() {
    if (g_opt.downstream.empty()) return true;
    if (g_opt.downstream_per_request) {
        int fd = connect_downstream();
        if (fd < 0) return false;
        bool ok = downstream_call(fd);
        ::close(fd);
        return ok;
    }
    int fd = pool_borrow();
    bool ok = downstream_call(fd);
    if (!ok) {
        // A broken pooled connection is replaced, as a real pool would evict it.
        ::close(fd);
        fd = connect_downstream();
        if (fd < 0) {
            // Keep the pool size constant: park a placeholder that will fail fast next time.
            fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        }
    }
    pool_return(fd);
    return ok;
}

// ---- connection queue (the "connector queue") ------------------------------------------

pthread_mutex_t g_q_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t g_q_cv = PTHREAD_COND_INITIALIZER;
std::deque<int> g_queue;

void queue_push(int fd) {
    pthread_mutex_lock(&g_q_mu);
    g_queue.push_back(fd);
    g_ctr.queued_conns.fetch_add(1);
    pthread_cond_signal(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
}

int queue_pop() {
    pthread_mutex_lock(&g_q_mu);
    while (g_queue.empty()) pthread_cond_wait(&g_q_cv, &g_q_mu);
    int fd = g_queue.front();
    g_queue.pop_front();
    g_ctr.queued_conns.fetch_sub(1);
    pthread_mutex_unlock(&g_q_mu);
    return fd;
}

// ---- HTTP ------------------------------------------------------------------------------

bool ieq_prefix(const char* p, const char* end, const char* lit) {
    for (; *lit; ++p, ++lit) {
        if (p >= end) return false;
        char a = *p, b = *lit;
        if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
        if (a != b) return false;
    }
    return true;
}

// Serves one connection until the client closes it (or keep-alive is off).
void serve_connection(int fd) {
    std::string buf;
    char chunk[4096];
    const int code = g_opt.status;
    char resp[128];
    int resp_len = std::snprintf(resp, sizeof resp, "HTTP/1.1 %d %s\r\nContent-Length: 2\r\n\r\nok",
                                 code, reason(code));
    for (;;) {
        // A request is "in flight" from the read that returns its first bytes (or at once when
        // pipelined bytes are already buffered) until its response is written.
        bool counted = false;
        long started_us = 0;
        if (!buf.empty()) {
            inc_with_max(g_ctr.in_flight, g_ctr.in_flight_max);
            counted = true;
            started_us = now_us();
        }
        size_t hdr_end;
        bool eof = false;
        while ((hdr_end = buf.find("\r\n\r\n")) == std::string::npos) {
            ssize_t r = ::read(fd, chunk, sizeof chunk);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                eof = true;
                break;
            }
            if (!counted) {
                inc_with_max(g_ctr.in_flight, g_ctr.in_flight_max);
                counted = true;
                started_us = now_us();
            }
            buf.append(chunk, static_cast<size_t>(r));
            if (buf.size() > (1u << 20)) {  // refuse absurd headers rather than grow forever
                eof = true;
                break;
            }
        }
        if (eof) {
            if (counted) g_ctr.in_flight.fetch_sub(1);
            return;
        }
        size_t head_len = hdr_end + 4;
        // Content-Length and Connection: close, case-insensitively, line by line.
        size_t body_len = 0;
        bool client_close = false;
        const char* p = buf.data();
        const char* end = buf.data() + hdr_end;
        const char* line = p;
        while (line < end) {
            const char* nl = static_cast<const char*>(std::memchr(line, '\n', end - line));
            const char* le = nl ? nl : end;
            if (ieq_prefix(line, le, "content-length:")) {
                body_len = std::strtoul(line + 15, nullptr, 10);
                if (body_len > (64u << 20)) body_len = 64u << 20;
            } else if (ieq_prefix(line, le, "connection:")) {
                const char* v = line + 11;
                while (v < le && (*v == ' ' || *v == '\t')) ++v;
                if (ieq_prefix(v, le, "close")) client_close = true;
            }
            line = le + 1;
        }
        while (buf.size() < head_len + body_len) {
            ssize_t r = ::read(fd, chunk, sizeof chunk);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                g_ctr.in_flight.fetch_sub(1);
                return;
            }
            buf.append(chunk, static_cast<size_t>(r));
        }
        buf.erase(0, head_len + body_len);

        sleep_ms(service_time_ms());
        burn_cpu_ms(g_opt.cpu_ms);
        bool ok = do_downstream();

        // Closing after this response: say so, or a keep-alive client would send its next
        // request into a closing socket and see a spurious error.
        const bool closing = client_close || !g_opt.keepalive;
        bool wrote;
        if (ok && !closing) {
            wrote = write_all(fd, resp, static_cast<size_t>(resp_len));
        } else {
            char out[192];
            int n = std::snprintf(out, sizeof out, "HTTP/1.1 %d %s\r\nContent-Length: 2\r\n%s\r\nok",
                                  ok ? code : 502, ok ? reason(code) : reason(502),
                                  closing ? "Connection: close\r\n" : "");
            wrote = write_all(fd, out, static_cast<size_t>(n));
        }
        g_ctr.in_flight.fetch_sub(1);
        if (wrote) {
            g_requests.note(now_us() - started_us);
            g_ctr.completed.fetch_add(1);
        }
        if (!wrote || closing) return;
    }
}

void* worker_main(void* arg) {
    char name[16];
    std::snprintf(name, sizeof name, "qs-worker-%ld", reinterpret_cast<long>(arg));
    pthread_setname_np(pthread_self(), name);
    for (;;) {
        int fd = queue_pop();
        g_ctr.workers_busy.fetch_add(1);
        serve_connection(fd);
        ::close(fd);
        g_ctr.workers_busy.fetch_sub(1);
    }
    return nullptr;
}

int g_listen_fd = -1;

// --fork-per-connection: the acceptor forks a child per connection that serves it and exits
// (a process tree that grows with the clients). The child dies with the server
// (PR_SET_PDEATHSIG) and takes SIGTERM; the server ignores SIGCHLD, so children reap
// themselves.
void fork_connection(int fd) {
    const pid_t child = ::fork();
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(0);  // the server died between fork and prctl
        sigset_t none;
        sigemptyset(&none);
        pthread_sigmask(SIG_SETMASK, &none, nullptr);
        pthread_setname_np(pthread_self(), "qs-conn");
        ::close(g_listen_fd);
        serve_connection(fd);
        _exit(0);
    }
    ::close(fd);
    if (child < 0) sleep_ms(10);  // out of processes: back off, the client sees a reset
}

void* acceptor_main(void*) {
    pthread_setname_np(pthread_self(), "qs-acceptor");
    for (;;) {
        if (!g_opt.accept_pause_file.empty()) {
            struct stat st;
            while (::stat(g_opt.accept_pause_file.c_str(), &st) == 0) sleep_ms(10);
        }
        sleep_ms(g_opt.accept_delay_ms);
        int fd = ::accept4(g_listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                sleep_ms(10);  // out of resources: back off instead of spinning
            continue;
        }
        g_ctr.accepted.fetch_add(1);
        if (g_opt.fork_per_connection)
            fork_connection(fd);
        else
            queue_push(fd);
    }
    return nullptr;
}

int open_listener() {
    sockaddr_storage ss{};
    socklen_t len;
    int family;
    if (inet_pton(AF_INET, g_opt.addr.c_str(), &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr) == 1) {
        auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
        sin->sin_family = AF_INET;
        sin->sin_port = htons(static_cast<uint16_t>(g_opt.port));
        len = sizeof *sin;
        family = AF_INET;
    } else if (inet_pton(AF_INET6, g_opt.addr.c_str(),
                         &reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr) == 1) {
        auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(static_cast<uint16_t>(g_opt.port));
        len = sizeof *sin6;
        family = AF_INET6;
    } else {
        die("bad --addr '%s' (want a numeric IPv4 or IPv6 address)", g_opt.addr.c_str());
    }
    int fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) die("socket: %s", std::strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (family == AF_INET6) {
        // "::" serves IPv4 too (dual stack), like a JVM listening on the wildcard.
        int v6only = 0;
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) die("bind: %s", std::strerror(errno));
    if (::listen(fd, g_opt.backlog) != 0) die("listen: %s", std::strerror(errno));
    return fd;
}

int bound_port(int fd) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
}

void start_thread(void* (*fn)(void*), void* arg) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);  // thousands of workers must fit
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_attr_destroy(&attr);
    if (rc != 0) die("pthread_create: %s", std::strerror(rc));
    pthread_detach(t);
}

}  // namespace

int main(int argc, char** argv) {
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);

    // Only the main thread takes SIGTERM/SIGINT (via sigtimedwait); block them before any
    // thread exists so every thread inherits the mask.
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

    if (!g_opt.downstream.empty()) {
        auto colon = g_opt.downstream.rfind(':');
        if (colon == std::string::npos || colon == 0)
            die("bad --downstream '%s' (want HOST:PORT)", g_opt.downstream.c_str());
        g_ds_host = g_opt.downstream.substr(0, colon);
        if (g_ds_host.size() > 2 && g_ds_host.front() == '[' && g_ds_host.back() == ']')
            g_ds_host = g_ds_host.substr(1, g_ds_host.size() - 2);
        g_ds_port = g_opt.downstream.substr(colon + 1);
        for (int i = 0; !g_opt.downstream_per_request && i < g_opt.pool; ++i) {
            // Tolerate a downstream that is still starting (tests launch both at once).
            int fd = -1;
            for (int tries = 0; fd < 0 && tries < 500; ++tries) {
                fd = connect_downstream();
                if (fd < 0) sleep_ms(10);
            }
            if (fd < 0)
                die("cannot connect to downstream %s: %s", g_opt.downstream.c_str(),
                    std::strerror(errno));
            g_pool.free_fds.push_back(fd);
        }
    }

    g_listen_fd = open_listener();
    if (g_opt.fork_per_connection)
        signal(SIGCHLD, SIG_IGN);
    else
        for (long i = 0; i < g_opt.workers; ++i) start_thread(worker_main, reinterpret_cast<void*>(i));
    start_thread(acceptor_main, nullptr);

    write_counters();
    std::printf("READY port=%d\n", bound_port(g_listen_fd));
    std::fflush(stdout);

    // The counters file is rewritten every 10 ms; without one, the main thread only waits
    // for a stop signal and never wakes (tests compare thread states with /proc, and a
    // thread that wakes 100 times a second is sometimes caught running).
    timespec tick{0, 10 * 1000000L};
    for (;;) {
        int sig = sigtimedwait(&sigs, nullptr, g_opt.counters_file.empty() ? nullptr : &tick);
        if (sig == SIGTERM || sig == SIGINT) break;
        write_counters();
    }
    write_counters(true);
    std::fflush(stdout);
    // Workers may be blocked in read() on clients or downstreams; don't wait for them.
    _exit(0);
}
