// What the test targets (qs_server, qs_downstream, qs_load) share: flag parsing with the
// same strictness everywhere (a typo in a test's argv must fail loudly, not run a different
// experiment), full writes and sleeps that survive signals.
#pragma once
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace qs_target {

// "--flag value" and "--flag=value", one flag at a time:
//   Args args(argc, argv, "qs_x", usage);
//   while (args.next()) if (args.is("--port")) port = args.num(0, 65535); else ...
class Args {
public:
    Args(int argc, char** argv, const char* prog, void (*usage)()) : argc_(argc), argv_(argv), prog_(prog), usage_(usage) {}

    bool next() {
        if (++i_ >= argc_) return false;
        flag_ = argv_[i_];
        has_eq_ = false;
        if (auto eq = flag_.find('='); flag_.rfind("--", 0) == 0 && eq != std::string::npos) {
            val_ = flag_.substr(eq + 1);
            flag_ = flag_.substr(0, eq);
            has_eq_ = true;
        }
        return true;
    }
    bool is(const char* f) const { return flag_ == f; }
    const std::string& flag() const { return flag_; }
    bool has_inline_value() const { return has_eq_; }
    std::string value() {
        if (has_eq_) return val_;
        if (i_ + 1 >= argc_) fail("missing value for " + flag_);
        return argv_[++i_];
    }
    long num(long lo, long hi) { return parse(value(), lo, hi); }
    double dbl(double lo, double hi) {
        const std::string v = value();
        char* end = nullptr;
        errno = 0;
        double d = std::strtod(v.c_str(), &end);
        if (v.empty() || *end != '\0' || errno != 0 || d < lo || d > hi)
            fail("bad value '" + v + "' for " + flag_ + " (want " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
        return d;
    }
    long parse(const std::string& v, long lo, long hi) const {
        char* end = nullptr;
        errno = 0;
        long n = std::strtol(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno != 0 || n < lo || n > hi)
            fail("bad value '" + v + "' for " + flag_ + " (want " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
        return n;
    }
    [[noreturn]] void unknown() const { fail("unknown flag " + flag_); }
    [[noreturn]] void fail(const std::string& why) const {
        std::fprintf(stderr, "%s: %s\n", prog_, why.c_str());
        usage_();
        std::exit(2);
    }

private:
    int argc_;
    char** argv_;
    const char* prog_;
    void (*usage_)();
    int i_ = 0;
    std::string flag_, val_;
    bool has_eq_ = false;
};

inline bool write_all(int fd, const char* p, size_t n) {
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return false;
        }
        p += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

inline void sleep_ms(long ms) {
    if (ms <= 0) return;
    timespec ts{ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

}  // namespace qs_target
