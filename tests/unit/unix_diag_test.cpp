// unix_diag reply parsing on bytes captured from the development kernel
// (fixtures/capture_unix_diag.py wrote unix_diag_sockets.bin and .txt): a path listener with
// one connection accepted and one still queued, an abstract seqpacket listener, a socketpair.
// Then the same bytes cut and bent: the parser must never read past them nor crash.
#include <linux/netlink.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "model/errors.h"
#include "sys/unix_diag.h"

using namespace qscope;

namespace {

std::vector<uint8_t> fixture_bytes() {
    std::ifstream in(std::string(QSCOPE_SOURCE_DIR) + "/tests/unit/fixtures/unix_diag_sockets.bin", std::ios::binary);
    REQUIRE(in);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// "label inode=N" lines and the listener's path, as the capture recorded them.
struct Expected {
    std::string path;
    std::map<std::string, uint64_t> inode;
};
Expected expected() {
    std::ifstream in(std::string(QSCOPE_SOURCE_DIR) + "/tests/unit/fixtures/unix_diag_sockets.txt");
    REQUIRE(in);
    Expected e;
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("path=", 0) == 0) {
            e.path = line.substr(5);
            continue;
        }
        const auto sp = line.find(" inode=");
        if (sp != std::string::npos) e.inode[line.substr(0, sp)] = std::stoull(line.substr(sp + 7));
    }
    return e;
}

const UnixDiagSocket& by_inode(const std::vector<UnixDiagSocket>& v, uint64_t ino) {
    for (const auto& s : v)
        if (s.inode == ino) return s;
    FAIL("inode " << ino << " not parsed");
    throw 0;
}

}  // namespace

TEST_CASE("unix_diag: captured replies give names, peers and queue lengths", "[unix_diag]") {
    const auto bytes = fixture_bytes();
    const Expected e = expected();
    std::vector<UnixDiagSocket> out;
    REQUIRE(parse_unix_diag(bytes.data(), bytes.size(), out) == DiagStatus::done);
    REQUIRE(out.size() == 6);

    const auto& l = by_inode(out, e.inode.at("listener"));
    CHECK(l.state == 10);
    CHECK(l.type == 1);
    CHECK(l.name == e.path);
    CHECK(l.rqueue == 1u);  // the second client, queued unaccepted
    CHECK(l.wqueue == 7u);  // listen(7)
    CHECK_FALSE(l.peer);

    // The accepted socket shares its listener's name; its peer is the client.
    const auto& a = by_inode(out, e.inode.at("accepted"));
    CHECK(a.state == 1);
    CHECK(a.name == e.path);
    CHECK(a.peer == e.inode.at("client"));
    CHECK(a.rqueue == 7u);  // "request", unread

    const auto& c = by_inode(out, e.inode.at("client"));
    CHECK(c.name.empty());
    CHECK(c.peer == e.inode.at("accepted"));
    CHECK(c.rqueue == 0u);

    // Queued, not accepted: the server side has no inode yet.
    CHECK_FALSE(by_inode(out, e.inode.at("queued_client")).peer);

    const auto& ab = by_inode(out, e.inode.at("abstract_listener"));
    CHECK(ab.type == 5);
    CHECK(ab.state == 10);
    CHECK(ab.name == "@qscope-fixture");
    CHECK(ab.wqueue == 3u);

    // A socketpair: neither end named.
    const auto& p = by_inode(out, e.inode.at("pair_a"));
    CHECK(p.name.empty());
    CHECK(p.peer);
}

TEST_CASE("unix_diag: abstract and path names as ss shows them", "[unix_diag]") {
    const uint8_t path[] = {'/', 'r', 'u', 'n', '/', 'x', 0, 'j', 'u', 'n', 'k'};
    CHECK(unix_name_text(path, sizeof(path)) == "/run/x");
    const uint8_t abs[] = {0, 'a', 0, 'b'};
    CHECK(unix_name_text(abs, sizeof(abs)) == "@a@b");
    CHECK(unix_name_text(abs, 0).empty());
}

TEST_CASE("unix_diag: truncated and bent replies are errors or partial, never a crash", "[unix_diag]") {
    const auto bytes = fixture_bytes();
    // Every prefix: either parsed (whole messages only) or a typed error.
    for (size_t n = 0; n < bytes.size(); ++n) {
        std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
        std::vector<UnixDiagSocket> out;
        try {
            (void)parse_unix_diag(cut.data(), cut.size(), out);
        } catch (const Error&) {
        }
        CHECK(out.size() <= 6);
    }
    // A message length shorter than a unix_diag_msg.
    {
        std::vector<uint8_t> b(bytes.begin(), bytes.begin() + 0x5c);
        const uint32_t short_len = NLMSG_HDRLEN + 4;
        std::memcpy(b.data(), &short_len, 4);
        std::vector<UnixDiagSocket> out;
        CHECK_THROWS_AS(parse_unix_diag(b.data(), b.size(), out), Error);
    }
    // An attribute claiming more than its message holds: the message is kept, the rest of
    // its attributes dropped.
    {
        std::vector<uint8_t> b(bytes.begin(), bytes.begin() + 0x5c);
        const uint16_t huge = 0x400;
        std::memcpy(b.data() + 0x20, &huge, 2);  // the listener's UNIX_DIAG_NAME rta_len
        std::vector<UnixDiagSocket> out;
        REQUIRE(parse_unix_diag(b.data(), b.size(), out) == DiagStatus::more);
        REQUIRE(out.size() == 1);
        CHECK(out[0].name.empty());
        CHECK_FALSE(out[0].rqueue);
    }
    // NLMSG_ERROR is a typed error naming the errno.
    {
        struct {
            nlmsghdr h;
            nlmsgerr e;
        } m{};
        m.h.nlmsg_len = sizeof(m);
        m.h.nlmsg_type = NLMSG_ERROR;
        m.e.error = -13;
        std::vector<UnixDiagSocket> out;
        CHECK_THROWS_WITH(parse_unix_diag(&m, sizeof(m), out), Catch::Contains("unix_diag"));
    }
}
