#include "sys/unix_diag.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "model/errors.h"

namespace qscope {

std::string unix_name_text(const uint8_t* path, size_t len) {
    if (len == 0) return "";
    if (path[0] != 0) {
        size_t n = 0;
        while (n < len && path[n]) ++n;
        return std::string(reinterpret_cast<const char*>(path), n);
    }
    std::string s(reinterpret_cast<const char*>(path), len);
    for (char& c : s)
        if (c == 0) c = '@';
    return s;
}

namespace {

// One unix_diag_msg's attributes, from `off` to `end` within `p`.
void parse_attrs(const uint8_t* p, size_t off, size_t end, UnixDiagSocket& s) {
    while (off + sizeof(rtattr) <= end) {
        rtattr a;
        std::memcpy(&a, p + off, sizeof(a));
        if (a.rta_len < sizeof(rtattr) || off + a.rta_len > end) return;
        const uint8_t* data = p + off + RTA_LENGTH(0);
        const size_t dlen = a.rta_len - RTA_LENGTH(0);
        switch (a.rta_type) {
        case UNIX_DIAG_NAME:
            s.name = unix_name_text(data, dlen);
            break;
        case UNIX_DIAG_PEER:
            if (dlen >= sizeof(uint32_t)) {
                uint32_t ino;
                std::memcpy(&ino, data, sizeof(ino));
                if (ino) s.peer = ino;  // 0: a client still queued on a listener has no server-side inode yet
            }
            break;
        case UNIX_DIAG_RQLEN:
            if (dlen >= sizeof(unix_diag_rqlen)) {
                unix_diag_rqlen q;
                std::memcpy(&q, data, sizeof(q));
                s.rqueue = q.udiag_rqueue;
                s.wqueue = q.udiag_wqueue;
            }
            break;
        default:
            break;
        }
        off += RTA_ALIGN(a.rta_len);
    }
}

}  // namespace

DiagStatus parse_unix_diag(const void* buf, size_t len, std::vector<UnixDiagSocket>& out) {
    const auto* base = static_cast<const uint8_t*>(buf);
    size_t off = 0;
    while (off + sizeof(nlmsghdr) <= len) {
        nlmsghdr h;
        std::memcpy(&h, base + off, sizeof(h));
        if (h.nlmsg_len < sizeof(nlmsghdr) || off + h.nlmsg_len > len)
            throw Error(Exit::failure, "unix_diag: truncated netlink message");
        const uint8_t* payload = base + off + NLMSG_HDRLEN;
        const size_t plen = h.nlmsg_len - std::min<size_t>(h.nlmsg_len, NLMSG_HDRLEN);
        if (h.nlmsg_type == NLMSG_DONE) return DiagStatus::done;
        if (h.nlmsg_type == NLMSG_ERROR) {
            nlmsgerr err{};
            std::memcpy(&err, payload, std::min(plen, sizeof(err)));
            throw Error(Exit::kernel, "unix_diag: " + errno_text(err.error));
        }
        if (h.nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            if (plen < sizeof(unix_diag_msg)) throw Error(Exit::failure, "unix_diag: short unix_diag_msg");
            unix_diag_msg m;
            std::memcpy(&m, payload, sizeof(m));
            UnixDiagSocket s;
            s.type = m.udiag_type;
            s.state = m.udiag_state;
            s.inode = m.udiag_ino;
            parse_attrs(payload, NLMSG_ALIGN(sizeof(unix_diag_msg)), plen, s);
            out.push_back(std::move(s));
        }
        off += NLMSG_ALIGN(h.nlmsg_len);
    }
    return DiagStatus::more;
}

std::vector<UnixDiagSocket> unix_diag_dump(uint32_t state_mask, int netns_pid) {
    const int fd = diag_socket(netns_pid);
    if (fd < 0) throw Error(Exit::kernel, "unix_diag: socket(NETLINK_SOCK_DIAG): " + errno_text(errno));
    struct Close {
        int fd;
        ~Close() { close(fd); }
    } guard{fd};
    struct {
        nlmsghdr h;
        unix_diag_req r;
    } req{};
    req.h.nlmsg_len = sizeof(req);
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = 1;
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_states = state_mask;
    req.r.udiag_show = UDIAG_SHOW_NAME | UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN;
    sockaddr_nl sa{};
    sa.nl_family = AF_NETLINK;
    if (sendto(fd, &req, sizeof(req), 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) < 0)
        throw Error(Exit::kernel, "unix_diag: send dump request: " + errno_text(errno));
    std::vector<UnixDiagSocket> out;
    std::vector<uint8_t> buf(64 * 1024);
    for (;;) {
        const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw Error(Exit::kernel, "unix_diag: recv: " + errno_text(errno));
        }
        if (n == 0) break;
        if (parse_unix_diag(buf.data(), static_cast<size_t>(n), out) == DiagStatus::done) break;
    }
    return out;
}

}  // namespace qscope
