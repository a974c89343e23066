/* Types shared by sock.bpf.c and collector/probes/sock/sock_source.cpp. Fixed-width only; the C++ side
 * static_asserts the sizes.
 *
 * Aggregates live in .bss arrays (mmapped by the skeleton): the kernel adds atomically, user
 * space reads them in place each tick and diffs cumulative values for the window; gauges are
 * exact (atomic adds) and maxima are kept in the kernel with a compare-and-swap loop, so a
 * peak between two ticks is not missed. User space rebases a maximum at a window reset with
 * an atomic store of the current gauge.
 */
#ifndef QSCOPE_SOCK_H
#define QSCOPE_SOCK_H

#include "hist.h"
#include "conn_state.h"

#define QS_MAX_PORTS 32          /* listening ports of the target */
#define QS_MAX_PEERS 128         /* downstream peers; the last index collects the rest */
#define QS_PEER_OTHER (QS_MAX_PEERS - 1)

/* Histograms per port: accept wait, then request duration per status class. */
#define QS_PH_ACCEPT_WAIT 0
#define QS_PH_LATENCY 1          /* + QS_STATUS_* */
#define QS_PORT_HISTS (QS_PH_LATENCY + QS_STATUS_CLASSES)
/* Histograms per peer. */
#define QS_PEER_H_CALL 0
#define QS_PEER_H_CONNECT 1
#define QS_PEER_H_FANOUT 2       /* calls to the peer per request that called it (a count, not ns) */
#define QS_PEER_HISTS 3

/* What an inbound connection's first response began with: the listener's protocol mix. */
#define QS_WIRE_HTTP1 0          /* an HTTP/1.x status line */
#define QS_WIRE_H2 1             /* HTTP/2 frames (or the client's preface was read) */
#define QS_WIRE_TLS 2            /* a TLS record */
#define QS_WIRE_OTHER 3          /* anything else: PostgreSQL, Redis, FastCGI... */
#define QS_WIRES 4

/* sock.bpf.c's tls_hooked values, per process of the target (--tls) */
#define QS_TLS_HOOKED 1          /* SSL_write/SSL_write_ex probed: the plaintext's class at each write */
#define QS_TLS_WALKED 2          /* SSL_read(_ex) and the returns probed too: HTTP/2 streams in TLS followed */
#define QS_TLS_SAW_H2 4          /* set by BPF: a TLS connection of the process answered in HTTP/2 frames */

struct qs_port_stats {
	__s64 in_flight;
	__s64 in_flight_max;
	__s64 waiting_unread;
	__s64 waiting_unread_max;
	__s64 connections;            /* accepted and open */
	__s64 accept_queue_max;       /* sk_ack_backlog peak seen at sk_data_ready */
	__u64 accepted;
	/* Segments tcp_v4_rcv/tcp_v6_rcv dropped on this port's listener and added to its sk_drops
	 * (sk_drops_skbadd) beside any listen drop: an ACK-stage overflow's second count (kfree_skb
	 * reason TCP_LISTEN_OVERFLOW), and a request socket's segment dropped for another reason (a
	 * retransmitted SYN, one out of window). sk_drops minus these is the listen overflows. */
	__u64 rcv_drops;
	__u64 status[QS_STATUS_CLASSES];
	__u32 port;                   /* host order; 0 = slot unused */
	__u32 pad;
	__u64 wire[QS_WIRES];         /* connections by what their first response began with (QS_WIRE_*) */
	__u64 dropped;                /* HTTP/1.x requests a close dropped unanswered: drained by a lingering
	                               * close, or left unread (qs_effects.dropped) */
};

/* The kernel functions whose drops of a listener's segment add to its sk_drops and are no
 * overflow (sock.bpf.c tcp_rcv_text): tcp_v4_rcv, tcp_v6_rcv, tcp_rcv_state_process and
 * tcp_drop_reason (inlined into the latter, usually; a symbol of its own where not). */
#define QS_RCV_TEXTS 4

/* A listener's drop seen before tcp_rcv_text is known (early_drops): where, on which port. */
struct qs_early_drop_key {
	__u64 location;               /* kfree_skb's caller */
	__u32 port_idx;
	__u32 pad;
};

struct qs_peer_key {
	__u16 family;                 /* AF_INET / AF_INET6 / AF_UNIX */
	__u16 port;                   /* host order; 0 for AF_UNIX */
	__u8 addr[16];                /* IPv4 in the first 4 bytes; AF_UNIX: qs_unix_hash of the name */
};

/* Unix-domain sockets (stream and seqpacket). A listener's slot in port_stats carries
 * port = QS_PORT_UNIX (no TCP port is that large) and its name in unix_port_names; a Unix
 * peer's name is in unix_peer_names at the peer's index. The name is the bound address as
 * the kernel holds it: sun_path bytes after sun_family (a filesystem path ends in its NUL,
 * an abstract name begins with a NUL byte). */
#define QS_PORT_UNIX 0x10000
#define QS_UNIX_PATH 108              /* sizeof(sockaddr_un.sun_path) */
#ifndef AF_UNIX
#define AF_UNIX 1
#endif

struct qs_unix_name {
	__u64 ino;                    /* listener: its socket inode (unix_diag joins on it); peer: 0 */
	__u32 len;                    /* bytes of path in use; 0 = slot unused */
	__u8 path[QS_UNIX_PATH];
	__u8 pad[4];
};

struct qs_peer_stats {
	__s64 connections;
	__s64 busy;
	__s64 busy_max;
	__u64 calls;
	__u64 connects;
	__u64 connect_failures;
	__u64 resets;
	/* Calls per inbound request (bpf/req_ctx.h), added when a request whose life ran on one
	 * thread is answered: requests that called this peer, their calls and retries, and the
	 * same for those answered 5xx. */
	__u64 fan_requests;
	__u64 fan_calls;
	__u64 fan_retries;
	__u64 fail_requests;
	__u64 fail_calls;
	__u64 fail_retries;
	__u64 failed_calls;           /* reset while busy, refused, abandoned busy, a 5xx/429 reply */
	__u64 calls_in_request;       /* started by a thread with an open request */
	__u64 calls_outside;          /* started by a thread with none */
	__u64 calls_moved;            /* reply read by another thread than sent the request */
	__u64 h2_conns;               /* connections speaking HTTP/2 */
	__u64 h2_followed;            /* of them, whose streams are the calls (the rest: per connection) */
	__u64 wire[QS_WIRES];         /* connections by what the peer's first bytes began with (QS_WIRE_*) */
	struct qs_peer_key key;
	__u32 used;
};

/* ACK-stage listen overflow: the client's handshake-completing ACK was dropped; the child is
 * created when a retransmitted ACK finally fits. Keyed by the client's address. */
struct qs_client_key {
	__u16 family;
	__u16 port;                   /* network order, as in the packet */
	__u8 addr[16];
};

/* Per thread that serves inbound connections: how many it took over (read or wrote one whose
 * last server was another thread, or none). Updated only on a change of server, not per read:
 * an event loop serving 50 keep-alive connections adds 50. Keyed by tid. */
struct qs_served {
	__u64 adopted;
	__u32 tgid;
	__u32 pad;
};

#endif
