// The text exposition serializer: golden output, escaping, numbers, locale independence.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <clocale>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <locale>
#include <string>

#include "prom/prom.h"

using namespace qscope::prom;

namespace {

std::vector<MetricFamily> sample_families() {
    std::vector<MetricFamily> fams;
    MetricFamily c{"qs_requests_total", "Requests\\served\nsince \"attach\"", MetricType::counter, {}};
    c.metrics.push_back({{{"peer", "a\\b\"c\nd"}, {"port", "80"}}, 1027, {}});
    c.metrics.push_back({{}, 0.5, {}});
    fams.push_back(c);
    MetricFamily g{"qs_queue", "Queue depth", MetricType::gauge, {}};
    g.metrics.push_back({{{"state", "x"}}, std::numeric_limits<double>::quiet_NaN(), {}});
    g.metrics.push_back({{{"state", "y"}}, -std::numeric_limits<double>::infinity(), {}});
    g.metrics.push_back({{{"state", "z"}}, 1.5e-05, {}});
    fams.push_back(g);
    MetricFamily h{"qs_wait_seconds", "Wait", MetricType::histogram, {}};
    Metric hm;
    hm.labels = {{"port", "8080"}};
    hm.histogram.sample_count = 7;
    hm.histogram.sample_sum = 0.0125;
    hm.histogram.buckets = {{0.0001, 1}, {0.5, 6}, {10, 7}};
    h.metrics.push_back(hm);
    fams.push_back(h);
    return fams;
}

const char* kGolden =
    "# HELP qs_requests_total Requests\\\\served\\nsince \"attach\"\n"
    "# TYPE qs_requests_total counter\n"
    "qs_requests_total{peer=\"a\\\\b\\\"c\\nd\",port=\"80\"} 1027\n"
    "qs_requests_total 0.5\n"
    "# HELP qs_queue Queue depth\n"
    "# TYPE qs_queue gauge\n"
    "qs_queue{state=\"x\"} NaN\n"
    "qs_queue{state=\"y\"} -Inf\n"
    "qs_queue{state=\"z\"} 0.000015\n"
    "# HELP qs_wait_seconds Wait\n"
    "# TYPE qs_wait_seconds histogram\n"
    "qs_wait_seconds_bucket{port=\"8080\",le=\"0.0001\"} 1\n"
    "qs_wait_seconds_bucket{port=\"8080\",le=\"0.5\"} 6\n"
    "qs_wait_seconds_bucket{port=\"8080\",le=\"10\"} 7\n"
    "qs_wait_seconds_bucket{port=\"8080\",le=\"+Inf\"} 7\n"
    "qs_wait_seconds_sum{port=\"8080\"} 0.0125\n"
    "qs_wait_seconds_count{port=\"8080\"} 7\n";

// A numpunct that writes decimals the German way, for the C++ global locale.
struct CommaPunct : std::numpunct<char> {
    char do_decimal_point() const override { return ','; }
    char do_thousands_sep() const override { return '.'; }
    std::string do_grouping() const override { return "\3"; }
};

// Switches LC_NUMERIC to a comma-decimal locale for the C library too (printf, strtod),
// building de_DE.UTF-8 into a temp dir with localedef when the system has not generated it.
// Returns false when no such locale can be had; `tmpdir` is set when one was built.
bool set_comma_c_locale(std::string& saved, std::string& tmpdir) {
    saved = std::setlocale(LC_NUMERIC, nullptr);
    for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8"})
        if (std::setlocale(LC_NUMERIC, name)) return true;
    char dir[] = "/tmp/qscope-locale-XXXXXX";
    if (!mkdtemp(dir)) return false;
    tmpdir = dir;
    const std::string cmd = std::string("localedef -i de_DE -f UTF-8 ") + dir + "/de_DE.UTF-8 >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) return false;
    setenv("LOCPATH", dir, 1);  // glibc reads it on every setlocale()
    return std::setlocale(LC_NUMERIC, "de_DE.UTF-8") != nullptr;
}

}  // namespace

TEST_CASE("serializer writes the 0.0.4 text format with escaping", "[prom]") {
    REQUIRE(serialize(sample_families()) == kGolden);
}

TEST_CASE("label values escape backslash, quote and newline; HELP escapes backslash and newline", "[prom]") {
    CHECK(escape_label_value("a\\b") == "a\\\\b");
    CHECK(escape_label_value("say \"hi\"") == "say \\\"hi\\\"");
    CHECK(escape_label_value("two\nlines") == "two\\nlines");
    CHECK(escape_help("say \"hi\"\\\n") == "say \"hi\"\\\\\\n");
    // UTF-8 passes through; invalid bytes become U+FFFD so Prometheus still parses the scrape.
    CHECK(escape_label_value("caf\xC3\xA9") == "caf\xC3\xA9");
    CHECK(escape_label_value("bad\xFF" "byte") == "bad\xEF\xBF\xBD" "byte");
    CHECK(escape_label_value("trunc\xE2\x82") == "trunc\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(escape_label_value("\xC0\xAF") == "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
    CHECK(escape_label_value("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST_CASE("numbers: NaN, infinities and shortest round-trip text", "[prom]") {
    CHECK(format_number(std::numeric_limits<double>::quiet_NaN()) == "NaN");
    CHECK(format_number(std::numeric_limits<double>::infinity()) == "+Inf");
    CHECK(format_number(-std::numeric_limits<double>::infinity()) == "-Inf");
    CHECK(format_number(0) == "0");
    CHECK(format_number(42) == "42");
    CHECK(format_number(0.1) == "0.1");
    CHECK(format_number(2.5) == "2.5");
    CHECK(format_number(0.0001) == "0.0001");
    CHECK(format_number(18446744073709551615.0) == "18446744073709551616");
    CHECK(format_number(1e300) == "1e+300");
    CHECK(format_number(1e-9) == "1e-09");
    for (double v : {0.1, 1.0 / 3, 123456.789, 6.02e23, 1e-300, 0.00025}) {
        const auto s = format_number(v);
        CHECK(std::strtod(s.c_str(), nullptr) == v);
    }
}

TEST_CASE("names are validated", "[prom]") {
    CHECK(valid_metric_name("qscope_up"));
    CHECK(valid_metric_name("a:b_c1"));
    CHECK_FALSE(valid_metric_name("1abc"));
    CHECK_FALSE(valid_metric_name("a-b"));
    CHECK_FALSE(valid_metric_name(""));
    CHECK(valid_label_name("status_class"));
    CHECK_FALSE(valid_label_name("__name__"));
    CHECK_FALSE(valid_label_name("a:b"));
    MetricFamily f{"bad-name", "x", MetricType::gauge, {{{}, 1, {}}}};
    CHECK_THROWS_AS(serialize({f}), std::invalid_argument);
    MetricFamily g{"ok", "x", MetricType::gauge, {{{{"bad label", "v"}}, 1, {}}}};
    CHECK_THROWS_AS(serialize({g}), std::invalid_argument);
}

TEST_CASE("histogram: +Inf is always the count, even when given as a bound", "[prom]") {
    MetricFamily h{"h_seconds", "h", MetricType::histogram, {}};
    Metric m;
    m.histogram.sample_count = 3;
    m.histogram.buckets = {{1, 2}, {std::numeric_limits<double>::infinity(), 99}};
    h.metrics.push_back(m);
    const auto s = serialize({h});
    CHECK(s.find("h_seconds_bucket{le=\"+Inf\"} 3\n") != std::string::npos);
    CHECK(s.find("99") == std::string::npos);
    CHECK(s.find("h_seconds_count 3\n") != std::string::npos);
}

TEST_CASE("registry collects every collectable at call time", "[prom]") {
    struct Fixed : Collectable {
        std::string name;
        explicit Fixed(std::string n) : name(std::move(n)) {}
        std::vector<MetricFamily> collect() const override {
            return {MetricFamily{name, "h", MetricType::gauge, {{{}, 1, {}}}}};
        }
    };
    Registry r;
    auto a = std::make_shared<Fixed>("a");
    auto b = std::make_shared<Fixed>("b");
    r.add(a);
    r.add(b);
    auto fams = r.collect();
    REQUIRE(fams.size() == 2);
    CHECK(fams[0].name == "a");
    CHECK(fams[1].name == "b");
    r.remove(a);
    fams = r.collect();
    REQUIRE(fams.size() == 1);
    CHECK(fams[0].name == "b");
}

TEST_CASE("output is identical under a comma-decimal locale", "[prom]") {
    const std::string expected = serialize(sample_families());
    std::string saved_c, tmpdir;
    const bool c_locale = set_comma_c_locale(saved_c, tmpdir);
    const std::locale saved_cpp = std::locale::global(std::locale(std::locale::classic(), new CommaPunct));
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", 1.5);
    std::string printed = buf;
    std::string got, got_numbers;
    try {
        got = serialize(sample_families());
        got_numbers = format_number(0.25) + " " + format_number(1234567.5);
    } catch (...) {
        std::locale::global(saved_cpp);
        std::setlocale(LC_NUMERIC, saved_c.c_str());
        throw;
    }
    std::locale::global(saved_cpp);
    std::setlocale(LC_NUMERIC, saved_c.c_str());
    if (!tmpdir.empty()) {
        unsetenv("LOCPATH");
        std::system(("rm -rf '" + tmpdir + "'").c_str());
    }
    if (c_locale)
        CHECK(printed == "1,5");  // proves the C locale really switched
    else
        WARN("no comma-decimal C locale available (localedef missing?): only the C++ global locale was switched");
    CHECK(got == expected);
    CHECK(got_numbers == "0.25 1234567.5");
}
