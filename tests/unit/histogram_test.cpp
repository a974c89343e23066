#include <catch2/catch.hpp>

#include "model/histogram.h"

using qscope::Histogram;

TEST_CASE("slot bounds partition the value range", "[hist]") {
    for (uint64_t v : {0ULL, 1ULL, 15ULL, 16ULL, 17ULL, 31ULL, 32ULL, 1000ULL, 999999ULL, 1ULL << 40}) {
        const auto slot = qs_hist_slot(v);
        REQUIRE(qs_hist_slot_low(slot) <= v);
        if (slot + 1 < QS_HIST_SLOTS) REQUIRE(v < qs_hist_slot_low(slot + 1));
    }
    for (uint32_t i = 1; i < QS_HIST_SLOTS; ++i) REQUIRE(qs_hist_slot_low(i) > qs_hist_slot_low(i - 1));
}

TEST_CASE("slot width stays within 1/16 of its value", "[hist]") {
    for (uint32_t i = QS_HIST_SUB; i + 1 < QS_HIST_SLOTS; ++i) {
        const double lo = static_cast<double>(qs_hist_slot_low(i));
        const double hi = static_cast<double>(qs_hist_slot_low(i + 1));
        REQUIRE((hi - lo) / lo <= 1.0 / 16 + 1e-12);
    }
}

TEST_CASE("quantiles of a known distribution are within 4%", "[hist]") {
    Histogram h;
    // 1..1000 ms uniformly: p50 = 500 ms, p90 = 900 ms, p99 = 990 ms
    for (uint64_t ms = 1; ms <= 1000; ++ms) h.add(ms * 1000000ULL);
    REQUIRE(h.count() == 1000);
    CHECK(h.quantile(0.5) == Approx(0.5).epsilon(0.04));
    CHECK(h.quantile(0.9) == Approx(0.9).epsilon(0.04));
    CHECK(h.quantile(0.99) == Approx(0.99).epsilon(0.04));
    CHECK(h.max_seconds() == Approx(1.0));
}

TEST_CASE("delta is the window between two cumulative reads", "[hist]") {
    Histogram a, b;
    a.add(5000, 3);
    b = a;
    b.add(5000000, 2);
    const auto d = b.delta(a);
    REQUIRE(d.count() == 2);
    CHECK(d.quantile(0.5) == Approx(0.005).epsilon(0.07));
    CHECK(d.count_le(0.001) == Approx(0));
    CHECK(d.count_le(1.0) == Approx(2));
}
