// The interval assembly: interval_acc adds up ticks, to_row makes the store's rows (one per
// thread and attribution) with the registry's per-second metrics.
#include "rsched/record/interval.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <map>
#include <string>
#include <tuple>

using namespace rsched;
using namespace rsched::record;
using metric = rsched::metrics::id;

namespace {
collect::thread_sample sample(std::uint32_t tid, const std::string &comm, std::uint64_t cgroup,
                              std::uint64_t count) {
  collect::thread_sample t;
  t.key = {tid, 7};
  t.tgid = tid;
  t.comm = comm;
  t.cgroup_id = cgroup;
  auto &d = t.c.m[metric::sched_delay];
  d.count = count;
  d.total = count * 1000;
  d.hist.add(1000, count);
  return t;
}

std::string path_of(std::uint64_t id) {
  return "/cg" + std::to_string(id);
}
} // namespace

TEST_CASE("A renamed thread has a row per name, ticks of one name add up", "[record]") {
  interval_acc acc;
  collect::interval_delta t1;
  t1.threads = {sample(5, "bash", 1, 2), sample(5, "make", 1, 3)};
  acc.add_tick(t1, false);
  collect::interval_delta t2;
  t2.threads = {sample(5, "make", 1, 4)};
  acc.add_tick(t2, false);
  const auto row = to_row(acc, path_of, {});
  REQUIRE(row.threads.size() == 2);
  std::map<std::string, std::uint64_t> by_comm;
  for (const auto &r : row.threads) {
    CHECK(r.tid == 5);
    by_comm[r.comm] = r.m[metric::sched_delay].count;
    CHECK(r.m[metric::sched_delay].total == r.m[metric::sched_delay].count * 1000);
    CHECK(r.m[metric::sched_delay].hist.total() == r.m[metric::sched_delay].count);
  }
  CHECK(by_comm["bash"] == 2);
  CHECK(by_comm["make"] == 7);
}

TEST_CASE("Attributions whose cgroups resolve to one path are one row (the store's key)",
          "[record]") {
  interval_acc acc;
  collect::interval_delta t;
  // cgroups 2 and 3 are gone (both unknown: ""), 4 is known; thread 6 is separate
  t.threads = {sample(5, "svc", 2, 1), sample(5, "svc", 3, 2), sample(5, "svc", 4, 4),
               sample(6, "svc", 2, 8)};
  acc.add_tick(t, false);
  const auto row = to_row(
      acc, [](std::uint64_t id) { return id == 4 ? std::string("/known") : std::string(); }, {});
  REQUIRE(row.threads.size() == 3);
  std::map<std::pair<std::uint32_t, std::string>, std::uint64_t> got;
  for (const auto &r : row.threads) {
    got[{r.tid, r.cgroup}] = r.m[metric::sched_delay].count;
  }
  CHECK(got[{5, ""}] == 3);
  CHECK(got[{5, "/known"}] == 4);
  CHECK(got[{6, ""}] == 8);
}

TEST_CASE("Per-second metrics get one sample per second with a migration, cross-die and "
          "cross-node ones only where the machine has several",
          "[record]") {
  interval_acc acc;
  // Three 1-s ticks: 2 migrations (1 cross-die), none, 5 (2 cross-die, 1 cross-node).
  for (const auto &[n, ccx, numa] : {std::tuple{2, 1, 0}, {0, 0, 0}, {5, 2, 1}}) {
    collect::interval_delta d;
    auto t = sample(9, "mover", 1, 1);
    t.c.migrations = {static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(ccx),
                      static_cast<std::uint64_t>(numa)};
    d.threads = {t};
    acc.add_tick(d, true);
  }
  SECTION("migration group on a two-node, multi-die machine") {
    const auto row = to_row(acc, path_of, {.migration = true, .dies = 4, .numa_nodes = 2});
    REQUIRE(row.threads.size() == 1);
    const auto &r = row.threads[0];
    CHECK(r.migrations == 7);
    CHECK(r.cross_ccx == 3);
    CHECK(r.cross_numa == 1);
    const auto &rate = r.m[metric::migration_rate];
    CHECK(rate.count == 2); // seconds with a migration
    CHECK(rate.total == 7);
    CHECK(rate.hist.kind == stats::layout::count);
    CHECK(rate.hist.slots[2] == 1);
    CHECK(rate.hist.slots[5] == 1);
    const auto &ccx = r.m[metric::migration_rate_cross_ccx];
    CHECK(ccx.count == 2);
    CHECK(ccx.total == 3);
    CHECK(ccx.hist.slots[1] == 1);
    CHECK(ccx.hist.slots[2] == 1);
    const auto &numa = r.m[metric::migration_rate_cross_numa];
    CHECK(numa.count == 2); // a sample in each second with a migration, 0 included (upstream)
    CHECK(numa.hist.slots[0] == 1);
    CHECK(numa.hist.slots[1] == 1);
    CHECK(r.m[metric::sched_delay].count == 3);
  }
  SECTION("one die, one node: the cross rates are not written (all-zero samples)") {
    const auto row = to_row(acc, path_of, {.migration = true});
    REQUIRE(row.threads.size() == 1);
    CHECK(row.threads[0].m[metric::migration_rate].count == 2);
    CHECK(row.threads[0].m[metric::migration_rate_cross_ccx].empty());
    CHECK(row.threads[0].m[metric::migration_rate_cross_numa].empty());
  }
  SECTION("without the migration group no per-second metric is written") {
    const auto row = to_row(acc, path_of, {});
    CHECK(row.threads[0].m[metric::migration_rate].empty());
    CHECK(row.threads[0].migrations == 7); // the tally itself is data
  }
}

TEST_CASE("CPU metrics and drops add up over the ticks", "[record]") {
  interval_acc acc;
  for (std::uint64_t tick = 1; tick <= 2; ++tick) {
    collect::interval_delta d;
    collect::cpu_sample c;
    c.cpu = 1;
    c.m[metric::cpu_sched_delay].count = tick;
    c.m[metric::cpu_sched_delay].hist.add(5'000, tick);
    c.m[metric::cpu_idle].count = 10 * tick;
    c.m[metric::cpu_idle].hist.add(1'000'000, 10 * tick);
    d.cpus = {c};
    d.drops[RSCHED_DROP_SEGMENT] = tick;
    acc.add_tick(d, false);
  }
  const auto row = to_row(acc, path_of, {});
  REQUIRE(row.cpus.size() == 1);
  CHECK(row.cpus[0].cpu == 1);
  CHECK(row.cpus[0].m[metric::cpu_sched_delay].count == 3);
  CHECK(row.cpus[0].m[metric::cpu_sched_delay].hist.total() == 3);
  CHECK(row.cpus[0].m[metric::cpu_idle].count == 30);
  CHECK(row.drops[RSCHED_DROP_SEGMENT] == 3);
}

TEST_CASE("Generic perf events: the interval's count and a per-second rate histogram", "[record]") {
  interval_acc acc(2);
  for (std::uint64_t v : {100U, 0U, 3000U}) {
    collect::interval_delta d;
    auto t = sample(3, "ev", 1, 1);
    t.c.counters[RSCHED_CTR_GENERIC0 + 1] = v;
    d.threads = {t};
    acc.add_tick(d, true);
  }
  const auto row = to_row(acc, path_of, {});
  REQUIRE(row.threads.size() == 1);
  const auto &r = row.threads[0];
  REQUIRE(r.events.size() == 1);
  CHECK(r.events[0] == std::pair<std::uint32_t, std::uint64_t>{1, 3100});
  REQUIRE(r.event_rates.size() == 1);
  CHECK(r.event_rates[0].second.total() == 2); // seconds with a count
  CHECK(r.event_rates[0].second.kind == stats::layout::log2);
}

TEST_CASE("Blame rows: the culprits with the most wait over the ticks, the rest by comm, then "
          "<other>",
          "[record][blame]") {
  interval_acc acc;
  // Two ticks; twelve culprit processes of comm "hog" (slots of a tick hold at most sixteen),
  // each culprit k waited behind for k * 1000 ns per tick; an <idle> and an <unknown> part.
  for (int tick = 0; tick < 2; ++tick) {
    collect::interval_delta d;
    auto t = sample(9, "db", 1, 1);
    for (std::uint32_t k = 1; k <= 12; ++k) {
      auto &s = t.c.blame.slots[k - 1];
      s.gen = 1;
      s.who.tgid = 100 + k;
      s.who.cgroup_id = 2;
      std::memcpy(s.who.comm.data(), "hog", 3);
      s.n = {k * 1000, 1, k == 1 ? 1U : 0U};
    }
    t.c.blame.idle = {50, 1, 0};
    t.c.blame.unknown = {5, 1, 0};
    d.threads = {t};
    acc.add_tick(d, false);
  }
  // A third tick: ten processes of ten comms p0 .. p9, each (j + 1) * 100 ns.
  {
    collect::interval_delta d;
    auto t = sample(9, "db", 1, 1);
    for (std::uint32_t j = 0; j < 10; ++j) {
      auto &s = t.c.blame.slots[j];
      s.gen = 2;
      s.who.tgid = 300 + j;
      s.who.cgroup_id = 2;
      const std::string comm = "p" + std::to_string(j);
      std::memcpy(s.who.comm.data(), comm.data(), comm.size());
      s.n = {(j + 1) * 100, 1, 0};
    }
    d.threads = {t};
    acc.add_tick(d, false);
  }
  const auto row = to_row(acc, path_of, {});
  REQUIRE(row.threads.size() == 1);
  const auto &b = row.threads[0].blame;
  // 8 processes (12k .. 5k: the most wait first); the rest by comm: hog's other four processes
  // together (pid 0), then p9 .. p3 (store::max_culprit_groups in all); <idle>, <unknown>, and
  // <other> with p2, p1 and p0.
  REQUIRE(b.size() == store::max_culprits + store::max_culprit_groups + 3);
  for (std::size_t i = 0; i < store::max_culprits; ++i) {
    CHECK(b[i].kind == store::culprit_kind::process);
    CHECK(b[i].pid == 100 + 12 - i);
    CHECK(b[i].wait_ns == 2 * (12 - i) * 1000);
    CHECK(b[i].waits == 2);
    CHECK(b[i].comm == "hog");
    CHECK(b[i].cgroup == "/cg2");
  }
  const store::blame_row &hogs = b[store::max_culprits];
  CHECK(hogs.kind == store::culprit_kind::process);
  CHECK(hogs.pid == 0);
  CHECK(hogs.comm == "hog");
  CHECK(hogs.cgroup == "/cg2");
  CHECK(hogs.wait_ns == 2 * (1 + 2 + 3 + 4) * 1000); // culprits 1..4
  CHECK(hogs.waits == 8);
  CHECK(hogs.preempts == 2); // culprit 1's preemptions
  for (std::size_t g = 1; g < store::max_culprit_groups; ++g) {
    const store::blame_row &x = b[store::max_culprits + g];
    CHECK(x.pid == 0);
    CHECK(x.comm == "p" + std::to_string(10 - g));
    CHECK(x.wait_ns == (10 - g + 1) * 100);
  }
  const std::size_t pseudo = store::max_culprits + store::max_culprit_groups;
  CHECK(b[pseudo].kind == store::culprit_kind::idle);
  CHECK(b[pseudo].wait_ns == 100);
  CHECK(b[pseudo + 1].kind == store::culprit_kind::unknown);
  CHECK(b[pseudo + 2].kind == store::culprit_kind::other);
  CHECK(b[pseudo + 2].wait_ns == 100 + 200 + 300); // p0, p1, p2
  std::uint64_t sum = 0;
  for (const auto &x : b) {
    sum += x.wait_ns;
  }
  CHECK(sum == 2 * (78 * 1000 + 55) + 5500);
}

TEST_CASE("Blame rows: the kernel's slot of a comm's processes together takes in the same comm "
          "past the kept rows",
          "[record][blame]") {
  interval_acc acc;
  collect::interval_delta d;
  auto t = sample(9, "db", 1, 1);
  // Ten "cc1" processes k = 1..10, k * 1000 ns; slot 10 is the kernel's merge of cc1's other
  // processes (tgid 0), 20,000 ns: kept among the eight, it takes in cc1 processes 1, 2 and 3.
  for (std::uint32_t k = 1; k <= 11; ++k) {
    auto &s = t.c.blame.slots[k - 1];
    s.gen = 1;
    s.who.tgid = k == 11 ? 0 : 200 + k;
    s.who.cgroup_id = 2;
    std::memcpy(s.who.comm.data(), "cc1", 3);
    s.n = {k == 11 ? 20'000U : k * 1000, 1, 0};
  }
  d.threads = {t};
  acc.add_tick(d, false);
  const auto row = to_row(acc, path_of, {});
  const auto &b = row.threads[0].blame;
  REQUIRE(b.size() == store::max_culprits);
  CHECK(b[0].pid == 0);
  CHECK(b[0].wait_ns == 20'000 + 1000 + 2000 + 3000);
  CHECK(b[0].waits == 4);
  for (std::size_t i = 1; i < b.size(); ++i) {
    CHECK(b[i].pid == 200 + 11 - i);
  }
}

TEST_CASE("Thousands of threads over ticks: each attribution adds up, rows in attribution order",
          "[record]") {
  // Past the accumulator's first index sizes; threads come and go between ticks, a few rename.
  interval_acc acc;
  std::map<std::tuple<std::uint32_t, std::uint64_t, std::string>, std::uint64_t> want;
  for (std::uint64_t tick = 0; tick < 4; ++tick) {
    collect::interval_delta d;
    for (std::uint32_t tid = 1; tid <= 3000; ++tid) {
      if ((tid + tick) % 5 == 0) {
        continue; // no samples this tick
      }
      const std::string comm = tid % 97 == 0 && tick >= 2 ? "renamed" : "w";
      const std::uint64_t cg = 1 + tid % 3;
      const std::uint64_t n = 1 + (tid * 7 + tick) % 11;
      d.threads.push_back(sample(tid, comm, cg, n));
      want[{tid, cg, comm}] += n;
    }
    acc.add_tick(std::move(d), false);
  }
  const auto row = to_row(std::move(acc), path_of, {});
  REQUIRE(row.threads.size() == want.size());
  auto it = want.begin();
  for (const auto &r : row.threads) {
    const auto &[tid, cg, comm] = it->first;
    CHECK(r.tid == tid);
    CHECK(r.cgroup == path_of(cg));
    CHECK(r.comm == comm);
    CHECK(r.m[metric::sched_delay].count == it->second);
    CHECK(r.m[metric::sched_delay].hist.total() == it->second);
    ++it;
  }
  // The accumulator is empty again, and takes a new interval.
  acc.clear();
  collect::interval_delta d;
  d.threads = {sample(4, "x", 1, 2)};
  acc.add_tick(std::move(d), false);
  const auto next = to_row(acc, path_of, {});
  REQUIRE(next.threads.size() == 1);
  CHECK(next.threads[0].m[metric::sched_delay].count == 2);
}
