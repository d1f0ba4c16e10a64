// The sparse metric sets and blame slots every stage passes along (issue 16): an unwritten
// metric reads as the empty value of its layout, equality does not see the difference between
// unwritten and written-empty, copies are deep, and the pipeline leaves untouched metrics
// unwritten (so a thread costs only the metrics it used).
#include "rsched/collect/delta.hpp"

#include <catch2/catch.hpp>

#include <utility>

using namespace rsched;
using metrics::id;

TEST_CASE("a sparse set reads unwritten metrics as empty values of their layout", "[collect]") {
  const metrics::thread_set s;
  for (std::size_t i = 0; i < metrics::thread_set::n; ++i) {
    CHECK_FALSE(s.has(i));
    CHECK(s.at(i).empty());
    CHECK(s.at(i).hist.kind == metrics::entries<metrics::scope::thread>()[i].layout);
  }
  CHECK(s.empty());
  CHECK(s[id::runq_depth].hist.kind == stats::layout::depth);
  CHECK_FALSE(s.has(1)); // reading did not write
}

TEST_CASE("sparse sets compare by value and copy deeply", "[collect]") {
  metrics::thread_set a;
  metrics::thread_set b;
  (void)b.at(0); // written, but empty: equal to unwritten
  CHECK(b.has(0));
  CHECK(a == b);
  a[id::sched_delay].count = 3;
  a[id::sched_delay].hist.add(5000, 3);
  CHECK_FALSE(a == b);
  metrics::thread_set c = a; // deep copy
  c[id::sched_delay].count = 4;
  CHECK(a[id::sched_delay].count == 3);
  c = a;
  CHECK(c == a);
  c.reset(0);
  CHECK_FALSE(c.has(0));
  CHECK(c.empty());
  metrics::thread_set d = std::move(a);
  CHECK(d[id::sched_delay].count == 3);
  metrics::thread_set e;
  metrics::accumulate(e, d);
  metrics::accumulate(e, d);
  CHECK(e[id::sched_delay].count == 6);
  CHECK_FALSE(e.has(1)); // accumulate writes only what the other side has
}

TEST_CASE("deltas leave metrics and blame slots without news unwritten", "[collect]") {
  collect::thread_counters prev;
  prev.m[id::sched_delay].count = 2;
  prev.m[id::sched_delay].hist.add(1000, 2);
  prev.m[id::runq_depth].count = 2;
  prev.m[id::runq_depth].hist.add(1, 2);
  collect::thread_counters cur = prev;
  cur.m[id::sched_delay].count = 3;
  cur.m[id::sched_delay].hist.add(1000);
  const auto d = collect::delta(cur, prev);
  CHECK(d.m.has(0));
  CHECK(d.m[id::sched_delay].count == 1);
  CHECK_FALSE(d.m.has(1)); // runq_depth had nothing new
  CHECK_FALSE(d.blame.slots.allocated());

  // A blame slot with new counts is the only one written.
  cur.blame.slots[3] = {1, {7, 1, {}}, {500, 1, 0}, 0, {}};
  const auto b = collect::delta(cur, prev);
  REQUIRE(b.blame.slots.allocated());
  CHECK(b.blame.slots[3].n == collect::blame_counts{500, 1, 0});
  CHECK(b.blame.slots[0].n.empty());
  // An unallocated side reads as sixteen empty slots.
  const collect::blame_slots none;
  CHECK_FALSE(none.allocated());
  CHECK(none[15].gen == 0);
  CHECK(none == collect::blame_slots{});
}
