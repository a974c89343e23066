// Which TLS library a process maps, from its /proc/PID/maps: what --tls can probe (OpenSSL's
// libssl, whose SSL_write/SSL_write_ex take the plaintext on the writing thread) and what it
// cannot (other libraries, named so the user is told why statuses stay unknown).
#pragma once
#include <string>
#include <vector>

#include "sys/proc_maps.h"

namespace qscope {

enum class TlsLibraryKind {
    openssl3,    // libssl.so.3 (OpenSSL 3.x: Debian 12's)
    openssl11,   // libssl.so.1.1 (OpenSSL 1.1.1: SSL_write_ex exists since 1.1.1)
    unsupported  // another TLS library mapped (GnuTLS, NSS, wolfSSL, mbed TLS): not probed
};

struct TlsLibrary {
    std::string path;  // as the process sees it (its mount namespace): open via /proc/PID/root
    TlsLibraryKind kind = TlsLibraryKind::unsupported;
    bool probed() const { return kind != TlsLibraryKind::unsupported; }
};

// The TLS libraries among a process's file-backed mappings, each path once, in map order.
// A deleted file (upgraded on disk while mapped) is left out: its path names another inode.
std::vector<TlsLibrary> tls_libraries(const std::vector<MapEntry>& maps);

}  // namespace qscope
