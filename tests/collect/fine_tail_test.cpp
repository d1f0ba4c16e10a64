// Issue 36: a thread's scheduling delay keeps a fine tail (latency_fine slots from 512 us,
// 32-bit counters in the kernel) beside its latency histogram. Its delta is taken modulo 2^32,
// a value without new tail samples holds none, sums keep it only while both sides are known at
// the fine precision, and the fine histogram it makes coarsens into the value's own.
#include "rsched/collect/delta.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"

#include <catch2/catch.hpp>

#include <random>

using namespace rsched;

namespace {

// A value of `n` random delays up to `max_ns`, counted as the kernel counts them: the latency
// slot always, the fine tail slot from 512 us.
metrics::value delays(std::mt19937_64 &rng, int n, std::uint64_t max_ns) {
  metrics::value v;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t ns = rng() % max_ns;
    v.add_sample(ns);
    const std::size_t f = stats::slot_of(stats::layout::latency_fine, ns);
    if (f > RSCHED_HIST_LINEAR_SLOTS) {
      if (!v.tail) {
        v.tail = base::make_cached<metrics::fine_tail>();
      }
      v.tail->slots[f - RSCHED_HIST_LINEAR_SLOTS - 1] += 1;
    }
  }
  return v;
}

} // namespace

TEST_CASE("a fine tail's delta is taken modulo 2^32, and a delta without tail samples has none",
          "[collect][fine]") {
  metrics::value prev;
  prev.count = 10;
  prev.hist.slots[60] = 3;
  prev.tail = base::make_cached<metrics::fine_tail>();
  prev.tail->slots[9 * 8] = 0xFFFFFFFEU; // fine slot 123: in latency slot 60
  prev.tail->slots[9 * 8 + 1] = 1;
  metrics::value cur = prev;
  cur.count = 17;
  cur.hist.slots[60] = 10;
  cur.tail->slots[9 * 8] = 5; // wrapped: 7 more
  metrics::value d;
  metrics::delta_into(d, cur, prev);
  REQUIRE(d.tail != nullptr);
  CHECK(d.tail->slots[9 * 8] == 7);
  CHECK(d.tail->slots[9 * 8 + 1] == 0);
  CHECK(d.hist.slots[60] == 7);
  // In place over the baseline, as the tracker does: the same.
  metrics::value baseline = prev;
  metrics::delta_into(baseline, cur, baseline);
  CHECK(baseline == d);
  // Nothing new from 512 us up: no tail.
  metrics::value later = cur;
  later.count += 2;
  later.hist.slots[3] += 2;
  metrics::delta_into(d, later, cur);
  CHECK(d.tail == nullptr);
  CHECK(d.hist.slots[3] == 2);
  // Counters reset (a bucket went down): the delta is cur, tail and all.
  metrics::value fresh;
  fresh.count = 1;
  fresh.hist.slots[52] = 1;
  fresh.tail = base::make_cached<metrics::fine_tail>();
  fresh.tail->slots[8] = 1;
  metrics::delta_into(d, fresh, cur);
  REQUIRE(d.tail != nullptr);
  CHECK(d.tail->slots[8] == 1);
  CHECK(d.tail->slots[9 * 8] == 0);
}

TEST_CASE("a fine value's latency_fine histogram coarsens into its own, and sums stay fine only "
          "while both sides are",
          "[collect][fine]") {
  std::mt19937_64 rng(36);
  for (int round = 0; round < 200; ++round) {
    metrics::value a = delays(rng, static_cast<int>(rng() % 50), 20'000'000);
    const metrics::value b = delays(rng, static_cast<int>(rng() % 50), 20'000'000);
    REQUIRE(metrics::has_fine(a));
    CHECK(stats::coarsen(metrics::fine_of(a)) == a.hist);
    std::vector<std::uint8_t> blob{9, 9, 9};
    metrics::encode_fine_into(a, blob); // the writer's encoding, from the spans and the tail
    CHECK(blob == stats::encode(metrics::fine_of(a)));
    stats::fine_histogram sum = metrics::fine_of(a);
    stats::merge_into(sum, metrics::fine_of(b));
    metrics::add(a, b);
    REQUIRE(metrics::has_fine(a));
    CHECK(metrics::fine_of(a) == sum);
    CHECK(stats::coarsen(metrics::fine_of(a)) == a.hist);
  }
  // A value with latency counts from 512 us and no tail (not known finer) makes the sum coarse.
  metrics::value fine = delays(rng, 100, 20'000'000);
  REQUIRE(fine.tail != nullptr);
  metrics::value coarse;
  coarse.add_sample(3'000'000);
  CHECK(!metrics::has_fine(coarse));
  metrics::value s = fine;
  metrics::add(s, coarse);
  CHECK(s.tail == nullptr);
  CHECK(!metrics::has_fine(s));
  metrics::value t = coarse;
  metrics::add(t, fine);
  CHECK(t.tail == nullptr);
  CHECK(t.hist == s.hist);
  // Samples below 512 us only: fine without a tail, and a sum with a fine one takes its tail.
  metrics::value low;
  low.add_sample(42'000);
  CHECK(metrics::has_fine(low));
  metrics::add(low, fine);
  REQUIRE(low.tail != nullptr);
  CHECK(*low.tail == *fine.tail);
}
