// The per-connection state machine of bpf/conn_state.h — the very code sock.bpf.c runs —
// driven event by event, with the gauges its effects imply kept as the kernel keeps them.

#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "bpf_shim.h"
extern "C" {
#include "conn_state.h"
}

namespace {

// What the kernel's per-port / per-peer aggregates would hold after applying effects.
struct Gauges {
    long in_flight = 0, unread = 0, busy = 0, conns = 0;
    int latencies = 0, calls = 0, accept_waits = 0, accepted = 0, connects = 0, connect_failures = 0, dropped = 0;
    unsigned long long last_latency = 0, last_call = 0, last_accept_wait = 0, last_connect = 0;
    void apply(const qs_effects& e) {
        in_flight += e.d_in_flight;
        unread += e.d_unread;
        busy += e.d_busy;
        conns += e.d_conns;
        if (e.record_latency) ++latencies, last_latency = e.latency_ns;
        if (e.record_call) ++calls, last_call = e.call_ns;
        if (e.record_accept_wait) ++accept_waits, last_accept_wait = e.accept_wait_ns;
        if (e.accepted) ++accepted;
        if (e.connect_ok) ++connects, last_connect = e.connect_ns;
        if (e.connect_fail) ++connect_failures;
        if (e.dropped) ++dropped;
    }
};

struct Conn {
    qs_conn c{};
    Gauges g;
    int drained = 0;  // reads qs_on_read found drained after the shutdown
    qs_effects e() { return qs_effects{}; }
    void arrive(unsigned long long t, unsigned bytes) {
        auto x = e();
        qs_on_arrival(&c, t, bytes, &x);
        g.apply(x);
    }
    void accept(unsigned long long t) {
        auto x = e();
        qs_on_accept(&c, t, &x);
        g.apply(x);
    }
    // request_line: the bytes begin an HTTP/1.x request line. sock.bpf.c looks at them only
    // when qs_on_read says they were drained, and counts a dropped request then.
    void read(unsigned long long t, int ret, unsigned left = 0, int flags = 0, int send_shut = 0,
              int request_line = 0) {
        auto x = e();
        qs_on_read(&c, t, ret, flags, left, send_shut, &x);
        if (x.drained) ++drained;
        if (x.drained && request_line) x.dropped = 1;
        g.apply(x);
    }
    int write(unsigned long long t, int ret) {
        auto x = e();
        int first = qs_on_write(&c, t, ret, &x);
        g.apply(x);
        return first;
    }
    void established(unsigned long long t) {
        auto x = e();
        qs_on_established(&c, t, &x);
        g.apply(x);
    }
    // http1: the connection answered in HTTP/1.x (sock.bpf.c: its wire).
    void close(int http1 = 0) {
        auto x = e();
        qs_on_close(&c, http1, &x);
        g.apply(x);
    }
};

Conn inbound(unsigned long long t_established) {
    Conn k;
    qs_conn_init_inbound(&k.c, t_established, 3);
    return k;
}

}  // namespace

TEST_CASE("inbound keep-alive: request, response, next request", "[sock]") {
    Conn k = inbound(1000);
    k.arrive(1500, 100);            // request bytes arrive before accept: not yet the app's
    CHECK(k.g.unread == 0);
    k.accept(2000);                 // accept: waited 1000 ns, and now it waits unread
    CHECK(k.g.accepted == 1);
    CHECK(k.g.accept_waits == 1);
    CHECK(k.g.last_accept_wait == 1000);
    CHECK(k.g.conns == 1);
    CHECK(k.g.unread == 1);
    CHECK(k.c.t_unread == 1500);

    k.read(3000, 100);              // whole request read
    CHECK(k.g.unread == 0);
    CHECK(k.g.in_flight == 1);
    CHECK(k.c.state == QS_ST_REQUEST);
    CHECK(k.write(8000, 50) == 1);  // first response bytes: latency 5000
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.latencies == 1);
    CHECK(k.g.last_latency == 5000);
    CHECK(k.write(8100, 50) == 0);  // the rest of the response: nothing new
    CHECK(k.g.latencies == 1);

    k.arrive(9000, 80);             // next request on the same connection
    CHECK(k.g.unread == 1);
    k.read(9500, 80);
    CHECK(k.g.in_flight == 1);
    CHECK(k.g.unread == 0);
    CHECK(k.write(9700, 10) == 1);
    CHECK(k.g.last_latency == 200);
    CHECK(k.g.latencies == 2);
    k.close();
    CHECK(k.g.conns == 0);
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.unread == 0);
}

TEST_CASE("a lingering close drains the client's next request: read, never answered, never in flight", "[sock]") {
    // Apache's event MPM, every worker busy, closes an idle keep-alive connection: shutdown
    // (SHUT_WR), then it reads what the client had sent meanwhile and closes (strace under wrk).
    Conn k = inbound(0);
    k.accept(10);
    k.arrive(20, 45);
    k.read(30, 45);
    CHECK(k.drained == 0);
    CHECK(k.write(40, 109) == 1);   // answered
    k.arrive(50, 45);               // the client's next request
    CHECK(k.g.unread == 1);
    k.read(60, 45, 0, 0, 1, 1);     // drained after shutdown(SHUT_WR): "GET /slow HTTP/1.1"
    CHECK(k.g.unread == 0);
    CHECK(k.g.in_flight == 0);
    CHECK(k.c.state != QS_ST_REQUEST);
    CHECK(k.drained == 1);
    CHECK(k.g.dropped == 1);        // the client's request, never to be answered
    k.close();
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.latencies == 1);
    CHECK(k.g.conns == 0);
    CHECK(k.g.dropped == 1);

    // Drained bytes that begin no request (the rest of a body answered early with 413, a TLS
    // alert, a protocol's goodbye): nothing dropped, nothing in flight.
    Conn b = inbound(0);
    b.accept(10);
    b.read(30, 4096, 0);
    CHECK(b.write(40, 120) == 1);
    b.read(50, 4096, 0, 0, 1, 0);
    CHECK(b.drained == 1);
    CHECK(b.g.dropped == 0);
    CHECK(b.g.in_flight == 0);
    // Bytes that begin a request, read before the shutdown: a request in flight, not drained.
    b.read(60, 45, 0, 0, 0, 1);
    CHECK(b.drained == 1);
    CHECK(b.g.dropped == 0);
    CHECK(b.g.in_flight == 1);

    // A request read before the shutdown stays in flight until the close ends it.
    Conn r = inbound(0);
    r.accept(10);
    r.arrive(20, 45);
    r.read(30, 20, 25);
    r.read(35, 25, 0, 0, 1);        // the rest of it, read after the server gave up answering
    CHECK(r.g.in_flight == 1);
    r.close();
    CHECK(r.g.in_flight == 0);
    CHECK(r.g.latencies == 0);
}

TEST_CASE("a close drops the HTTP/1.x request its client sent after an answer, left unread", "[sock]") {
    // Apache again, when the request had not arrived at its drain read: the close finds it
    // queued, and the kernel resets the connection (wrk: a read error).
    Conn k = inbound(0);
    k.accept(10);
    k.arrive(20, 45);
    k.read(30, 45);
    CHECK(k.write(40, 109) == 1);
    k.arrive(50, 45);
    k.close(1);
    CHECK(k.g.dropped == 1);
    CHECK(k.g.unread == 0);
    CHECK(k.g.in_flight == 0);

    // Not HTTP/1.x (PostgreSQL, a WebSocket after its 101): queued bytes are no known request.
    Conn o = inbound(0);
    o.accept(10);
    o.read(30, 45);
    CHECK(o.write(40, 109) == 1);
    o.arrive(50, 45);
    o.close(0);
    CHECK(o.g.dropped == 0);

    // Answered, nothing queued: a plain keep-alive close drops nothing.
    Conn q = inbound(0);
    q.accept(10);
    q.read(30, 45);
    CHECK(q.write(40, 109) == 1);
    q.close(1);
    CHECK(q.g.dropped == 0);

    // Closed mid-request, the rest of it queued: in flight until the close, not a second request.
    Conn m = inbound(0);
    m.accept(10);
    m.arrive(20, 300);
    m.read(30, 100, 200);
    m.close(1);
    CHECK(m.g.dropped == 0);
    CHECK(m.g.in_flight == 0);
    CHECK(m.g.latencies == 0);
}

TEST_CASE("a request read in several pieces is one request", "[sock]") {
    Conn k = inbound(0);
    k.accept(10);
    k.arrive(20, 300);
    k.read(30, 100, 200);           // 200 bytes still queued: still waiting unread
    CHECK(k.g.unread == 1);
    CHECK(k.g.in_flight == 1);
    k.read(40, 200, 0);
    CHECK(k.g.unread == 0);
    CHECK(k.g.in_flight == 1);
    CHECK(k.write(100, 5) == 1);
    CHECK(k.g.last_latency == 70);  // from the FIRST byte read
}

TEST_CASE("pipelining: two requests in one read count as one", "[sock]") {
    // Documented limit: the state machine sees reads and writes, not request boundaries.
    Conn k = inbound(0);
    k.accept(1);
    k.read(10, 200);                // two pipelined requests in one read
    CHECK(k.write(20, 10) == 1);
    CHECK(k.write(30, 10) == 0);    // second response: same state, no second request
    CHECK(k.g.latencies == 1);
    CHECK(k.g.in_flight == 0);
}

TEST_CASE("close mid-request releases the in-flight slot without a latency", "[sock]") {
    Conn k = inbound(0);
    k.accept(1);
    k.read(10, 50);
    CHECK(k.g.in_flight == 1);
    k.close();
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.latencies == 0);
    CHECK(k.g.conns == 0);
}

TEST_CASE("close while bytes wait unread leaves the connector gauge at zero", "[sock]") {
    Conn k = inbound(0);
    k.accept(1);
    k.arrive(5, 10);
    CHECK(k.g.unread == 1);
    k.close();
    CHECK(k.g.unread == 0);
    k.arrive(6, 10);                // a late arrival on a closed entry
    CHECK(k.g.unread == 0);
}

TEST_CASE("MSG_PEEK, EOF and errors start nothing", "[sock]") {
    Conn k = inbound(0);
    k.accept(1);
    k.arrive(2, 10);
    k.read(3, 10, 10, QS_MSG_PEEK);
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.unread == 1);         // peeked bytes are still unread
    k.read(4, 0);                   // EOF
    k.read(5, -11);                 // EAGAIN
    CHECK(k.g.in_flight == 0);
    CHECK(k.write(6, 10) == 0);     // a write with no request (a greeting): not a response
    CHECK(k.g.latencies == 0);
    k.read(7, 10);
    CHECK(k.g.in_flight == 1);
}

TEST_CASE("a read without a seen accept makes the connection the app's", "[sock]") {
    // accept via io_uring, or a connection queued before the attach.
    Conn k = inbound(0);
    k.arrive(5, 10);
    CHECK(k.g.unread == 0);
    k.read(10, 10);
    CHECK(k.g.accepted == 1);
    CHECK(k.g.conns == 1);
    CHECK(k.g.accept_waits == 0);
    CHECK(k.g.unread == 0);
    k.accept(11);                   // a late accept event changes nothing
    CHECK(k.g.accepted == 1);
    CHECK(k.g.conns == 1);
}

TEST_CASE("seeded connections: counted, their first read starts a request", "[sock]") {
    Conn k;
    auto x = qs_effects{};
    qs_conn_seed(&k.c, QS_DIR_IN, 1, 100, 42, 1, &x);
    k.g.apply(x);
    CHECK(k.g.conns == 1);
    CHECK(k.g.unread == 1);         // its request bytes were already waiting
    CHECK(k.g.in_flight == 0);      // unread: waiting in the connector, not in flight
    CHECK((k.c.flags & QS_F_SEEDED));
    k.accept(120);                  // already the app's: no wait recorded
    CHECK(k.g.accept_waits == 0);
    k.read(200, 42);
    CHECK(k.g.in_flight == 1);
    CHECK(k.g.unread == 0);
    CHECK(k.write(300, 1) == 1);
    CHECK(k.g.last_latency == 100);

    Conn o;
    x = qs_effects{};
    qs_conn_seed(&o.c, QS_DIR_OUT, 7, 100, 0, 0, &x);
    o.g.apply(x);
    CHECK(o.g.conns == 1);
    o.write(110, 10);
    CHECK(o.g.busy == 1);
}

TEST_CASE("seeded mid-request / mid-call: counted now, no histogram sample", "[sock]") {
    Conn k;
    auto x = qs_effects{};
    qs_conn_seed(&k.c, QS_DIR_IN, 1, 100, 0, 1, &x);   // request read before the attach
    k.g.apply(x);
    CHECK(k.g.in_flight == 1);
    CHECK(k.c.t_req == 100);
    CHECK(k.write(500, 10) == 0);   // its response: no latency (start unknown), no completion
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.latencies == 0);
    k.read(600, 10);                // the next request is measured normally
    CHECK(k.write(700, 10) == 1);
    CHECK(k.g.last_latency == 100);

    Conn o;
    x = qs_effects{};
    qs_conn_seed(&o.c, QS_DIR_OUT, 7, 100, 0, 1, &x);  // request sent before the attach
    o.g.apply(x);
    CHECK(o.g.busy == 1);
    o.read(900, 3);
    CHECK(o.g.busy == 0);
    CHECK(o.g.calls == 0);
    o.write(1000, 1);
    o.read(1250, 1);
    CHECK(o.g.calls == 1);
    CHECK(o.g.last_call == 250);

    Conn b;                         // idle pool connection, then a thread found blocked on it
    x = qs_effects{};
    qs_conn_seed(&b.c, QS_DIR_OUT, 7, 100, 0, 0, &x);
    b.g.apply(x);
    x = qs_effects{};
    qs_seed_blocked_read(&b.c, 120, &x);
    b.g.apply(x);
    CHECK(b.g.busy == 1);
    x = qs_effects{};
    qs_seed_blocked_read(&b.c, 130, &x);  // twice (two threads, or both seeders): still one
    b.g.apply(x);
    CHECK(b.g.busy == 1);
}

TEST_CASE("seeded work back-dated from the socket: a real completion and latency", "[sock]") {
    Conn k;
    auto x = qs_effects{};
    qs_conn_seed(&k.c, QS_DIR_IN, 1, 1000, 0, 1, &x);
    k.g.apply(x);
    qs_conn_backdate(&k.c, 400);     // lrcvtime said the request arrived at 400
    CHECK(k.c.t_req == 400);
    CHECK(k.write(1500, 10) == 1);   // classified and counted like any other response
    CHECK(k.g.latencies == 1);
    CHECK(k.g.last_latency == 1100);
    CHECK(k.g.in_flight == 0);

    Conn unknown;                    // no HZ: stays a lower bound, not counted
    x = qs_effects{};
    qs_conn_seed(&unknown.c, QS_DIR_IN, 1, 1000, 0, 1, &x);
    unknown.g.apply(x);
    qs_conn_backdate(&unknown.c, 0);
    CHECK(unknown.write(1500, 10) == 0);
    CHECK(unknown.g.latencies == 0);

    Conn o;
    x = qs_effects{};
    qs_conn_seed(&o.c, QS_DIR_OUT, 7, 1000, 0, 1, &x);
    o.g.apply(x);
    qs_conn_backdate(&o.c, 200);
    o.read(1700, 3);
    CHECK(o.g.calls == 1);
    CHECK(o.g.last_call == 1500);

    Conn idle;                       // back-dating idle work changes nothing
    x = qs_effects{};
    qs_conn_seed(&idle.c, QS_DIR_IN, 1, 1000, 0, 0, &x);
    qs_conn_backdate(&idle.c, 10);
    CHECK(idle.c.t_req == 0);
}

TEST_CASE("a reset racing accept(): the connection count never keeps a +1", "[sock]") {
    // The client resets between the kernel handing the child to accept() and the accept
    // probe: the close comes first. Nothing that arrives after it may count anything.
    Conn k = inbound(100);
    k.arrive(110, 20);
    k.close();
    k.accept(120);
    k.read(130, 20);
    CHECK(k.write(140, 10) == 0);
    CHECK(k.g.conns == 0);
    CHECK(k.g.accepted == 0);
    CHECK(k.g.in_flight == 0);
    CHECK(k.g.unread == 0);

    Conn a = inbound(100);           // accept first, then the reset: +1 then -1
    a.accept(110);
    a.arrive(115, 20);
    a.close();
    CHECK(a.g.conns == 0);
    CHECK(a.g.unread == 0);
    CHECK(a.g.accepted == 1);
}

TEST_CASE("outbound: connect latency, busy calls, close while busy", "[sock]") {
    Conn k;
    qs_conn_init_outbound(&k.c, 1000, 9);
    k.established(1300);
    CHECK(k.g.connects == 1);
    CHECK(k.g.last_connect == 300);
    CHECK(k.g.conns == 1);
    k.read(1400, 10);               // unsolicited bytes (a server greeting): no call
    CHECK(k.g.calls == 0);
    k.write(2000, 10);
    k.write(2001, 10);              // a request in two writes is one call
    CHECK(k.g.busy == 1);
    k.read(2500, 3);
    CHECK(k.g.busy == 0);
    CHECK(k.g.calls == 1);
    CHECK(k.g.last_call == 500);
    k.read(2600, 3);                // rest of the reply
    CHECK(k.g.calls == 1);
    k.write(3000, 1);
    CHECK(k.g.busy == 1);
    k.close();
    CHECK(k.g.busy == 0);
    CHECK(k.g.conns == 0);
    CHECK(k.g.connect_failures == 0);
}

// A proxy's loop in a long turn: the upstream's reply comes and waits unread. The call is
// still busy (its reply not read) but answered: the request waits on the caller now.
TEST_CASE("outbound: a reply that came and waits unread is flagged, never in the connector gauge", "[sock]") {
    Conn k;
    qs_conn_init_outbound(&k.c, 1000, 9);
    k.established(1300);
    k.arrive(1350, 40);             // a greeting, no call in progress: not a reply
    CHECK(!(k.c.aflags & QS_A_UNREAD));
    k.read(1400, 40);
    k.write(2000, 10);
    CHECK(k.g.busy == 1);
    CHECK(!(k.c.aflags & QS_A_UNREAD));
    k.arrive(2200, 300);            // the reply
    CHECK((k.c.aflags & QS_A_UNREAD));
    CHECK(k.g.busy == 1);           // not read yet: still a call in progress
    CHECK(k.g.unread == 0);         // no request of an inbound connection
    k.arrive(2210, 600);            // more of it: nothing changes
    CHECK(k.g.unread == 0);
    k.read(2900, 600);              // read at the turn's end: the call's time spans the wait
    CHECK(!(k.c.aflags & QS_A_UNREAD));
    CHECK(k.g.busy == 0);
    CHECK(k.g.calls == 1);
    CHECK(k.g.last_call == 900);
    CHECK(k.g.unread == 0);
}

TEST_CASE("outbound: SYN_SENT then close is a connect failure", "[sock]") {
    Conn k;
    qs_conn_init_outbound(&k.c, 1000, 9);
    k.close();
    CHECK(k.g.connect_failures == 1);
    CHECK(k.g.conns == 0);
    CHECK(k.g.connects == 0);
}

TEST_CASE("the connector gauge follows the COUNTED bit exactly", "[sock]") {
    // Whatever the order of arrival, accept and read, +1/-1 pair up.
    for (int order = 0; order < 6; ++order) {
        Conn k = inbound(0);
        const int perm[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        for (int step : perm[order]) {
            if (step == 0) k.arrive(10, 5);
            if (step == 1) k.accept(20);
            if (step == 2) k.read(30, 5);
            const bool counted = k.c.aflags & QS_A_COUNTED;
            CHECK(k.g.unread == (counted ? 1 : 0));
            CHECK(counted == ((k.c.aflags & QS_A_UNREAD) && (k.c.aflags & QS_A_ACCEPTED)));
        }
        k.close();
        CHECK(k.g.unread == 0);
        CHECK(k.g.conns == 0);
        CHECK(k.g.in_flight == 0);
    }
}

static int status_of(const std::string& s) {
    return qs_http_status_class(reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
}

TEST_CASE("an HTTP/1.x request line: a method of capital letters, then a space", "[sock]") {
    auto line = [](const std::string& s) {
        return qs_http_request_line(reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
    };
    CHECK(line("GET /slow HT") == 1);
    CHECK(line("POST /api HT") == 1);
    CHECK(line("OPTIONS * HT") == 1);
    CHECK(line("PROPFIND /da") == 1);
    CHECK(line("GET /") == 1);       // a 5-byte copy (io_head)
    CHECK(line("PATCH") == 0);       // no space within the bytes seen
    CHECK(line("GE /") == 0);        // too short a method
    CHECK(line("get / HTTP/1") == 0);
    CHECK(line(std::string("\x15\x03\x03\x00\x02", 5)) == 0);  // a TLS alert record (close_notify)
    CHECK(line(std::string("X\0\0\0\x04", 5)) == 0);            // PostgreSQL's Terminate
    CHECK(line("{\"a\": 1}") == 0);  // the rest of a JSON body
    CHECK(line("") == 0);
}

TEST_CASE("HTTP status class from the status line only", "[sock]") {
    CHECK(status_of("HTTP/1.1 200 OK\r\n") == QS_STATUS_2XX);
    CHECK(status_of("HTTP/1.0 204 ") == QS_STATUS_2XX);
    CHECK(status_of("HTTP/1.1 301 Moved") == QS_STATUS_3XX);
    CHECK(status_of("HTTP/1.1 404 Not Found") == QS_STATUS_4XX);
    CHECK(status_of("HTTP/1.1 503 Service Unavailable") == QS_STATUS_5XX);
    CHECK(status_of("HTTP/1.1 599") == QS_STATUS_5XX);           // exactly 12 bytes
    CHECK(status_of("HTTP/1.1 100 Continue") == QS_STATUS_UNKNOWN);
    CHECK(status_of("HTTP/1.1 20") == QS_STATUS_UNKNOWN);        // short write
    CHECK(status_of("HTTP/2 200 xx") == QS_STATUS_UNKNOWN);
    CHECK(status_of("http/1.1 200 OK") == QS_STATUS_UNKNOWN);
    CHECK(status_of("HTTP/1.1 2x0 OK") == QS_STATUS_UNKNOWN);
    CHECK(status_of(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x00", 12)) == QS_STATUS_UNKNOWN);
    CHECK(status_of("") == QS_STATUS_UNKNOWN);
}

static int response_of(const std::string& s) {
    return qs_response_class(reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
}

TEST_CASE("a response that is no status line: HTTP/2 frame or TLS record, else unknown", "[sock]") {
    using std::string;
    CHECK(response_of("HTTP/1.1 200 OK\r\n") == QS_STATUS_2XX);
    CHECK(response_of("HTTP/1.1 100 Continue") == QS_STATUS_UNKNOWN);
    // What nginx writes first on h2c: a HEADERS frame header alone (9 bytes, stream 0x7d7).
    CHECK(response_of(string("\x00\x00\x27\x01\x04\x00\x00\x07\xd7", 9)) == QS_STATUS_H2);
    CHECK(response_of(string("\x00\x00\x0c\x04\x00\x00\x00\x00\x00\x00\x03\x00", 12)) == QS_STATUS_H2);  // SETTINGS
    CHECK(response_of(string("\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x00\x10", 12)) == QS_STATUS_H2);  // WINDOW_UPD.
    CHECK(response_of(string("\x00\x00\x08\x06\x01\x00\x00\x00\x00", 9)) == QS_STATUS_H2);  // PING ack
    CHECK(response_of(string("\x00\x00\x27\x01\x04\x00\x00\x00\x00", 9)) == QS_STATUS_UNKNOWN);  // HEADERS on stream 0
    CHECK(response_of(string("\x00\x00\x0c\x04\x00\x00\x00\x00\x01", 9)) == QS_STATUS_UNKNOWN);  // SETTINGS on a stream
    CHECK(response_of(string("\x00\x00\x05\x04\x00\x00\x00\x00\x00", 9)) == QS_STATUS_UNKNOWN);  // SETTINGS, 5 bytes
    CHECK(response_of(string("\x00\x40\x01\x00\x00\x00\x00\x00\x01", 9)) == QS_STATUS_UNKNOWN);  // 16385 > max frame
    CHECK(response_of(string("\x00\x00\x27\x0a\x00\x00\x00\x00\x01", 9)) == QS_STATUS_UNKNOWN);  // unknown type
    CHECK(response_of(string("\x00\x00\x27\x01\x04\x80\x00\x00\x01", 9)) == QS_STATUS_UNKNOWN);  // reserved bit
    CHECK(response_of(string("\x00\x00\x27\x01\x04\x00\x00\x07", 8)) == QS_STATUS_UNKNOWN);      // short
    // TLS records: application data (TLS 1.2/1.3 framing), a handshake, an alert.
    CHECK(response_of(string("\x17\x03\x03\x00\x45\x9a\x10\x44\x00\x01\x02\x03", 12)) == QS_STATUS_TLS);
    CHECK(response_of(string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\x00", 12)) == QS_STATUS_TLS);
    CHECK(response_of(string("\x15\x03\x03\x00\x02\x02\x28\x00\x00\x00\x00\x00", 12)) == QS_STATUS_TLS);
    CHECK(response_of(string("\x17\x02\x03\x00\x45\x9a\x10\x44\x00\x01\x02\x03", 12)) == QS_STATUS_UNKNOWN);
    CHECK(response_of(string("\x17\x03\x03\x00\x00\x9a\x10\x44\x00\x01\x02\x03", 12)) == QS_STATUS_UNKNOWN);
    CHECK(response_of(string("\x17\x03\x03\x48\x01\x9a\x10\x44\x00\x01\x02\x03", 12)) == QS_STATUS_UNKNOWN);
    CHECK(response_of("") == QS_STATUS_UNKNOWN);
}

TEST_CASE("a connection is noted as HTTP/2 or TLS once, whatever its responses", "[sock]") {
    Conn k = inbound(1);
    CHECK(qs_note_protocol(&k.c, QS_STATUS_2XX) == 0);
    CHECK(qs_note_protocol(&k.c, QS_STATUS_UNKNOWN) == 0);
    CHECK(qs_note_protocol(&k.c, QS_STATUS_H2) == QS_F_H2);
    CHECK(qs_note_protocol(&k.c, QS_STATUS_H2) == 0);
    CHECK(qs_note_protocol(&k.c, QS_STATUS_TLS) == QS_F_TLS);
    CHECK(qs_note_protocol(&k.c, QS_STATUS_TLS) == 0);
    // The flags ride along with the state machine's: a seeded mid-request connection keeps both.
    Conn s;
    qs_effects e{};
    qs_conn_seed(&s.c, QS_DIR_IN, 0, 10, 0, 1, &e);
    CHECK(qs_note_protocol(&s.c, QS_STATUS_H2) == QS_F_H2);
    CHECK((s.c.flags & (QS_F_SEEDED | QS_F_START_UNKNOWN | QS_F_H2)) == (QS_F_SEEDED | QS_F_START_UNKNOWN | QS_F_H2));
    s.write(20, 100);
    CHECK((s.c.flags & QS_F_H2) != 0);
    CHECK(!(s.c.flags & QS_F_START_UNKNOWN));
}

TEST_CASE("--tls: a TLS record's class comes from the SSL_write that wrote it, else it is no response", "[sock][tls]") {
    // Probed process, SSL_write pending on the thread: the plaintext's class.
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 1, 1, QS_STATUS_2XX) == QS_STATUS_2XX);
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 1, 1, QS_STATUS_4XX) == QS_STATUS_4XX);
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 1, 1, QS_STATUS_H2) == QS_STATUS_H2);      // h2 over TLS
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 1, 1, QS_STATUS_UNKNOWN) == QS_STATUS_UNKNOWN);
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 1, 1, QS_STATUS_TLS) == QS_STATUS_UNKNOWN);  // TLS inside TLS
    // Nothing pending: written outside SSL_write (handshake, session ticket, alert).
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 1, 0, QS_STATUS_2XX) == QS_TLS_CONTROL);
    // Not probed (no --tls, no supported libssl, forked since the last tick): stays a TLS record.
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 0, 0, QS_STATUS_UNKNOWN) == QS_STATUS_TLS);
    CHECK(qs_tls_write_status(QS_STATUS_TLS, 0, 1, QS_STATUS_2XX) == QS_STATUS_TLS);
    // A cleartext response is never touched.
    CHECK(qs_tls_write_status(QS_STATUS_2XX, 1, 1, QS_STATUS_5XX) == QS_STATUS_2XX);
    CHECK(qs_tls_write_status(QS_STATUS_H2, 1, 0, QS_STATUS_UNKNOWN) == QS_STATUS_H2);
}

TEST_CASE("attach mid-request: sequence numbers tell in flight from idle", "[sock]") {
    const __u32 base = 0xfffffff0u;  // wraps: the comparisons must be modular
    // Request (100 bytes) read, response not written: the peer's last segment carried data.
    CHECK(qs_seed_is_in_flight(0, 500, 500, base, base + 100));
    // Same, but the request still sits unread: connector queue, not in flight.
    CHECK_FALSE(qs_seed_is_in_flight(100, 500, 500, base, base + 100));
    // Response written, not yet acked.
    CHECK_FALSE(qs_seed_is_in_flight(0, 500, 600, base, base + 100));
    // Response written and acked by a pure ACK: the peer's last word was an ACK.
    CHECK_FALSE(qs_seed_is_in_flight(0, 600, 600, base + 100, base + 100));
    // Fresh accepted connection, nothing received after the handshake ACK.
    CHECK_FALSE(qs_seed_is_in_flight(0, 1, 1, base, base));

    // Outbound: request acked by a pure ACK, no reply (a silent partner): busy.
    CHECK(qs_seed_is_busy(0, 700, 700, base + 5, base + 5));
    // Request not yet acked: busy.
    CHECK(qs_seed_is_busy(0, 690, 700, base + 5, base + 5));
    // Reply arrived, not read: busy until the app reads it.
    CHECK(qs_seed_is_busy(3, 700, 700, base + 5, base + 8));
    // Reply read (the peer's last segment carried data): idle pool connection.
    CHECK_FALSE(qs_seed_is_busy(0, 700, 700, base + 5, base + 8));
    // Never used since the handshake: snd_wl1 = SYN-ACK's seq = rcv_nxt - 1.
    CHECK_FALSE(qs_seed_is_busy(0, 1, 1, base - 1, base));
}
