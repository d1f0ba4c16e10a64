// explain()'s stages one at a time (modules/query/src/explain_stages.hpp), on plain data: the
// victims ranked and classed, the causes of one hand-made victim, and the baseline over a small
// database. explain_test.cpp tests them together, through SQL.
#include "explain_stages.hpp"
#include "store_test_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <sqlite3.h>
#include <string>
#include <utility>
#include <vector>

using namespace store_test;
using rsched::query::detail::baseline_of;
using rsched::query::detail::cause_row;
using rsched::query::detail::causes_for;
using rsched::query::detail::classify;
using rsched::query::detail::culprit_key;
using rsched::query::detail::culprit_sum;
using rsched::query::detail::evidence;
using rsched::query::detail::explain_scope;
using rsched::query::detail::inverted_wait;
using rsched::query::detail::io_sum;
using rsched::query::detail::judge;
using rsched::query::detail::other_incidents;
using rsched::query::detail::period;
using rsched::query::detail::pressure_sum;
using rsched::query::detail::rank_victims;
using rsched::query::detail::rate;
using rsched::query::detail::stretch;
using rsched::query::detail::thread_culprit;
using rsched::query::detail::thread_stats;
using rsched::query::detail::thread_stats_map;
using rsched::query::detail::victim_class;
using rsched::query::detail::victim_row;
using rsched::query::detail::waker_sum;
using rsched::query::detail::window_causes;

namespace {

constexpr std::int64_t ms = 1'000'000;
constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)
// A 5-minute baseline against a 1-minute window.
constexpr long double fifth = 0.2L;

// A thread's lateness in a period: its scheduling delay, held (S) and blocked (D) sleep.
thread_stats stats_of(std::int64_t tid, std::int64_t pid, const char *comm, std::int64_t wait_ns,
                      std::int64_t held_ns = 0, std::int64_t blocked_ns = 0,
                      const char *cgroup = "/") {
  thread_stats t;
  t.tid = tid;
  t.pid = pid;
  t.comm = comm;
  t.cgroup = cgroup;
  t.wait_ns = wait_ns;
  t.held_ns = held_ns;
  t.blocked_ns = blocked_ns;
  t.any = true;
  return t;
}

// A ranked victim as rank_victims makes it (only what classify and causes_for read).
victim_row victim_of(std::int64_t id, const thread_stats &w, const thread_stats *base,
                     std::int64_t late_excess_ns, victim_class cls = victim_class::baseline) {
  victim_row v;
  v.thread_id = id;
  v.w = &w;
  v.base = base;
  v.late_excess_ns = late_excess_ns;
  v.cls = cls;
  return v;
}

culprit_sum process(std::int64_t pid, const char *comm, std::int64_t wait_ns,
                    const char *cgroup = "/") {
  culprit_sum c;
  c.kind = 0;
  c.pid = pid;
  c.comm = comm;
  c.cgroup = cgroup;
  c.wait_ns = wait_ns;
  return c;
}

waker_sum waker(int kind, std::int64_t pid, const char *comm, int state, std::int64_t sleep_ns) {
  waker_sum w;
  w.kind = kind;
  w.pid = pid;
  w.comm = comm;
  w.cgroup = "/";
  w.state = state;
  w.sleep_ns = sleep_ns;
  return w;
}

std::vector<std::int64_t> ids_of(const std::vector<victim_row> &vs) {
  std::vector<std::int64_t> out;
  out.reserve(vs.size());
  for (const auto &v : vs) {
    out.push_back(v.thread_id);
  }
  return out;
}

double share_sum(const std::vector<cause_row> &causes) {
  return std::accumulate(causes.begin(), causes.end(), 0.0,
                         [](double s, const cause_row &c) { return s + c.share.value_or(0.0); });
}

} // namespace

TEST_CASE("rank_victims: the threads whose lateness grew, by how much; classify ranks the new "
          "ones after those judged against their own baseline",
          "[explain][stages]") {
  thread_stats_map base, win;
  // 1: its delay grew: 50 ms against 20 ms at the baseline rate.
  base[1] = stats_of(101, 100, "web", 100 * ms);
  win[1] = stats_of(101, 100, "web", 50 * ms);
  // 2: its delay grew as much as its held sleep fell: no later than before, no victim.
  base[2] = stats_of(102, 100, "web", 100 * ms, 50 * ms);
  win[2] = stats_of(102, 100, "web", 25 * ms, 5 * ms);
  // 3: waited less than before but slept far longer in D: ranked by its lateness.
  base[3] = stats_of(103, 100, "web", 100 * ms);
  win[3] = stats_of(103, 100, "web", 10 * ms, 0, 100 * ms);
  // 4: new in the window: all of its lateness is extra, the most of any.
  win[4] = stats_of(400, 400, "batch", 200 * ms);
  // 5: in the baseline's map but with no row of it there: new too.
  base[5].tid = 500;
  win[5] = stats_of(500, 500, "cron", 5 * ms);
  // 6 and 7: the same extra lateness: by tid.
  base[6] = stats_of(602, 600, "pool", 100 * ms);
  win[6] = stats_of(602, 600, "pool", 60 * ms);
  base[7] = stats_of(601, 600, "pool", 100 * ms);
  win[7] = stats_of(601, 600, "pool", 60 * ms);

  auto ranked = rank_victims(win, base, rate{fifth});
  REQUIRE(ids_of(ranked) == std::vector<std::int64_t>{4, 3, 7, 6, 1, 5});
  const auto &fresh = ranked[0];
  CHECK(fresh.cls == victim_class::fresh);
  CHECK(fresh.w == &win.at(4));
  CHECK(fresh.base == nullptr);
  CHECK(fresh.expected_ns == 0);
  CHECK(fresh.excess_ns == 200 * ms);
  CHECK(fresh.late_excess_ns == 200 * ms);
  const auto &slept = ranked[1];
  CHECK(slept.cls == victim_class::baseline);
  CHECK(slept.base == &base.at(3));
  CHECK(slept.expected_ns == 20 * ms);
  CHECK(slept.excess_ns == -10 * ms); // its delay fell
  CHECK(slept.late_excess_ns == 90 * ms);
  CHECK(ranked[4].late_excess_ns == 30 * ms);
  CHECK(ranked[4].excess_ns == 30 * ms);
  CHECK(ranked[5].cls == victim_class::fresh);
  CHECK(ranked[5].base == nullptr);
  CHECK(ranked[5].late_excess_ns == 5 * ms);

  // Without a baseline recorded (rate 0) nothing is expected: every thread with any lateness.
  CHECK(rank_victims(win, base, rate{}).size() == win.size());

  // No thread's wait caused another's: by class, by extra lateness within one.
  classify(ranked, window_causes{});
  CHECK(ids_of(ranked) == std::vector<std::int64_t>{3, 7, 6, 1, 4, 5});
  CHECK(ranked[3].cls == victim_class::baseline);
  CHECK(ranked[4].cls == victim_class::fresh);
}

TEST_CASE("classify: the root culprit of other processes' waits is classed culprit and ranked "
          "last; two that hold each other up are neither",
          "[explain][stages]") {
  thread_stats_map win;
  win[1] = stats_of(103, 100, "web", 0);
  win[2] = stats_of(200, 200, "other", 0);
  win[3] = stats_of(900, 900, "rtjob", 0);
  win[4] = stats_of(701, 700, "a", 0);
  win[5] = stats_of(801, 800, "b", 0);
  win[6] = stats_of(300, 300, "hog", 0);
  win[7] = stats_of(901, 900, "rtjob", 0);
  // In rank order, as rank_victims gives them.
  std::vector<victim_row> victims{victim_of(3, win[3], &win[3], 1000 * ms),
                                  victim_of(1, win[1], &win[1], 900 * ms),
                                  victim_of(4, win[4], &win[4], 100 * ms),
                                  victim_of(5, win[5], &win[5], 100 * ms),
                                  victim_of(2, win[2], &win[2], 96 * ms),
                                  victim_of(6, win[6], nullptr, 50 * ms, victim_class::fresh),
                                  victim_of(7, win[7], &win[7], 20 * ms)};
  window_causes blame;
  const auto held_up = [&](std::int64_t thread_id, culprit_sum c) {
    blame.by_thread.push_back(thread_culprit{thread_id, std::move(c)});
  };
  // rtjob held web up 1.2 s, more than its two threads' own 1.02 s extra.
  held_up(1, process(900, "rtjob", 1200 * ms));
  // a and b held each other up: each waited mostly behind the other.
  held_up(4, process(800, "b", 500 * ms));
  held_up(5, process(700, "a", 400 * ms));
  // hog held other up less than its own extra.
  held_up(2, process(300, "hog", 30 * ms));
  // Not counted: its own process (rtjob's threads behind each other), a pseudo-culprit, a
  // rollup's (no pid).
  held_up(7, process(900, "rtjob", 5000 * ms));
  culprit_sum idle;
  idle.kind = 1;
  idle.pid = 0;
  idle.comm = "<idle>";
  idle.wait_ns = 5000 * ms;
  held_up(1, idle);
  culprit_sum rollup = process(0, "kworker", 5000 * ms);
  rollup.pid.reset();
  held_up(2, rollup);

  classify(victims, blame);
  CHECK(ids_of(victims) == std::vector<std::int64_t>{1, 4, 5, 2, 6, 3, 7});
  for (const auto &v : victims) {
    INFO("thread " << v.thread_id);
    const auto want = v.w->pid == 900    ? victim_class::culprit
                      : v.thread_id == 6 ? victim_class::fresh
                                         : victim_class::baseline;
    CHECK(v.cls == want);
  }

  // Its own threads' extra beyond what it caused: no root culprit.
  for (auto &v : victims) {
    v.cls = v.thread_id == 6 ? victim_class::fresh : victim_class::baseline;
    if (v.thread_id == 3) {
      v.late_excess_ns = 1500 * ms;
    }
  }
  classify(victims, blame);
  CHECK(std::none_of(victims.begin(), victims.end(),
                     [](const victim_row &v) { return v.cls == victim_class::culprit; }));
}

TEST_CASE("causes_for: a cpu cause names its culprit; the shares of the extra lateness add up to "
          "100 at most",
          "[explain][stages]") {
  const thread_stats base = stats_of(103, 100, "web", 100 * ms, 0, 0, "/web.slice");
  thread_stats w = stats_of(103, 100, "web", 620 * ms, 400 * ms, 0, "/web.slice");
  evidence e;
  e.pressures["/web.slice"] = {pressure_sum{}, pressure_sum{}};
  // In the window: 600 ms behind hog, none before; 20 ms behind noise, as before.
  const culprit_sum hog = process(300, "hog", 600 * ms, "/hog.slice");
  const culprit_sum noise = process(50, "noise", 20 * ms);
  e.culprits_w[1] = {&hog, &noise};
  e.wait_b[{1, culprit_key{0, 50, "noise", "/"}}] = 100 * ms;
  // Held 400 ms until writer woke it, none before; a timer's wakeups and a D sleep are no one's
  // holding it up.
  e.wake_w[1] = {waker(0, 77, "writer", 0, 400 * ms), waker(6, 0, "<timer>", 0, 900 * ms),
                 waker(0, 78, "flusher", 1, 900 * ms)};
  const period window{t0, t0 + 60'000 * ms, 60'000 * ms};
  const judge j{e, window, rate{fifth}, static_cast<double>(fifth)};

  SECTION("the parts explain more than its extra lateness (a part fell): shares of their sum") {
    // Before: held 300 ms behind a cache that did not hold it up in the window.
    thread_stats before = base;
    before.held_ns = 300 * ms;
    // 1020 ms late against 80 ms: 940 ms extra; the parts' 1000 ms are what a share is of.
    const auto v = victim_of(1, w, &before, 940 * ms);
    const auto causes = causes_for(v, j);
    REQUIRE(causes.size() == 2);
    CHECK(causes[0].kind == "cpu");
    CHECK(causes[0].pid == 300);
    CHECK(causes[0].comm == "hog");
    CHECK(causes[0].cgroup == "/hog.slice");
    CHECK(causes[0].share.value_or(0) == Approx(60.0));
    CHECK(causes[0].measure == Approx(6e8));
    CHECK(causes[0].measure_baseline == Approx(0.0));
    CHECK(causes[0].summary == "hog[300] ran while it waited: 60% of the extra time");
    CHECK(causes[1].kind == "wakeup");
    CHECK(causes[1].pid == 77);
    CHECK(causes[1].comm == "writer");
    CHECK(causes[1].share.value_or(0) == Approx(40.0));
    CHECK(causes[1].summary.find("until writer (pid 77) woke it") != std::string::npos);
    CHECK(share_sum(causes) <= 100.0 + 1e-9);
  }
  SECTION("part of its extra lateness has no name: shares of the extra lateness, under 100") {
    w.wait_ns = 1020 * ms; // 400 ms more than its culprits account for
    const auto v = victim_of(1, w, &base, 1400 * ms);
    const auto causes = causes_for(v, j);
    REQUIRE(causes.size() == 2);
    CHECK(causes[0].share.value_or(0) == Approx(100.0 * 600 / 1400));
    CHECK(causes[1].share.value_or(0) == Approx(100.0 * 400 / 1400));
    CHECK(share_sum(causes) < 100.0);
  }
  SECTION("at least half of the wait behind it was an inversion: the cause is one") {
    const inverted_wait inv{1, 300, "hog", "/hog.slice", 400 * ms, 0, 100, 1, 98};
    e.inv[{1, culprit_key{0, 300, "hog", "/hog.slice"}}] = &inv;
    const auto causes = causes_for(victim_of(1, w, &base, 1000 * ms), j);
    REQUIRE_FALSE(causes.empty());
    CHECK(causes[0].kind == "inversion");
    CHECK(causes[0].pid == 300);
    CHECK(causes[0].summary ==
          "hog[300] (SCHED_FIFO 1) ran ahead of it at nice -20: 60% of the extra time");
  }
}

TEST_CASE("causes_for: an io cause names the process whose I/O grew most, its own process left "
          "out",
          "[explain][stages]") {
  const thread_stats base = stats_of(103, 100, "web", 100 * ms, 0, 0, "/web.slice");
  const thread_stats w = stats_of(103, 100, "web", 20 * ms, 0, 500 * ms, "/web.slice");
  evidence e;
  e.pressures["/web.slice"] = {pressure_sum{}, pressure_sum{}};
  const period window{t0, t0 + 60'000 * ms, 60'000 * ms};
  const judge j{e, window, rate{fifth}, static_cast<double>(fifth)};
  // 520 ms late against 20 ms: all of its 500 ms extra blocked in D.
  const auto v = victim_of(1, w, &base, 500 * ms);

  SECTION("the I/O that grew, most first (as gather orders it)") {
    constexpr std::int64_t gib = 1LL << 30;
    e.io.push_back({io_sum{100, "web", "/web.slice", 8 * gib, 0}, 0});
    e.io.push_back({io_sum{400, "backup", "/backup.slice", 2 * gib, 0}, 100LL << 20});
    e.io.push_back({io_sum{0, "kworker", "/", 0, gib}, 0}); // a rollup: named, no pid
    const auto causes = causes_for(v, j);
    REQUIRE(causes.size() == 1);
    const auto &c = causes[0];
    CHECK(c.kind == "io");
    CHECK(c.pid == 400);
    CHECK(c.comm == "backup");
    CHECK(c.cgroup == "/backup.slice");
    CHECK(c.share.value_or(0) == Approx(100.0));
    CHECK(c.measure == Approx(5e8));
    CHECK(c.measure_baseline == Approx(0.0));
    INFO(c.summary);
    CHECK(c.summary.find("the I/O that grew: backup[400] (2.00 GiB read, 0 B written; 100 MiB at "
                         "its baseline rate), kworker (") != std::string::npos);
    CHECK(c.summary.find("web[100]") == std::string::npos);
  }
  SECTION("no I/O grew: no culprit, why() shows where it blocked") {
    const auto causes = causes_for(v, j);
    REQUIRE(causes.size() == 1);
    CHECK(causes[0].kind == "io");
    CHECK_FALSE(causes[0].pid.has_value());
    CHECK_FALSE(causes[0].comm.has_value());
    CHECK(causes[0].summary.ends_with("; why() shows where"));
  }
}

TEST_CASE("causes_for: throttling up to all of the extra, then migrations and pressure as "
          "evidence",
          "[explain][stages]") {
  const thread_stats base = stats_of(400, 400, "api", 100 * ms, 0, 0, "/api.slice");
  const thread_stats w = stats_of(400, 400, "api", 600 * ms, 0, 0, "/api.slice");
  evidence e;
  pressure_sum now, before;
  now.throttled_ns = 12'000 * ms;
  now.throttled_cgroup = "/api.slice";
  now.victim_some_pct = 60.0;
  now.system_some_pct = 20.0;
  before.victim_some_pct = 5.0;
  before.system_some_pct = 3.0;
  e.pressures["/api.slice"] = {now, before};
  e.mig_w[1] = 300;
  e.mig_b[1] = 30;
  const period window{t0, t0 + 60'000 * ms, 60'000 * ms};
  const judge j{e, window, rate{fifth}, static_cast<double>(fifth)};
  const auto causes = causes_for(victim_of(1, w, &base, 580 * ms), j);
  REQUIRE(causes.size() == 3);
  CHECK(causes[0].kind == "throttle");
  CHECK(causes[0].cgroup == "/api.slice");
  CHECK(causes[0].share.value_or(0) == Approx(100.0)); // 12 s of 580 ms: up to all of it
  CHECK(causes[1].kind == "migration");
  CHECK_FALSE(causes[1].share.has_value());
  CHECK(causes[1].in == cause_row::unit::count);
  CHECK(causes[1].measure == Approx(300.0));
  CHECK(causes[1].measure_baseline == Approx(6.0));
  CHECK(causes[2].kind == "pressure");
  CHECK(causes[2].in == cause_row::unit::pct);
  CHECK(causes[2].cgroup == "/api.slice");
  CHECK(causes[2].summary == "CPU pressure 60% in /api.slice (5% before)");

  // Fewer than 10 migrations more than the baseline rate's, PSI under 10 points above: nothing.
  e.mig_w[1] = 15;
  e.pressures["/api.slice"].first.victim_some_pct = 14.0;
  const auto fewer = causes_for(victim_of(1, w, &base, 580 * ms), j);
  REQUIRE(fewer.size() == 1);
  CHECK(fewer[0].kind == "throttle");
}

namespace {

// A read-only connection to a database file, as the query functions see it.
struct connection {
  sqlite3 *db = nullptr;
  explicit connection(const std::string &path) {
    REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  }
  connection(const connection &) = delete;
  connection &operator=(const connection &) = delete;
  ~connection() { sqlite3_close(db); }
};

period baseline(sqlite3 *db, std::int64_t a, std::int64_t b, std::int64_t first,
                std::optional<std::int64_t> annotation = std::nullopt) {
  explain_scope s;
  s.a = a;
  s.b = b;
  s.annotation = annotation;
  auto p = baseline_of(db, s, first);
  INFO("error: " << (p.ok() ? std::string() : p.err().msg));
  REQUIRE(p.ok());
  return *p;
}

} // namespace

TEST_CASE_METHOD(new_db,
                 "baseline_of: the nearest stretch before the window, as long as it and at least "
                 "5 minutes, outside other annotations' windows",
                 "[explain][stages]") {
  // 20 minutes recorded, in intervals of 10 s.
  for (int i = 0; i < 120; ++i) {
    write_ok(w, make_interval(t0 + i * 10 * sec, {make_thread(10, "api", {1'000'000})}));
  }
  connection c(path);
  const auto at = [](std::int64_t s) { return t0 + s * sec; };

  // A minute: the 5 minutes just before it, all recorded.
  auto p = baseline(c.db, at(1140), at(1200), at(1140));
  CHECK(p.a == at(840));
  CHECK(p.b == at(1140));
  CHECK(p.recorded_ns == 300 * sec);
  // From the window's first interval, not from where it was asked to start.
  p = baseline(c.db, at(1145), at(1200), at(1140));
  CHECK(p.a == at(840));
  CHECK(p.b == at(1140));
  // 8 minutes: 8 minutes before it.
  p = baseline(c.db, at(720), at(1200), at(720));
  CHECK(p.a == at(240));
  CHECK(p.b == at(720));
  // Too near the oldest record for a clean one: the stretch just before, as explain always took.
  p = baseline(c.db, at(120), at(180), at(120));
  CHECK(p.a == at(-180));
  CHECK(p.b == at(120));
  CHECK(p.recorded_ns == 120 * sec);

  // Another incident in the way (1); rschedd's own note (2), a point in time (3) are not.
  raw_exec(path, fmt::format("INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                             "created_ns) VALUES ({}, {}, 't', 'earlier', '', 0), ({}, {}, "
                             "'rschedd', 'a note', '', 0), ({}, NULL, 't', 'a deploy', '', 0)",
                             at(1000), at(1050), at(700), at(1100), at(900)));
  auto others = other_incidents(c.db, std::nullopt);
  REQUIRE(others.ok());
  CHECK(*others == std::vector<stretch>{{at(1000), at(1050)}});
  p = baseline(c.db, at(1140), at(1200), at(1140));
  CHECK(p.a == at(700));
  CHECK(p.b == at(1000));
  CHECK(p.recorded_ns == 300 * sec);
  // The annotation explained is not in its own way.
  others = other_incidents(c.db, 1);
  REQUIRE(others.ok());
  CHECK(others->empty());
  p = baseline(c.db, at(1140), at(1200), at(1140), 1);
  CHECK(p.a == at(840));
  CHECK(p.b == at(1140));
}
