#include "sys/sock_diag.h"

#include <arpa/inet.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>

#include "model/errors.h"
#include "sys/netlink_walk.h"

namespace qscope {

std::string format_ip(int family, const uint8_t* addr) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (family == AF_INET6) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (std::memcmp(addr, mapped, 12) == 0) return format_ip(AF_INET, addr + 12);
        inet_ntop(AF_INET6, addr, buf, sizeof(buf));
    } else {
        inet_ntop(AF_INET, addr, buf, sizeof(buf));
    }
    return buf;
}

std::string format_endpoint(const std::string& ip, uint16_t port) {
    if (ip.find(':') != std::string::npos) return "[" + ip + "]:" + std::to_string(port);
    return ip + ":" + std::to_string(port);
}

std::string format_endpoint(int family, const uint8_t* addr, uint16_t port) {
    return format_endpoint(format_ip(family, addr), port);
}

DiagStatus parse_sock_diag(const void* buf, size_t len, std::vector<DiagSocket>& out) {
    return netlink::walk_messages(buf, len, "sock_diag", [&](const uint8_t* payload, size_t plen) {
        if (plen < sizeof(inet_diag_msg)) throw Error(Exit::failure, "sock_diag: short inet_diag_msg");
        inet_diag_msg m;
        std::memcpy(&m, payload, sizeof(m));
        DiagSocket s;
        s.family = m.idiag_family;
        s.state = m.idiag_state;
        s.sport = ntohs(m.id.idiag_sport);
        s.dport = ntohs(m.id.idiag_dport);
        s.src = format_ip(s.family, reinterpret_cast<const uint8_t*>(m.id.idiag_src));
        s.dst = format_ip(s.family, reinterpret_cast<const uint8_t*>(m.id.idiag_dst));
        s.rqueue = m.idiag_rqueue;
        s.wqueue = m.idiag_wqueue;
        s.inode = m.idiag_inode;
        s.uid = m.idiag_uid;
        netlink::walk_attrs(payload, NLMSG_ALIGN(sizeof(inet_diag_msg)), plen,
                            [&](unsigned type, const uint8_t* data, size_t dlen) {
                                if (type == INET_DIAG_CGROUP_ID && dlen >= sizeof(uint64_t)) {
                                    uint64_t id;
                                    std::memcpy(&id, data, sizeof(id));
                                    s.cgroup_id = id;
                                }
                                if (type != INET_DIAG_SKMEMINFO || dlen < (SK_MEMINFO_DROPS + 1) * sizeof(uint32_t))
                                    return;
                                uint32_t drops;
                                std::memcpy(&drops, data + SK_MEMINFO_DROPS * sizeof(uint32_t), sizeof(drops));
                                s.drops = drops;
                            });
        out.push_back(std::move(s));
    });
}

namespace {
struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) close(fd);
    }
};
}  // namespace

// A netlink socket answers for the network namespace it was created in, and setns() moves
// only the calling thread: a short-lived thread enters the target's namespace, creates the
// socket and ends, leaving qscope's own threads where they were.
int diag_socket(int netns_pid) {
    auto plain = [] { return socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG); };
    if (netns_pid <= 0) return plain();
    const std::string path = "/proc/" + std::to_string(netns_pid) + "/ns/net";
    struct stat mine {}, theirs {};
    if (stat("/proc/self/ns/net", &mine) == 0 && stat(path.c_str(), &theirs) == 0 && mine.st_ino == theirs.st_ino &&
        mine.st_dev == theirs.st_dev)
        return plain();
    const int ns = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) {
        const int e = errno;
        throw Error(e == EACCES || e == EPERM ? Exit::permission : Exit::kernel,
                    "sock_diag: open " + path + " (the target's network namespace): " + errno_text(e));
    }
    int fd = -1, err = 0;
    std::thread([&] {
        if (setns(ns, CLONE_NEWNET) != 0) {
            err = errno;
            return;
        }
        fd = plain();
        if (fd < 0) err = errno;
    }).join();
    close(ns);
    if (fd < 0)
        throw Error(err == EPERM ? Exit::permission : Exit::kernel,
                    "sock_diag: enter the target's network namespace (" + path + "): " + errno_text(err));
    return fd;
}

std::vector<DiagSocket> sock_diag_dump(int family, uint32_t state_mask, bool meminfo, int netns_pid) {
    Fd s;
    s.fd = diag_socket(netns_pid);
    if (s.fd < 0) throw Error(Exit::kernel, "sock_diag: socket(NETLINK_SOCK_DIAG): " + errno_text(errno));
    struct {
        nlmsghdr h;
        inet_diag_req_v2 r;
    } req{};
    req.h.nlmsg_len = sizeof(req);
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
    req.h.nlmsg_seq = 1;
    req.r.sdiag_family = static_cast<uint8_t>(family);
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_states = state_mask;
    if (meminfo) req.r.idiag_ext |= 1 << (INET_DIAG_SKMEMINFO - 1);
    std::vector<DiagSocket> out;
    netlink::dump(s.fd, req, "sock_diag",
                  [&](const uint8_t* buf, size_t len) { return parse_sock_diag(buf, len, out); });
    return out;
}

std::vector<DiagSocket> sock_diag_by_inode(uint32_t state_mask, const std::set<uint64_t>& inodes, bool meminfo) {
    std::vector<DiagSocket> out;
    for (int fam : {AF_INET, AF_INET6}) {
        for (auto& s : sock_diag_dump(fam, state_mask, meminfo))
            if (inodes.count(s.inode)) out.push_back(std::move(s));
    }
    return out;
}

}  // namespace qscope
