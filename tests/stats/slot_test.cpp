// The slot function (shared with BPF) and its inverse, bucket_bounds, at every slot edge.
#include "rsched/stats/histogram.hpp"

#include <catch2/catch.hpp>

#include <limits>
#include <random>

using namespace rsched::stats;

TEST_CASE("latency layout matches the documented bucket table", "[stats]") {
  CHECK(bucket_bounds(layout::latency, 0).lo == 0);
  CHECK(bucket_bounds(layout::latency, 0).hi == 9'999);
  CHECK(bucket_bounds(layout::latency, 49).lo == 490'000);
  CHECK(bucket_bounds(layout::latency, 49).hi == 499'999);
  CHECK(bucket_bounds(layout::latency, 50).lo == 500'000);
  CHECK(bucket_bounds(layout::latency, 50).hi == 511'999);
  CHECK(bucket_bounds(layout::latency, 51).lo == 512'000);
  CHECK(bucket_bounds(layout::latency, 51).hi == 1'023'999);
  // upstream's old cap (2^21 us) is now an ordinary bucket
  CHECK(bucket_bounds(layout::latency, 63).lo == (1ULL << 21) * 1000);
  CHECK(bucket_bounds(layout::latency, 63).hi == (1ULL << 22) * 1000 - 1);
  // 10 s (max kept delay) and 1 h (max kept sleep/idle) are inside bounded buckets
  CHECK(slot_of(layout::latency, 10'000'000'000ULL) < RSCHED_HIST_SLOTS - 1);
  CHECK(slot_of(layout::latency, 3'600'000'000'000ULL) < RSCHED_HIST_SLOTS - 1);
  const auto top = bucket_bounds(layout::latency, RSCHED_HIST_SLOTS - 1);
  CHECK(top.open_ended());
  CHECK(top.lo == (1ULL << 32) * 1000);
  CHECK(top.lo >= 3'600'000'000'000ULL);
  CHECK(bucket_bounds(layout::latency, RSCHED_HIST_SLOTS).hi == 0); // out of range
}

TEST_CASE("every slot edge maps to its own slot", "[stats]") {
  for (auto l :
       {layout::latency, layout::depth, layout::count, layout::log2, layout::latency_fine}) {
    const std::size_t n = slot_count(l);
    std::uint64_t expected_lo = 0;
    for (std::size_t s = 0; s < n; ++s) {
      const bucket b = bucket_bounds(l, s);
      INFO("layout " << int(l) << " slot " << s << " [" << b.lo << ", " << b.hi << "]");
      CHECK(b.lo == expected_lo); // buckets tile the number line without gaps
      CHECK(b.lo <= b.hi);
      CHECK(slot_of(l, b.lo) == s);
      CHECK(slot_of(l, b.hi) == s);
      if (b.lo > 0) {
        CHECK(slot_of(l, b.lo - 1) == s - 1);
      }
      if (!b.open_ended()) {
        CHECK(slot_of(l, b.hi + 1) == s + 1);
        expected_lo = b.hi + 1;
      } else {
        CHECK(s == n - 1);
        CHECK(slot_of(l, std::numeric_limits<std::uint64_t>::max()) == s);
      }
    }
  }
}

TEST_CASE("lo(slot(v)) <= v <= hi(slot(v)) for random values of every magnitude", "[stats]") {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200'000; ++i) {
    const unsigned shift = static_cast<unsigned>(rng() % 64);
    const std::uint64_t v = rng() >> shift;
    for (auto l :
         {layout::latency, layout::depth, layout::count, layout::log2, layout::latency_fine}) {
      const bucket b = bucket_bounds(l, slot_of(l, v));
      REQUIRE(b.lo <= v);
      REQUIRE(v <= b.hi);
    }
  }
}

namespace {

// The latency slot as it was computed before it went through the fine slot function: two
// divisions (upstream's form). rsched_hist_slot must agree with it everywhere.
std::uint32_t plain_hist_slot(std::uint64_t ns) {
  const std::uint64_t us = ns / 1000;
  if (us < 500) {
    return static_cast<std::uint32_t>(us / RSCHED_HIST_LINEAR_STEP_US);
  }
  if (us < 512) {
    return RSCHED_HIST_LINEAR_SLOTS;
  }
  std::uint32_t log2 = 0;
  for (std::uint64_t v = us; v > 1; v >>= 1) {
    ++log2;
  }
  const std::uint32_t slot = log2 + RSCHED_HIST_LOG2_BASE_SLOT;
  return slot < RSCHED_HIST_SLOTS - 1 ? slot : RSCHED_HIST_SLOTS - 1;
}

} // namespace

TEST_CASE("the division-free latency slot agrees with the plain division form", "[stats]") {
  // every ns up to 2.1 ms (the linear part, its 500-512 us edge and two octaves), every
  // bucket edge of both latency layouts +-1, the top of u64, and random values of every size
  for (std::uint64_t ns = 0; ns <= 2'100'000; ++ns) {
    REQUIRE(rsched_hist_slot(ns) == plain_hist_slot(ns));
  }
  for (auto l : {layout::latency, layout::latency_fine}) {
    for (std::size_t s = 0; s < slot_count(l); ++s) {
      const bucket b = bucket_bounds(l, s);
      for (const std::uint64_t v : {b.lo - (b.lo > 0 ? 1 : 0), b.lo, b.lo + 1, b.hi - 1, b.hi,
                                    b.open_ended() ? b.hi : b.hi + 1}) {
        INFO("layout " << int(l) << " slot " << s << " value " << v);
        REQUIRE(rsched_hist_slot(v) == plain_hist_slot(v));
      }
    }
  }
  REQUIRE(rsched_hist_slot(std::numeric_limits<std::uint64_t>::max()) == RSCHED_HIST_SLOTS - 1);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1'000'000; ++i) {
    const std::uint64_t v = rng() >> (rng() % 64);
    REQUIRE(rsched_hist_slot(v) == plain_hist_slot(v));
  }
}

TEST_CASE("log2 helper agrees with a plain loop", "[stats]") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 100'000; ++i) {
    const std::uint64_t v = (rng() >> (rng() % 64)) | 1;
    unsigned expect = 0;
    for (std::uint64_t x = v; x > 1; x >>= 1) {
      ++expect;
    }
    REQUIRE(rsched_log2_u64(v) == expect);
  }
}

TEST_CASE("ABI structs have the layout the BPF side uses", "[stats][abi]") {
  STATIC_REQUIRE(sizeof(rsched_task_record) == 6992);
  STATIC_REQUIRE(sizeof(rsched_task_state) == 6944); // 6168 + the fine tail (issue 36) + I/O (50)
  STATIC_REQUIRE(sizeof(rsched_fine_tail) == 744);
  STATIC_REQUIRE(offsetof(rsched_task_state, depth) ==
                 offsetof(rsched_task_state, delay) + sizeof(rsched_delay_stats));
  // the fine tail after wakeup: the service's parts first (issue 49)
  STATIC_REQUIRE(offsetof(rsched_task_state, delay_tail) ==
                 offsetof(rsched_task_state, wakeup) + sizeof(rsched_wakeup));
  STATIC_REQUIRE(offsetof(rsched_task_record, st) == sizeof(rsched_task_ident));
  STATIC_REQUIRE(sizeof(rsched_cpu_stats) % 8 == 0); // per-CPU values are 8-byte strided
}
