// The netlink framing both sock_diag dumps share (TCP's inet_diag, Unix's unix_diag): the
// walk over one recv()'s messages, over one message's attributes, and the dump's recv loop.
// Templates so a parser's per-message work inlines; the parsers' own code is what a message
// means, not how messages are found.
#pragma once
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model/errors.h"
#include "sys/sock_diag.h"

namespace qscope::netlink {

// Calls on_msg(payload, payload_len) for each SOCK_DIAG_BY_FAMILY message in `buf`. Returns
// done at NLMSG_DONE. Throws Error, prefixed with `who`, on NLMSG_ERROR (the kernel's errno)
// or on a message that runs past the buffer.
template <typename OnMsg>
DiagStatus walk_messages(const void* buf, size_t len, const char* who, OnMsg&& on_msg) {
    const auto* base = static_cast<const uint8_t*>(buf);
    size_t off = 0;
    while (off + sizeof(nlmsghdr) <= len) {
        nlmsghdr h;
        std::memcpy(&h, base + off, sizeof(h));
        if (h.nlmsg_len < sizeof(nlmsghdr) || off + h.nlmsg_len > len)
            throw Error(Exit::failure, std::string(who) + ": truncated netlink message");
        const uint8_t* payload = base + off + NLMSG_HDRLEN;
        const size_t plen = h.nlmsg_len - std::min<size_t>(h.nlmsg_len, NLMSG_HDRLEN);
        if (h.nlmsg_type == NLMSG_DONE) return DiagStatus::done;
        if (h.nlmsg_type == NLMSG_ERROR) {
            nlmsgerr err{};
            std::memcpy(&err, payload, std::min(plen, sizeof(err)));
            throw Error(Exit::kernel, std::string(who) + ": " + errno_text(err.error));
        }
        if (h.nlmsg_type == SOCK_DIAG_BY_FAMILY) on_msg(payload, plen);
        off += NLMSG_ALIGN(h.nlmsg_len);
    }
    return DiagStatus::more;
}

// Calls on_attr(type, data, data_len) for each rtattr of a message from `off` to `end`. An
// attribute whose length is too short or runs past the message ends the walk: what was read
// stays.
template <typename OnAttr>
void walk_attrs(const uint8_t* p, size_t off, size_t end, OnAttr&& on_attr) {
    while (off + sizeof(rtattr) <= end) {
        rtattr a;
        std::memcpy(&a, p + off, sizeof(a));
        if (a.rta_len < sizeof(rtattr) || off + a.rta_len > end) return;
        on_attr(a.rta_type, p + off + RTA_LENGTH(0), size_t(a.rta_len - RTA_LENGTH(0)));
        off += RTA_ALIGN(a.rta_len);
    }
}

// Sends the dump request `req` on `fd` and hands each recv() to parse(buf, len) until it
// returns done or the socket closes. Throws Error naming the step and errno.
template <typename Req, typename Parse>
void dump(int fd, const Req& req, const char* who, Parse&& parse) {
    sockaddr_nl sa{};
    sa.nl_family = AF_NETLINK;
    if (sendto(fd, &req, sizeof(req), 0, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa)) < 0)
        throw Error(Exit::kernel, std::string(who) + ": send dump request: " + errno_text(errno));
    std::vector<uint8_t> buf(64 * 1024);
    for (;;) {
        const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(Exit::kernel, std::string(who) + ": recv: " + errno_text(errno));
        }
        if (n == 0 || parse(buf.data(), static_cast<size_t>(n)) == DiagStatus::done) return;
    }
}

}  // namespace qscope::netlink
