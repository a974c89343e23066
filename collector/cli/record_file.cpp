#include "cli/record_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "model/errors.h"

namespace qscope {

RecordFile::RecordFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd_ < 0) throw Error(Exit::usage, "--output " + path + ": " + errno_text(errno));
}

RecordFile::~RecordFile() {
    if (fd_ >= 0) ::close(fd_);
}

void RecordFile::write(const std::string& bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Error(Exit::failure, "writing " + path_ + ": " + errno_text(errno));
        done += static_cast<size_t>(n);
    }
    written_ += bytes.size();
}

void write_whole(const std::string& path, const std::string& bytes) {
    const std::string tmp = path + ".tmp";
    {
        RecordFile f(tmp);
        f.write(bytes);
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw Error(Exit::failure, "renaming " + tmp + ": " + errno_text(err));
    }
}

namespace {
std::string hostname() {
    char h[256] = {};
    if (::gethostname(h, sizeof(h) - 1) != 0) return "";
    return h;
}
}  // namespace

record::RecordHeader recording_header(const Snapshot& first, const std::string& selector, double interval_seconds) {
    record::RecordHeader h;
    h.qscope_version = QSCOPE_VERSION;
    h.selector = selector;
    h.pid = first.target.pid;
    h.comm = first.target.comm;
    h.cmdline = first.target.cmdline;
    h.start_time_ticks = first.target.start_time_ticks;
    h.hostname = hostname();
    h.interval_seconds = interval_seconds;
    // "Seconds since the start" count from the first tick, the first thing a replay shows.
    h.started_unix_ms = first.taken_at_unix_ms;
    return h;
}

}  // namespace qscope
