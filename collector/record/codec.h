// A Snapshot as bytes, and back: the payload of a recording's tick frame (docs/recording.md).
// Pure: no I/O. Every struct is length-prefixed and its fields are written in declaration
// order, so a field added at the end of a struct is read as its default from an older file
// and skipped by an older reader: the format grows the way the JSON contract does.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "model/snapshot.h"

namespace qscope::record {

// What a recording is of, written once at its start (the header frame).
struct RecordHeader {
    std::string qscope_version;
    std::string selector;            // the target as given: "pid:1234", "port:8080"
    int pid = 0;
    std::string comm, cmdline;
    uint64_t start_time_ticks = 0;   // /proc/PID/stat field 22 of the root
    std::string hostname;
    double interval_seconds = 0;     // between ticks
    int64_t started_unix_ms = 0;
};

std::string encode(const Snapshot& s);
std::string encode(const RecordHeader& h);
// False on malformed bytes (a length beyond the payload, a bad varint, an enum out of
// range, a histogram slot out of range); `out` is then unspecified. Never throws for bad input.
bool decode(std::string_view bytes, Snapshot& out);
bool decode(std::string_view bytes, RecordHeader& out);

}  // namespace qscope::record
