// The wall clock stepped under the real rschedd (Debian's libfaketime, which moves
// CLOCK_REALTIME alone: FAKETIME_DONT_FAKE_MONOTONIC), forward and back, mid-run and at a
// restart (issue 51): every interval is kept, each step is in clock_steps and gaps(), each
// tier sums to the one below, and retention never ran on the stepped clock.
#include "root_test_util.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using rsched::test::as_int;
using rsched::test::as_text;
using rsched::test::query_db;
namespace test = rsched::test;

namespace {

constexpr const char *libfaketime = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
constexpr std::int64_t sec = 1'000'000'000;

// The offset libfaketime gives the wall clock, re-read on every call ("+0", "+3d", "-5").
struct fake_wall {
  test::temp_dir dir;
  std::string file = dir.str() + "/faketime";
  explicit fake_wall(const std::string &offset) { set(offset); }
  void set(const std::string &offset) const {
    std::ofstream(file, std::ios::trunc) << offset << '\n';
  }
  [[nodiscard]] test::spawn_options spawn() const {
    test::spawn_options so;
    so.env = {std::string("LD_PRELOAD=") + libfaketime, "FAKETIME_TIMESTAMP_FILE=" + file,
              "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"};
    return so;
  }
};

std::int64_t one(const std::string &db, const std::string &sql) {
  return as_int(query_db(db, sql).at(0).at(0));
}

// The run length rschedd's last line reports ("rschedd: stopped after 9.4 s"), ns.
std::int64_t stopped_after(const std::string &err) {
  const auto at = err.rfind("stopped after ");
  REQUIRE(at != std::string::npos);
  return static_cast<std::int64_t>(std::stod(err.substr(at + 14)) * 1e9);
}

// Lets `d` record `n` more raw intervals (1 s each).
void record_more(const std::string &db, test::daemon &d, std::int64_t n) {
  const auto have = test::raw_intervals(db);
  d.require(test::wait_for_intervals(db, have + n - 1, 20s), "intervals were not written");
}

} // namespace

TEST_CASE_METHOD(test::db_dir,
                 "the wall clock stepped forward and back under rschedd and at a restart: nothing "
                 "lost, each step noted, every tier sums to the one below",
                 "[root][bpf][clock]") {
  if (!test::bpf_available()) {
    return;
  }
  REQUIRE(access(libfaketime, R_OK) == 0);
  fake_wall wall("+0");
  const std::vector<std::string> args = {"--db", db, "-i", "1", "-g", "latency"};
  std::int64_t run_ns = 0; // both runs' lengths, as rschedd measured them (monotonic)
  const std::int64_t real0 = test::realtime_ns();
  {
    test::daemon d(args, wall.spawn());
    d.require(d.wait_attached(), "rschedd did not attach");
    record_more(db, d, 3);
    wall.set("+3d"); // NTP correcting a clock three days behind
    record_more(db, d, 3);
    wall.set("-5"); // and set back 3 days and 5 s: onto this run's first intervals
    record_more(db, d, 4);
    REQUIRE(d.stop() == 0);
    run_ns += stopped_after(d.stderr_text());
    INFO(d.stderr_text());
    CHECK(d.stderr_text().find("the wall clock stepped forward by 259200.0") != std::string::npos);
    CHECK(d.stderr_text().find("the wall clock stepped back by 259205.0") != std::string::npos);
  }
  {
    wall.set("-60"); // a restart with a clock a minute behind, corrected after 3 s
    test::daemon d(args, wall.spawn());
    d.require(d.wait_attached(), "rschedd did not attach");
    record_more(db, d, 3);
    wall.set("+0");
    record_more(db, d, 3);
    REQUIRE(d.stop() == 0);
    run_ns += stopped_after(d.stderr_text());
  }
  // Each step as rschedd saw it (the offsets moved exactly so; reading the two clocks costs
  // microseconds).
  const auto steps = query_db(db, "SELECT step_ns FROM clock_steps ORDER BY rowid");
  REQUIRE(steps.size() == 3);
  const std::int64_t want[] = {3 * 86400 * sec, -(3 * 86400 + 5) * sec, 60 * sec};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("step " << i);
    CHECK(std::llabs(as_int(steps[i][0]) - want[i]) < 10'000'000);
  }
  // Nothing lost: the raw intervals hold both runs whole (each run's length to a tenth of a
  // second, as printed), and retention, which keeps two days of raw rows, deleted none of those
  // before the step of three days (run on the wall clock, it took their minute, built by then).
  const auto raw_ns = one(db, "SELECT sum(dur_ns) FROM intervals WHERE tier = 0");
  CHECK(std::llabs(raw_ns - run_ns) < sec / 5);
  CHECK(one(db, "SELECT count(*) FROM (SELECT start_ns FROM intervals WHERE tier = 0 ORDER BY "
                "id LIMIT 3) WHERE start_ns >= " +
                    std::to_string(real0) + " AND start_ns < " +
                    std::to_string(real0 + 60 * sec)) == 3);
  // Every tier sums to the one below: a rollup holds every source row before its tier's built
  // end, but for rows written late into a built bucket and still waiting (flags bit 2).
  for (int k = 1; k <= 2; ++k) {
    const std::string tier = " FROM intervals WHERE tier = " + std::to_string(k);
    std::string sources = " FROM intervals WHERE tier = " + std::to_string(k - 1);
    sources += " AND start_ns < (SELECT built_ns FROM tiers WHERE tier = " + std::to_string(k);
    sources += ") AND flags & 4 = 0";
    INFO("tier " << k);
    for (const std::string sum : {"SELECT coalesce(sum(dur_ns), 0)",
                                  "SELECT coalesce(sum(unseen_events + drops_task_state), 0)"}) {
      CHECK(one(db, sum + tier) == one(db, sum + sources));
    }
  }
  CHECK(one(db, "SELECT count(*) FROM intervals WHERE tier = 1") > 0);
  const auto samples_1m = one(db, "SELECT coalesce(sum(count), 0) FROM sched_delay_1m");
  CHECK(samples_1m > 0);
  CHECK(samples_1m ==
        one(db, "SELECT coalesce(sum(count), 0) FROM main.sched_delay WHERE tier = 0 AND ts < "
                "(SELECT built_ns FROM tiers WHERE tier = 1) AND ts NOT IN (SELECT start_ns FROM "
                "intervals WHERE tier = 0 AND flags & 4 <> 0)"));
  // gaps() names the steps, and the hole the step forward left is not a loss.
  const auto gaps = query_db(db, "SELECT reason FROM gaps(0, 9000000000000000000)");
  std::string reasons;
  for (const auto &g : gaps) {
    reasons += as_text(g[0]) + "\n";
  }
  INFO(reasons);
  CHECK(reasons.find("the wall clock stepped forward by 259200.0") != std::string::npos);
  CHECK(reasons.find("the wall clock stepped back by 259205.0") != std::string::npos);
  CHECK(reasons.find("the wall clock stepped forward by 60.0") != std::string::npos);
  CHECK(reasons.find("no time was lost") != std::string::npos);
  CHECK(reasons.find("intervals overlap") != std::string::npos);
}
