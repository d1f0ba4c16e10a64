// Blame in the cumulative-to-delta path: slot-by-slot differences, a slot that took a new culprit
// counted whole, sums of deltas per culprit, and the tracker end to end.
#include "rsched/collect/delta.hpp"

#include <catch2/catch.hpp>

#include <array>
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

namespace {
// A kernel blame record whose slot i holds culprit 100 + i, `waits` waits, last updated at
// epoch `stamp[i]` (gen 0: never used).
rsched_blame kernel_blame(const std::array<std::uint16_t, RSCHED_BLAME_SLOTS> &gen,
                          const std::array<std::uint16_t, RSCHED_BLAME_SLOTS> &stamp,
                          std::uint64_t waits) {
  rsched_blame b{};
  for (std::size_t i = 0; i < RSCHED_BLAME_SLOTS; ++i) {
    b.gen[i] = gen[i];
    b.epoch[i] = stamp[i];
    b.tgid[i] = static_cast<std::uint32_t>(100 + i);
    b.slot[i].wait_ns = gen[i] != 0 ? 10 * waits : 0;
    b.slot[i].waits = gen[i] != 0 ? waits : 0;
  }
  b.idle_waits = waits;
  return b;
}
} // namespace

TEST_CASE("a live read leaves out the blame slots unchanged for three epochs", "[collect][blame]") {
  std::array<std::uint16_t, RSCHED_BLAME_SLOTS> gen{};
  std::array<std::uint16_t, RSCHED_BLAME_SLOTS> stamp{};
  gen[0] = 1;
  stamp[0] = 7; // updated in the read period before epoch 8
  gen[1] = 3;
  stamp[1] = 5; // three epochs before 8: read since
  gen[2] = 1;
  stamp[2] = 6; // two epochs: still copied (one epoch safer than needed)
  gen[3] = 2;
  stamp[3] = 0xFFFF; // before the 16-bit epoch wrapped: 65535 -> 8 is nine epochs
  const auto k = kernel_blame(gen, stamp, 4);

  blame_state all;
  from_abi(k, all); // no epoch: every slot
  CHECK(all.stale == 0);
  CHECK(all.slots[1].n.waits == 4);
  CHECK(all.slots[3].who.tgid == 103);

  blame_state live;
  from_abi(k, live, 8);
  CHECK(live.stale == 0b1010);
  CHECK(live.slots[0].who.tgid == 100);
  CHECK(live.slots[2].n.waits == 4);
  CHECK(live.slots[1] == blame_slot{}); // left out: not copied
  CHECK(live.slots[3] == blame_slot{});
  CHECK(live.idle.waits == 4); // the pseudo-culprits are always read

  // Every used slot stale: no slot array at all.
  std::array<std::uint16_t, RSCHED_BLAME_SLOTS> old{};
  old.fill(1);
  blame_state none;
  from_abi(kernel_blame(gen, old, 4), none, 8);
  CHECK_FALSE(none.slots.allocated());
  CHECK(none.stale == 0b1111);
  CHECK(none.idle.waits == 4);
}

TEST_CASE("the tracker keeps the baseline's copy of stale blame slots", "[collect][blame]") {
  // The deltas of a thread read with stale slots equal those of the same reads copied whole.
  std::array<std::uint16_t, RSCHED_BLAME_SLOTS> gen{};
  std::array<std::uint16_t, RSCHED_BLAME_SLOTS> stamp{};
  gen[0] = 1;
  gen[1] = 1;
  delta_tracker whole;
  delta_tracker partial;
  const auto read = [&](std::uint32_t epoch, std::uint64_t waits0, std::uint64_t waits1) {
    rsched_blame k = kernel_blame(gen, stamp, 0);
    k.slot[0].waits = waits0;
    k.slot[1].waits = waits1;
    thread_sample t;
    t.key = {42, 1};
    t.tgid = 42;
    t.comm = "db";
    thread_sample u = t;
    from_abi(k, t.c.blame);
    from_abi(k, u.c.blame, epoch);
    snapshot a;
    a.full = false;
    a.live = {t};
    snapshot b = a;
    b.live = {u};
    auto da = whole.advance(a);
    auto db = partial.advance(std::move(b));
    REQUIRE(da.threads.size() == db.threads.size());
    for (std::size_t i = 0; i < da.threads.size(); ++i) {
      CHECK(da.threads[i].c.blame == db.threads[i].c.blame);
    }
    return da.threads.empty() ? blame_counts{} : da.threads[0].c.blame.slots[1].n;
  };
  stamp = {1, 1};
  CHECK(read(1, 2, 5).waits == 5); // first read: everything new
  stamp = {2, 1};
  CHECK(read(2, 3, 5).waits == 0);
  stamp = {3, 1};
  CHECK(read(3, 4, 5).waits == 0);
  stamp = {4, 1}; // slot 1 stale from here on: left out, the baseline keeps 5
  CHECK(read(4, 6, 5).waits == 0);
  CHECK(read(5, 7, 5).waits == 0);
  stamp = {6, 6}; // slot 1 counted again: 5 -> 9
  CHECK(read(6, 8, 9).waits == 4);
  stamp = {6, 7};
  gen[1] = 2; // slot 1 given to a new culprit (its counts were read): counted whole
  CHECK(read(7, 8, 3).waits == 3);
}

TEST_CASE("a new baseline never counts blame slots it did not read", "[collect][blame]") {
  delta_tracker tr;
  thread_sample t;
  t.key = {42, 1};
  t.comm = "db";
  t.c.blame.stale = 0b10; // slot 1 left out, slot 0 read
  t.c.blame.slots[0] = slot(1, who(7, "hog"), 100, 1);
  snapshot s1;
  s1.live = {t};
  auto d1 = tr.advance(s1);
  REQUIRE(d1.threads.size() == 1);
  CHECK(d1.threads[0].c.blame.slots[0].n.waits == 1);
  CHECK(d1.threads[0].c.blame.slots[1].n.empty());
  CHECK(d1.threads[0].c.blame.stale == 0);
  // Slot 1 read at last: its cumulative counts have an unknown start (never counted from the
  // baseline), so they are skipped once; the next read counts from there.
  t.c.blame.stale = 0;
  t.c.blame.slots[1] = slot(4, who(8, "cron"), 900, 9);
  snapshot s2;
  s2.full = false;
  s2.live = {t};
  auto d2 = tr.advance(s2);
  CHECK(d2.threads.empty());
  t.c.blame.slots[1].n = {1000, 10, 0};
  snapshot s3;
  s3.full = false;
  s3.live = {t};
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].c.blame.slots[1].n == blame_counts{100, 1, 0});
}
