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
#include "sys/netlink_walk.h"

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
    netlink::walk_attrs(p, off, end, [&](unsigned type, const uint8_t* data, size_t dlen) {
        switch (type) {
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
    });
}

}  // namespace

DiagStatus parse_unix_diag(const void* buf, size_t len, std::vector<UnixDiagSocket>& out) {
    return netlink::walk_messages(buf, len, "unix_diag", [&](const uint8_t* payload, size_t plen) {
        if (plen < sizeof(unix_diag_msg)) throw Error(Exit::failure, "unix_diag: short unix_diag_msg");
        unix_diag_msg m;
        std::memcpy(&m, payload, sizeof(m));
        UnixDiagSocket s;
        s.type = m.udiag_type;
        s.state = m.udiag_state;
        s.inode = m.udiag_ino;
        parse_attrs(payload, NLMSG_ALIGN(sizeof(unix_diag_msg)), plen, s);
        out.push_back(std::move(s));
    });
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
    std::vector<UnixDiagSocket> out;
    netlink::dump(fd, req, "unix_diag",
                  [&](const uint8_t* buf, size_t len) { return parse_unix_diag(buf, len, out); });
    return out;
}

}  // namespace qscope
