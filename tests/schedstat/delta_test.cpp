// Deltas of two snapshots: per CPU, per (CPU, domain), system-wide sums, counter resets, CPUs
// that appear, and ratios that never divide by zero.
#include "rsched/schedstat/delta.hpp"

#include "fixture.hpp"

#include <catch2/catch.hpp>

#include <limits>
#include <string>

using namespace rsched::schedstat;

namespace {

snapshot parsed(const std::string &text) {
  auto r = parse(text);
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return std::move(r).value();
}

deltas diffed(const snapshot &a, const snapshot &b) {
  auto r = delta(a, b);
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return std::move(r).value();
}

// A v15 domain line whose 36 values are base, base + 1, ...
std::string domain_line(int index, const std::string &mask, std::uint64_t base) {
  std::string s = "domain" + std::to_string(index) + " " + mask;
  for (std::uint64_t i = 0; i < 36; ++i) {
    // Two appends, not += " " + std::to_string(..): GCC 12 at -O2 warns -Wrestrict on that
    // (a false positive, GCC bug 105329).
    s.append(1, ' ').append(std::to_string(base + i));
  }
  return s + "\n";
}

} // namespace

TEST_CASE("v17 fixtures: per-CPU, per-domain and system-wide deltas", "[schedstat]") {
  const auto a = fixture_snapshot("schedstat_v17.txt");
  const auto b = fixture_snapshot("schedstat_v17_later.txt");
  const auto d = diffed(a, b);
  CHECK(d.version == 17);
  REQUIRE(d.elapsed_jiffies);
  CHECK(*d.elapsed_jiffies == 250);
  CHECK(d.clamped_fields == 0);
  REQUIRE(d.cpus.size() == 4);
  REQUIRE(d.domains.size() == 8);
  for (const auto &c : d.cpus) {
    CHECK_FALSE(c.from_zero);
  }
  for (const auto &dom : d.domains) {
    CHECK_FALSE(dom.from_zero);
    CHECK(dom.fields.size() == 45);
  }

  const auto *cpu1 = d.cpu(1);
  REQUIRE(cpu1 != nullptr);
  check_cpu_fields(cpu1->fields, {13, 0, 40135, 16054, 12724, 1817, 942298547, 77557545, 19489});

  const auto &t = d.cpu_totals;
  check_cpu_fields(t, {43, 0, 195226, 78089, 108899, 13402, 3744470096ULL, 233962018, 130191});

  REQUIRE(d.totals.avg_run_delay_ns);
  CHECK(*d.totals.avg_run_delay_ns == Approx(233962018.0 / 130191.0));
  REQUIRE(d.totals.avg_timeslice_ns);
  CHECK(*d.totals.avg_timeslice_ns == Approx(3744470096.0 / 130191.0));
  REQUIRE(d.totals.ttwu_local_share);
  CHECK(*d.totals.ttwu_local_share == Approx(13402.0 / 108899.0));
  REQUIRE(d.totals.goidle_share);
  CHECK(*d.totals.goidle_share == Approx(78089.0 / 195226.0));

  const auto *dom = d.domain(2, 1);
  REQUIRE(dom != nullptr);
  CHECK(dom->name == "PKG");
  CHECK(dom->cpumask == "f");
  CHECK(dom->field("lb_count_idle") == 450U);

  REQUIRE(d.domain_totals.size() == 45);
  CHECK(d.domain_totals.front().name == "lb_count_not_idle"); // the version's order
  CHECK(d.domain_total("lb_count_not_idle") == 3958U);
  CHECK(d.domain_total("lb_imbalance_load_not_idle") == 1707U);
  CHECK(d.domain_total("alb_count") == 2007U);
  CHECK(d.domain_total("ttwu_wake_remote") == 2161U);
  CHECK_FALSE(d.domain_total("lb_imbalance_idle"));
  // the totals are the sums of the per-domain deltas
  for (std::size_t i = 0; i < d.domain_totals.size(); ++i) {
    std::uint64_t sum = 0;
    for (const auto &x : d.domains) {
      sum += x.fields[i].value;
    }
    CHECK(d.domain_totals[i].value == sum);
  }
}

TEST_CASE("no change gives zeros and no ratios", "[schedstat]") {
  const auto a = fixture_snapshot("schedstat_v15.txt");
  const auto d = diffed(a, a);
  CHECK(d.cpu_totals == cpu_fields{});
  for (const auto &f : d.domain_totals) {
    CHECK(f.value == 0);
  }
  CHECK(*d.elapsed_jiffies == 0);
  CHECK_FALSE(d.totals.avg_run_delay_ns);
  CHECK_FALSE(d.totals.avg_timeslice_ns);
  CHECK_FALSE(d.totals.ttwu_local_share);
  CHECK_FALSE(d.totals.goidle_share);
}

TEST_CASE("a counter that went backwards gives 0, not a wrapped value", "[schedstat]") {
  const auto a = parsed("version 15\ntimestamp 1000\ncpu0 10 0 100 40 80 30 5000 900 60\n" +
                        domain_line(0, "3", 1000));
  // sched_count and run_delay reset; domain field 5 (lb_hot_gained_idle) reset
  std::string dom = domain_line(0, "3", 1010);
  dom = dom.replace(dom.find(" 1015 "), 6, " 2 ");
  const auto b = parsed("version 15\ntimestamp 1100\ncpu0 15 0 7 45 90 33 6000 3 70\n" + dom);
  const auto d = diffed(a, b);
  const auto &c = d.cpus.at(0).fields;
  check_cpu_fields(c, {5, 0, 0, 5, 10, 3, 1000, 0, 10});
  const auto &dd = d.domains.at(0);
  CHECK_FALSE(dd.from_zero);
  CHECK(dd.field("lb_gained_idle") == 10U);
  CHECK(dd.field("lb_hot_gained_idle") == 0U);
  CHECK(dd.field("lb_nobusyq_idle") == 10U);
  CHECK(d.clamped_fields == 3);
  CHECK(d.domain_total("lb_hot_gained_idle") == 0U);
  CHECK(*d.elapsed_jiffies == 100);
}

TEST_CASE("CPUs and domains that appear are diffed against zero", "[schedstat]") {
  const std::string head = "version 15\ntimestamp 50\n";
  const auto a = parsed(head + "cpu0 10 0 100 40 80 30 5000 900 60\n" + domain_line(0, "3", 100));
  const auto b =
      parsed(head + "cpu0 11 0 110 44 88 33 5500 990 66\n" + domain_line(0, "3", 101) +
             domain_line(1, "f", 7000) + "cpu1 1 0 2 3 4 5 6 7 8\n" + domain_line(0, "3", 500));
  const auto d = diffed(a, b);
  REQUIRE(d.cpus.size() == 2);
  CHECK_FALSE(d.cpu(0)->from_zero);
  CHECK(d.cpu(0)->fields.sched_count == 10);
  REQUIRE(d.cpu(1) != nullptr);
  CHECK(d.cpu(1)->from_zero);
  CHECK(d.cpu(1)->fields.pcount == 8);
  CHECK(d.cpu(1)->fields.yld_count == 1);
  CHECK(d.cpu_totals.sched_count == 12);
  CHECK(d.cpu_totals.pcount == 14);

  REQUIRE(d.domains.size() == 3);
  CHECK_FALSE(d.domain(0, 0)->from_zero);
  CHECK(d.domain(0, 0)->field("lb_count_idle") == 1U);
  CHECK(d.domain(0, 1)->from_zero);
  CHECK(d.domain(0, 1)->field("lb_count_idle") == 7000U);
  CHECK(d.domain(1, 0)->from_zero);
  CHECK(d.domain(1, 0)->field("ttwu_move_balance") == 535U);
  CHECK(d.domain_total("lb_count_idle") == 1U + 7000U + 500U);
  CHECK(d.clamped_fields == 0);

  // a CPU that went away is simply not in the result
  const auto back = diffed(b, a);
  REQUIRE(back.cpus.size() == 1);
  CHECK(back.cpus[0].cpu == 0);
  CHECK(back.domains.size() == 1);
}

TEST_CASE("a rebuilt domain (new span or name) restarts from zero", "[schedstat]") {
  std::string v17a = "version 17\ncpu0 1 0 2 3 4 5 6 7 8\ndomain0 MC f";
  std::string v17b = "version 17\ncpu0 1 0 2 3 4 5 6 7 8\ndomain0 MC 3";
  std::string v17c = "version 17\ncpu0 1 0 2 3 4 5 6 7 8\ndomain0 PKG f";
  for (int i = 0; i < 45; ++i) {
    v17a.append(1, ' ').append(std::to_string(1000 + i));
    v17b.append(1, ' ').append(std::to_string(10 + i));
    v17c.append(1, ' ').append(std::to_string(2000 + i));
  }
  const auto sa = parsed(v17a + "\n");
  const auto sb = parsed(v17b + "\n");
  const auto sc = parsed(v17c + "\n");
  const auto ab = diffed(sa, sb);
  CHECK(ab.domains.at(0).from_zero);
  CHECK(ab.domains.at(0).field("lb_count_not_idle") == 10U);
  CHECK(ab.clamped_fields == 0);
  const auto ac = diffed(sa, sc);
  CHECK(ac.domains.at(0).from_zero);
  CHECK(ac.domains.at(0).field("ttwu_move_balance") == 2044U);
  const auto aa = diffed(sa, sa);
  CHECK_FALSE(aa.domains.at(0).from_zero);
}

TEST_CASE("versions must match unless the previous snapshot is empty", "[schedstat]") {
  const auto v15 = fixture_snapshot("schedstat_v15.txt");
  const auto v16 = fixture_snapshot("schedstat_v16.txt");
  const auto r = delta(v15, v16);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.err().msg, Catch::Contains("version changed from 15 to 16"));

  // upstream's first collect: absolute values
  const auto first = diffed(snapshot{}, v16);
  CHECK(first.version == 16);
  CHECK_FALSE(first.elapsed_jiffies);
  REQUIRE(first.cpus.size() == 4);
  for (const auto &c : first.cpus) {
    CHECK(c.from_zero);
    CHECK(c.fields == v16.cpu(c.cpu)->fields);
  }
  CHECK(first.domain(0, 0)->field("lb_count_not_idle") == 5691U);
  CHECK(first.clamped_fields == 0);

  snapshot bogus = v15;
  bogus.version = 18;
  CHECK_FALSE(delta(snapshot{}, bogus).ok());
  bogus.version = 17; // 36 fields cannot be v17 domains
  const auto mismatch = delta(snapshot{}, bogus);
  REQUIRE_FALSE(mismatch.ok());
  CHECK_THAT(mismatch.err().msg, Catch::Contains("has 36 fields, version 17 has 45"));
}

TEST_CASE("timestamps going backwards give no elapsed time", "[schedstat]") {
  const auto a = parsed("timestamp 500\ncpu0 1 0 2 3 4 5 6 7 8\n");
  const auto b = parsed("timestamp 400\ncpu0 1 0 2 3 4 5 6 7 8\n");
  CHECK_FALSE(diffed(a, b).elapsed_jiffies);
  CHECK(*diffed(b, a).elapsed_jiffies == 100);
  const auto none = parsed("cpu0 1 0 2 3 4 5 6 7 8\n");
  CHECK_FALSE(diffed(a, none).elapsed_jiffies);
}

TEST_CASE("derived ratios never divide by zero", "[schedstat]") {
  cpu_fields f;
  auto r = derive(f);
  CHECK_FALSE(r.avg_run_delay_ns);
  CHECK_FALSE(r.avg_timeslice_ns);
  CHECK_FALSE(r.ttwu_local_share);
  CHECK_FALSE(r.goidle_share);

  f.run_delay_ns = 1000; // waiting with no timeslice counted yet
  f.rq_cpu_time_ns = 5000;
  f.ttwu_local = 3;
  f.sched_goidle = 2;
  r = derive(f);
  CHECK_FALSE(r.avg_run_delay_ns);
  CHECK_FALSE(r.avg_timeslice_ns);
  CHECK_FALSE(r.ttwu_local_share);
  CHECK_FALSE(r.goidle_share);

  f.pcount = 4;
  f.ttwu_count = 12;
  f.sched_count = 8;
  r = derive(f);
  REQUIRE(r.avg_run_delay_ns);
  CHECK(*r.avg_run_delay_ns == Approx(250.0));
  REQUIRE(r.avg_timeslice_ns);
  CHECK(*r.avg_timeslice_ns == Approx(1250.0));
  REQUIRE(r.ttwu_local_share);
  CHECK(*r.ttwu_local_share == Approx(0.25));
  REQUIRE(r.goidle_share);
  CHECK(*r.goidle_share == Approx(0.25));
}

TEST_CASE("sums saturate instead of wrapping", "[schedstat]") {
  const std::string big = "18446744073709551615";
  const auto b = parsed("cpu0 1 0 2 3 4 5 6 " + big + " 8\ncpu1 1 0 2 3 4 5 6 " + big + " 8\n");
  const auto d = diffed(snapshot{}, b);
  CHECK(d.cpu_totals.run_delay_ns == std::numeric_limits<std::uint64_t>::max());
  CHECK(d.cpu_totals.pcount == 16);
}
