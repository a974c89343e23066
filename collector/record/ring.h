// The always-on ring (docs/recording.md "The ring"): the last N seconds of ticks, kept as
// the frames a recording would hold, so writing them out is a copy. Pure: bytes in, bytes out.
#pragma once
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "model/snapshot.h"
#include "record/codec.h"

namespace qscope::record {

// At most this much memory for a ring's frames, whatever --ring says: the oldest go first.
inline constexpr size_t kRingMaxBytes = 64u << 20;

class Ring {
public:
    Ring(double seconds, size_t max_bytes = kRingMaxBytes) : seconds_(seconds), max_bytes_(max_bytes) {}
    void set_header(const RecordHeader& h) { header_ = h; }
    // Keeps `s` and drops what is older than the ring's span or beyond its bytes.
    void push(const Snapshot& s);
    // The ring as a whole recording file (file header, header frame, every tick kept).
    std::string file() const;
    size_t ticks() const { return frames_.size(); }
    size_t bytes() const { return bytes_; }

private:
    struct Kept {
        int64_t taken_at_unix_ms;
        std::string frame;
    };
    double seconds_;
    size_t max_bytes_;
    RecordHeader header_;
    std::deque<Kept> frames_;
    size_t bytes_ = 0;
};

// "10m", "90s", "1h", "45" (seconds); nullopt when it is none of these or not positive.
std::optional<double> parse_span(const std::string& text);

}  // namespace qscope::record
