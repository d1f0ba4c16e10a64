// interval_acc and to_row: rows per thread and attribution.
#include "interval.hpp"

#include <catch2/catch.hpp>

using namespace rsched;
using namespace rsched::rschedd;

namespace {
collect::thread_sample sample(std::uint32_t tid, const std::string &comm, std::uint64_t cgroup,
                              std::uint64_t count) {
  collect::thread_sample t;
  t.key = {tid, 7};
  t.tgid = tid;
  t.comm = comm;
  t.cgroup_id = cgroup;
  t.c.delay.count = count;
  t.c.delay.total_ns = count * 1000;
  t.c.delay.hist.add(1000, count);
  return t;
}
} // namespace

TEST_CASE("A renamed thread has a row per name, ticks of one name add up", "[rschedd]") {
  interval_acc acc;
  collect::interval_delta t1;
  t1.threads = {sample(5, "bash", 1, 2), sample(5, "make", 1, 3)};
  acc.add_tick(t1, false);
  collect::interval_delta t2;
  t2.threads = {sample(5, "make", 1, 4)};
  acc.add_tick(t2, false);
  const auto row = to_row(
      acc, [](std::uint64_t id) { return "/cg" + std::to_string(id); }, false, false);
  REQUIRE(row.threads.size() == 2);
  std::map<std::string, std::uint64_t> by_comm;
  for (const auto &r : row.threads) {
    CHECK(r.tid == 5);
    by_comm[r.comm] = r.delay_count;
  }
  CHECK(by_comm["bash"] == 2);
  CHECK(by_comm["make"] == 7);
}

TEST_CASE("Attributions whose cgroups resolve to one path are one row (the store's key)",
          "[rschedd]") {
  interval_acc acc;
  collect::interval_delta t;
  // cgroups 2 and 3 are gone (both unknown: ""), 4 is known; thread 6 is separate
  t.threads = {sample(5, "svc", 2, 1), sample(5, "svc", 3, 2), sample(5, "svc", 4, 4),
               sample(6, "svc", 2, 8)};
  acc.add_tick(t, false);
  const auto row = to_row(
      acc, [](std::uint64_t id) { return id == 4 ? std::string("/known") : std::string(); }, false,
      false);
  REQUIRE(row.threads.size() == 3);
  std::map<std::pair<std::uint32_t, std::string>, std::uint64_t> got;
  for (const auto &r : row.threads) {
    got[{r.tid, r.cgroup}] = r.delay_count;
  }
  CHECK(got[{5, ""}] == 3);
  CHECK(got[{5, "/known"}] == 4);
  CHECK(got[{6, ""}] == 8);
}
