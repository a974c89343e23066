// A recording's bytes (docs/recording.md): a file header, then independent frames, each
// length-prefixed, checksummed and zstd-compressed on its own, so a file cut anywhere (a
// crash, `kill -9`, a full disk) replays up to its last whole frame. Pure: no I/O.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/snapshot.h"
#include "record/codec.h"

namespace qscope::record {

// "QSREC" \r\n \x1a \0: the \r\n and ^Z catch text-mode mangling, like PNG's signature.
inline constexpr char kMagic[8] = {'Q', 'S', 'R', 'E', 'C', '\r', '\n', '\x1a'};
inline constexpr uint16_t kVersion = 1;
// magic, version (u16 LE), reserved (u16)
inline constexpr size_t kFileHeaderBytes = 12;
// kind (u8), reserved (3 bytes), compressed length (u32 LE), raw length (u32 LE), crc32 of
// the 12 bytes before it and the compressed payload (u32 LE)
inline constexpr size_t kFrameHeaderBytes = 16;
// A frame larger than this is corruption, not a snapshot (a 10,000-thread target's tick
// is a few MB raw).
inline constexpr uint32_t kMaxFrameBytes = 256u << 20;

enum class FrameKind : uint8_t { header = 1, tick = 2 };

std::string file_header();
// One frame: the record's bytes compressed (zstd level 3) and framed.
std::string frame(FrameKind kind, std::string_view raw);
std::string header_frame(const RecordHeader& h);
std::string tick_frame(const Snapshot& s);

// What a recording's bytes hold: the header, every whole tick in order, and where and why
// reading stopped early (nullopt: the file is whole).
struct Recording {
    RecordHeader header;
    std::vector<Snapshot> ticks;
    size_t readable_bytes = 0;           // offset of the first byte not read as a whole frame
    std::optional<std::string> stopped;  // "frame 12 at byte 40960: checksum mismatch"
};

// Throws nothing. A file that is not a recording at all (bad magic, another version, no
// header frame) gives no ticks and `stopped` says why.
Recording parse(std::string_view bytes);

}  // namespace qscope::record
