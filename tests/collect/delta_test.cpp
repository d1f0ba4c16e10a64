// delta_tracker: cumulative snapshots in, per-interval deltas out.
#include "rsched/collect/delta.hpp"

#include <catch2/catch.hpp>

using namespace rsched::collect;
using rsched::metrics::id;

namespace {
thread_sample thread(std::uint32_t tid, std::uint64_t start, std::uint64_t count,
                     std::uint64_t total, const std::string &comm = "t") {
  thread_sample t;
  t.key = {tid, start};
  t.tgid = tid;
  t.comm = comm;
  t.c.m[id::sched_delay].count = count;
  t.c.m[id::sched_delay].total = total;
  t.c.m[id::sched_delay].hist.add(total / (count ? count : 1), count);
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
  CHECK(d1.threads[0].c.m[id::sched_delay].count == 5);
  snapshot s2;
  s2.live = {thread(10, 1, 8, 800)};
  auto d2 = tr.advance(s2);
  REQUIRE(d2.threads.size() == 1);
  CHECK(d2.threads[0].c.m[id::sched_delay].count == 3);
  CHECK(d2.threads[0].c.m[id::sched_delay].total == 300);
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
  CHECK(d2.threads[0].c.m[id::sched_delay].count == 4);
  CHECK(tr.tracked_threads() == 0);
  // a thread born and dead within one interval
  snapshot s3;
  auto brief = thread(11, 2, 3, 30);
  brief.dead = true;
  s3.dead = {brief};
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].c.m[id::sched_delay].count == 3);
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
  CHECK(d2.threads[0].c.m[id::sched_delay].count == 2);
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
  CHECK(d3.threads[0].c.m[id::sched_delay].count == 1); // not 6: the baseline survived
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
  const thread_sample *fresh = find(d2, 10, 99);
  REQUIRE(fresh != nullptr);
  CHECK(fresh->c.m[id::sched_delay].count == 2);
  CHECK(fresh->comm == "new");
  CHECK(find(d2, 10, 1) == nullptr); // old thread had nothing new
}

TEST_CASE("per-CPU and drop counters are diffed", "[collect]") {
  delta_tracker tr;
  snapshot s1;
  cpu_sample c0;
  c0.cpu = 0;
  c0.m[id::cpu_sched_delay].count = 10;
  c0.m[id::cpu_sched_delay].total = 100;
  c0.m[id::cpu_sched_delay].hist.add(10, 10);
  s1.cpus = {c0};
  s1.drops[0] = 3;
  auto d1 = tr.advance(s1);
  REQUIRE(d1.cpus.size() == 1);
  CHECK(d1.drops[0] == 3);
  c0.m[id::cpu_sched_delay].count = 15;
  c0.m[id::cpu_sched_delay].total = 150;
  c0.m[id::cpu_sched_delay].hist.slots[0] = 15;
  snapshot s2;
  s2.cpus = {c0};
  s2.drops[0] = 4;
  auto d2 = tr.advance(s2);
  REQUIRE(d2.cpus.size() == 1);
  CHECK(d2.cpus[0].m[id::cpu_sched_delay].count == 5);
  CHECK(d2.cpus[0].m[id::cpu_sched_delay].hist.total() == 5);
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
  CHECK(d.threads[0].c.m[id::sched_delay].count == 2); // diffed against the old baseline, not zero
  // a full read without it starts the exit grace period
  snapshot full;
  (void)tr.advance(full);
  (void)tr.advance(full);
  CHECK(tr.tracked_threads() == 0);
}

namespace {
// A segment record: the counters at the close of attribution `seg` under (comm, cgroup).
thread_sample segment(std::uint32_t tid, std::uint64_t start, std::uint32_t seg,
                      std::uint64_t count, std::uint64_t total, const std::string &comm,
                      std::uint64_t cgroup = 0) {
  thread_sample t = thread(tid, start, count, total, comm);
  t.segment = true;
  t.seg = seg;
  t.cgroup_id = cgroup;
  return t;
}
thread_sample live(std::uint32_t tid, std::uint64_t start, std::uint32_t seg, std::uint64_t count,
                   std::uint64_t total, const std::string &comm, std::uint64_t cgroup = 0) {
  thread_sample t = thread(tid, start, count, total, comm);
  t.seg = seg;
  t.cgroup_id = cgroup;
  return t;
}
const thread_sample *find(const interval_delta &d, std::uint32_t tid, const std::string &comm,
                          std::uint64_t cgroup = 0) {
  for (const auto &t : d.threads) {
    if (t.key.tid == tid && t.comm == comm && t.cgroup_id == cgroup) {
      return &t;
    }
  }
  return nullptr;
}
// The delay sample count of the row of (tid, comm, cgroup); fails the test when there is none.
std::uint64_t count_of(const interval_delta &d, std::uint32_t tid, const std::string &comm,
                       std::uint64_t cgroup = 0) {
  const thread_sample *t = find(d, tid, comm, cgroup);
  INFO("tid " << tid << " comm " << comm << " cgroup " << cgroup);
  REQUIRE(t != nullptr);
  return t->c.m[id::sched_delay].count;
}
} // namespace

TEST_CASE("a rename splits a thread's delta: before under the old name, after under the new",
          "[collect][segments]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {live(10, 1, 0, 5, 500, "bash")};
  (void)tr.advance(s1);
  snapshot s2; // renamed at 7 samples, 9 now
  s2.live = {live(10, 1, 1, 9, 900, "worker")};
  s2.segments = {segment(10, 1, 1, 7, 700, "bash")};
  auto d = tr.advance(s2);
  REQUIRE(d.threads.size() == 2);
  REQUIRE(find(d, 10, "bash") != nullptr);
  REQUIRE(find(d, 10, "worker") != nullptr);
  CHECK(count_of(d, 10, "bash") == 2);
  CHECK(find(d, 10, "bash")->c.m[id::sched_delay].total == 200);
  CHECK(count_of(d, 10, "worker") == 2);
  // the next read diffs against the live record, not the segment
  snapshot s3;
  s3.live = {live(10, 1, 1, 10, 1000, "worker")};
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].comm == "worker");
  CHECK(d3.threads[0].c.m[id::sched_delay].count == 1);
}

TEST_CASE("a new thread that execs at once: its first samples stay under the parent's name",
          "[collect][segments]") {
  delta_tracker tr;
  snapshot s; // never read before: the first segment is diffed against zero
  s.segments = {segment(20, 2, 1, 1, 40, "sh")};
  s.live = {live(20, 2, 1, 30, 3000, "make")};
  auto d = tr.advance(s);
  CHECK(count_of(d, 20, "sh") == 1);
  CHECK(count_of(d, 20, "make") == 29);
}

TEST_CASE("a segment written after the live read waits for the record that counts it",
          "[collect][segments]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {live(10, 1, 0, 5, 500, "a")};
  // renamed just after its record was read: segment 1 (at 6 samples) arrives with this read
  s1.segments = {segment(10, 1, 1, 6, 600, "a")};
  auto d1 = tr.advance(s1);
  REQUIRE(d1.threads.size() == 1);
  CHECK(d1.threads[0].comm == "a");
  CHECK(d1.threads[0].c.m[id::sched_delay].count == 5);
  snapshot s2;
  s2.live = {live(10, 1, 1, 9, 900, "b")};
  auto d2 = tr.advance(s2);
  CHECK(count_of(d2, 10, "a") == 1);
  CHECK(count_of(d2, 10, "b") == 3);
}

TEST_CASE("renames A -> B -> A within one read give one row per name, totals are unchanged",
          "[collect][segments]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {live(10, 1, 0, 2, 200, "A")};
  (void)tr.advance(s1);
  snapshot s2; // segments out of order in the buffer: applied by number
  s2.segments = {segment(10, 1, 2, 7, 700, "B"), segment(10, 1, 1, 4, 400, "A")};
  s2.live = {live(10, 1, 2, 12, 1200, "A")};
  auto d = tr.advance(s2);
  REQUIRE(d.threads.size() == 2);
  CHECK(count_of(d, 10, "A") == 2 + 5); // 2..4 and 7..12
  CHECK(count_of(d, 10, "B") == 3);     // 4..7
}

TEST_CASE("a cgroup move splits by cgroup, a final record applies its segments",
          "[collect][segments]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {live(30, 3, 0, 1, 100, "svc", 100)};
  (void)tr.advance(s1);
  snapshot s2; // moved to cgroup 200 at 4 samples, then exited at 6
  s2.segments = {segment(30, 3, 1, 4, 400, "svc", 100)};
  auto fin = live(30, 3, 1, 6, 600, "svc", 200);
  fin.dead = true;
  s2.dead = {fin};
  auto d = tr.advance(s2);
  REQUIRE(d.threads.size() == 2);
  CHECK(count_of(d, 30, "svc", 100) == 3);
  CHECK_FALSE(find(d, 30, "svc", 100)->dead);
  CHECK(count_of(d, 30, "svc", 200) == 2);
  CHECK(find(d, 30, "svc", 200)->dead);
  CHECK(tr.tracked_threads() == 0);
}

TEST_CASE("a lost segment (buffer full) files the samples under the new name, none lost",
          "[collect][segments]") {
  delta_tracker tr;
  snapshot s1;
  s1.live = {live(10, 1, 0, 5, 500, "a")};
  (void)tr.advance(s1);
  snapshot s2; // segment 1 was dropped by the kernel side: the record says 1 closed
  s2.live = {live(10, 1, 1, 9, 900, "b")};
  auto d = tr.advance(s2);
  REQUIRE(d.threads.size() == 1);
  CHECK(d.threads[0].comm == "b");
  CHECK(d.threads[0].c.m[id::sched_delay].count == 4);
}

TEST_CASE("segments of a thread no read lists any more are counted before they are forgotten",
          "[collect][segments]") {
  delta_tracker tr(2);
  snapshot s1;
  s1.live = {live(10, 1, 0, 5, 500, "a")};
  (void)tr.advance(s1);
  snapshot s2; // renamed, then its final record was lost (graveyard full)
  s2.full = true;
  s2.segments = {segment(10, 1, 1, 8, 800, "a")};
  auto d2 = tr.advance(s2);
  CHECK(d2.threads.empty());
  snapshot s3;
  s3.full = true;
  auto d3 = tr.advance(s3);
  REQUIRE(d3.threads.size() == 1);
  CHECK(d3.threads[0].comm == "a");
  CHECK(d3.threads[0].c.m[id::sched_delay].count == 3);
}

TEST_CASE("advance taking the snapshot gives the same deltas as advance copying it", "[collect]") {
  // The recorder moves each read's counters into the baselines; the deltas must not change
  // (a moved-from baseline or a partial read that relies on a kept baseline would show here).
  delta_tracker copying;
  delta_tracker moving;
  const std::vector<std::vector<thread_sample>> reads = {
      {thread(10, 1, 5, 500), thread(11, 1, 1, 10)},
      {thread(10, 1, 8, 800)}, // 11 unchanged: not listed (a partial read)
      {thread(10, 1, 8, 800), thread(11, 1, 4, 70), thread(12, 3, 2, 20)},
      {thread(11, 1, 9, 200), thread(12, 3, 2, 20)},
  };
  for (const auto &live : reads) {
    snapshot s;
    s.full = false;
    s.live = live;
    const auto want = copying.advance(s);
    snapshot moved = s;
    const auto got = moving.advance(std::move(moved));
    REQUIRE(got.threads.size() == want.threads.size());
    for (std::size_t i = 0; i < want.threads.size(); ++i) {
      CHECK(got.threads[i].key == want.threads[i].key);
      CHECK(got.threads[i].c == want.threads[i].c);
    }
  }
  CHECK(moving.tracked_threads() == copying.tracked_threads());
}
