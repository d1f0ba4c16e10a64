// rsched::pressure without root: PSI and cpu.stat parsing (both cgroup versions), deltas, the
// rows of an interval, and the sampler over a fake cgroup tree.
#include "rsched/base/mountinfo.hpp"
#include "rsched/pressure/pressure.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>

using namespace rsched::pressure;
using rsched::test::temp_dir;

TEST_CASE("PSI files: some and full totals in microseconds", "[pressure]") {
  auto p = parse_psi("some avg10=0.06 avg60=2.97 avg300=8.39 total=856503367\n"
                     "full avg10=0.00 avg60=0.00 avg300=0.00 total=12\n");
  REQUIRE(p);
  CHECK(p->some_us == 856503367U);
  CHECK(p->full_us == 12U);
  // Before Linux 5.13 the system file has no full line.
  auto old = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n");
  REQUIRE(old);
  CHECK(old->some_us == 5U);
  CHECK_FALSE(old->full_us);
  for (const char *bad : {"", "full avg10=0 total=1\n", "some avg10=0.00\n", "some total=12x\n",
                          "weird total=1\n", "some total=-1\n"}) {
    INFO(bad);
    auto r = parse_psi(bad);
    REQUIRE_FALSE(r);
    CHECK(r.err().msg.find('\n') == std::string::npos);
  }
  auto hostile = parse_psi("some \x1b[2J total=1\nbogus\x1b]0;x\x07 line\n");
  REQUIRE_FALSE(hostile);
  CHECK(hostile.err().msg.find('\x1b') == std::string::npos);
}

TEST_CASE("cpu.stat: v2 in microseconds, v1's throttled_time in ns", "[pressure]") {
  auto v2 = parse_cpu_stat("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n"
                           "nr_periods 40\nnr_throttled 7\nthrottled_usec 250\n"
                           "nr_bursts 0\nburst_usec 0\n");
  REQUIRE(v2);
  CHECK(v2->usage_ns == 1'500'000U);
  CHECK(v2->periods == 40U);
  CHECK(v2->throttled == 7U);
  CHECK(v2->throttled_ns == 250'000U);
  auto no_ctrl = parse_cpu_stat("usage_usec 9\nuser_usec 9\nsystem_usec 0\n");
  REQUIRE(no_ctrl);
  CHECK(no_ctrl->usage_ns == 9000U);
  CHECK_FALSE(no_ctrl->periods);
  CHECK_FALSE(no_ctrl->throttled_ns);
  auto v1 = parse_cpu_stat("nr_periods 3\nnr_throttled 2\nthrottled_time 123456789\n"
                           "nr_bursts 0\nburst_time 0\n");
  REQUIRE(v1);
  CHECK_FALSE(v1->usage_ns);
  CHECK(v1->throttled_ns == 123456789U);
  CHECK_FALSE(parse_cpu_stat("usage_usec\n"));
  CHECK_FALSE(parse_cpu_stat("usage_usec 1.5\n"));
}

TEST_CASE("deltas: missing fields stay missing, a counter that went down restarts", "[pressure]") {
  cgroup_cpu prev{100, 10, 1000, std::nullopt, std::nullopt, std::nullopt};
  cgroup_cpu cur{150, 10, 400, 5, std::nullopt, std::nullopt};
  const auto d = delta(cur, prev);
  CHECK(d.some_ns == 50U);
  CHECK(d.full_ns == 0U);
  CHECK(d.usage_ns == 400U); // re-created cgroup: counted from 0
  CHECK_FALSE(d.periods);    // unknown before
  CHECK_FALSE(d.throttled);
}

TEST_CASE("ancestors of a cgroup path", "[pressure]") {
  CHECK(ancestors("/").empty());
  CHECK(ancestors("/a") == std::vector<std::string>{"/"});
  CHECK(ancestors("/a/b/c") == std::vector<std::string>{"/a/b", "/a", "/"});
}

TEST_CASE("interval rows: active cgroups, their ancestors and the system, new and gone ones",
          "[pressure]") {
  readings prev{{"/", {1000, 0, 50, {}, {}, {}}},
                {"/sys", {10, 0, 5, {}, {}, {}}},
                {"/sys/db", {100, 20, 30, 10, 1, 500}},
                {"/idle", {7, 0, 1, {}, {}, {}}},
                {"/gone", {1, 1, 1, {}, {}, {}}}};
  readings cur{{"/", {1600, 0, 90, {}, {}, {}}},
               {"/sys", {30, 0, 25, {}, {}, {}}},
               {"/sys/db", {400, 20, 90, 20, 6, 4500}},
               {"/idle", {9, 0, 2, {}, {}, {}}},
               {"/new", {5, 0, 3, {}, {}, {}}}};
  const auto rows = interval_rows(prev, cur, {"/sys/db", "/new", "/gone", ""});
  REQUIRE(rows.size() == 4); // "/", "/new", "/sys", "/sys/db"; not "/idle" nor "/gone"
  CHECK(rows[0].first == "/");
  CHECK(rows[0].second.some_ns == 600U);
  CHECK(rows[1].first == "/new");
  CHECK(rows[1].second.some_ns == 5U); // created in the interval: from 0
  CHECK(rows[2].first == "/sys");
  CHECK(rows[3].first == "/sys/db");
  CHECK(rows[3].second.throttled == 5U);
  CHECK(rows[3].second.throttled_ns == 4000U);
  CHECK(rows[3].second.periods == 10U);
}

namespace {
void put(const std::filesystem::path &p, const std::string &text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
}
} // namespace

TEST_CASE("sampler: a fake machine with cgroup v2 and the cpu controller on v1", "[pressure]") {
  temp_dir dir;
  const auto &root = dir.path();
  put(root / "proc/pressure/cpu", "some avg10=0 avg60=0 avg300=0 total=2000\n"
                                  "full avg10=0 avg60=0 avg300=0 total=0\n");
  put(root / "v2/cgroup.controllers", "memory pids\n");
  put(root / "v2/cpu.stat", "usage_usec 900\nuser_usec 600\nsystem_usec 300\n");
  put(root / "v2/app/cpu.pressure", "some avg10=0 avg60=0 avg300=0 total=30\n"
                                    "full avg10=0 avg60=0 avg300=0 total=4\n");
  put(root / "v2/app/cpu.stat", "usage_usec 70\nuser_usec 70\nsystem_usec 0\n");
  put(root / "v2/app/db/cpu.pressure", "some avg10=0 avg60=0 avg300=0 total=1\n"
                                       "full avg10=0 avg60=0 avg300=0 total=1\n");
  put(root / "v2/app/db/cpu.stat", "usage_usec 5\nuser_usec 5\nsystem_usec 0\n");
  put(root / "v1cpu/app/db/cpu.stat", "nr_periods 9\nnr_throttled 4\nthrottled_time 777\n");
  sources s;
  s.system_psi = (root / "proc/pressure/cpu").string();
  s.cgroup2 = (root / "v2").string();
  s.cpu_v1 = (root / "v1cpu").string();
  sampler sm(s);
  const auto r = sm.read();
  CHECK_FALSE(sm.truncated());
  REQUIRE(r.size() == 3);
  CHECK(r.at("/").some_ns == 2'000'000U);
  CHECK(r.at("/").usage_ns == 900'000U);
  CHECK(r.at("/app").full_ns == 4000U);
  CHECK_FALSE(r.at("/app").throttled);
  CHECK(r.at("/app/db").throttled == 4U);
  CHECK(r.at("/app/db").throttled_ns == 777U);
  CHECK(r.at("/app/db").usage_ns == 5000U);
  CHECK(sm.missing().empty());

  s.max_cgroups = 2; // breadth first: "/" and "/app" are kept, "/app/db" is not
  sampler capped(s);
  const auto c = capped.read();
  CHECK(capped.truncated());
  CHECK(c.count("/app") == 1);
  CHECK(c.count("/app/db") == 0);

  sources none;
  none.system_psi = (root / "no/such/file").string();
  sampler bare(none);
  const auto m = bare.missing();
  REQUIRE(m.size() == 2);
  CHECK(m[0].find("CPU pressure unavailable") != std::string::npos);
  CHECK(m[1].find("no cgroup v2") != std::string::npos);
  const auto r0 = bare.read();
  REQUIRE(r0.size() == 1);
  CHECK_FALSE(r0.at("/").some_ns);
}

TEST_CASE("sampler: a hybrid machine's v1-only cgroups with a CFS quota are named", "[pressure]") {
  temp_dir dir;
  const auto &root = dir.path();
  put(root / "v2/app/db/cpu.stat", "usage_usec 5\n");
  put(root / "v1cpu/app/db/cpu.cfs_quota_us", "50000\n"); // seen: v2 has /app/db
  put(root / "v1cpu/docker/abc/cpu.cfs_quota_us", "50000\n");
  put(root / "v1cpu/docker/abc/cpu.cfs_period_us", "100000\n");
  put(root / "v1cpu/docker/free/cpu.cfs_quota_us", "-1\n"); // no quota: nothing to miss
  put(root / "v1cpu/hand\x1b[2J/cpu.cfs_quota_us", "1000\n");
  sources s;
  s.cgroup2 = (root / "v2").string();
  s.cpu_v1 = (root / "v1cpu").string();
  const auto lines = sampler(s).unseen_v1_quotas();
  REQUIRE(lines.size() == 2);
  std::vector<std::string> sorted = lines;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted[0] == "cgroup /docker/abc has a CFS quota in the v1 cpu hierarchy (50000 us every "
                     "100000 us) but no cgroup v2 counterpart: its threads are recorded under "
                     "their v2 cgroup and its throttling is not read");
  CHECK(sorted[1].find("cgroup /hand\x1b[2J has a CFS quota") == 0); // escaped by the caller
  // At most max_lines, then how many more.
  const auto one = sampler(s).unseen_v1_quotas(1);
  REQUIRE(one.size() == 2);
  CHECK(one[1] == "... and 1 more v1-only cgroups with a CFS quota");
  s.cpu_v1.clear();
  CHECK(sampler(s).unseen_v1_quotas().empty());
}

TEST_CASE("mountinfo: cgroup2 and the v1 cpu controller of a hybrid system", "[pressure]") {
  const char *mi =
      "24 30 0:22 / /sys rw,nosuid shared:7 - sysfs sysfs rw\n"
      "30 24 0:26 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755\n"
      "31 30 0:27 / /sys/fs/cgroup/unified rw shared:10 - cgroup2 cgroup2 rw\n"
      "33 30 0:29 / /sys/fs/cgroup/cpuset rw shared:14 - cgroup cgroup rw,cpuset\n"
      "34 30 0:30 / /sys/fs/cgroup/cpu,cpuacct rw shared:15 - cgroup cgroup rw,cpu,cpuacct\n"
      "garbage line\n"
      "35 30 0:31 / /mnt/with\\040space rw - cgroup cgroup rw,cpuacct\n";
  const auto s = find_sources(mi);
  CHECK(s.cgroup2 == "/sys/fs/cgroup/unified");
  CHECK(s.cpu_v1 == "/sys/fs/cgroup/cpu,cpuacct");
  CHECK(rsched::mountinfo::cgroup1(mi, "cpuacct") == "/sys/fs/cgroup/cpu,cpuacct");
  CHECK(rsched::mountinfo::cgroup1(mi, "memory") == std::nullopt);
  const auto all = rsched::mountinfo::parse(mi);
  REQUIRE(all.size() == 6);
  CHECK(all.back().point == "/mnt/with space");
}
