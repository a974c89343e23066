// qs_load: a closed-loop HTTP/1.1 load generator with exact accounting, the client side of
// every integration test. One thread per connection (simple and correct up to ~2000
// connections); every outcome is counted exactly once:
//   requests  — complete responses received (any status), each with its latency;
//   errors    — connect failures, resets, or EOF before a complete response;
//   timeouts  — no complete response within --timeout-ms (the connection is then dropped);
//   abandoned — requests still unanswered when --duration ran out (not errors: just cut off).
// Latency is measured from the request write (from connect() with --new-conn-per-request)
// to the last response byte.
//
// --rate R: open loop instead, R requests per second in total (each of the C threads starts
// one every C/R seconds, on schedule; a thread that falls behind does not burst to catch up
// more than a second's worth). With --new-conn-per-request, R is the new connections per second.
//
// --connect-only C --hold S: open C connections at once (non-blocking), send one request on
// each as it connects, never read, close them after S seconds. Fills accept queues.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "target_util.h"

namespace {

struct Options {
    std::string host = "127.0.0.1";
    int port = -1;
    int connections = 0;
    double duration_s = 0;
    bool new_conn = false;
    long timeout_ms = 0;
    std::string out;
    std::string path = "/";
    int connect_only = 0;
    double hold_s = 0;
    double rate = 0;  // requests/s over all threads; 0 = closed loop
};
Options g_opt;

void print_usage() {
    std::fprintf(stderr,
                 "usage: qs_load --host H --port P --connections C --duration S\n"
                 "               [--new-conn-per-request] [--rate R] [--timeout-ms T] [--out F] [--path /x]\n"
                 "       qs_load --host H --port P --connect-only C --hold S [--out F] [--path /x]\n");
}

[[noreturn]] void usage(const std::string& why) {
    std::fprintf(stderr, "qs_load: %s\n", why.c_str());
    print_usage();
    std::exit(2);
}

void parse_args(int argc, char** argv) {
    qs_target::Args args(argc, argv, "qs_load", print_usage);
    while (args.next()) {
        if (args.is("--host")) g_opt.host = args.value();
        else if (args.is("--port")) g_opt.port = static_cast<int>(args.num(1, 65535));
        else if (args.is("--connections")) g_opt.connections = static_cast<int>(args.num(1, 100000));
        else if (args.is("--duration")) g_opt.duration_s = args.dbl(0.001, 86400 * 7);
        else if (args.is("--new-conn-per-request") && !args.has_inline_value()) g_opt.new_conn = true;
        else if (args.is("--timeout-ms")) g_opt.timeout_ms = args.num(0, 86400000);
        else if (args.is("--out")) g_opt.out = args.value();
        else if (args.is("--path")) g_opt.path = args.value();
        else if (args.is("--connect-only")) g_opt.connect_only = static_cast<int>(args.num(1, 1000000));
        else if (args.is("--hold")) g_opt.hold_s = args.dbl(0, 86400 * 7);
        else if (args.is("--rate")) g_opt.rate = args.dbl(0.001, 1e7);
        else args.unknown();
    }
    if (g_opt.port < 0) usage("--port is required");
    if (g_opt.connect_only == 0) {
        if (g_opt.connections <= 0) usage("--connections is required");
        if (g_opt.duration_s <= 0) usage("--duration is required");
    }
    if (g_opt.path.empty() || g_opt.path[0] != '/') usage("--path must start with /");
}

double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

sockaddr_storage g_addr;
socklen_t g_addr_len = 0;
std::string g_request;

void resolve() {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port = std::to_string(g_opt.port);
    int rc = getaddrinfo(g_opt.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || !res) {
        std::fprintf(stderr, "qs_load: cannot resolve %s: %s\n", g_opt.host.c_str(), gai_strerror(rc));
        std::exit(1);
    }
    std::memcpy(&g_addr, res->ai_addr, res->ai_addrlen);
    g_addr_len = res->ai_addrlen;
    freeaddrinfo(res);
    std::string host = g_opt.host.find(':') != std::string::npos ? "[" + g_opt.host + "]" : g_opt.host;
    g_request = "GET " + g_opt.path + " HTTP/1.1\r\nHost: " + host + ":" + port + "\r\n" +
                (g_opt.new_conn ? "Connection: close\r\n" : "") + "\r\n";
}

void raise_nofile() {
    rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

// Milliseconds left until `deadline` (absolute, monotonic seconds), at least 0.
int ms_left(double deadline) {
    double left = (deadline - now_s()) * 1000.0;
    if (left <= 0) return 0;
    return left > 1e9 ? 1000000000 : static_cast<int>(left) + 1;
}

// Outcome of one I/O step: `timeout` when the request's own deadline passed first, `cutoff`
// when the run's --duration did.
enum class Io { ok, error, timeout, cutoff };

Io wait_fd(int fd, short events, double deadline, double req_deadline);

// Non-blocking connect bounded by both deadlines; the fd stays non-blocking (all I/O below
// goes through poll).

Io connect_to(double deadline, double req_deadline, int* out_fd) {
    int fd = ::socket(g_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return Io::error;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&g_addr), g_addr_len) != 0) {
        if (errno != EINPROGRESS) {
            ::close(fd);
            return Io::error;
        }
        Io w = wait_fd(fd, POLLOUT, deadline, req_deadline);
        if (w != Io::ok) {
            ::close(fd);
            return w;
        }
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err != 0) {
            ::close(fd);
            return Io::error;
        }
    }
    *out_fd = fd;
    return Io::ok;
}

// Waits for `events` on fd until the earlier of the two deadlines.
Io wait_fd(int fd, short events, double deadline, double req_deadline) {
    pollfd p{fd, events, 0};
    double until = std::min(deadline, req_deadline);
    for (;;) {
        int rc = poll(&p, 1, ms_left(until));
        if (rc < 0 && errno == EINTR) continue;
        if (rc < 0) return Io::error;
        if (rc == 0) {
            if (now_s() < until) continue;  // poll rounds; only give up at the real deadline
            return req_deadline <= deadline ? Io::timeout : Io::cutoff;
        }
        return Io::ok;
    }
}

// Reads one full response (status line, headers, Content-Length body). `buf` keeps any
// extra bytes for the next response. Sets *status.
Io read_response(int fd, std::string& buf, double deadline, double req_deadline, int* status,
                 bool* server_close) {
    *server_close = false;
    char chunk[8192];
    size_t hdr_end;
    auto fill = [&]() -> Io {
        for (;;) {
            ssize_t r = ::read(fd, chunk, sizeof chunk);
            if (r > 0) {
                buf.append(chunk, static_cast<size_t>(r));
                return Io::ok;
            }
            if (r == 0) return Io::error;
            if (errno == EINTR) continue;
            if (errno != EAGAIN) return Io::error;
            Io w = wait_fd(fd, POLLIN, deadline, req_deadline);
            if (w != Io::ok) return w;
        }
    };
    while ((hdr_end = buf.find("\r\n\r\n")) == std::string::npos) {
        if (Io r = fill(); r != Io::ok) return r;
        if (buf.size() > (1u << 20)) return Io::error;
    }
    if (buf.size() < 12 || buf.compare(0, 5, "HTTP/") != 0) return Io::error;
    size_t sp = buf.find(' ');
    if (sp == std::string::npos || sp > hdr_end) return Io::error;
    *status = std::atoi(buf.c_str() + sp + 1);
    if (*status < 100 || *status > 599) return Io::error;
    size_t body = 0;
    bool have_len = false;
    for (size_t line = buf.find("\r\n") + 2; line < hdr_end;) {
        size_t le = buf.find("\r\n", line);
        if (le == std::string::npos || le > hdr_end) le = hdr_end;
        if (le - line > 15 && strncasecmp(buf.c_str() + line, "content-length:", 15) == 0) {
            body = std::strtoul(buf.c_str() + line + 15, nullptr, 10);
            have_len = true;
        } else if (le - line >= 17 && strncasecmp(buf.c_str() + line, "connection:", 11) == 0 &&
                   buf.find("close", line + 11) < le) {
            *server_close = true;
        }
        line = le + 2;
    }
    if (!have_len) {
        // No length: the body ends at close (HTTP/1.0 style).
        for (;;) {
            Io r = fill();
            if (r == Io::error) break;  // EOF ends the body
            if (r != Io::ok) return r;
        }
        buf.clear();
        return Io::ok;
    }
    while (buf.size() < hdr_end + 4 + body) {
        if (Io r = fill(); r != Io::ok) return r;
    }
    buf.erase(0, hdr_end + 4 + body);
    return Io::ok;
}

Io write_request(int fd, double deadline, double req_deadline) {
    const char* p = g_request.data();
    size_t n = g_request.size();
    while (n > 0) {
        ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
        if (w > 0) {
            p += w;
            n -= static_cast<size_t>(w);
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && errno == EAGAIN) {
            Io r = wait_fd(fd, POLLOUT, deadline, req_deadline);
            if (r != Io::ok) return r;
            continue;
        }
        return Io::error;
    }
    return Io::ok;
}

struct ThreadStats {
    long requests = 0, errors = 0, timeouts = 0, abandoned = 0;
    long status[6] = {0, 0, 0, 0, 0, 0};  // index = status / 100
    std::vector<double> lat;
};

double g_deadline = 0;
const ThreadStats* g_stats_base = nullptr;  // thread i's stats are g_stats_base[i]

void* client_main(void* arg) {
    auto* st = static_cast<ThreadStats*>(arg);
    pthread_setname_np(pthread_self(), "qs-load");
    int fd = -1;
    std::string buf;
    // Open loop: this thread's slots are `interval` apart, staggered across threads.
    const double interval = g_opt.rate > 0 ? g_opt.connections / g_opt.rate : 0;
    double next_start = now_s() + interval * static_cast<double>(st - g_stats_base) / g_opt.connections;
    while (now_s() < g_deadline) {
        if (interval > 0) {
            double t = now_s();
            if (next_start < t - 1.0) next_start = t - 1.0;
            if (next_start > t) {
                if (next_start >= g_deadline) break;
                const double d = next_start - t;
                timespec ts{static_cast<time_t>(d), static_cast<long>((d - static_cast<double>(static_cast<time_t>(d))) * 1e9)};
                nanosleep(&ts, nullptr);
            }
            next_start += interval;
        }
        double t0 = now_s();
        double req_deadline = g_opt.timeout_ms > 0 ? t0 + g_opt.timeout_ms / 1000.0 : 1e300;
        Io r = Io::ok;
        if (fd < 0) {
            buf.clear();
            r = connect_to(g_deadline, req_deadline, &fd);
        }
        if (r == Io::ok && !g_opt.new_conn) t0 = now_s();  // keep-alive: latency excludes connect
        int status = 0;
        bool server_close = false;
        if (r == Io::ok) r = write_request(fd, g_deadline, req_deadline);
        if (r == Io::ok) r = read_response(fd, buf, g_deadline, req_deadline, &status, &server_close);
        double t1 = now_s();
        switch (r) {
            case Io::ok:
                st->requests++;
                st->status[status / 100]++;
                st->lat.push_back(t1 - t0);
                break;
            case Io::error:
                st->errors++;
                break;
            case Io::timeout:
                st->timeouts++;
                break;
            case Io::cutoff:
                st->abandoned++;
                break;
        }
        if (r != Io::ok || g_opt.new_conn || server_close) {
            if (fd >= 0) ::close(fd);
            fd = -1;
        }
        // A refused or reset server must not turn this thread into a busy loop.
        if (r == Io::error) {
            timespec ts{0, 10 * 1000000L};
            nanosleep(&ts, nullptr);
        }
    }
    if (fd >= 0) ::close(fd);
    return nullptr;
}

double percentile(const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0;
    // Nearest rank: the smallest value with at least q of the samples at or below it.
    size_t rank = static_cast<size_t>(q * static_cast<double>(sorted.size()) + 0.999999999);
    if (rank < 1) rank = 1;
    if (rank > sorted.size()) rank = sorted.size();
    return sorted[rank - 1];
}

void emit(const std::string& json) {
    std::printf("%s\n", json.c_str());
    std::fflush(stdout);
    if (!g_opt.out.empty()) {
        std::string tmp = g_opt.out + ".tmp";
        FILE* f = std::fopen(tmp.c_str(), "w");
        if (!f || std::fprintf(f, "%s\n", json.c_str()) < 0 || std::fclose(f) != 0 ||
            std::rename(tmp.c_str(), g_opt.out.c_str()) != 0) {
            std::fprintf(stderr, "qs_load: cannot write %s: %s\n", g_opt.out.c_str(), std::strerror(errno));
            std::exit(1);
        }
    }
}

int run_load() {
    std::vector<ThreadStats> stats(static_cast<size_t>(g_opt.connections));
    g_stats_base = stats.data();
    std::vector<pthread_t> threads;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    double start = now_s();
    g_deadline = start + g_opt.duration_s;
    for (auto& s : stats) {
        pthread_t t;
        int rc = pthread_create(&t, &attr, client_main, &s);
        if (rc != 0) {
            std::fprintf(stderr, "qs_load: pthread_create: %s (after %zu threads)\n", std::strerror(rc),
                         threads.size());
            break;
        }
        threads.push_back(t);
    }
    for (auto t : threads) pthread_join(t, nullptr);
    double elapsed = now_s() - start;

    ThreadStats all;
    for (auto& s : stats) {
        all.requests += s.requests;
        all.errors += s.errors;
        all.timeouts += s.timeouts;
        all.abandoned += s.abandoned;
        for (int i = 0; i < 6; ++i) all.status[i] += s.status[i];
        all.lat.insert(all.lat.end(), s.lat.begin(), s.lat.end());
    }
    std::sort(all.lat.begin(), all.lat.end());
    char json[1024];
    std::snprintf(json, sizeof json,
                  "{\"requests\":%ld,\"errors\":%ld,\"timeouts\":%ld,\"abandoned\":%ld,"
                  "\"status\":{\"1xx\":%ld,\"2xx\":%ld,\"3xx\":%ld,\"4xx\":%ld,\"5xx\":%ld},"
                  "\"latency_seconds\":{\"p50\":%.6f,\"p90\":%.6f,\"p99\":%.6f,\"max\":%.6f},"
                  "\"rps\":%.3f,\"elapsed_seconds\":%.3f,\"connections\":%zu}",
                  all.requests, all.errors, all.timeouts, all.abandoned, all.status[1], all.status[2],
                  all.status[3], all.status[4], all.status[5], percentile(all.lat, 0.50),
                  percentile(all.lat, 0.90), percentile(all.lat, 0.99),
                  all.lat.empty() ? 0.0 : all.lat.back(), elapsed > 0 ? all.requests / elapsed : 0.0,
                  elapsed, threads.size());
    emit(json);
    return 0;
}

int run_connect_only() {
    const int n = g_opt.connect_only;
    std::vector<int> fds(static_cast<size_t>(n), -1);
    std::vector<char> state(static_cast<size_t>(n), 0);  // 0 pending, 1 connected, 2 failed
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int connected = 0, failed = 0;
    double start = now_s();
    double end = start + g_opt.hold_s;
    for (int i = 0; i < n; ++i) {
        int fd = ::socket(g_addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            state[i] = 2;
            failed++;
            continue;
        }
        fds[i] = fd;
        int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&g_addr), g_addr_len);
        if (rc != 0 && errno != EINPROGRESS) {
            state[i] = 2;
            failed++;
            continue;
        }
        epoll_event ev{};
        ev.events = EPOLLOUT;
        ev.data.u32 = static_cast<uint32_t>(i);
        epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    }
    int last_printed = -1;
    double last_print = 0;
    std::vector<epoll_event> evs(1024);
    // Connections may complete late (SYN retransmits when the accept queue is full), so keep
    // collecting completions for the whole hold.
    for (;;) {
        int wait = ms_left(end);
        if (connected + failed == n) wait = std::min(wait, 200);
        int k = epoll_wait(ep, evs.data(), static_cast<int>(evs.size()), std::min(wait, 200));
        for (int j = 0; j < k; ++j) {
            int i = static_cast<int>(evs[j].data.u32);
            if (state[i] != 0) continue;
            int err = 0;
            socklen_t el = sizeof err;
            getsockopt(fds[i], SOL_SOCKET, SO_ERROR, &err, &el);
            epoll_ctl(ep, EPOLL_CTL_DEL, fds[i], nullptr);
            if (err == 0) {
                state[i] = 1;
                connected++;
                (void)::send(fds[i], g_request.data(), g_request.size(), MSG_NOSIGNAL);
            } else {
                state[i] = 2;
                failed++;
            }
        }
        double t = now_s();
        if (connected != last_printed && t - last_print >= 0.2) {
            std::printf("connected=%d failed=%d pending=%d\n", connected, failed, n - connected - failed);
            std::fflush(stdout);
            last_printed = connected;
            last_print = t;
        }
        if (t >= end) break;
    }
    for (int fd : fds)
        if (fd >= 0) ::close(fd);
    ::close(ep);
    char json[256];
    std::snprintf(json, sizeof json, "{\"attempted\":%d,\"connected\":%d,\"failed\":%d,\"pending\":%d}", n,
                  connected, failed, n - connected - failed);
    emit(json);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    raise_nofile();
    resolve();
    return g_opt.connect_only > 0 ? run_connect_only() : run_load();
}
