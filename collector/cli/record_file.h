// Writing recordings (docs/recording.md): the file a `record` streams into, a ring's dump
// written whole, and the header both start with.
#pragma once
#include <cstdint>
#include <string>

#include "model/snapshot.h"
#include "record/codec.h"

namespace qscope {

// A recording's file, created 0600 (a recording holds command lines, peers and stacks). Each
// write goes out in one write(2): the page cache keeps what was written when qscope is
// killed, so a `kill -9` loses at most the frame being written.
class RecordFile {
public:
    explicit RecordFile(const std::string& path);
    ~RecordFile();
    RecordFile(const RecordFile&) = delete;
    RecordFile& operator=(const RecordFile&) = delete;

    void write(const std::string& bytes);  // throws Error on a failed write
    uint64_t written() const { return written_; }

private:
    std::string path_;
    int fd_ = -1;
    uint64_t written_ = 0;
};

// `bytes` written to a temporary file beside `path`, then renamed over it: a reader never
// sees half a dump. Throws Error.
void write_whole(const std::string& path, const std::string& bytes);

// The header of a recording of `first`'s target, as given by `selector` ("pid:1234",
// "port:8080"), ticking every `interval_seconds`.
record::RecordHeader recording_header(const Snapshot& first, const std::string& selector, double interval_seconds);

}  // namespace qscope
