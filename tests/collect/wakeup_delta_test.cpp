// The wakeup group in the cumulative-to-delta path: the kernel's slots and pseudo-wakers read
// from the ABI and from a compact record, slot-by-slot differences (a slot that took a new waker
// counted whole), sums of deltas per waker, and the tracker end to end.
#include "rsched/collect/delta.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace rsched::collect;

namespace {

void set_slot(rsched_wakeup &w, unsigned i, std::uint16_t gen, std::uint32_t tgid, const char *comm,
              std::uint64_t s_ns, std::uint64_t s_n, std::uint64_t d_ns = 0,
              std::uint64_t d_n = 0) {
  w.gen[i] = gen;
  w.tgid[i] = tgid;
  w.slot[i].cgroup_id = 5;
  std::memset(w.slot[i].comm, 0, sizeof(w.slot[i].comm));
  std::memcpy(w.slot[i].comm, comm, std::strlen(comm));
  w.slot[i].n = {};
  w.slot[i].n.sleep_ns[RSCHED_SLEEP_S] = s_ns;
  w.slot[i].n.count[RSCHED_SLEEP_S] = s_n;
  w.slot[i].n.sleep_ns[RSCHED_SLEEP_D] = d_ns;
  w.slot[i].n.count[RSCHED_SLEEP_D] = d_n;
}

const wakeup_entry *find(const wakeup_state &s, std::uint8_t kind, std::uint32_t tgid) {
  for (const auto &e : s.e) {
    if (e.who.kind == kind && e.who.tgid == tgid) {
      return &e;
    }
  }
  return nullptr;
}

} // namespace

TEST_CASE("wakeup: slots and pseudo-wakers from the ABI; deltas; a new occupant counts whole",
          "[collect][wakeup]") {
  rsched_wakeup a{};
  set_slot(a, 0, 1, 100, "writer", 1'000, 2, 50, 1);
  set_slot(a, 3, 1, 200, "other", 10, 1);
  a.pseudo[RSCHED_WAKER_SOFTIRQ].sleep_ns[RSCHED_SLEEP_D] = 7;
  a.pseudo[RSCHED_WAKER_SOFTIRQ].count[RSCHED_SLEEP_D] = 1;
  wakeup_state s0;
  from_abi(a, s0);
  REQUIRE(s0.e.size() == 3); // two slots in use, one pseudo-waker with counts
  const auto *soft = find(s0, 1 + RSCHED_WAKER_SOFTIRQ, 0);
  REQUIRE(soft != nullptr);
  CHECK(soft->n.sleep_ns[RSCHED_SLEEP_D] == 7);

  rsched_wakeup b = a;
  set_slot(b, 0, 1, 100, "writer", 1'600, 5, 50, 1); // same occupant: +600 ns, +3
  set_slot(b, 3, 2, 300, "newcomer", 40, 1);         // slot 3 given to a new waker
  b.pseudo[RSCHED_WAKER_OTHER].sleep_ns[RSCHED_SLEEP_S] = 9;
  b.pseudo[RSCHED_WAKER_OTHER].count[RSCHED_SLEEP_S] = 1;
  wakeup_state s1;
  from_abi(b, s1);
  const wakeup_state d = delta(s1, s0);
  REQUIRE(d.e.size() == 3);
  const auto *w = find(d, 0, 100);
  REQUIRE(w != nullptr);
  CHECK(w->n.sleep_ns[RSCHED_SLEEP_S] == 600);
  CHECK(w->n.count[RSCHED_SLEEP_S] == 3);
  CHECK(w->n.count[RSCHED_SLEEP_D] == 0);
  const auto *n = find(d, 0, 300);
  REQUIRE(n != nullptr);
  CHECK(n->n.sleep_ns[RSCHED_SLEEP_S] == 40); // whole: a new occupant started from 0
  CHECK(find(d, 0, 200) == nullptr);
  CHECK(find(d, 1 + RSCHED_WAKER_SOFTIRQ, 0) == nullptr); // unchanged
  const auto *o = find(d, 1 + RSCHED_WAKER_OTHER, 0);
  REQUIRE(o != nullptr);
  CHECK(o->n.count[RSCHED_SLEEP_S] == 1);

  // Sums per waker, whatever slot it had.
  wakeup_state sum;
  accumulate(sum, d);
  accumulate(sum, d);
  REQUIRE(sum.e.size() == 3);
  CHECK(find(sum, 0, 100)->n.sleep_ns[RSCHED_SLEEP_S] == 1'200);
}

TEST_CASE("wakeup: the compact record carries the group after blame; the tracker's deltas",
          "[collect][wakeup]") {
  const std::uint32_t groups = RSCHED_G_LATENCY | RSCHED_G_BLAME | RSCHED_G_WAKEUP;
  const std::size_t size = rsched_iter_record_size(groups);
  CHECK(size == rsched_iter_record_size(RSCHED_G_LATENCY | RSCHED_G_BLAME) + sizeof(rsched_wakeup));
  const auto record = [&](std::uint64_t ns, std::uint64_t n) {
    std::vector<char> bytes(size, 0);
    rsched_task_ident id{};
    id.tid = 42;
    id.tgid = 42;
    id.start_time = 9;
    std::memcpy(id.comm, "reader", 6);
    std::memcpy(bytes.data(), &id, sizeof(id));
    rsched_wakeup w{};
    set_slot(w, 2, 1, 100, "writer", ns, n);
    std::memcpy(bytes.data() + size - sizeof(w), &w, sizeof(w));
    return bytes;
  };
  std::vector<thread_sample> got;
  REQUIRE(parse_iter_records(record(500, 2), groups, got).ok());
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].c.wakeup.e.size() == 1);
  CHECK(got[0].c.wakeup.e[0].index == 2);
  CHECK(got[0].c.wakeup.e[0].n.sleep_ns[RSCHED_SLEEP_S] == 500);

  delta_tracker tr;
  snapshot s1;
  s1.full = false;
  s1.live = got;
  auto d1 = tr.advance(s1);
  REQUIRE(d1.threads.size() == 1);
  CHECK(d1.threads[0].c.wakeup.e.at(0).n.count[RSCHED_SLEEP_S] == 2);
  got.clear();
  REQUIRE(parse_iter_records(record(800, 3), groups, got).ok());
  snapshot s2;
  s2.full = false;
  s2.live = got;
  auto d2 = tr.advance(s2);
  REQUIRE(d2.threads.size() == 1);
  CHECK(d2.threads[0].c.wakeup.e.at(0).n.sleep_ns[RSCHED_SLEEP_S] == 300);
  CHECK(d2.threads[0].c.wakeup.e.at(0).n.count[RSCHED_SLEEP_S] == 1);
}

TEST_CASE("wakeup: D sleeps' stacks by slot, a new occupant counted whole, <other> kept",
          "[collect][wakeup]") {
  rsched_wakeup a{};
  a.stack_gen[0] = 1;
  a.stack_id[0] = 7;
  a.stack_ns[0] = 100;
  a.stack_count[0] = 2;
  a.other_stack_ns = 5;
  a.other_stack_count = 1;
  wakeup_state s0;
  from_abi(a, s0);
  REQUIRE(s0.stacks.size() == 2);
  rsched_wakeup b = a;
  b.stack_ns[0] = 160; // same stack: +60, +1
  b.stack_count[0] = 3;
  b.stack_gen[1] = 1; // a new one
  b.stack_id[1] = 9;
  b.stack_ns[1] = 40;
  b.stack_count[1] = 1;
  b.stack_gen[0] = 1;
  wakeup_state s1;
  from_abi(b, s1);
  wakeup_state d = delta(s1, s0);
  REQUIRE(d.stacks.size() == 2);
  CHECK(d.stacks[0].stack == 7);
  CHECK(d.stacks[0].sleep_ns == 60);
  CHECK(d.stacks[0].count == 1);
  CHECK(d.stacks[1].stack == 9);
  CHECK(d.stacks[1].sleep_ns == 40);
  // Slot 0 given to another stack: its counts are whole.
  rsched_wakeup c = b;
  c.stack_gen[0] = 2;
  c.stack_id[0] = 11;
  c.stack_ns[0] = 30;
  c.stack_count[0] = 1;
  wakeup_state s2;
  from_abi(c, s2);
  d = delta(s2, s1);
  REQUIRE(d.stacks.size() == 1);
  CHECK(d.stacks[0].stack == 11);
  CHECK(d.stacks[0].sleep_ns == 30);
  // Sums per stack.
  wakeup_state sum;
  accumulate(sum, d);
  accumulate(sum, d);
  REQUIRE(sum.stacks.size() == 1);
  CHECK(sum.stacks[0].sleep_ns == 60);
  CHECK(!sum.empty());
}
