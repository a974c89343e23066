// Which TLS library a process maps (collector/sys/tls_libs.h), from /proc/PID/maps text of the
// shape this machine's nginx shows (Debian 12: OpenSSL 3 in /usr/lib/x86_64-linux-gnu).
#include <catch2/catch.hpp>

#include "sys/proc_maps.h"
#include "sys/tls_libs.h"

using namespace qscope;

namespace {

std::vector<TlsLibrary> libs_of(const std::string& maps) { return tls_libraries(parse_proc_maps(maps)); }

}  // namespace

TEST_CASE("OpenSSL 3's libssl is found once, whatever its number of mappings", "[tls]") {
    const auto libs = libs_of(
        "55d1c0a00000-55d1c0a2f000 r--p 00000000 fe:00 1311                       /usr/sbin/nginx\n"
        "7fd294fa1000-7fd294fc0000 r--p 00000000 fe:00 14885011                   /usr/lib/x86_64-linux-gnu/libssl.so.3\n"
        "7fd294fc0000-7fd29501d000 r-xp 0001f000 fe:00 14885011                   /usr/lib/x86_64-linux-gnu/libssl.so.3\n"
        "7fd29501d000-7fd29503c000 r--p 0007c000 fe:00 14885011                   /usr/lib/x86_64-linux-gnu/libssl.so.3\n"
        "7fd29503c000-7fd295046000 rw-p 0009b000 fe:00 14885011                   /usr/lib/x86_64-linux-gnu/libssl.so.3\n"
        "7fd295046000-7fd2954c0000 r-xp 00000000 fe:00 14884999                   /usr/lib/x86_64-linux-gnu/libcrypto.so.3\n");
    REQUIRE(libs.size() == 1);
    CHECK(libs[0].path == "/usr/lib/x86_64-linux-gnu/libssl.so.3");
    CHECK(libs[0].kind == TlsLibraryKind::openssl3);
    CHECK(libs[0].probed());
}

TEST_CASE("OpenSSL 1.1 is probed; other TLS libraries are named, not probed", "[tls]") {
    const auto libs = libs_of(
        "7f0000000000-7f0000001000 r-xp 00000000 08:01 100 /opt/app/lib/libssl.so.1.1\n"
        "7f0000002000-7f0000003000 r-xp 00000000 08:01 101 /usr/lib/x86_64-linux-gnu/libgnutls.so.30.34.3\n"
        "7f0000004000-7f0000005000 r-xp 00000000 08:01 102 /usr/lib/x86_64-linux-gnu/libssl3.so\n");
    REQUIRE(libs.size() == 3);
    CHECK(libs[0].kind == TlsLibraryKind::openssl11);
    CHECK(libs[1].kind == TlsLibraryKind::unsupported);
    CHECK_FALSE(libs[1].probed());
    CHECK(libs[2].kind == TlsLibraryKind::unsupported);  // NSS's libssl3.so is not OpenSSL
}

TEST_CASE("no TLS library: Go's static crypto/tls, an unversioned or deleted libssl, anonymous maps", "[tls]") {
    CHECK(libs_of("00400000-00a00000 r-xp 00000000 08:01 7 /usr/local/bin/goserver\n"
                  "c000000000-c000400000 rw-p 00000000 00:00 0\n")
              .empty());
    // A libssl upgraded on disk while mapped: its path names another file now.
    CHECK(libs_of("7f0000000000-7f0000001000 r-xp 00000000 08:01 100 /usr/lib/libssl.so.3 (deleted)\n").empty());
    // Only the soname is claimed: a vendored copy without a version is not known to be OpenSSL.
    CHECK(libs_of("7f0000000000-7f0000001000 r-xp 00000000 08:01 100 /opt/x/libssl.so\n").empty());
    CHECK(libs_of("7f0000000000-7f0000001000 r-xp 00000000 08:01 100 /opt/x/libssl.so.3.bak\n").empty());
    CHECK(libs_of("garbage\n\n7f-\n").empty());
}
