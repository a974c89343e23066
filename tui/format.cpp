#include "tui/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace qscope::tui {

static std::string printf_str(const char* f, double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// Three significant digits with a suffix; rounds up into the next unit rather than
// printing "1000k".
static std::string scaled(double v, const char* const* units, int nunits, double step) {
    int u = 0;
    while (u + 1 < nunits && v >= step * 0.9995) {
        v /= step;
        ++u;
    }
    std::string num = v < 9.995 ? printf_str("%.2f", v) : v < 99.95 ? printf_str("%.1f", v) : printf_str("%.0f", v);
    return num + units[u];
}

std::string fmt_count(uint64_t n) {
    if (n < 10000) return std::to_string(n);
    static const char* const units[] = {"", "k", "M", "G", "T", "P"};
    double v = static_cast<double>(n) / 1000;
    int u = 1;
    while (u + 1 < 6 && v >= 999.5) {
        v /= 1000;
        ++u;
    }
    std::string num = v < 9.95 ? printf_str("%.1f", v) : printf_str("%.0f", v);
    // 9.96k would print as "10.0k": keep three significant characters.
    if (num == "10.0") num = "10";
    return num + units[u];
}

std::string fmt_secs(double s, bool unicode) {
    if (!(s > 0) || !std::isfinite(s)) return "0";
    if (s < 1e-3) {
        const double us = s * 1e6;
        if (us < 0.5) return "<1" + std::string(unicode ? "µs" : "us");
        return printf_str("%.0f", us) + (unicode ? "µs" : "us");
    }
    if (s < 0.9995) {
        static const char* const units[] = {"ms"};
        return scaled(s * 1e3, units, 1, 1000);
    }
    if (s < 59.95) return s < 9.995 ? printf_str("%.2fs", s) : printf_str("%.1fs", s);
    return fmt_elapsed(s);
}

std::string fmt_elapsed(double s) {
    if (!(s > 0) || !std::isfinite(s)) return "0s";
    const uint64_t t = static_cast<uint64_t>(s + 0.5);
    char buf[32];
    if (t < 60) std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(t));
    else if (t < 3600)
        std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(t / 60),
                      static_cast<unsigned long long>(t % 60));
    else if (t < 86400)
        std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(t / 3600),
                      static_cast<unsigned long long>(t % 3600 / 60));
    else
        std::snprintf(buf, sizeof buf, "%llud%02lluh", static_cast<unsigned long long>(t / 86400),
                      static_cast<unsigned long long>(t % 86400 / 3600));
    return buf;
}

std::string fmt_average(double n) { return printf_str("%.1f", n); }

std::string fmt_rate(double r) {
    if (!(r > 0) || !std::isfinite(r)) return "0/s";
    if (r < 9.95) return printf_str("%.1f/s", r);
    if (r < 10000) return printf_str("%.0f/s", r);
    return fmt_count(static_cast<uint64_t>(r + 0.5)) + "/s";
}

int spark_level(double v, double scale_max) {
    if (!(v > 0)) return 0;
    if (!(scale_max > 0)) return 8;
    const int lvl = static_cast<int>(std::ceil(v / scale_max * 8 - 1e-9));
    return std::clamp(lvl, 1, 8);
}

std::string dot(bool unicode) { return unicode ? " · " : " - "; }

std::string sparkline(const std::vector<double>& samples, int width, double scale_max, bool unicode) {
    if (width <= 0) return {};
    static const char* const bars[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    static const char* const ascii = " .,:-=+*#";
    const int n = static_cast<int>(samples.size());
    std::vector<double> cells;
    if (n > width) {
        for (int i = 0; i < width; ++i) {
            const int b = static_cast<int>(static_cast<int64_t>(i) * n / width);
            const int e = static_cast<int>(static_cast<int64_t>(i + 1) * n / width);
            double m = 0;
            for (int k = b; k < e; ++k) m = std::max(m, samples[k]);
            cells.push_back(m);
        }
    } else {
        cells.assign(width - n, 0.0);
        cells.insert(cells.end(), samples.begin(), samples.end());
    }
    double top = scale_max;
    for (double v : cells) top = std::max(top, v);
    std::string out;
    for (double v : cells) {
        const int l = spark_level(v, top);
        if (unicode) out += bars[l];
        else out.push_back(ascii[l]);
    }
    return out;
}

}  // namespace qscope::tui
