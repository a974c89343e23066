#include "prom/prom.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace qscope::prom {

void Registry::add(std::shared_ptr<const Collectable> c) {
    std::lock_guard<std::mutex> g(mu_);
    collectables_.push_back(std::move(c));
}

void Registry::remove(const std::shared_ptr<const Collectable>& c) {
    std::lock_guard<std::mutex> g(mu_);
    collectables_.erase(std::remove(collectables_.begin(), collectables_.end(), c), collectables_.end());
}

std::vector<MetricFamily> Registry::collect() const {
    std::vector<std::shared_ptr<const Collectable>> list;
    {
        std::lock_guard<std::mutex> g(mu_);
        list = collectables_;
    }
    std::vector<MetricFamily> out;
    for (const auto& c : list) {
        auto fams = c->collect();
        std::move(fams.begin(), fams.end(), std::back_inserter(out));
    }
    return out;
}

void append_number(std::string& out, double v) {
    if (std::isnan(v)) {
        out += "NaN";
        return;
    }
    if (std::isinf(v)) {
        out += v > 0 ? "+Inf" : "-Inf";
        return;
    }
    // to_chars never consults the locale (printf and iostreams do: "0,5" under de_DE).
    // Plain decimal in the everyday range reads better (le="0.0001", not "1e-04"); both
    // are the shortest text that round-trips.
    char buf[64];
    const double a = std::fabs(v);
    const bool plain = a == 0 || (a >= 1e-6 && a < 1e15);
    auto r = plain ? std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed)
                   : std::to_chars(buf, buf + sizeof buf, v);
    if (r.ec != std::errc()) r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
    out.append(buf, r.ptr);
}

std::string format_number(double v) {
    std::string s;
    append_number(s, v);
    return s;
}

namespace {

// Length of the valid UTF-8 sequence at s[i], or 0 if it is not one (overlong forms,
// surrogates and code points above U+10FFFF are invalid, as Go's utf8.ValidString says).
size_t utf8_seq_len(std::string_view s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return 1;
    size_t n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k) {
        const auto cc = static_cast<unsigned char>(s[i + k]);
        if ((cc & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

// Label values escape \ " and newline; HELP escapes only \ and newline (the format spec).
void append_escaped(std::string& out, std::string_view v, bool quote) {
    for (size_t i = 0; i < v.size();) {
        const char c = v[i];
        if (c == '\\') {
            out += "\\\\";
        } else if (c == '\n') {
            out += "\\n";
        } else if (quote && c == '"') {
            out += "\\\"";
        } else if (static_cast<unsigned char>(c) >= 0x80) {
            const size_t n = utf8_seq_len(v, i);
            if (n == 0) {
                // Thread and process names are arbitrary bytes; one bad byte must not make
                // Prometheus reject the whole scrape.
                out += "\xEF\xBF\xBD";
                ++i;
            } else {
                out.append(v.substr(i, n));
                i += n;
            }
            continue;
        } else {
            out += c;
        }
        ++i;
    }
}

const char* type_name(MetricType t) {
    switch (t) {
        case MetricType::counter: return "counter";
        case MetricType::gauge: return "gauge";
        case MetricType::histogram: return "histogram";
        case MetricType::untyped: return "untyped";
    }
    return "untyped";
}

void append_labels(std::string& out, const std::vector<Label>& labels, const char* extra_name = nullptr,
                   double extra_value = 0) {
    if (labels.empty() && !extra_name) return;
    out += '{';
    bool first = true;
    for (const auto& l : labels) {
        if (!valid_label_name(l.name)) throw std::invalid_argument("invalid Prometheus label name: " + l.name);
        if (!first) out += ',';
        first = false;
        out += l.name;
        out += "=\"";
        append_escaped(out, l.value, true);
        out += '"';
    }
    if (extra_name) {
        if (!first) out += ',';
        out += extra_name;
        out += "=\"";
        append_number(out, extra_value);
        out += '"';
    }
    out += '}';
}

void append_sample(std::string& out, std::string_view name, std::string_view suffix,
                   const std::vector<Label>& labels, double value, const char* extra_name = nullptr,
                   double extra_value = 0) {
    out += name;
    out += suffix;
    append_labels(out, labels, extra_name, extra_value);
    out += ' ';
    append_number(out, value);
    out += '\n';
}

}  // namespace

std::string escape_label_value(std::string_view v) {
    std::string s;
    append_escaped(s, v, true);
    return s;
}

std::string escape_help(std::string_view v) {
    std::string s;
    append_escaped(s, v, false);
    return s;
}

bool valid_metric_name(std::string_view n) {
    if (n.empty()) return false;
    for (size_t i = 0; i < n.size(); ++i) {
        const char c = n[i];
        const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
        if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
    }
    return true;
}

bool valid_label_name(std::string_view n) {
    if (n.empty() || n.find(':') != std::string_view::npos) return false;
    if (n.size() >= 2 && n[0] == '_' && n[1] == '_') return false;  // reserved for Prometheus
    return valid_metric_name(n);
}

void serialize(std::string& out, const MetricFamily& f) {
    if (!valid_metric_name(f.name)) throw std::invalid_argument("invalid Prometheus metric name: " + f.name);
    out += "# HELP ";
    out += f.name;
    out += ' ';
    append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += ' ';
    out += type_name(f.type);
    out += '\n';
    for (const auto& m : f.metrics) {
        if (f.type != MetricType::histogram) {
            append_sample(out, f.name, "", m.labels, m.value);
            continue;
        }
        for (const auto& l : m.labels)
            if (l.name == "le") throw std::invalid_argument("histogram " + f.name + " must not carry an le label");
        const auto& h = m.histogram;
        for (const auto& b : h.buckets) {
            if (std::isinf(b.upper_bound)) continue;  // written once below, always == count
            append_sample(out, f.name, "_bucket", m.labels, static_cast<double>(b.cumulative_count), "le",
                          b.upper_bound);
        }
        append_sample(out, f.name, "_bucket", m.labels, static_cast<double>(h.sample_count), "le",
                      std::numeric_limits<double>::infinity());
        append_sample(out, f.name, "_sum", m.labels, h.sample_sum);
        append_sample(out, f.name, "_count", m.labels, static_cast<double>(h.sample_count));
    }
}

std::string serialize(const std::vector<MetricFamily>& families) {
    std::string out;
    out.reserve(4096);
    for (const auto& f : families) serialize(out, f);
    return out;
}

}  // namespace qscope::prom
