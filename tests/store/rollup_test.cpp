// Schema 3: rollup tiers (1 minute, 1 hour) that are exact merges of the raw intervals, views
// that show each moment once from the finest tier kept, retention by age and by size, space
// given back to the file system, thread identities collected, and the upgrade of a real
// version 2 database (recorded by the previous rschedd). Schema 4: the delay clock and the
// segment drops of each interval, their rollups, and the upgrade of a real version 3 database.
#include "rsched/query/reader.hpp"
#include "rsched/query/tier_plan.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

using namespace store_test;
using rsched::store::retention;

namespace {

// An hour boundary (1'699'999'200 s = 472222 h), so bucket edges are easy to name.
constexpr std::int64_t t0 = 1'699'999'200LL * sec;
constexpr std::int64_t step = 10 * sec; // interval length of the synthetic history

// One synthetic interval at `start`: three threads with every per-thread metric, two CPUs,
// perf event values, counter times and schedstat deltas, all drawn from `rng`.
rsched::store::interval_row synthetic(std::int64_t start, std::mt19937_64 &rng) {
  auto draw = [&](std::size_t n, unsigned max_shift) {
    std::vector<std::uint64_t> v;
    for (std::size_t i = 0; i < n; ++i) {
      v.push_back((1000 + rng() % 1000) << (rng() % max_shift));
    }
    return v;
  };
  std::vector<rsched::store::thread_row> threads;
  const char *comms[] = {"alpha", "beta", "gamma"};
  for (std::uint32_t i = 0; i < 3; ++i) {
    auto t = make_thread(100 + i, comms[i], draw(1 + rng() % 20, 16),
                         {rng() % 4, rng() % 4, rng() % 70});
    t.m[metric::slice_voluntary] = value_of(layout::latency, draw(rng() % 5, 12));
    t.m[metric::slice_involuntary] = value_of(layout::latency, draw(rng() % 3, 12));
    t.m[metric::sleep] = value_of(layout::latency, draw(rng() % 4, 20));
    t.m[metric::migration_rate] = value_of(layout::count, {rng() % 5, rng() % 300});
    t.migrations = rng() % 7;
    t.cross_ccx = t.migrations / 2;
    if (rng() % 3 == 0) { // I/O in some intervals only (no row otherwise)
      t.io_read_bytes = rng() % 1'000'000;
      t.io_write_bytes = rng() % 100'000'000;
    }
    t.events = {{0, 1 + rng() % 100000}};
    t.event_rates = {{0, value_of(layout::log2, {rng() % 100000}).hist}};
    threads.push_back(std::move(t));
  }
  std::vector<rsched::store::cpu_row> cpus(2);
  for (std::uint32_t c = 0; c < 2; ++c) {
    cpus[c].cpu = c;
    const auto d = draw(1 + rng() % 30, 14);
    cpus[c].m[metric::cpu_sched_delay].hist = latency_hist(d);
    cpus[c].m[metric::cpu_sched_delay].count = d.size();
    for (auto v : d) {
      cpus[c].m[metric::cpu_sched_delay].total += v;
    }
    cpus[c].m[metric::cpu_idle] = value_of(layout::latency, draw(rng() % 10, 20));
  }
  auto iv = make_interval(start, std::move(threads), std::move(cpus));
  iv.dur_ns = step;
  iv.groups = 1 | 2 | 4 | 16 | 32;
  iv.drops[0] = rng() % 2;
  iv.events = {{"cs", 1, 3}};
  iv.counter_times = {{0, "cs", 5, 4}, {1, "cs", 7, 7}};
  iv.schedstat_cpu = {{0, "sched_count", static_cast<std::int64_t>(rng() % 50)},
                      {1, "ttwu_count", static_cast<std::int64_t>(1 + rng() % 50)}};
  iv.collect_ns = 1000;
  iv.rss_bytes = static_cast<std::int64_t>(1000 + rng() % 1000);
  return iv;
}

// Calls maintain() until a call has nothing left to do; returns the summed report.
rsched::store::maintenance_report settle(writer &w, std::int64_t now) {
  rsched::store::maintenance_report sum;
  for (int i = 0; i < 100000; ++i) {
    auto r = w.maintain(now);
    INFO("maintain: " << (r.ok() ? std::string() : r.err().msg));
    REQUIRE(r.ok());
    sum.buckets_built += r->buckets_built;
    sum.rows_deleted += r->rows_deleted;
    sum.threads_deleted += r->threads_deleted;
    sum.pages_freed += r->pages_freed;
    sum.over_size = sum.over_size || r->over_size;
    if (r->idle()) {
      return sum;
    }
  }
  FAIL("maintenance never settled");
  return sum;
}

// `hours` hours (and 30 s more) of synthetic 10 s intervals from t0, maintained after each
// write with `keep` as the daemon does; returns the end time.
std::int64_t record(writer &w, int hours, const retention &keep, std::uint64_t seed = 42) {
  std::mt19937_64 rng(seed);
  w.set_retention(keep);
  std::int64_t t = t0;
  for (; t < t0 + hours * hour + 30 * sec; t += step) {
    write_ok(w, synthetic(t, rng));
    auto r = w.maintain(t + step);
    REQUIRE(r.ok());
  }
  return t;
}

// Per comm over [a, b) of `view`: samples, exact total and the merged histogram (hex).
std::vector<std::vector<std::string>> per_comm(reader &r, const std::string &view, std::int64_t a,
                                               std::int64_t b, const std::string &extra = "") {
  auto t = run(r, "SELECT comm, sum(count), sum(total_ns), hex(hist_merge(hist)) FROM " + view +
                      " WHERE ts >= " + std::to_string(a) + " AND ts < " + std::to_string(b) +
                      extra + " GROUP BY comm ORDER BY comm");
  std::vector<std::vector<std::string>> out;
  for (const auto &row : t.rows) {
    out.push_back({as_text(row[0]), std::to_string(as_int(row[1])), std::to_string(as_int(row[2])),
                   as_text(row[3])});
  }
  return out;
}

// Sums of every other metric over [a, b) of the views with suffix `sfx` ("" = finest).
std::vector<std::int64_t> other_sums(reader &r, const std::string &sfx, std::int64_t a,
                                     std::int64_t b) {
  const std::string w = " WHERE ts >= " + std::to_string(a) + " AND ts < " + std::to_string(b);
  std::vector<std::int64_t> out;
  for (const std::string q :
       {"SELECT sum(voluntary_count) + sum(involuntary_count) * 1000 FROM timeslice",
        "SELECT sum(voluntary_ns) FROM timeslice", "SELECT sum(count) FROM sleep",
        "SELECT sum(total_ns) FROM sleep", "SELECT sum(count + cross_ccx) FROM migration",
        "SELECT sum(seconds) FROM migration_rate", "SELECT sum(value) FROM perf_events",
        "SELECT hist_count(hist_merge(rate_hist)) FROM perf_events",
        "SELECT sum(count) FROM cpu_sched_delay", "SELECT sum(total_ns) FROM cpu_idle",
        "SELECT hist_pct(hist_merge(hist), 99) FROM cpu_idle",
        "SELECT sum(running_ns) FROM perf_counter_time", "SELECT sum(delta) FROM schedstat_cpu",
        "SELECT sum(count) FROM runq_depth",
        "SELECT hist_pct(hist_merge(hist), 50) FROM runq_depth",
        "SELECT sum(read_bytes) + 3 * sum(write_bytes) FROM io",
        "SELECT count(DISTINCT comm) FROM io"}) {
    // Insert the suffix after the view name (the last word of the query).
    const auto sp = q.rfind(' ');
    std::string sql = q.substr(0, sp + 1);
    sql.append(q, sp + 1).append(sfx).append(w);
    out.push_back(scalar_int(r, sql));
  }
  return out;
}

// `hours` of synthetic history in a fresh file, rolled up, nothing deleted yet.
struct history {
  temp_dir dir;
  std::string path = dir.file("rsched.db");
  writer w = open_writer(path);
  std::int64_t end;
  reader r;
  explicit history(int hours)
      : end(record(w, hours, forever())), r((settle(w, end), open_reader(path))) {}
};

} // namespace

TEST_CASE("rollups are exact: every tier gives the same counts, totals and histograms",
          "[store][rollup]") {
  history h(2);
  // references into h (not a structured binding: clang 14 cannot capture one in a lambda)
  auto &w = h.w;
  auto &r = h.r;
  auto &end = h.end;

  // Every complete minute and hour was built; the one in progress was not.
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1") == 120);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 2") == 2);
  CHECK(scalar_int(r, "SELECT built_ns FROM tiers WHERE tier = 1") == t0 + 2 * hour);
  CHECK(scalar_int(r, "SELECT built_ns FROM tiers WHERE tier = 2") == t0 + 2 * hour);
  // A rollup interval covers what its sources recorded.
  CHECK(scalar_int(r, "SELECT min(dur_ns) FROM intervals WHERE tier = 1") == minute);
  CHECK(scalar_int(r, "SELECT max(dur_ns) FROM intervals WHERE tier = 2") == hour);
  CHECK(scalar_int(r, "SELECT sum(drops_task_state) FROM intervals WHERE tier = 0 AND start_ns < " +
                          std::to_string(t0 + 2 * hour)) ==
        scalar_int(r, "SELECT sum(drops_task_state) FROM intervals WHERE tier = 2"));
  CHECK(scalar_int(r, "SELECT groups FROM intervals WHERE tier = 2 LIMIT 1") ==
        (1 | 2 | 4 | 16 | 32));

  // Rollup rows are per (comm, cgroup): thread and process ids are 0 there.
  CHECK(scalar_int(r, "SELECT count(DISTINCT tid) FROM sched_delay_1m") == 1);
  CHECK(scalar_int(r, "SELECT max(tid) + max(pid) FROM sched_delay_1h") == 0);
  CHECK(scalar_int(r, "SELECT count(DISTINCT comm) FROM sched_delay_1h") == 3);

  // Nothing was deleted: the finest views show raw rows only, nothing twice.
  CHECK(scalar_int(r, "SELECT count(DISTINCT tier) FROM sched_delay") == 1);
  CHECK(scalar_int(r, "SELECT max(tier) FROM sched_delay") == 0);

  const auto raw = per_comm(r, "sched_delay", t0, t0 + 2 * hour);
  REQUIRE(raw.size() == 3);
  CHECK(per_comm(r, "sched_delay_1m", t0, t0 + 2 * hour) == raw);
  CHECK(per_comm(r, "sched_delay_1h", t0, t0 + 2 * hour) == raw);
  // A window of whole minutes inside an hour: the 1-minute tier alone.
  CHECK(per_comm(r, "sched_delay_1m", t0 + 14 * minute, t0 + 19 * minute) ==
        per_comm(r, "sched_delay", t0 + 14 * minute, t0 + 19 * minute));
  // p99 over an hour from the 1-hour tier is the p99 of the raw samples, not a mean of p99s.
  CHECK(scalar_int(r, "SELECT hist_percentile(hist, 99) FROM sched_delay_1h WHERE comm = 'beta' "
                      "AND ts = " +
                          std::to_string(t0)) ==
        scalar_int(r, "SELECT hist_percentile(hist, 99) FROM sched_delay WHERE comm = 'beta' AND "
                      "ts >= " +
                          std::to_string(t0) + " AND ts < " + std::to_string(t0 + hour)));

  const auto sums = other_sums(r, "", t0, t0 + 2 * hour);
  CHECK(sums.at(sums.size() - 2) > 0); // thread_io rows were written
  CHECK(sums.back() == 3);
  CHECK(other_sums(r, "_1m", t0, t0 + 2 * hour) == sums);
  CHECK(other_sums(r, "_1h", t0, t0 + 2 * hour) == sums);

  // Health sums and maxima roll up too.
  CHECK(scalar_int(r, "SELECT sum(collect_ns) FROM intervals WHERE tier = 2") ==
        scalar_int(r, "SELECT sum(collect_ns) FROM intervals WHERE tier = 0 AND start_ns < " +
                          std::to_string(t0 + 2 * hour)));
  CHECK(scalar_int(r, "SELECT max(rss_bytes) FROM intervals WHERE tier = 2") ==
        scalar_int(r, "SELECT max(rss_bytes) FROM intervals WHERE tier = 0 AND start_ns < " +
                          std::to_string(t0 + 2 * hour)));

  // Maintenance is idempotent: once settled, calling again changes nothing.
  const auto n = scalar_int(r, "SELECT count(*) FROM intervals");
  auto again = w.maintain(end);
  REQUIRE(again.ok());
  CHECK(again->idle());
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == n);
}

TEST_CASE("retention by age: the views switch to the rollups, each moment counted once",
          "[store][rollup]") {
  history h(3);
  // references into h (not a structured binding: clang 14 cannot capture one in a lambda)
  auto &w = h.w;
  auto &r = h.r;
  auto &end = h.end;
  const auto all = per_comm(r, "sched_delay", t0, end);
  const auto sums = other_sums(r, "", t0, end);
  const auto raw_rows = scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0");

  // Raw kept 50 minutes: older raw intervals go, the 1-minute rollups take their place.
  retention keep = forever();
  keep.keep_raw_ns = 50 * minute;
  w.set_retention(keep);
  auto rep = settle(w, end);
  CHECK(rep.rows_deleted > 0);
  const std::int64_t cut0 = (end - 50 * minute) / minute * minute;
  CHECK(scalar_int(r, "SELECT cutoff_ns FROM tiers WHERE tier = 0") == cut0);
  CHECK(scalar_int(r, "SELECT min(start_ns) FROM intervals WHERE tier = 0") >= cut0);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0") < raw_rows);
  // The finest views: 1-minute rows before the cutoff, raw after it, the same totals as before.
  CHECK(scalar_int(r, "SELECT max(ts) FROM sched_delay WHERE tier = 1") < cut0);
  CHECK(scalar_int(r, "SELECT min(ts) FROM sched_delay WHERE tier = 0") >= cut0);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE tier = 2") == 0);
  CHECK(per_comm(r, "sched_delay", t0, end) == all);
  CHECK(other_sums(r, "", t0, end) == sums);
  // The timeline has no hole and no overlap: 100 % covered.
  CHECK(scalar_int(r, "SELECT CAST(round(coverage_pct) AS INTEGER) FROM coverage(" +
                          std::to_string(t0) + ", " + std::to_string(t0 + 3 * hour) + ")") == 100);

  // 1-minute rollups kept 2 hours: the first hour comes from the 1-hour tier.
  keep.keep_1m_ns = 2 * hour;
  w.set_retention(keep);
  settle(w, end);
  CHECK(scalar_int(r, "SELECT cutoff_ns FROM tiers WHERE tier = 1") == t0 + hour);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE tier = 2") == 3);
  CHECK(scalar_int(r, "SELECT count(DISTINCT tier) FROM sched_delay") == 3);
  // A window inside one rollup row finds that row (the table functions bound start_ns from
  // below by the longest interval the timeline shows there: an hour here, a minute later on).
  const auto covered = [&](std::int64_t a, std::int64_t b) {
    return scalar_int(r, "SELECT CAST(round(coverage_pct) AS INTEGER) FROM coverage(" +
                             std::to_string(a) + ", " + std::to_string(b) + ")");
  };
  CHECK(covered(t0 + 30 * minute, t0 + 40 * minute) == 100);
  CHECK(covered(t0 + hour + 90 * sec, t0 + hour + 100 * sec) == 100);
  CHECK(per_comm(r, "sched_delay", t0, end) == all);
  CHECK(other_sums(r, "", t0, end) == sums);

  // 1-hour rollups kept 2 hours: the first hour is gone from every view.
  keep.keep_1h_ns = 2 * hour;
  w.set_retention(keep);
  settle(w, end);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE ts < " + std::to_string(t0 + hour)) ==
        0);
  CHECK(per_comm(r, "sched_delay", t0 + hour, end) ==
        per_comm(r, "sched_delay", t0, end)); // what is left starts at t0 + 1 h
  CHECK(as_text(run(r, "PRAGMA integrity_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE("retention by size: the oldest raw rows go first, space goes back to the file system",
          "[store][rollup]") {
  history h(3);
  // references into h (not a structured binding: clang 14 cannot capture one in a lambda)
  auto &w = h.w;
  auto &r = h.r;
  auto &end = h.end;
  const auto &path = h.path;
  const auto all = per_comm(r, "sched_delay", t0, end);
  raw_exec(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  const auto size_before = fs::file_size(path);
  auto sz = w.size();
  REQUIRE(sz.ok());
  const auto used_before = sz->first;

  retention keep = forever();
  keep.max_bytes = used_before / 2;
  w.set_retention(keep);
  auto rep = settle(w, end);
  CHECK(rep.over_size);
  CHECK(rep.rows_deleted > 0);
  CHECK(rep.pages_freed > 0);
  // Raw rows went down to the hour that is always kept (whole minutes of it: at most 1 h 59 s);
  // the rollups still hold everything.
  CHECK(scalar_int(r, "SELECT max(start_ns) - min(start_ns) FROM intervals WHERE tier = 0") <
        hour + minute);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1") > 0);
  CHECK(per_comm(r, "sched_delay", t0, end) == all);
  // The pages are really returned: no free pages left, and the file shrinks on checkpoint.
  CHECK(scalar_int(r, "PRAGMA freelist_count") == 0);
  raw_exec(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  CHECK(fs::file_size(path) < size_before);
  sz = w.size();
  REQUIRE(sz.ok());
  CHECK(sz->first < used_before);
}

TEST_CASE_METHOD(
    new_db, "thread identities are deleted with their last rows, and come back when seen again",
    "[store][rollup]") {
  w.set_retention(forever());
  // Thread "old" only in the first 10 minutes, "new" only 5 hours later.
  for (std::int64_t t = t0; t < t0 + 10 * minute; t += step) {
    write_ok(w, make_interval(t, {make_thread(7, "old", {5'000})}));
    REQUIRE(w.maintain(t).ok());
  }
  const std::int64_t later = t0 + 5 * hour;
  for (std::int64_t t = later; t < later + 2 * minute; t += step) {
    write_ok(w, make_interval(t, {make_thread(8, "new", {5'000})}));
    REQUIRE(w.maintain(t).ok());
  }
  settle(w, later + 2 * minute);
  auto r = open_reader(path);
  // Each thread's own identity (raw rows) and its (comm, cgroup) group identity (rollups).
  CHECK(scalar_int(r, "SELECT count(*) FROM thread") == 4);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread WHERE boot_id = '' AND tid = 0") == 2);

  retention keep = forever();
  keep.keep_raw_ns = 10 * minute;
  keep.keep_1m_ns = 20 * minute;
  keep.keep_1h_ns = 2 * hour;
  w.set_retention(keep);
  auto rep = settle(w, later + 2 * minute);
  CHECK(rep.threads_deleted == 2); // both identities of "old"
  CHECK(scalar_int(r, "SELECT count(*) FROM thread WHERE comm = 'old'") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread WHERE comm = 'new'") == 2);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE comm = 'new'") > 0);
  // The same identity seen again gets a new row (the writer's cache forgot the deleted id).
  write_ok(w, make_interval(later + 3 * minute, {make_thread(7, "old", {6'000})}));
  CHECK(scalar_int(r, "SELECT sum(count) FROM sched_delay WHERE comm = 'old'") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_hist WHERE thread_id NOT IN "
                      "(SELECT id FROM thread)") == 0);
}

TEST_CASE("a real version 2 database is upgraded in place and its history rolled up",
          "[store][rollup]") {
  // tests/store/data/v2.db: 3 s recorded by rschedd at schema 2 (commit 80046b7) with
  // -g latency,slice,sleep,migration, checkpointed.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v2.db", path);
  std::vector<std::vector<std::string>> before;
  std::int64_t t_end = 0;
  {
    auto r = open_reader(path); // read-only: sees version 2 as it is
    CHECK(scalar_int(r, "PRAGMA user_version") == 2);
    CHECK(scalar_int(r, "PRAGMA auto_vacuum") == 0);
    CHECK(columns_of(r, "sched_delay").size() == 9);
    before = per_comm(r, "sched_delay", 0, INT64_MAX);
    REQUIRE_FALSE(before.empty());
    t_end = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
    // rsched-sql's window functions work on it without the timeline view.
    CHECK(scalar_int(r, "SELECT CAST(round(coverage_pct) AS INTEGER) FROM coverage()") == 100);
  }
  auto w = open_writer(path);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "PRAGMA auto_vacuum") == 2); // incremental, after the one VACUUM
  CHECK(columns_of(r, "sched_delay").size() == 10);
  CHECK(per_comm(r, "sched_delay", 0, INT64_MAX) == before);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread WHERE last_ns = 0") == 0);
  // New intervals two minutes later: the old minute is rolled up, exactly.
  std::mt19937_64 rng(7);
  const std::int64_t next = (t_end / minute + 2) * minute;
  write_ok(w, synthetic(next, rng));
  settle(w, next + step);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1") >= 1);
  const std::int64_t m0 = scalar_int(r, "SELECT min(start_ns) FROM intervals WHERE tier = 1");
  CHECK(per_comm(r, "sched_delay_1m", m0, next) == per_comm(r, "sched_delay", m0, next));
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE_METHOD(new_db,
                 "a reader holding a snapshot does not block the writer, the WAL shrinks after it",
                 "[store][rollup]") {
  w.set_retention(forever());
  std::mt19937_64 rng(3);
  // Threads with wide histograms: ~40 KB of rows per interval.
  auto interval = [&](std::int64_t t) {
    std::vector<rsched::store::thread_row> threads;
    for (std::uint32_t i = 0; i < 200; ++i) {
      std::vector<std::uint64_t> d;
      d.reserve(40);
      for (int k = 0; k < 40; ++k) {
        d.push_back(1000 + rng() % 100'000'000);
      }
      threads.push_back(make_thread(1000 + i, "w" + std::to_string(i % 20), d));
    }
    return make_interval(t, std::move(threads));
  };
  const std::string wal = path + "-wal";
  // A read transaction held open, as a long query would.
  sqlite3 *rdb = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &rdb, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_exec(rdb, "BEGIN; SELECT count(*) FROM intervals;", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  std::int64_t t = t0;
  for (int i = 0; i < 600; ++i, t += step) {
    write_ok(w, interval(t)); // never busy: WAL readers do not block the writer
    REQUIRE(w.maintain(t).ok());
  }
  const auto held = fs::file_size(wal);
  CHECK(held > 16u << 20); // the checkpoint cannot pass the reader's snapshot
  sqlite3_exec(rdb, "COMMIT", nullptr, nullptr, nullptr);
  sqlite3_close(rdb);
  // Once the reader is gone, the next checkpoint completes and the WAL restarts, truncated to
  // the journal size limit (16 MiB).
  for (int i = 0; i < 200; ++i, t += step) {
    write_ok(w, interval(t));
  }
  CHECK(fs::file_size(wal) <= 16u << 20);
  CHECK(fs::file_size(wal) < held);
}

// Schema 4: the delay clock of every interval and the segment drops.
TEST_CASE_METHOD(new_db,
                 "the delay clock and segment drops are recorded per interval, shown in health and "
                 "rolled up ('mixed' when a bucket's intervals used two clocks)",
                 "[store][rollup]") {
  // Minute 0: monotonic only; minute 1: monotonic then runqueue; minute 2: latency not recorded.
  for (int i = 0; i < 18; ++i) {
    auto iv = make_interval(t0 + i * step, {make_thread(1, "a", {1'000})});
    iv.groups = 1;
    if (i < 6) {
      iv.delay_clock = "monotonic";
    } else if (i < 12) {
      iv.delay_clock = i < 9 ? "monotonic" : "runqueue";
    } else {
      iv.delay_clock.clear();
      iv.groups = 2;
    }
    iv.drops[RSCHED_DROP_SEGMENT] = static_cast<std::uint64_t>(i);
    write_ok(w, iv);
  }
  write_ok(w, make_interval(t0 + 5 * minute, {make_thread(1, "a", {1'000})}));
  settle(w, t0 + 5 * minute + step);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM health WHERE delay_clock = 'monotonic'") == 9);
  CHECK(scalar_int(r, "SELECT count(*) FROM health WHERE delay_clock = 'runqueue'") == 3);
  CHECK(scalar_int(r, "SELECT count(*) FROM health WHERE delay_clock IS NULL") == 7);
  CHECK(scalar_int(r, "SELECT drops_segment FROM health WHERE ts = " +
                          std::to_string(t0 + 4 * step)) == 4);
  // health.drops counts them with the other drops
  CHECK(scalar_int(r, "SELECT drops FROM health WHERE ts = " + std::to_string(t0 + 4 * step)) == 4);
  const auto clock_of = [&](std::int64_t m) {
    return as_text(run(r, "SELECT delay_clock FROM intervals WHERE tier = 1 AND start_ns = " +
                              std::to_string(t0 + m * minute))
                       .rows.at(0)
                       .at(0));
  };
  CHECK(clock_of(0) == "monotonic");
  CHECK(clock_of(1) == "mixed");
  CHECK(run(r, "SELECT delay_clock IS NULL FROM intervals WHERE tier = 1 AND start_ns = " +
                   std::to_string(t0 + 2 * minute))
            .rows.at(0)
            .at(0) == rsched::query::value{std::int64_t{1}});
  CHECK(scalar_int(r, "SELECT drops_segment FROM intervals WHERE tier = 1 AND start_ns = " +
                          std::to_string(t0 + minute)) == 6 + 7 + 8 + 9 + 10 + 11);
}

TEST_CASE("a real version 3 database is upgraded in place to the current version",
          "[store][rollup]") {
  // tests/store/data/v3.db: 3 s recorded by rschedd at schema 3 (commit 97f2bea, runqueue
  // delay clock) with -g latency,slice,sleep,migration.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v3.db", path);
  std::vector<std::vector<std::string>> before;
  std::int64_t n = 0;
  {
    auto r = open_reader(path); // read-only: sees version 3 as it is
    CHECK(scalar_int(r, "PRAGMA user_version") == 3);
    CHECK(columns_of(r, "health").size() == 13);
    before = per_comm(r, "sched_delay", 0, INT64_MAX);
    REQUIRE_FALSE(before.empty());
    n = scalar_int(r, "SELECT count(*) FROM intervals");
  }
  auto w = open_writer(path);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(per_comm(r, "sched_delay", 0, INT64_MAX) == before);
  // Old intervals say nothing of their clock, and lost no segments.
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE delay_clock IS NULL") == n);
  CHECK(scalar_int(r, "SELECT sum(drops_segment) FROM intervals") == 0);
  CHECK(scalar_int(r, "SELECT sum(unseen_events) FROM intervals") == 0);
  CHECK(columns_of(r, "health").size() == 17);
  CHECK(scalar_int(r, "SELECT count(*) FROM health WHERE delay_clock IS NULL") == n);
  // New intervals record their clock next to the old ones.
  const std::int64_t next = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
  auto iv = make_interval(next, {make_thread(1, "new", {1'000})});
  iv.groups = 1;
  iv.delay_clock = "monotonic";
  write_ok(w, iv);
  CHECK(scalar_int(r, "SELECT count(*) FROM health WHERE delay_clock = 'monotonic'") == 1);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
  // A second open finds the current version: nothing to do.
  auto w2 = writer::open(path);
  CHECK_FALSE(w2.ok()); // one writer per database; the first still holds it
}

TEST_CASE("health.drops sums every drop counter including drops_segment, and the clock is "
          "stored as written",
          "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    const char *clocks[] = {"monotonic", "runqueue", ""};
    for (int i = 0; i < 3; ++i) {
      auto iv = make_interval(t0 + i * step, {make_thread(1, "a", {1'000})});
      iv.groups = i < 2 ? 1 : 2;
      iv.delay_clock = clocks[i];
      // One bit per counter: task_state 1, graveyard 2, stale_tid 4, no_rq 8, too_long 16,
      // perf_read 32, segment 64, unseen 128 (times i + 1).
      for (std::size_t d = 0; d <= RSCHED_DROP_UNSEEN; ++d) {
        iv.drops[d] = static_cast<std::uint64_t>(i + 1) << d;
      }
      write_ok(w, iv);
    }
  }
  auto r = open_reader(path);
  const auto t = run(r, "SELECT delay_clock, drops_segment, drops_perf_read, "
                        "discarded_too_long FROM intervals WHERE tier = 0 ORDER BY start_ns");
  REQUIRE(t.rows.size() == 3);
  CHECK(as_text(t.rows[0][0]) == "monotonic");
  CHECK(as_text(t.rows[1][0]) == "runqueue");
  CHECK(is_null(t.rows[2][0])); // empty: the latency group was not recorded
  for (std::size_t i = 0; i < 3; ++i) {
    const auto k = static_cast<std::int64_t>(i + 1);
    CHECK(as_int(t.rows[i][1]) == 64 * k);
    CHECK(as_int(t.rows[i][2]) == 32 * k);
    CHECK(as_int(t.rows[i][3]) == 16 * k);
  }
  const auto h = run(r, "SELECT drops, discarded_too_long, delay_clock, drops_segment, "
                        "typeof(delay_clock), unseen_events FROM health ORDER BY ts");
  REQUIRE(h.rows.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("interval " << i);
    const auto k = static_cast<std::int64_t>(i + 1);
    // 1 + 2 + 4 + 8 + 32 + 64: every drop, not the samples discarded on purpose (16) nor the
    // events recovered from the kernel's account (128: not a loss)
    CHECK(as_int(h.rows[i][0]) == 111 * k);
    CHECK(as_int(h.rows[i][1]) == 16 * k);
    CHECK(as_int(h.rows[i][3]) == 64 * k);
    CHECK(as_int(h.rows[i][5]) == 128 * k);
  }
  CHECK(as_text(h.rows[0][2]) == "monotonic");
  CHECK(as_text(h.rows[1][2]) == "runqueue");
  CHECK(as_text(h.rows[2][4]) == "null");
}

TEST_CASE_METHOD(new_db,
                 "the 1-hour rollup keeps the one clock of its minutes or says 'mixed', and sums "
                 "drops_segment and unseen_events through both tiers",
                 "[store][rollup]") {
  w.set_retention(forever());
  // Hour 0: monotonic throughout; hour 1: monotonic except one runqueue interval in minute 30.
  const std::int64_t runqueue_at = t0 + hour + 30 * minute + 2 * step;
  std::int64_t n = 0;
  for (std::int64_t t = t0; t < t0 + 2 * hour; t += step, ++n) {
    auto iv = make_interval(t, {make_thread(1, "a", {1'000})});
    iv.dur_ns = step;
    iv.groups = 1;
    iv.delay_clock = t == runqueue_at ? "runqueue" : "monotonic";
    iv.drops[RSCHED_DROP_SEGMENT] = 1;
    iv.drops[RSCHED_DROP_UNSEEN] = 2;
    write_ok(w, iv);
  }
  write_ok(w, make_interval(t0 + 2 * hour + 5 * minute, {make_thread(1, "a", {1'000})}));
  settle(w, t0 + 2 * hour + 5 * minute + step);
  auto r = open_reader(path);
  const auto clock_of = [&](int tier, std::int64_t start) {
    return as_text(run(r, "SELECT delay_clock FROM intervals WHERE tier = " + std::to_string(tier) +
                              " AND start_ns = " + std::to_string(start))
                       .rows.at(0)
                       .at(0));
  };
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1 AND start_ns < " +
                          std::to_string(t0 + 2 * hour)) == 120);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1 AND delay_clock = 'mixed'") ==
        1);
  CHECK(clock_of(1, t0 + hour + 30 * minute) == "mixed");
  CHECK(clock_of(1, t0 + hour + 31 * minute) == "monotonic");
  CHECK(clock_of(2, t0) == "monotonic");
  CHECK(clock_of(2, t0 + hour) == "mixed"); // a 'mixed' minute makes a 'mixed' hour
  CHECK(scalar_int(r, "SELECT drops_segment FROM intervals WHERE tier = 1 AND start_ns = " +
                          std::to_string(t0 + 7 * minute)) == 6);
  CHECK(scalar_int(r, "SELECT drops_segment FROM intervals WHERE tier = 2 AND start_ns = " +
                          std::to_string(t0 + hour)) == 360);
  CHECK(scalar_int(r, "SELECT sum(drops_segment) FROM intervals WHERE tier = 2") == n);
  CHECK(scalar_int(r, "SELECT sum(drops_segment) FROM intervals WHERE tier = 1") == n);
  CHECK(scalar_int(r, "SELECT unseen_events FROM intervals WHERE tier = 2 AND start_ns = " +
                          std::to_string(t0 + hour)) == 720);
  CHECK(scalar_int(r, "SELECT sum(unseen_events) FROM intervals WHERE tier = 1") == 2 * n);
}

// The rollup's rule (docs/SCHEMA.md): 'mixed' only when the sources used two clocks. An
// interval that did not record the latency group (NULL, groups without bit 0) used no clock and
// does not make its bucket 'mixed'; an interval written before version 4 that did record it
// (NULL, groups bit 0: its clock is unknown) does.
TEST_CASE_METHOD(new_db,
                 "a rollup ignores intervals that recorded no latency when it names the clock",
                 "[store][rollup]") {
  for (int i = 0; i < 6; ++i) {
    // Minute 0: three monotonic intervals, then three of `-g slice` (no latency, no clock).
    auto iv = make_interval(t0 + i * step, {make_thread(1, "a", {1'000})});
    iv.groups = i < 3 ? 1 : 2;
    iv.delay_clock = i < 3 ? "monotonic" : "";
    write_ok(w, iv);
    // Minute 1: three latency intervals of unknown clock (as upgraded from version 3), then
    // three monotonic ones.
    auto old = make_interval(t0 + minute + i * step, {make_thread(1, "a", {1'000})});
    old.groups = 1;
    old.delay_clock = i < 3 ? "" : "monotonic";
    write_ok(w, old);
  }
  write_ok(w, make_interval(t0 + 5 * minute, {make_thread(1, "a", {1'000})}));
  settle(w, t0 + 5 * minute + step);
  auto r = open_reader(path);
  const auto clock_of = [&](std::int64_t start) {
    return as_text(run(r, "SELECT coalesce(delay_clock, 'NULL') FROM intervals WHERE tier = 1 "
                          "AND start_ns = " +
                              std::to_string(start))
                       .rows.at(0)
                       .at(0));
  };
  CHECK(clock_of(t0) == "monotonic");
  CHECK(clock_of(t0 + minute) == "mixed");
}

// ---- Schema 10: the main views answer from the coarsest exact tier --------------------------

TEST_CASE("plan_tiers: whole hours from the 1-hour tier, whole minutes from the 1-minute tier",
          "[store][rollup][tiers]") {
  using rsched::query::plan_tiers;
  using rsched::query::tier_bounds;
  using rsched::query::tier_segment;
  tier_bounds b;
  b.built = {0, t0 + 3 * hour + 5 * minute, t0 + 3 * hour};
  const std::vector<std::int64_t> none;
  // Ragged start and end: the view, then minutes, hours, minutes, the view.
  CHECK(plan_tiers(t0 + 90 * sec, t0 + 2 * hour + 3 * minute + 7 * sec, b, none) ==
        std::vector<tier_segment>{
            {0, t0 + 90 * sec, t0 + 2 * minute},
            {1, t0 + 2 * minute, t0 + hour},
            {2, t0 + hour, t0 + 2 * hour},
            {1, t0 + 2 * hour, t0 + 2 * hour + 3 * minute},
            {0, t0 + 2 * hour + 3 * minute, t0 + 2 * hour + 3 * minute + 7 * sec}});
  // Past what is built: the view (the minute in progress, the hour not rolled up yet).
  CHECK(plan_tiers(t0 + 3 * hour, t0 + 4 * hour, b, none) ==
        std::vector<tier_segment>{{1, t0 + 3 * hour, t0 + 3 * hour + 5 * minute},
                                  {0, t0 + 3 * hour + 5 * minute, t0 + 4 * hour}});
  // A late raw interval: its minute from the view, its hour from minutes.
  CHECK(plan_tiers(t0, t0 + 2 * hour, b, {t0 + hour + 10 * minute}) ==
        std::vector<tier_segment>{{2, t0, t0 + hour},
                                  {1, t0 + hour, t0 + hour + 10 * minute},
                                  {0, t0 + hour + 10 * minute, t0 + hour + 11 * minute},
                                  {1, t0 + hour + 11 * minute, t0 + 2 * hour}});
  // Deleted by retention: the 1-hour tier before its cutoff (the view shows nothing there
  // either), minutes before theirs.
  b.cutoff = {t0 + 2 * hour, t0 + hour + 30 * minute, t0 + hour};
  CHECK(plan_tiers(t0, t0 + 2 * hour, b, none) ==
        std::vector<tier_segment>{{0, t0, t0 + hour}, {2, t0 + hour, t0 + 2 * hour}});
  b.cutoff = {0, 0, 0};
  // A window inside one minute: the view alone.
  CHECK(plan_tiers(t0 + 5 * sec, t0 + 50 * sec, b, none) ==
        std::vector<tier_segment>{{0, t0 + 5 * sec, t0 + 50 * sec}});
  // Before the epoch's minute boundaries too (negative times round down).
  b.cutoff.fill(std::numeric_limits<std::int64_t>::min());
  CHECK(plan_tiers(-90 * sec, 0, b, none) ==
        std::vector<tier_segment>{{0, -90 * sec, -60 * sec}, {1, -60 * sec, 0}});
}

namespace {

// The tier-invariant questions of every kind of view, {V} standing for the view's name.
const std::vector<std::pair<std::string, std::string>> routed_questions = {
    {"sched_delay", "SELECT comm, sum(count), sum(total_ns), hex(hist_merge(hist)), "
                    "hist_percentile(hist, 99) FROM {V} {W} GROUP BY comm ORDER BY comm"},
    {"cpu_sched_delay",
     "SELECT cpu, sum(count), hex(hist_merge(hist)) FROM {V} {W} GROUP BY cpu ORDER BY cpu"},
    {"runq_depth", "SELECT comm, hist_percentile(hist, 50) FROM {V} {W} GROUP BY comm ORDER BY 1"},
    {"timeslice", "SELECT comm, sum(voluntary_count), sum(involuntary_ns), "
                  "hex(hist_merge(voluntary_hist)) FROM {V} {W} GROUP BY comm ORDER BY 1"},
    {"migration", "SELECT comm, sum(count), sum(cross_ccx) FROM {V} {W} GROUP BY comm ORDER BY 1"},
    {"perf_events", "SELECT event, sum(value) FROM {V} {W} GROUP BY event ORDER BY 1"},
    {"schedstat_cpu",
     "SELECT cpu, field, sum(delta) FROM {V} {W} GROUP BY cpu, field ORDER BY 1, 2"},
    {"cpu_idle", "SELECT hist_percentile(hist, 99), sum(total_ns) FROM {V} {W}"},
};

std::string routed_sql(const std::string &q, const std::string &view, const std::string &where) {
  std::string s = q;
  s.replace(s.find("{V}"), 3, view);
  s.replace(s.find("{W}"), 3, where);
  return s;
}

} // namespace

TEST_CASE("the main views answer whole minutes and hours from the rollups, as the finest tier "
          "would",
          "[store][rollup][tiers]") {
  history h(4);
  // references into h (not a structured binding: clang 14 cannot capture one in a lambda)
  auto &w = h.w;
  auto &r = h.r;
  auto &end = h.end;
  // A raw interval written after its minute was rolled up (a restart within the minute): that
  // minute, and its hour, must come from raw rows.
  std::mt19937_64 rng(7);
  write_ok(w, synthetic(t0 + hour + 10 * minute + 5 * sec, rng));
  settle(w, end);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0 AND flags & 4 <> 0") == 1);
  // A gap of 50 minutes (the daemon stopped), then 40 more minutes of history.
  for (std::int64_t t = end + 50 * minute; t < end + 90 * minute; t += step) {
    write_ok(w, synthetic(t, rng));
    REQUIRE(w.maintain(t + step).ok());
  }
  end += 90 * minute;
  settle(w, end);

  // Phases of retention, as in the test above: everything kept; raw kept 2 hours; 1-minute
  // rows kept 3 hours as well.
  retention keep = forever();
  for (int phase = 0; phase < 3; ++phase) {
    if (phase == 1) {
      keep.keep_raw_ns = 2 * hour;
    } else if (phase == 2) {
      keep.keep_1m_ns = 3 * hour;
    }
    w.set_retention(keep);
    settle(w, end);
    // A fresh reader each phase (the writer's retention is seen by any connection anyway).
    auto rr = open_reader(h.path);
    std::mt19937_64 pick(100 + static_cast<unsigned>(phase));
    int rollup_scans = 0;
    for (int n = 0; n < 60; ++n) {
      // Windows from before the history to past its end, whole or ragged, open or closed.
      const std::int64_t a =
          t0 - 10 * minute + static_cast<std::int64_t>(pick() % (5 * 3600)) * sec;
      const std::int64_t len = static_cast<std::int64_t>(pick() % (3 * 3600)) * sec;
      std::string where =
          "WHERE ts >= " + std::to_string(pick() % 3 == 0 ? a / minute * minute : a);
      if (pick() % 4 != 0) {
        where += " AND ts < " + std::to_string(a + len);
      }
      for (const auto &[view, q] : routed_questions) {
        INFO("phase " << phase << ": " << routed_sql(q, view, where));
        const auto routed = run(rr, routed_sql(q, view, where)).rows;
        for (const auto &t : rr.take_tier_reads()) {
          rollup_scans += t.tier > 0 ? 1 : 0;
        }
        CHECK(routed == run(rr, routed_sql(q, "main." + view, where)).rows);
      }
    }
    CHECK(rollup_scans > 100); // the rollups did answer
  }
}

TEST_CASE("what a routed view read, and why a scan read the finest tier",
          "[store][rollup][tiers]") {
  history h(3);
  auto &r = h.r;
  const std::string win = " WHERE ts >= " + std::to_string(t0 + 30 * sec) + " AND ts < " +
                          std::to_string(t0 + 2 * hour);
  run(r, "SELECT comm, hist_percentile(hist, 99) FROM sched_delay" + win + " GROUP BY comm");
  auto reads = r.take_tier_reads();
  REQUIRE(reads.size() == 3);
  CHECK(reads[0].tier == 0); // the ragged 30 s at the start
  CHECK(reads[0].from == t0 + 30 * sec);
  CHECK(reads[0].to == t0 + minute);
  CHECK(reads[1].tier == 1);
  CHECK(reads[1].to == t0 + hour);
  CHECK(reads[2].tier == 2);
  CHECK(reads[2].from == t0 + hour);
  CHECK(reads[2].rows == 3); // three comms, one hour
  CHECK(r.take_tier_reads().empty());

  const auto why = [&](const std::string &sql) {
    run(r, sql);
    auto rs = r.take_tier_reads();
    REQUIRE(rs.size() == 1);
    CHECK(rs[0].tier == 0);
    return rs[0].why;
  };
  CHECK_THAT(why("SELECT tid, sum(count) FROM sched_delay" + win + " GROUP BY tid"),
             Catch::Contains("per-thread column"));
  CHECK_THAT(why("SELECT comm, count(*) FROM sched_delay" + win + " GROUP BY comm"),
             Catch::Contains("count()"));
  CHECK_THAT(why("SELECT ts / 600000000000, sum(count) FROM sched_delay" + win + " GROUP BY 1"),
             Catch::Contains("ts other than"));
  CHECK_THAT(why("SELECT DISTINCT comm FROM sched_delay" + win), Catch::Contains("lists rows"));
  CHECK_THAT(why("SELECT comm, sum(count) FROM sched_delay" + win + " AND count > 3 GROUP BY comm"),
             Catch::Contains("count other than summed"));
  r.set_tier_routing(false);
  CHECK_FALSE(r.tier_routing());
  CHECK_THAT(why("SELECT comm, sum(count) FROM sched_delay" + win + " GROUP BY comm"),
             Catch::Contains("routing is off"));
  r.set_tier_routing(true);

  // Many raw rows: one remark per scan, naming the view and the reason.
  std::vector<std::string> notes;
  r.on_notice([&](const std::string &s) { notes.push_back(s); }, 1000);
  run(r, "SELECT tid, sum(count) FROM sched_delay" + win + " GROUP BY tid");
  REQUIRE(notes.size() == 1);
  CHECK_THAT(notes[0], Catch::Contains("sched_delay: 1000 rows read from the finest tier") &&
                           Catch::Contains("per-thread column"));
  run(r, "SELECT comm, sum(count) FROM sched_delay" + win + " GROUP BY comm");
  CHECK(notes.size() == 1); // routed: 30 s of raw rows only
  r.take_tier_reads();

  // main.VIEW is the file's own view; the routed one has its columns and answers text bounds
  // as the view does (numeric affinity of ts).
  std::vector<std::string> file_view;
  for (const auto &row : run(r, "SELECT name FROM pragma_table_info('sched_delay', 'main')").rows) {
    file_view.push_back(as_text(row[0]));
  }
  CHECK(columns_of(r, "sched_delay") == file_view);
  CHECK(scalar_int(r, "SELECT count(*) FROM sqlite_temp_master WHERE name = 'sched_delay'") == 1);
  CHECK(scalar_int(r, "SELECT sum(count) FROM sched_delay WHERE ts >= '" + std::to_string(t0) +
                          "' AND comm = 'beta'") ==
        scalar_int(r, "SELECT sum(count) FROM main.sched_delay WHERE ts >= " + std::to_string(t0) +
                          " AND comm = 'beta'"));
  // A constraint other than on ts or tid reaches the view as a filter, +(col op ?), so that an
  // automatic index on thread(comm) cannot drive the join (one lookup per thread so named and
  // interval): the comparison inside keeps the column's affinity, as the file's view does.
  const std::string since = " WHERE ts >= " + std::to_string(t0);
  for (const std::string cond : {" AND tid = '101'", " AND pid = '100'", " AND comm = 'beta'",
                                 " AND comm IN ('beta', 'gamma')", " AND cgroup >= ''",
                                 " AND comm > 'alpha'", " AND tid < '102'"}) {
    INFO(cond);
    const std::string q = "SELECT tid, comm, sum(count), hist_percentile(hist, 99) FROM ";
    const std::string tail = since + cond + " GROUP BY tid, comm ORDER BY tid, comm";
    const auto routed = run(r, std::string(q).append("sched_delay").append(tail)).rows;
    CHECK_FALSE(routed.empty());
    CHECK(routed == run(r, std::string(q).append("main.sched_delay").append(tail)).rows);
  }
  CHECK(scalar_int(r, "SELECT sum(count) FROM cpu_sched_delay" + since + " AND cpu = '1'") ==
        scalar_int(r, "SELECT sum(count) FROM main.cpu_sched_delay" + since + " AND cpu = 1"));
}

TEST_CASE("the version 10 upgrade marks the raw intervals of minutes their rollup misses",
          "[store][rollup][tiers]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  std::int64_t end = 0;
  {
    auto w = open_writer(path);
    end = record(w, 1, forever());
    settle(w, end);
    std::mt19937_64 rng(3);
    write_ok(w, synthetic(t0 + 20 * minute + 5 * sec, rng)); // after its minute was built
    settle(w, end);
  }
  // As a version 9 file had it: no mark, no index.
  raw_exec(path,
           "UPDATE intervals SET flags = flags & ~4; DROP INDEX intervals_late; "
           "UPDATE meta SET value = '9' WHERE key = 'schema_version'; PRAGMA user_version = 9");
  { auto w = open_writer(path); }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // Every raw interval of that minute (six of 10 s and the late one), nothing else.
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE flags & 4 <> 0") == 7);
  CHECK(scalar_int(r, "SELECT min(start_ns) FROM intervals WHERE flags & 4 <> 0") ==
        t0 + 20 * minute);
  CHECK(scalar_int(r, "SELECT max(start_ns) FROM intervals WHERE flags & 4 <> 0") ==
        t0 + 20 * minute + 50 * sec);
  // And the views answer that hour from raw rows and minutes, exactly.
  const std::string q = "SELECT comm, sum(count), hex(hist_merge(hist)) FROM {V} {W} GROUP BY comm "
                        "ORDER BY comm";
  const std::string where = "WHERE ts >= " + std::to_string(t0);
  const auto routed = run(r, routed_sql(q, "sched_delay", where)).rows;
  bool finest_late_minute = false;
  for (const auto &t : r.take_tier_reads()) {
    finest_late_minute = finest_late_minute || (t.tier == 0 && t.from == t0 + 20 * minute);
  }
  CHECK(finest_late_minute);
  CHECK(routed == run(r, routed_sql(q, "main.sched_delay", where)).rows);
}

TEST_CASE("compare() reads whole minutes and hours from the rollups, with the same answer",
          "[store][rollup][tiers]") {
  history h(4);
  // references into h (not a structured binding: clang 14 cannot capture one in a lambda)
  auto &w = h.w;
  auto &r = h.r;
  auto &end = h.end;
  std::mt19937_64 rng(11);
  write_ok(w, synthetic(t0 + 2 * hour + 30 * minute + 5 * sec, rng)); // a late raw interval
  // One that crosses a minute's end (as rschedd's 1 s intervals do), late as well.
  write_ok(w, synthetic(t0 + 3 * hour + 55 * sec, rng));
  retention keep = forever();
  keep.keep_raw_ns = 2 * hour; // and raw rows gone before the last two hours
  w.set_retention(keep);
  settle(w, end);
  // A window whose end cuts the minute after the crossing interval's start.
  const std::string fixed = "SELECT * FROM compare(" + std::to_string(t0) + ", " +
                            std::to_string(t0 + hour) + ", " + std::to_string(t0 + 2 * hour) +
                            ", " + std::to_string(t0 + 3 * hour + minute + 30 * sec) + ")";
  const auto fixed_routed = run(r, fixed).rows;
  r.set_tier_routing(false);
  CHECK(fixed_routed == run(r, fixed).rows);
  r.set_tier_routing(true);
  std::mt19937_64 pick(5);
  for (int n = 0; n < 40; ++n) {
    const auto at = [&] {
      return t0 - 5 * minute + static_cast<std::int64_t>(pick() % (4 * 3600 + 600)) * sec;
    };
    std::int64_t a1 = at();
    std::int64_t a2 = at();
    std::int64_t b1 = at();
    std::int64_t b2 = at();
    if (a1 > a2) {
      std::swap(a1, a2);
    }
    if (b1 > b2) {
      std::swap(b1, b2);
    }
    for (const char *by : {"comm", "cpu"}) {
      const std::string sql = "SELECT * FROM compare(" + std::to_string(a1) + ", " +
                              std::to_string(a2) + ", " + std::to_string(b1) + ", " +
                              std::to_string(b2) + ", '" + by + "')";
      INFO(sql);
      r.set_tier_routing(true);
      const auto routed = run(r, sql).rows;
      r.set_tier_routing(false);
      CHECK(routed == run(r, sql).rows);
    }
  }
  r.set_tier_routing(true);
}

namespace {

// Two hours and two minutes of history from t0, then the wall clock set back 47 minutes under
// the recorder: 55 more minutes from t0 + 75 min, whose first 46 are written late into minutes
// (and, to t0 + 2 h, an hour) already rolled up. Maintained after each write with `keep` as the
// daemon does: its now is the data's time (rschedd's maintenance_now), which goes back with the
// step. Returns the latest end.
std::int64_t record_with_step_back(writer &w, const retention &keep) {
  std::mt19937_64 rng(7);
  w.set_retention(keep);
  std::int64_t end = t0;
  for (std::int64_t t = t0; t < t0 + 2 * hour + 2 * minute; t += step) {
    write_ok(w, synthetic(t, rng));
    end = t + step;
    REQUIRE(w.maintain(end).ok());
  }
  for (std::int64_t t = t0 + 75 * minute; t < t0 + 2 * hour + 10 * minute; t += step) {
    write_ok(w, synthetic(t, rng));
    end = std::max(end, t + step);
    REQUIRE(w.maintain(t + step).ok());
  }
  return end;
}

} // namespace

TEST_CASE("intervals written late (the clock set back) are rolled up into their minute and hour "
          "exactly, and retention keeps them until they are",
          "[store][rollup][clock]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::int64_t end = 0;
  {
    writer w = open_writer(path);
    end = record_with_step_back(w, forever());
    const auto sum = settle(w, end);
    (void)sum;
  }
  reader r = open_reader(path);
  const auto all = " WHERE ts >= " + std::to_string(t0) + " AND ts < " + std::to_string(end);
  // 46 minutes of raw intervals were written into built minutes: each minute and hour holds
  // them in a second rollup interval, and none waits any more.
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0") == 732 + 330);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE flags & 4 <> 0") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1 AND start_ns >= " +
                          std::to_string(t0 + 75 * minute) + " AND start_ns < " +
                          std::to_string(t0 + 2 * hour)) == 2 * 45);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 2 AND start_ns = " +
                          std::to_string(t0)) == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 2 AND start_ns = " +
                          std::to_string(t0 + hour)) == 2);
  // Every tier sums to the raw intervals, over every built hour and any window of minutes.
  const auto raw = per_comm(r, "main.sched_delay", t0, t0 + 2 * hour);
  REQUIRE(raw.size() == 3);
  CHECK(per_comm(r, "sched_delay_1m", t0, t0 + 2 * hour) == raw);
  CHECK(per_comm(r, "sched_delay_1h", t0, t0 + 2 * hour) == raw);
  CHECK(per_comm(r, "sched_delay_1m", t0 + 80 * minute, t0 + 83 * minute) ==
        per_comm(r, "main.sched_delay", t0 + 80 * minute, t0 + 83 * minute));
  CHECK(other_sums(r, "_1m", t0, t0 + 2 * hour) == other_sums(r, "", t0, t0 + 2 * hour));
  CHECK(other_sums(r, "_1h", t0, t0 + 2 * hour) == other_sums(r, "", t0, t0 + 2 * hour));
  // The routed view (whole hours and minutes from the rollups) answers as the raw rows do.
  CHECK(per_comm(r, "sched_delay", t0, end) == per_comm(r, "main.sched_delay", t0, end));
  const auto truth = scalar_int(r, "SELECT sum(count) FROM main.sched_delay" + all);

  SECTION("retention deletes no interval written late before its rollup holds it") {
    temp_dir d2;
    const std::string p2 = d2.file("rsched.db");
    writer w = open_writer(p2);
    retention keep = forever();
    keep.keep_raw_ns = 30 * minute;
    const std::int64_t e2 = record_with_step_back(w, keep);
    REQUIRE(e2 == end);
    settle(w, e2);
    reader r2 = open_reader(p2);
    CHECK(scalar_int(r2, "SELECT count(*) FROM intervals WHERE flags & 4 <> 0") == 0);
    // Each moment once, from the finest tier kept: every sample is there.
    CHECK(scalar_int(r2, "SELECT sum(count) FROM main.sched_delay" + all) == truth);
    CHECK(scalar_int(r2, "SELECT sum(count) FROM sched_delay_1h" + all) ==
          scalar_int(r, "SELECT sum(count) FROM sched_delay_1h" + all));
  }
}
