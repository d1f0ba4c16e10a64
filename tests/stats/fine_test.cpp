// The latency_fine layout (issue 36): its division-free slot function (shared with BPF) against
// a reference built from the documented bucket table, its precision, and its exact coarsening
// into the latency layout (every latency boundary is a fine boundary).
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace rsched::stats;

namespace {

// Lower bounds (ns) of the fine slots, from the table in sched_abi.h written out with plain
// arithmetic: 10 us steps to 500 us, 500 us, then (8 + j) * 2^(n-3) us for n = 9..31, j = 0..7,
// then 2^32 us.
std::vector<std::uint64_t> reference_lows() {
  std::vector<std::uint64_t> lo;
  for (std::uint64_t s = 0; s <= 50; ++s) {
    lo.push_back(s * 10'000);
  }
  for (unsigned n = 9; n <= 31; ++n) {
    for (std::uint64_t j = 0; j < 8; ++j) {
      lo.push_back((8 + j) * (std::uint64_t{1} << (n - 3)) * 1000);
    }
  }
  lo.push_back((std::uint64_t{1} << 32) * 1000);
  return lo;
}

std::size_t reference_slot(const std::vector<std::uint64_t> &lows, std::uint64_t ns) {
  return static_cast<std::size_t>(std::upper_bound(lows.begin(), lows.end(), ns) - lows.begin()) -
         1;
}

} // namespace

TEST_CASE("fine slot function agrees with the reference at every boundary", "[stats]") {
  const auto lows = reference_lows();
  REQUIRE(lows.size() == fine_slots);
  REQUIRE(std::is_sorted(lows.begin(), lows.end()));
  REQUIRE(std::adjacent_find(lows.begin(), lows.end()) == lows.end());
  for (std::size_t s = 0; s < fine_slots; ++s) {
    const std::uint64_t b = lows[s];
    for (std::uint64_t v : {b - 1, b, b + 1}) {
      if (b == 0 && v == b - 1) {
        continue;
      }
      INFO("slot " << s << " value " << v);
      REQUIRE(rsched_hist_fine_slot(v) == reference_slot(lows, v));
    }
    REQUIRE(bucket_bounds(layout::latency_fine, s).lo == b);
  }
  // every ns of the linear part and the first octaves, and the top of u64
  for (std::uint64_t v = 0; v < 4'200'000; ++v) {
    REQUIRE(rsched_hist_fine_slot(v) == reference_slot(lows, v));
  }
  REQUIRE(rsched_hist_fine_slot(std::numeric_limits<std::uint64_t>::max()) == fine_slots - 1);
  std::mt19937_64 rng(36);
  for (int i = 0; i < 1'000'000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    REQUIRE(rsched_hist_fine_slot(v) == reference_slot(lows, v));
  }
}

TEST_CASE("fine buckets are at most 10 us wide below 80 us and 12.5 % above", "[stats]") {
  for (std::size_t s = 0; s + 1 < fine_slots; ++s) {
    const bucket b = bucket_bounds(layout::latency_fine, s);
    INFO("slot " << s << " [" << b.lo << ", " << b.hi << "]");
    if (b.lo >= 80'000) {
      REQUIRE(b.width() * 8 <= b.lo);
    } else {
      REQUIRE(b.width() <= 10'000);
    }
    REQUIRE(bucket_bounds(layout::latency_fine, s + 1).lo == b.hi + 1);
  }
  CHECK(bucket_bounds(layout::latency_fine, fine_slots - 1).open_ended());
  CHECK(bucket_bounds(layout::latency_fine, fine_slots - 1).lo ==
        bucket_bounds(layout::latency, max_slots - 1).lo);
  // 6 ms: octave 2^12 us, sub-bucket 3 of 8 of 512 us: [5632, 6143] us
  CHECK(bucket_bounds(layout::latency_fine, slot_of(layout::latency_fine, 6'000'000)).lo ==
        5'632'000);
}

TEST_CASE("every latency boundary is a fine boundary", "[stats]") {
  std::size_t fine = 0;
  for (std::size_t k = 0; k < max_slots; ++k) {
    const bucket c = bucket_bounds(layout::latency, k);
    INFO("latency slot " << k);
    REQUIRE(bucket_bounds(layout::latency_fine, fine).lo == c.lo);
    std::size_t last = fine;
    while (last + 1 < fine_slots && coarse_slot(last + 1) == k) {
      ++last;
    }
    REQUIRE(bucket_bounds(layout::latency_fine, last).hi == c.hi);
    for (std::size_t s = fine; s <= last; ++s) {
      REQUIRE(coarse_slot(s) == k);
      REQUIRE(rsched_fine_to_coarse(static_cast<__u32>(s)) == k);
    }
    CHECK(last - fine + 1 == (k <= 50 || k + 1 == max_slots ? 1U : 8U));
    fine = last + 1;
  }
  CHECK(fine == fine_slots);
  // the slot functions agree: the fine slot of any value coarsens to its latency slot
  std::mt19937_64 rng(3636);
  for (int i = 0; i < 500'000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    REQUIRE(coarse_slot(slot_of(layout::latency_fine, v)) == slot_of(layout::latency, v));
  }
}

TEST_CASE("fine histograms coarsen and merge with latency ones exactly", "[stats]") {
  std::mt19937_64 rng(99);
  std::vector<std::uint8_t> blob;
  for (int trial = 0; trial < 2000; ++trial) {
    // two windows' samples: the old rows (latency) and the new rows (latency_fine)
    histogram old_rows{layout::latency, {}};
    fine_histogram new_rows;
    histogram all{layout::latency, {}};
    histogram new_coarse{layout::latency, {}};
    const int n_old = static_cast<int>(rng() % 50);
    const int n_new = 1 + static_cast<int>(rng() % 50);
    for (int i = 0; i < n_old + n_new; ++i) {
      const std::uint64_t v = rng() >> (rng() % 64);
      const std::uint64_t c = 1 + rng() % 1000;
      all.add(v, c);
      if (i < n_old) {
        old_rows.add(v, c);
      } else {
        new_rows.add(v, c);
        new_coarse.add(v, c);
      }
    }
    REQUIRE(coarsen(new_rows) == new_coarse);
    REQUIRE(coarsen(new_rows).total() == new_rows.total());
    histogram mixed = old_rows;
    REQUIRE(merge_into(mixed, new_rows).ok());
    REQUIRE(mixed == all);
    histogram depth{layout::depth, {}};
    REQUIRE_FALSE(merge_into(depth, new_rows).ok());
    // the blob: round trip at fine precision; read as a histogram it is the coarsened one
    encode_into(new_rows, blob);
    REQUIRE(blob[0] == 5);
    const auto back = decode_fine(blob);
    REQUIRE(back.ok());
    REQUIRE(back.value() == new_rows);
    const auto coarse = decode(blob);
    REQUIRE(coarse.ok());
    REQUIRE(coarse.value() == new_coarse);
    REQUIRE(blob_layout(blob) == layout::latency);
    REQUIRE_FALSE(decode_fine(encode(old_rows)).ok());
    // fine + fine stays fine
    fine_histogram twice = new_rows;
    merge_into(twice, new_rows);
    for (std::size_t s = 0; s < fine_slots; ++s) {
      REQUIRE(twice.slots[s] == 2 * new_rows.slots[s]);
    }
  }
}

TEST_CASE("hostile latency_fine blobs are errors", "[stats]") {
  using bytes = std::vector<std::uint8_t>;
  CHECK(decode_fine(bytes{5}).ok()); // empty histogram
  CHECK(decode_fine(bytes{5, 235, 1, 1}).ok());
  CHECK_FALSE(decode_fine(bytes{5, 236, 1, 1}).ok()); // past slot 235
  CHECK_FALSE(decode(bytes{5, 236, 1, 1}).ok());
  CHECK_FALSE(decode_fine(bytes{5, 0, 0}).ok()); // empty bucket entry
  CHECK_FALSE(decode_fine(bytes{5, 0x80}).ok()); // truncated varint
  CHECK_FALSE(decode_fine(bytes{}).ok());
  const auto h = decode(bytes{5, 235, 1, 1});
  REQUIRE(h.ok());
  CHECK(h.value().kind == layout::latency);
  CHECK(h.value().slots[74] == 1);
}

TEST_CASE("fine percentiles are within 12.5 % and hold the exact nearest-rank sample", "[stats]") {
  std::mt19937_64 rng(6);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::uint64_t> samples;
    fine_histogram h;
    const std::size_t n = 1 + rng() % 2000;
    for (std::size_t i = 0; i < n; ++i) {
      // 80 us .. ~70 s, log-uniform
      const std::uint64_t v = 80'000 + (rng() >> (24 + rng() % 40));
      samples.push_back(v);
      h.add(v);
    }
    std::sort(samples.begin(), samples.end());
    for (double p : {50.0, 90.0, 99.0, 99.9}) {
      const auto r = percentile(h, p);
      REQUIRE(r.has_value());
      const std::uint64_t exact = samples[percentile_rank(n, p) - 1];
      INFO("p" << p << " exact " << exact << " bucket [" << r->bounds.lo << ", " << r->bounds.hi
               << "]");
      REQUIRE(r->bounds.lo <= exact);
      REQUIRE(exact <= r->bounds.hi);
      if (!r->bounds.open_ended()) {
        REQUIRE(r->bounds.width() * 8 <= r->bounds.lo);
      }
      // the coarse answer's bucket holds the fine one's
      const auto c = percentile(coarsen(h), p);
      REQUIRE(c.has_value());
      REQUIRE(c->bounds.lo <= r->bounds.lo);
      REQUIRE(r->bounds.hi <= c->bounds.hi);
    }
  }
}
