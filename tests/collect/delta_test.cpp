// delta_tracker: cumulative snapshots in, per-interval deltas out.
#include "rsched/collect/delta.hpp"

#include <catch2/catch.hpp>

using namespace rsched::collect;

namespace {
thread_sample thread(std::uint32_t tid, std::uint64_t start, std::uint64_t count,
                     std::uint64_t total, const std::string &comm = "t") {
  thread_sample t;
  t.key = {tid, start};
  t.tgid = tid;
  t.comm = comm;
  t.c.delay.count = count;
  t.c.delay.total_ns = total;
  t.c.delay.hist.add(total / (count ? count : 1), count);
  return t;
}
const thread_sample *find(const interval_delta &d, std::uint32_t tid, std::uint64_t start) {
  for (const auto &t : d.threads) {
    if (t.key.tid == tid && t.key.start_time == start) {
      return &t;
    }
  }
  return nullptr;
}
} // namespace

TEST_CASE("first read diffs against zero, later reads against the previous one", "[collect]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {thread(10, 1, 5, 500)};
  auto d1 = tr.advance(s1);
  REQUIRE(d1.threads.size() == 1);
  CHECK(d1.threads[0].c.delay.count == 5);
  snapshot s2;
  s2.live = {thread(10, 1, 8, 800)};
  auto d2 = tr.advance(s2);
  REQUIRE(d2.threads.size() == 1);
  CHECK(d2.threads[0].c.delay.count == 3);
  CHECK(d2.threads[0].c.delay.total_ns == 300);
  // unchanged thread: no row
  auto d3 = tr.advance(s2);
  CHECK(d3.threads.empty());
}

TEST_CASE("a thread that exits keeps its last partial interval, counted once", "[collect]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {thread(10, 1, 5, 500)};
  (void)tr.advance(s1);
  snapshot s2; // exited: final record in the graveyard, gone from the live list
  auto dead = thread(10, 1, 9, 900);
  dead.dead = true;
  s2.dead = {dead};
  auto d2 = tr.advance(s2);
  REQUIRE(d2.threads.size() == 1);
  CHECK(d2.threads[0].dead);
  CHECK(d2.threads[0].c.delay.count == 4);
  CHECK(tr.tracked_threads() == 0);
  // a thread born and dead within one interval
  snapshot s3;
  auto brief = thread(11, 2, 3, 30);
  brief.dead = true;
  s3.dead = {brief};
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].c.delay.count == 3);
}

TEST_CASE("a zombie listed both live and dead is counted once", "[collect]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {thread(10, 1, 5, 500)};
  (void)tr.advance(s1);
  snapshot s2;
  auto dead = thread(10, 1, 7, 700);
  dead.dead = true;
  s2.dead = {dead};
  s2.live = {thread(10, 1, 7, 700)};
  auto d2 = tr.advance(s2);
  REQUIRE(d2.threads.size() == 1);
  CHECK(d2.threads[0].c.delay.count == 2);
}

TEST_CASE("a thread missing from one read keeps its baseline until buried", "[collect]") {
  delta_tracker tr(4);
  snapshot s1;
  s1.live = {thread(10, 1, 5, 500)};
  (void)tr.advance(s1);
  snapshot empty;
  (void)tr.advance(empty); // exiting: neither live nor buried yet
  snapshot s3;
  auto dead = thread(10, 1, 6, 600);
  dead.dead = true;
  s3.dead = {dead};
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].c.delay.count == 1); // not 6: the baseline survived
  // after the grace period the baseline is forgotten
  delta_tracker tr2(2);
  (void)tr2.advance(s1);
  (void)tr2.advance(empty);
  (void)tr2.advance(empty);
  CHECK(tr2.tracked_threads() == 0);
}

TEST_CASE("tid reuse is a different thread", "[collect]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {thread(10, 1, 50, 5000, "old")};
  (void)tr.advance(s1);
  snapshot s2;
  auto dead = thread(10, 1, 50, 5000, "old");
  dead.dead = true;
  s2.dead = {dead};
  s2.live = {thread(10, 99, 2, 20, "new")};
  auto d2 = tr.advance(s2);
  REQUIRE(find(d2, 10, 99) != nullptr);
  CHECK(find(d2, 10, 99)->c.delay.count == 2);
  CHECK(find(d2, 10, 99)->comm == "new");
  CHECK(find(d2, 10, 1) == nullptr); // old thread had nothing new
}

TEST_CASE("per-CPU and drop counters are diffed", "[collect]") {
  delta_tracker tr;
  snapshot s1;
  cpu_sample c0;
  c0.cpu = 0;
  c0.delay.count = 10;
  c0.delay.total_ns = 100;
  c0.delay.hist.add(10, 10);
  s1.cpus = {c0};
  s1.drops[0] = 3;
  auto d1 = tr.advance(s1);
  REQUIRE(d1.cpus.size() == 1);
  CHECK(d1.drops[0] == 3);
  c0.delay.count = 15;
  c0.delay.total_ns = 150;
  c0.delay.hist.slots[0] = 15;
  snapshot s2;
  s2.cpus = {c0};
  s2.drops[0] = 4;
  auto d2 = tr.advance(s2);
  REQUIRE(d2.cpus.size() == 1);
  CHECK(d2.cpus[0].delay.count == 5);
  CHECK(d2.cpus[0].delay.hist.total() == 5);
  CHECK(d2.drops[0] == 1);
}

TEST_CASE("a thread absent from partial reads keeps its baseline indefinitely", "[collect]") {
  delta_tracker tr(2);
  snapshot s1;
  s1.live = {thread(10, 1, 5, 500)};
  (void)tr.advance(s1);
  snapshot partial; // nothing changed
  partial.full = false;
  for (int i = 0; i < 10; ++i) {
    CHECK(tr.advance(partial).threads.empty());
  }
  CHECK(tr.tracked_threads() == 1);
  snapshot s2;
  s2.full = false;
  s2.live = {thread(10, 1, 7, 700)};
  auto d = tr.advance(s2);
  REQUIRE(d.threads.size() == 1);
  CHECK(d.threads[0].c.delay.count == 2); // diffed against the old baseline, not zero
  // a full read without it starts the exit grace period
  snapshot full;
  (void)tr.advance(full);
  (void)tr.advance(full);
  CHECK(tr.tracked_threads() == 0);
}
