// qs_uring: an HTTP/1.1 server on one io_uring event loop (liburing), the io_uring case of
// the event-loop tests (tests/integration/loops_test.cpp).
//
// One thread, one ring: accept, recv and send are submitted to it, and each turn of the loop
// waits for completions in io_uring_enter (io_uring_submit_and_wait), then handles every
// completion there is. A request (whatever one recv returns) spins --cpu-ms on the CPU in
// the loop thread, then answers `HTTP/1.1 200 OK` with a 2-byte body; the connection stays
// open for the next one.
//
// Its own instrumentation is the tests' oracle, as monitorEventLoopDelay is for Node: each
// turn's length, from io_uring_submit_and_wait's return to its next call, and every 100 ms a
// line `TURN mono_ns=<CLOCK_MONOTONIC now> max_ns=<longest turn since the last reset>`.
// SIGUSR2 resets the max.
//
//   qs_uring --port P [--cpu-ms 0]        prints READY port=<P> once listening
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "target_util.h"

namespace {

constexpr unsigned kEntries = 256;
constexpr size_t kBuf = 4096;
const char kResponse[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok";

enum class Op : uint8_t { accept, recv, send };

struct Conn {
    int fd = -1;
    Op op = Op::recv;
    char buf[kBuf];
};

std::atomic<bool> g_reset{false};
void on_usr2(int) { g_reset = true; }

uint64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void spin_ms(long ms) {
    if (ms <= 0) return;
    const uint64_t end = mono_ns() + static_cast<uint64_t>(ms) * 1000000ull;
    while (mono_ns() < end) {
    }
}

void usage() { std::fprintf(stderr, "usage: qs_uring --port P [--cpu-ms MS]\n"); }

io_uring_sqe* sqe_of(io_uring* ring) {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (!sqe) {  // the submission queue is full: hand it to the kernel, then there is room
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}

void submit_accept(io_uring* ring, int lfd, Conn* acceptor) {
    io_uring_sqe* sqe = sqe_of(ring);
    io_uring_prep_accept(sqe, lfd, nullptr, nullptr, 0);
    io_uring_sqe_set_data(sqe, acceptor);
}

void submit_recv(io_uring* ring, Conn* c) {
    c->op = Op::recv;
    io_uring_sqe* sqe = sqe_of(ring);
    io_uring_prep_recv(sqe, c->fd, c->buf, kBuf, 0);
    io_uring_sqe_set_data(sqe, c);
}

void submit_send(io_uring* ring, Conn* c) {
    c->op = Op::send;
    io_uring_sqe* sqe = sqe_of(ring);
    io_uring_prep_send(sqe, c->fd, kResponse, sizeof(kResponse) - 1, 0);
    io_uring_sqe_set_data(sqe, c);
}

}  // namespace

int main(int argc, char** argv) {
    long port = -1, cpu_ms = 0;
    qs_target::Args args(argc, argv, "qs_uring", usage);
    while (args.next()) {
        if (args.is("--port")) port = args.num(0, 65535);
        else if (args.is("--cpu-ms")) cpu_ms = args.num(0, 10000);
        else args.unknown();
    }
    if (port < 0) args.fail("--port is required");
    signal(SIGPIPE, SIG_IGN);
    signal(SIGUSR2, on_usr2);

    const int lfd = socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 128) != 0) {
        std::perror("qs_uring: bind/listen");
        return 1;
    }
    socklen_t alen = sizeof a;
    getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &alen);

    io_uring ring;
    if (int err = io_uring_queue_init(kEntries, &ring, 0); err < 0) {
        std::fprintf(stderr, "qs_uring: io_uring_queue_init: %s\n", std::strerror(-err));
        return 1;
    }
    Conn acceptor;
    acceptor.op = Op::accept;
    std::vector<std::unique_ptr<Conn>> conns;  // owned until exit: a test server's lifetime
    submit_accept(&ring, lfd, &acceptor);
    std::printf("READY port=%d\n", ntohs(a.sin_port));
    std::fflush(stdout);

    uint64_t max_turn = 0, last_print = 0;
    for (;;) {
        const int rc = io_uring_submit_and_wait(&ring, 1);
        const uint64_t turn_start = mono_ns();
        if (rc < 0 && rc != -EINTR) {
            std::fprintf(stderr, "qs_uring: io_uring_submit_and_wait: %s\n", std::strerror(-rc));
            return 1;
        }
        io_uring_cqe* cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            auto* c = static_cast<Conn*>(io_uring_cqe_get_data(cqe));
            const int res = cqe->res;
            if (c == &acceptor) {
                if (res >= 0) {
                    conns.push_back(std::make_unique<Conn>());
                    conns.back()->fd = res;
                    submit_recv(&ring, conns.back().get());
                }
                submit_accept(&ring, lfd, &acceptor);
            } else if (c->op == Op::recv) {
                if (res <= 0) {
                    close(c->fd);  // the client left
                } else {
                    spin_ms(cpu_ms);
                    submit_send(&ring, c);
                }
            } else {
                if (res < 0) close(c->fd);
                else submit_recv(&ring, c);
            }
        }
        io_uring_cq_advance(&ring, seen);
        const uint64_t now = mono_ns();
        if (g_reset.exchange(false)) max_turn = 0;
        if (now - turn_start > max_turn) max_turn = now - turn_start;
        if (now - last_print >= 100000000ull) {
            std::printf("TURN mono_ns=%llu max_ns=%llu\n", static_cast<unsigned long long>(now),
                        static_cast<unsigned long long>(max_turn));
            std::fflush(stdout);
            last_print = now;
        }
    }
}
