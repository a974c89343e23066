#include "sys/tls_libs.h"

#include <algorithm>
#include <optional>
#include <string_view>

namespace qscope {

namespace {

// A mapped file's name -> its TLS library kind; nullopt for anything else. OpenSSL is matched
// by soname only: a renamed or vendored copy (libssl.so without a version) is not claimed.
std::optional<TlsLibraryKind> kind_of(std::string_view name) {
    if (name == "libssl.so.3") return TlsLibraryKind::openssl3;
    if (name == "libssl.so.1.1") return TlsLibraryKind::openssl11;
    for (std::string_view other : {"libgnutls.so.", "libssl3.so", "libnss3.so", "libwolfssl.so.", "libmbedtls.so."})
        if (name.substr(0, other.size()) == other) return TlsLibraryKind::unsupported;
    return std::nullopt;
}

}  // namespace

std::vector<TlsLibrary> tls_libraries(const std::vector<MapEntry>& maps) {
    std::vector<TlsLibrary> out;
    for (const MapEntry& m : maps) {
        if (!m.file_backed() || m.deleted) continue;
        const size_t slash = m.path.rfind('/');
        const std::optional<TlsLibraryKind> k = kind_of(std::string_view(m.path).substr(slash + 1));
        if (!k) continue;
        if (std::none_of(out.begin(), out.end(), [&](const TlsLibrary& l) { return l.path == m.path; }))
            out.push_back({m.path, *k});
    }
    return out;
}

}  // namespace qscope
