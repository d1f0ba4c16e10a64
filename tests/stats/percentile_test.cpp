// Percentiles from histograms against exact percentiles of the underlying samples.
#include "rsched/stats/percentile.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace rsched::stats;

namespace {
// Exact nearest-rank percentile of a sample set.
std::uint64_t exact_percentile(std::vector<std::uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  const auto r = percentile_rank(v.size(), p);
  return v[r - 1];
}

std::vector<std::uint64_t> random_samples(std::mt19937_64 &rng, std::size_t n, int kind) {
  std::vector<std::uint64_t> v(n);
  std::lognormal_distribution<double> logn(std::log(50'000.0), 2.0); // ~50 us median, heavy tail
  std::uniform_int_distribution<std::uint64_t> small(0, 600'000);
  std::exponential_distribution<double> expo(1.0 / 3'000'000.0);
  for (auto &x : v) {
    switch (kind) {
    case 0:
      x = static_cast<std::uint64_t>(std::min(logn(rng), 1e13));
      break;
    case 1:
      x = small(rng);
      break;
    case 2:
      x = static_cast<std::uint64_t>(expo(rng));
      break;
    default:
      x = rng() >> (rng() % 64); // every magnitude, up to the open-ended bucket
    }
  }
  return v;
}
} // namespace

TEST_CASE("percentile lies in the bucket of the exact percentile", "[stats]") {
  std::mt19937_64 rng(12345);
  const double ps[] = {0.1, 1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99, 100};
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t n = 1 + rng() % (trial % 4 == 0 ? 5 : 3000);
    const int kind = trial % 4;
    const auto samples = random_samples(rng, n, kind);
    histogram h{layout::latency, {}};
    for (auto s : samples) {
      h.add(s);
    }
    REQUIRE(h.total() == n);
    for (double p : ps) {
      const auto got = percentile(h, p);
      REQUIRE(got.has_value());
      const std::uint64_t exact = exact_percentile(samples, p);
      INFO("trial " << trial << " n " << n << " p " << p << " exact " << exact << " got "
                    << got->value);
      REQUIRE(got->slot == slot_of(layout::latency, exact));
      REQUIRE(got->bounds.lo <= got->value);
      REQUIRE(got->value <= got->bounds.hi);
      if (got->bounds.open_ended()) {
        // documented: the open-ended top bucket reports its lower bound, a lower bound
        REQUIRE(got->value == got->bounds.lo);
        REQUIRE(exact >= got->value);
      } else {
        const std::uint64_t err = got->value > exact ? got->value - exact : exact - got->value;
        REQUIRE(err < got->bounds.width());
      }
    }
  }
}

TEST_CASE("depth percentiles are exact (one value per bucket)", "[stats]") {
  std::mt19937_64 rng(99);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::uint64_t> v(1 + rng() % 500);
    for (auto &x : v) {
      x = rng() % 40;
    }
    histogram h{layout::depth, {}};
    for (auto x : v) {
      h.add(x);
    }
    for (double p : {1.0, 50.0, 90.0, 99.0, 100.0}) {
      REQUIRE(percentile(h, p)->value == exact_percentile(v, p));
    }
  }
}

TEST_CASE("no upstream single-sample quirk", "[stats]") {
  histogram h{layout::latency, {}};
  h.add(4'200'000); // one sample of 4.2 ms
  for (double p : {50.0, 90.0, 99.0}) {
    const auto r = percentile(h, p);
    REQUIRE(r);
    CHECK(r->slot == slot_of(layout::latency, 4'200'000));
    CHECK(r->value >= 4'096'000);
    CHECK(r->value <= 8'191'999);
  }
}

TEST_CASE("percentile edge cases", "[stats]") {
  histogram h{layout::latency, {}};
  CHECK_FALSE(percentile(h, 50).has_value()); // empty
  h.add(15'000);
  CHECK_FALSE(percentile(h, 0).has_value());
  CHECK_FALSE(percentile(h, -1).has_value());
  CHECK_FALSE(percentile(h, 100.5).has_value());
  CHECK_FALSE(percentile(h, std::nan("")).has_value());
  CHECK(percentile(h, 100)->value / 10'000 == 1);
  // open-ended bucket reports its lower bound
  histogram big{layout::latency, {}};
  big.add(std::numeric_limits<std::uint64_t>::max());
  CHECK(percentile(big, 99)->value == bucket_bounds(layout::latency, RSCHED_HIST_SLOTS - 1).lo);
  CHECK(percentile_rank(100, 99) == 99);
  CHECK(percentile_rank(1000, 99.9) == 999);
  CHECK(percentile_rank(3, 50) == 2);
  CHECK(percentile_rank(1, 0.001) == 1);
}

TEST_CASE("merge is bucket-wise and refuses mixed layouts", "[stats]") {
  histogram a{layout::latency, {}};
  histogram b{layout::latency, {}};
  a.add(1'000);
  b.add(1'000);
  b.add(900'000);
  REQUIRE(merge_into(a, b).ok());
  CHECK(a.total() == 3);
  CHECK(a.slots[0] == 2);
  histogram d{layout::depth, {}};
  CHECK_FALSE(merge_into(a, d).ok());
}

TEST_CASE("delta of cumulative histograms", "[stats]") {
  histogram prev{layout::latency, {}};
  histogram cur{layout::latency, {}};
  prev.add(5'000, 3);
  cur.add(5'000, 5);
  cur.add(2'000'000, 1);
  auto d = delta(cur, prev);
  CHECK(d.total() == 3);
  CHECK(d.slots[0] == 2);
  // a reset (counter went down) restarts from the current values
  auto r = delta(prev, cur);
  CHECK(r == prev);
}
