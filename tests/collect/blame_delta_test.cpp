// Blame in the cumulative-to-delta path: slot-by-slot differences, a slot that took a new culprit
// counted whole, sums of deltas per culprit, and the tracker end to end.
#include "rsched/collect/delta.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace rsched::collect;

namespace {

culprit who(std::uint32_t tgid, const char *comm, std::uint64_t cgroup = 1) {
  culprit c;
  c.tgid = tgid;
  c.cgroup_id = cgroup;
  std::memcpy(c.comm.data(), comm, std::min(std::strlen(comm), c.comm.size()));
  return c;
}

blame_slot slot(std::uint32_t gen, const culprit &c, std::uint64_t ns, std::uint64_t waits,
                std::uint64_t preempts = 0) {
  return {gen, c, {ns, waits, preempts}, 0, {}};
}

} // namespace

TEST_CASE("blame delta: slot by slot, a new occupant counts whole", "[collect][blame]") {
  blame_state prev;
  prev.slots[0] = slot(1, who(10, "hog"), 1000, 2, 1);
  prev.slots[1] = slot(1, who(11, "old"), 500, 1);
  prev.idle = {300, 3, 0};
  prev.unknown = {7, 1, 0};
  blame_state cur = prev;
  cur.slots[0].n = {1600, 3, 4};
  cur.slots[1] = slot(2, who(12, "new"), 250, 1); // slot 1 went to another culprit
  cur.idle = {310, 4, 0};
  const auto d = delta(cur, prev);
  CHECK(d.slots[0].who == who(10, "hog"));
  CHECK(d.slots[0].n == blame_counts{600, 1, 3});
  CHECK(d.slots[1].who == who(12, "new"));
  CHECK(d.slots[1].n == blame_counts{250, 1, 0});
  CHECK(d.idle == blame_counts{10, 1, 0});
  CHECK(d.unknown.empty());
  CHECK(d.slots[2].n.empty());
  CHECK_FALSE(d.empty());
  CHECK(delta(prev, prev).empty());
}

TEST_CASE("blame accumulate: one slot per culprit, the rest <other>", "[collect][blame]") {
  blame_state into;
  blame_state a;
  a.slots[0] = slot(1, who(1, "x"), 100, 1);
  a.slots[5] = slot(3, who(2, "y"), 50, 1, 2);
  a.other = {5, 1, 0};
  accumulate(into, a);
  blame_state b;
  b.slots[2] = slot(9, who(2, "y"), 25, 1); // the same culprit in another slot, another gen
  b.idle = {4, 1, 0};
  accumulate(into, b);
  std::uint64_t y = 0;
  for (const auto &s : into.slots) {
    if (s.who == who(2, "y")) {
      y += s.n.wait_ns;
    }
  }
  CHECK(y == 75);
  CHECK(into.other == blame_counts{5, 1, 0});
  CHECK(into.idle == blame_counts{4, 1, 0});
  // Sixteen slots full: a seventeenth culprit goes to <other>, nothing is lost.
  blame_state full;
  for (std::uint32_t i = 0; i < full.slots.size(); ++i) {
    full.slots[i] = slot(1, who(100 + i, "p"), 10, 1);
  }
  blame_state extra;
  extra.slots[0] = slot(1, who(999, "late"), 7, 1, 1);
  accumulate(full, extra);
  CHECK(full.other == blame_counts{7, 1, 1});
}

TEST_CASE("the tracker carries blame with the thread's other deltas", "[collect][blame]") {
  delta_tracker tr;
  snapshot s1;
  thread_sample t;
  t.key = {42, 1};
  t.tgid = 42;
  t.comm = "db";
  t.c.blame.slots[0] = slot(1, who(7, "hog"), 1000, 1);
  s1.live = {t};
  auto d1 = tr.advance(s1);
  REQUIRE(d1.threads.size() == 1);
  CHECK(d1.threads[0].c.blame.slots[0].n.wait_ns == 1000);
  snapshot s2;
  t.c.blame.slots[0].n = {1500, 2, 0};
  s2.full = false;
  s2.live = {t};
  auto d2 = tr.advance(s2);
  REQUIRE(d2.threads.size() == 1);
  CHECK(d2.threads[0].c.blame.slots[0].n == blame_counts{500, 1, 0});
  // Blame alone (a preemption with no delay sample yet) is a row.
  snapshot s3;
  t.c.blame.slots[0].n.preempts = 1;
  s3.full = false;
  s3.live = {t};
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].c.blame.slots[0].n == blame_counts{0, 0, 1});
}
