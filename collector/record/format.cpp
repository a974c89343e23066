#include "record/format.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace qscope::record {
namespace {

void put_u16(std::string& out, uint16_t v) {
    out.push_back(static_cast<char>(v & 0xff));
    out.push_back(static_cast<char>(v >> 8));
}
void put_u32(std::string& out, uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(const char* p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    return v;
}
uint32_t crc_of(std::string_view a, std::string_view b) {
    uLong c = crc32(0L, Z_NULL, 0);
    c = crc32(c, reinterpret_cast<const Bytef*>(a.data()), static_cast<uInt>(a.size()));
    c = crc32(c, reinterpret_cast<const Bytef*>(b.data()), static_cast<uInt>(b.size()));
    return static_cast<uint32_t>(c);
}

// One frame at `at`, or why it is not whole.
struct FrameRead {
    FrameKind kind{};
    std::string raw;
    size_t next = 0;
    std::string error;
};

FrameRead read_frame(std::string_view bytes, size_t at) {
    FrameRead r;
    const size_t left = bytes.size() - at;
    if (left < kFrameHeaderBytes) {
        r.error = "truncated frame header (" + std::to_string(left) + " of " + std::to_string(kFrameHeaderBytes) +
                  " bytes)";
        return r;
    }
    const char* h = bytes.data() + at;
    const uint32_t clen = get_u32(h + 4), rlen = get_u32(h + 8), crc = get_u32(h + 12);
    if (clen > kMaxFrameBytes || rlen > kMaxFrameBytes) {
        r.error = "frame length " + std::to_string(std::max(clen, rlen)) + " is beyond any snapshot (corrupt)";
        return r;
    }
    if (left - kFrameHeaderBytes < clen) {
        r.error = "truncated frame (" + std::to_string(left - kFrameHeaderBytes) + " of " + std::to_string(clen) +
                  " payload bytes)";
        return r;
    }
    const std::string_view payload(h + kFrameHeaderBytes, clen);
    if (crc_of(std::string_view(h, 12), payload) != crc) {
        r.error = "checksum mismatch (corrupt)";
        return r;
    }
    const auto kind = static_cast<uint8_t>(h[0]);
    if (kind != static_cast<uint8_t>(FrameKind::header) && kind != static_cast<uint8_t>(FrameKind::tick)) {
        r.error = "unknown frame kind " + std::to_string(kind);
        return r;
    }
    r.kind = static_cast<FrameKind>(kind);
    r.raw.resize(rlen);
    const size_t got = ZSTD_decompress(r.raw.data(), rlen, payload.data(), payload.size());
    if (ZSTD_isError(got) || got != rlen) {
        r.error = std::string("zstd: ") + (ZSTD_isError(got) ? ZSTD_getErrorName(got) : "length mismatch");
        return r;
    }
    r.next = at + kFrameHeaderBytes + clen;
    return r;
}

}  // namespace

std::string file_header() {
    std::string out(kMagic, sizeof(kMagic));
    put_u16(out, kVersion);
    put_u16(out, 0);
    return out;
}

std::string frame(FrameKind kind, std::string_view raw) {
    std::string z(ZSTD_compressBound(raw.size()), '\0');
    const size_t n = ZSTD_compress(z.data(), z.size(), raw.data(), raw.size(), 3);
    if (ZSTD_isError(n)) return {};  // only on a bound it computed itself; never for valid input
    z.resize(n);
    std::string out;
    out.push_back(static_cast<char>(kind));
    out.append(3, '\0');
    put_u32(out, static_cast<uint32_t>(z.size()));
    put_u32(out, static_cast<uint32_t>(raw.size()));
    put_u32(out, crc_of(out, z));
    out += z;
    return out;
}

std::string header_frame(const RecordHeader& h) { return frame(FrameKind::header, encode(h)); }
std::string tick_frame(const Snapshot& s) { return frame(FrameKind::tick, encode(s)); }

Recording parse(std::string_view bytes) {
    Recording rec;
    if (bytes.size() < kFileHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
        rec.stopped = "not a qscope recording (no QSREC signature at byte 0)";
        return rec;
    }
    const unsigned version = static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8;
    if (version != kVersion) {
        rec.stopped = "recording format version " + std::to_string(version) + ", this qscope reads version " +
                      std::to_string(kVersion);
        return rec;
    }
    if (bytes[10] != 0 || bytes[11] != 0) {
        rec.stopped = "the file header's reserved bytes are not zero (corrupt)";
        return rec;
    }
    size_t at = kFileHeaderBytes;
    rec.readable_bytes = at;
    bool have_header = false;
    for (size_t n = 0; at < bytes.size(); ++n) {
        FrameRead f = read_frame(bytes, at);
        const std::string where = "frame " + std::to_string(n) + " at byte " + std::to_string(at) + ": ";
        if (!f.error.empty()) {
            rec.stopped = where + f.error;
            break;
        }
        if (!have_header) {
            if (f.kind != FrameKind::header || !decode(f.raw, rec.header)) {
                rec.stopped = where + "the recording's header frame is missing or malformed";
                break;
            }
            have_header = true;
        } else if (f.kind == FrameKind::tick) {
            Snapshot s;
            if (!decode(f.raw, s)) {
                rec.stopped = where + "malformed snapshot";
                break;
            }
            rec.ticks.push_back(std::move(s));
        }  // a second header frame: nothing to read from it
        at = f.next;
        rec.readable_bytes = at;
    }
    if (!have_header && !rec.stopped) rec.stopped = "no header frame after the signature (an empty recording)";
    return rec;
}

}  // namespace qscope::record
