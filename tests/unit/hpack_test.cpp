// gRPC's status and :status from HTTP/2 response header blocks: bpf/hpack.h, the very code
// sock.bpf.c runs, fed the header blocks of RFC 7541's own examples (Appendix C.5 and C.6: three
// responses with a dynamic table, plain and Huffman-coded) and those gRPC encoders send (C-core:
// plain names; grpc-go: Huffman-coded names, values by an indexed name), whole and cut at every
// byte, as blocks reach the walk split across iovecs and syscalls.

#include <catch2/catch.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "bpf_shim.h"
extern "C" {
#include "conn_state.h"  // QS_STATUS_*
#include "hpack.h"
}

namespace {

using Bytes = std::vector<__u8>;

Bytes hex(const std::string& s) {
    Bytes b;
    std::string digits;
    for (char c : s)
        if (std::isxdigit(static_cast<unsigned char>(c))) digits += c;
    for (size_t i = 0; i + 1 < digits.size(); i += 2) b.push_back(__u8(std::stoul(digits.substr(i, 2), nullptr, 16)));
    return b;
}

Bytes operator+(Bytes a, const Bytes& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

Bytes ascii(const std::string& s) { return Bytes(s.begin(), s.end()); }

// What one block said.
struct Found {
    int status;  // QS_STATUS_*
    int grpc;    // the code, -1 none
    bool blind;
    bool cut;
};

// One block walked, handed over in pieces of `piece` bytes (at most QS_HP_CHUNK, as the walk
// copies them).
Found walk(qs_hpack& s, const Bytes& block, size_t piece = QS_HP_CHUNK) {
    piece = std::min<size_t>(piece, QS_HP_CHUNK);
    qs_hp_begin(&s);
    for (size_t at = 0; at < block.size(); at += piece)
        qs_hp_feed(&s, block.data() + at, static_cast<__u32>(std::min(piece, block.size() - at)));
    const bool cut = qs_hp_end(&s);
    return {s.status, s.grpc ? s.grpc - 1 : -1, s.blind != 0, cut};
}

// C-core's grpc-status the first time: literal with incremental indexing, plain name and value.
Bytes grpc_literal(const std::string& code) {
    return Bytes{0x40, 11} + ascii("grpc-status") + Bytes{__u8(code.size())} + ascii(code);
}

// grpc-go's: the name Huffman-coded (8 bytes), the value plain when Huffman is not shorter.
const Bytes kGoName = hex("9aca c8b2 1234 da8f");
Bytes go_literal(const std::string& code) {
    return Bytes{0x40, 0x88} + kGoName + Bytes{__u8(code.size())} + ascii(code);
}

// grpc-message, which follows grpc-status in a failing call's trailers (C-core: literal, not indexed).
Bytes grpc_message(const std::string& m) {
    return Bytes{0x00, 12} + ascii("grpc-message") + Bytes{__u8(m.size())} + ascii(m);
}

}  // namespace

TEST_CASE("hpack RFC 7541 C.5 and C.6: each response's :status, the table followed through evictions", "[hpack]") {
    const std::vector<std::vector<std::string>> examples = {
        // C.5: plain literals
        {"4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 "
         "3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
         "4803 3330 37c1 c0bf",
         "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 "
         "7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 "
         "6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31"},
        // C.6: the same, Huffman-coded
        {"4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad "
         "1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
         "4883 640e ffc1 c0bf",
         "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 "
         "e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07"}};
    const int want_status[] = {QS_STATUS_3XX, QS_STATUS_3XX, QS_STATUS_2XX};  // 302, 307, 200
    const __u32 want_inserted[] = {4, 5, 8};  // every literal of the examples is indexed
    for (const auto& blocks : examples)
        for (size_t piece : {size_t(1), size_t(3), size_t(7), size_t(QS_HP_CHUNK)}) {
            INFO((&blocks == &examples[0] ? "C.5" : "C.6") << " in pieces of " << piece);
            qs_hpack s{};
            for (size_t i = 0; i < blocks.size(); ++i) {
                const Found f = walk(s, hex(blocks[i]), piece);
                CHECK(f.status == want_status[i]);
                CHECK(f.grpc == -1);
                CHECK(!f.blind);  // c1 c0 bf: entries the walk saw added (cache-control, date, location)
                CHECK(!f.cut);
                CHECK(s.inserted == want_inserted[i]);
            }
        }
}

TEST_CASE("hpack C-core's grpc-status: a literal the first time, then a reference to the entry it added", "[hpack]") {
    qs_hpack s{};
    // The first answer: HEADERS (:status 200, content-type application/grpc, grpc-accept-encoding
    // as C-core sends them, literals with incremental indexing), then trailers.
    const Bytes headers = Bytes{0x88, 0x5f, 16} + ascii("application/grpc") + Bytes{0x40, 20} +
                          ascii("grpc-accept-encoding") + Bytes{21} + ascii("identity,deflate,gzip");
    Found f = walk(s, headers);
    CHECK(f.status == QS_STATUS_2XX);
    CHECK(f.grpc == -1);
    CHECK(s.inserted == 2);
    f = walk(s, grpc_literal("0"));
    CHECK(f.grpc == 0);
    CHECK(s.inserted == 3);
    // The second answer: its HEADERS all references now (:status static, the two entries), and
    // its trailers the one byte 0xbe, entry 62: the newest, grpc-status 0.
    f = walk(s, {0x88, 0xc0, 0xbf});
    CHECK(f.status == QS_STATUS_2XX);
    CHECK(!f.blind);
    f = walk(s, {0xbe});
    CHECK(f.grpc == 0);
    // A failure: grpc-status 14 added (now 62; OK moves to 63), with grpc-message, not indexed.
    f = walk(s, grpc_literal("14") + grpc_message("qs.Slow/Fail always fails"));
    CHECK(f.grpc == 14);
    CHECK(s.inserted == 4);
    f = walk(s, Bytes{0xbe} + grpc_message("again"));
    CHECK(f.grpc == 14);
    f = walk(s, {0xbf});
    CHECK(f.grpc == 0);
    // A reference past the entries added is not a grpc-status qscope knows: blind, not "none".
    f = walk(s, {0xc2});
    CHECK(f.blind);
    CHECK(f.grpc == -1);
}

TEST_CASE("hpack grpc-go's grpc-status: Huffman-coded name, and a new value by the entry's indexed name", "[hpack]") {
    qs_hpack s{};
    Found f = walk(s, go_literal("0"));
    CHECK(f.grpc == 0);
    f = walk(s, {0xbe});
    CHECK(f.grpc == 0);
    // A new value: literal with incremental indexing whose name is entry 62 (0x40 | 62).
    f = walk(s, Bytes{0x7e, 0x01} + ascii("5"));
    CHECK(f.grpc == 5);
    CHECK(s.inserted == 2);
    CHECK(walk(s, {0xbe}).grpc == 5);
    CHECK(walk(s, {0xbf}).grpc == 0);
    // Huffman-coded values: "14" is 00001 011010 + padding 11111: 0x0b 0x5f; "0" is 0x07.
    CHECK(walk(s, Bytes{0x00, 0x88} + kGoName + Bytes{0x82, 0x0b, 0x5f}).grpc == 14);
    CHECK(walk(s, Bytes{0x00, 0x88} + kGoName + Bytes{0x81, 0x07}).grpc == 0);
    // Not a status: three digits, bad padding, letters.
    CHECK(walk(s, Bytes{0x00, 0x88} + kGoName + Bytes{0x03} + ascii("140")).blind);
    CHECK(walk(s, Bytes{0x00, 0x88} + kGoName + Bytes{0x81, 0x06}).blind);
    CHECK(walk(s, Bytes{0x00, 0x88} + kGoName + Bytes{0x02} + ascii("ok")).blind);
}

TEST_CASE("hpack a connection met mid-way: entries added before are blind, those added after are read", "[hpack]") {
    qs_hpack s{};  // as h2_follow leaves it at a join: nothing counted yet
    Found f = walk(s, {0xbe});  // grpc-status 0, added before the attach
    CHECK(f.blind);
    CHECK(f.grpc == -1);
    f = walk(s, grpc_literal("14"));  // a code first seen after: added now, read
    CHECK(f.grpc == 14);
    CHECK(walk(s, {0xbe}).grpc == 14);
    CHECK(walk(s, {0xbf}).blind);  // the old one, one place further back
}

TEST_CASE("hpack a block not walked whole: the table is counted afresh from the next block", "[hpack]") {
    qs_hpack s{};
    CHECK(walk(s, grpc_literal("0")).grpc == 0);
    // Cut inside a string: the walk cannot tell what the rest added.
    Bytes cut = grpc_literal("14");
    cut.resize(5);
    const Found f = walk(s, cut);
    CHECK(f.cut);
    CHECK(s.lost == 1);
    // From the next block on, entries before it are blind; new ones are read.
    CHECK(walk(s, {0xbe}).blind);
    CHECK(walk(s, grpc_literal("2")).grpc == 2);
    CHECK(walk(s, {0xbe}).grpc == 2);
}

TEST_CASE("hpack more grpc-status entries than remembered: a forgotten one is blind, never taken for another field",
          "[hpack]") {
    qs_hpack s{};
    for (int code = 0; code < QS_HP_REMEMBER + 2; ++code) CHECK(walk(s, grpc_literal(std::to_string(code))).grpc == code);
    // The newest QS_HP_REMEMBER are read back; the older two are blind.
    for (int back = 0; back < QS_HP_REMEMBER; ++back)
        CHECK(walk(s, {__u8(0x80 | (62 + back))}).grpc == QS_HP_REMEMBER + 1 - back);
    CHECK(walk(s, {__u8(0x80 | (62 + QS_HP_REMEMBER))}).blind);
    CHECK(walk(s, {__u8(0x80 | (62 + QS_HP_REMEMBER + 1))}).blind);
}

TEST_CASE("hpack size updates, long strings and multi-byte integers are stepped over", "[hpack]") {
    qs_hpack s{};
    // nginx's first response: a size update (0x3fe1 1f: 4096) before :status.
    Found f = walk(s, Bytes{0x3f, 0xe1, 0x1f, 0x88});
    CHECK(f.status == QS_STATUS_2XX);
    CHECK(!f.cut);
    // A 300-byte value (length 127 + 173: 0x7f 0xad 0x01) and a literal whose name index needs
    // two bytes (0x0f 0x2b: 15 + 43 = 58, user-agent), then :status 404 (static 13).
    Bytes big = Bytes{0x0f, 0x2b, 0x7f, 0xad, 0x01} + Bytes(300, 'x') + Bytes{0x8d};
    f = walk(s, big);
    CHECK(f.status == QS_STATUS_4XX);
    CHECK(!f.cut);
    CHECK(s.inserted == 0);
    // Index 0 is no field: the rest of the block is not HPACK, and not walked.
    f = walk(s, {0x80, 0x88});
    CHECK(f.cut);
    CHECK(f.status == QS_STATUS_UNKNOWN);
    CHECK(s.lost == 1);
}

TEST_CASE("hpack gRPC codes map to HTTP status classes as grpc-gateway maps them", "[hpack]") {
    CHECK(qs_grpc_class(0) == QS_STATUS_2XX);   // OK
    CHECK(qs_grpc_class(1) == QS_STATUS_4XX);   // CANCELLED 499
    CHECK(qs_grpc_class(3) == QS_STATUS_4XX);   // INVALID_ARGUMENT 400
    CHECK(qs_grpc_class(8) == QS_STATUS_4XX);   // RESOURCE_EXHAUSTED 429
    CHECK(qs_grpc_class(16) == QS_STATUS_4XX);  // UNAUTHENTICATED 401
    CHECK(qs_grpc_class(2) == QS_STATUS_5XX);   // UNKNOWN 500
    CHECK(qs_grpc_class(4) == QS_STATUS_5XX);   // DEADLINE_EXCEEDED 504
    CHECK(qs_grpc_class(12) == QS_STATUS_5XX);  // UNIMPLEMENTED 501
    CHECK(qs_grpc_class(14) == QS_STATUS_5XX);  // UNAVAILABLE 503
    CHECK(qs_grpc_class(17) == QS_STATUS_UNKNOWN);
}
