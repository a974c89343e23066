#include "record/ring.h"

#include <cmath>
#include <cstdlib>

#include "record/format.h"

namespace qscope::record {

void Ring::push(const Snapshot& s) {
    frames_.push_back({s.taken_at_unix_ms, tick_frame(s)});
    bytes_ += frames_.back().frame.size();
    const int64_t oldest = s.taken_at_unix_ms - static_cast<int64_t>(std::llround(seconds_ * 1000));
    while (frames_.size() > 1 && (frames_.front().taken_at_unix_ms < oldest || bytes_ > max_bytes_)) {
        bytes_ -= frames_.front().frame.size();
        frames_.pop_front();
    }
}

std::string Ring::file() const {
    std::string out = file_header();
    RecordHeader h = header_;
    if (!frames_.empty()) h.started_unix_ms = frames_.front().taken_at_unix_ms;  // the file's own first tick
    out += header_frame(h);
    for (const auto& k : frames_) out += k.frame;
    return out;
}

std::optional<double> parse_span(const std::string& text) {
    if (text.empty()) return std::nullopt;
    char* rest = nullptr;
    const double v = std::strtod(text.c_str(), &rest);
    if (rest == text.c_str() || !std::isfinite(v) || v <= 0) return std::nullopt;
    const std::string unit(rest);
    if (unit.empty() || unit == "s") return v;
    if (unit == "m") return v * 60;
    if (unit == "h") return v * 3600;
    return std::nullopt;
}

}  // namespace qscope::record
