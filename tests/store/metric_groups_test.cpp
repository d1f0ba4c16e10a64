// The metric groups' tables of rsched::store (schema version 2): the slice, sleep, waking,
// migration, perf, CPU idle, counter time and schedstat tables and views, and the in-place upgrade
// of version 1 databases.
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <ctime>
#include <map>
#include <string>
#include <vector>

using namespace store_test;
using rsched::stats::histogram;

namespace {

// The schema of rsched 0.1 (schema version 1), verbatim from git history
// (`git show bea33f2:modules/store/src/schema.cpp`): the upgrade is tested on what version 1
// really created, not on what today's code believes it created.
const char *const v1_schema = R"sql(
CREATE TABLE meta(
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
);
CREATE TABLE intervals(
  id                 INTEGER PRIMARY KEY,
  start_ns           INTEGER NOT NULL,           -- UTC (CLOCK_REALTIME) ns at interval start
  dur_ns             INTEGER NOT NULL,           -- length, CLOCK_MONOTONIC ns
  boot_id            TEXT NOT NULL,              -- /proc/sys/kernel/random/boot_id
  flags              INTEGER NOT NULL DEFAULT 0, -- bit 0: final (partial) interval of a run
  drops_task_state   INTEGER NOT NULL DEFAULT 0,
  drops_graveyard    INTEGER NOT NULL DEFAULT 0,
  drops_stale_tid    INTEGER NOT NULL DEFAULT 0,
  drops_no_rq        INTEGER NOT NULL DEFAULT 0,
  discarded_too_long INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX intervals_start_ns ON intervals(start_ns);
CREATE TABLE metric(
  id     INTEGER PRIMARY KEY,
  name   TEXT NOT NULL UNIQUE,
  unit   TEXT NOT NULL,
  layout INTEGER NOT NULL                        -- histogram layout id (blob byte 0)
);
INSERT INTO metric(id, name, unit, layout) VALUES
  (1, 'sched_delay', 'ns', 1),
  (2, 'runq_depth', 'tasks', 2);
-- One row per thread identity. cgroup '' = unknown (NOT NULL: UNIQUE treats NULLs as distinct,
-- which would defeat the INSERT OR IGNORE deduplication).
CREATE TABLE thread(
  id            INTEGER PRIMARY KEY,
  boot_id       TEXT NOT NULL,
  tid           INTEGER NOT NULL,
  pid           INTEGER NOT NULL,
  start_time_ns INTEGER NOT NULL,                -- task start, ns since boot
  comm          TEXT NOT NULL,                   -- exact kernel bytes, not necessarily UTF-8
  cgroup        TEXT NOT NULL DEFAULT '',
  UNIQUE(boot_id, tid, start_time_ns, comm, cgroup)
);
CREATE TABLE thread_hist(
  interval_id INTEGER NOT NULL,
  metric      INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL,
  count       INTEGER NOT NULL,
  total       INTEGER NOT NULL,
  hist        BLOB NOT NULL,
  PRIMARY KEY(interval_id, metric, thread_id)
) WITHOUT ROWID;
CREATE TABLE cpu_hist(
  interval_id INTEGER NOT NULL,
  metric      INTEGER NOT NULL,
  cpu         INTEGER NOT NULL,
  count       INTEGER NOT NULL,
  total       INTEGER NOT NULL,
  hist        BLOB NOT NULL,
  PRIMARY KEY(interval_id, metric, cpu)
) WITHOUT ROWID;
-- The views name intervals first with CROSS JOIN, which fixes it as the outer loop: a range on
-- ts then uses intervals_start_ns and reads only the matching (interval_id, metric) ranges of
-- the hist tables. Left to itself (no ANALYZE statistics) the planner scans all of thread_hist.
CREATE VIEW sched_delay AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, h.count AS count, h.total AS total_ns, h.hist AS hist
  FROM intervals AS i
  CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric = 1
  JOIN thread AS t ON t.id = h.thread_id;
CREATE VIEW cpu_sched_delay AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, c.cpu AS cpu, c.count AS count,
         c.total AS total_ns, c.hist AS hist
  FROM intervals AS i
  CROSS JOIN cpu_hist AS c ON c.interval_id = i.id AND c.metric = 1;
CREATE VIEW runq_depth AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, h.count AS count, h.hist AS hist
  FROM intervals AS i
  CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric = 2
  JOIN thread AS t ON t.id = h.thread_id;
)sql";

constexpr std::int64_t t0 = 1'700'000'000'000'000'000;
constexpr std::int64_t step = 10'000'000'000;

histogram decoded(const value &v) {
  auto h = rsched::stats::decode(as_blob(v));
  REQUIRE(h.ok());
  return *h;
}

// A thread with no v1 data at all (only what a test adds).
rsched::store::thread_row bare_thread(std::uint32_t tid, std::string comm) {
  return make_thread(tid, std::move(comm), {});
}

bool has_object(reader &r, const std::string &type, const std::string &name) {
  return scalar_int(r, "SELECT count(*) FROM sqlite_master WHERE type = '" + type +
                           "' AND name = '" + name + "'") == 1;
}

// A database file exactly as rsched 0.1 left it: v1 schema, meta, header pragmas, WAL, and one
// interval with two threads (sched_delay + runq_depth) and one CPU.
void make_v1_database(const std::string &path) {
  const auto h1 = blob_literal(latency_hist({1'500, 25'000, 700'000}));
  const auto h2 = blob_literal(latency_hist({9'000}));
  const auto d1 = blob_literal(depth_hist({0, 1, 2}));
  raw_exec(path, std::string("PRAGMA journal_mode = WAL;") + "BEGIN;" + v1_schema +
                     "INSERT INTO meta(key, value) VALUES ('schema_version', '1'), "
                     "('created_ns', '1690000000000000000'), ('hostname', 'old-host'), "
                     "('kernel_release', '6.1.0'), ('rsched_version', '0.1.0'), "
                     "('hist_layouts', '1=latency ...; 2=depth ...');"
                     "INSERT INTO intervals(id, start_ns, dur_ns, boot_id, flags, drops_no_rq) "
                     "VALUES (1, 1690000000000000000, 10000000000, 'boot-a', 1, 7);"
                     "INSERT INTO thread(id, boot_id, tid, pid, start_time_ns, comm, cgroup) "
                     "VALUES (1, 'boot-a', 11, 10, 500, 'old-a', '/a'), "
                     "(2, 'boot-a', 12, 10, 600, 'old-b', '');"
                     "INSERT INTO thread_hist VALUES (1, 1, 1, 3, 726500, " +
                     h1 + "), (1, 1, 2, 1, 9000, " + h2 + "), (1, 2, 1, 3, 3, " + d1 + ");" +
                     "INSERT INTO cpu_hist VALUES (1, 1, 0, 3, 726500, " + h1 + ");" +
                     "PRAGMA application_id = 1920164712; PRAGMA user_version = 1; COMMIT;");
}

using row_t = std::vector<value>;

std::vector<row_t> v1_query(reader &r) {
  return run(r, "SELECT ts, dur, tid, pid, comm, cgroup, count, total_ns, hist FROM sched_delay "
                "ORDER BY tid")
      .rows;
}

} // namespace

TEST_CASE("v2 and v3 tables and views have exactly the documented columns", "[store]") {
  auto r = open_reader(":memory:", false);
  using v = std::vector<std::string>;
  const v ident = {"ts", "dur", "tid", "pid", "comm", "cgroup"};
  auto with = [&](const v &extra) {
    v out = ident;
    out.insert(out.end(), extra.begin(), extra.end());
    out.emplace_back("tier"); // schema 3: every data view ends with the tier of its rows
    return out;
  };
  CHECK(columns_of(r, "timeslice") ==
        with({"voluntary_count", "involuntary_count", "voluntary_hist", "involuntary_hist",
              "total_ns", "voluntary_ns", "involuntary_ns"}));
  CHECK(columns_of(r, "sleep") == with({"count", "total_ns", "hist"}));
  CHECK(columns_of(r, "waking_delay") == with({"count", "total_ns", "hist"}));
  CHECK(columns_of(r, "cpu_idle") ==
        v{"ts", "dur", "cpu", "count", "total_ns", "hist", "tier", "llc", "node"}); // llc, node: v9
  CHECK(columns_of(r, "migration") == with({"count", "cross_ccx", "cross_numa"}));
  CHECK(columns_of(r, "migration_rate") ==
        with({"seconds", "total", "hist", "cross_ccx_hist", "cross_numa_hist"}));
  CHECK(columns_of(r, "perf") ==
        with({"user_cycles", "kernel_cycles", "user_instructions", "kernel_instructions"}));
  CHECK(columns_of(r, "perf_events") == with({"event", "value", "rate_hist"}));
  CHECK(columns_of(r, "perf_counter_time") ==
        v{"ts", "dur", "cpu", "counter", "enabled_ns", "running_ns", "tier", "llc", "node"});
  CHECK(columns_of(r, "schedstat_cpu") ==
        v{"ts", "dur", "cpu", "field", "delta", "tier", "llc", "node"});
  CHECK(columns_of(r, "schedstat_domain") ==
        v{"ts", "dur", "cpu", "domain", "name", "field", "delta", "tier", "llc", "node"});

  CHECK(columns_of(r, "thread_migration") ==
        v{"interval_id", "thread_id", "count", "cross_ccx", "cross_numa"});
  CHECK(columns_of(r, "thread_perf") == v{"interval_id", "thread_id", "user_cycles",
                                          "kernel_cycles", "user_instructions",
                                          "kernel_instructions"});
  CHECK(columns_of(r, "perf_event") == v{"id", "name", "type", "config"});
  CHECK(columns_of(r, "thread_perf_event") ==
        v{"interval_id", "event_id", "thread_id", "value", "rate_hist"});
  CHECK(columns_of(r, "counter_time") ==
        v{"interval_id", "cpu", "counter", "enabled_ns", "running_ns"});
  CHECK(columns_of(r, "schedstat_field") == v{"id", "name"});
  CHECK(columns_of(r, "schedstat_domain_def") == v{"id", "cpu", "domain", "name"});
  CHECK(columns_of(r, "schedstat_cpu_delta") == v{"interval_id", "field_id", "cpu", "delta"});
  CHECK(columns_of(r, "schedstat_domain_delta") ==
        v{"interval_id", "field_id", "domain_id", "delta"});

  // Interval-first primary keys, WITHOUT ROWID (no rowid column to select).
  for (const char *t : {"thread_migration", "thread_perf", "thread_perf_event", "counter_time",
                        "schedstat_cpu_delta", "schedstat_domain_delta"}) {
    INFO(t);
    CHECK(scalar_int(r, std::string("SELECT pk FROM pragma_table_info('") + t +
                            "') WHERE name = 'interval_id'") == 1);
    std::string err;
    run(r, std::string("SELECT rowid FROM ") + t, &err);
    CHECK_THAT(err, Catch::Contains("no such column: rowid"));
  }
}

TEST_CASE("time-range queries on the v2 views use the start_ns index", "[store]") {
  auto r = open_reader(":memory:", false);
  const std::vector<std::string> views = {"timeslice",     "sleep",           "waking_delay",
                                          "cpu_idle",      "migration",       "migration_rate",
                                          "perf",          "perf_events",     "perf_counter_time",
                                          "schedstat_cpu", "schedstat_domain"};
  for (const auto &view : views) {
    for (const char *where : {"ts > 10", "ts BETWEEN 10 AND 20"}) {
      INFO(view << " WHERE " << where);
      const std::string details = query_plan(r, "SELECT * FROM main." + view + " WHERE " + where);
      INFO(details);
      CHECK_THAT(details, Catch::Contains("INDEX intervals_start_ns (start_ns>"));
      CHECK(indexed_hist_plan(details));
    }
  }
}

TEST_CASE_METHOD(new_db, "all v2 data round trips through writer and views", "[store]") {

  auto a = bare_thread(201, "both");
  a.m[metric::slice_voluntary] = value_of(layout::latency, {100'000, 250'000});
  a.m[metric::slice_involuntary] = value_of(layout::latency, {4'000'000});
  a.m[metric::sleep] = value_of(layout::latency, {1'000'000, 2'000'000, 30'000'000});
  a.m[metric::waking_delay] = value_of(layout::latency, {3'000, 4'000});
  a.m[metric::migration_rate] = value_of(layout::count, {1, 3, 200});
  a.migrations = 204;
  a.cross_ccx = 20;
  a.cross_numa = 2;
  a.has_ipc = true;
  a.user_cycles = 1'000'000;
  a.kernel_cycles = 200'000;
  a.user_instructions = 2'500'000;
  a.kernel_instructions = 100'000;
  a.events = {{0, 5'000}, {1, 70}};
  a.event_rates = {{0, hist_of(layout::log2, {400, 4'600})}};

  auto b = make_thread(202, "plain", {10'000}); // v1 data only: no row in any v2 view
  b.has_ipc = false;
  b.user_cycles = 999; // not valid without has_ipc: not written

  auto c = bare_thread(203, "ipc-zero"); // has_ipc with all counters 0: no rows, no thread
  c.has_ipc = true;

  rsched::store::cpu_row cpu1;
  cpu1.cpu = 1;
  cpu1.m[metric::cpu_idle] = value_of(layout::latency, {50'000, 60'000, 9'000'000});
  rsched::store::cpu_row cpu2; // sched delay only
  cpu2.cpu = 2;
  cpu2.m[metric::cpu_sched_delay].hist = latency_hist({5'000});
  cpu2.m[metric::cpu_sched_delay].count = 1;
  cpu2.m[metric::cpu_sched_delay].total = 5'000;

  auto iv = make_interval(t0, {a, b, c}, {cpu1, cpu2});
  iv.groups = RSCHED_G_LATENCY | RSCHED_G_SLICE | RSCHED_G_PERF;
  iv.drops[RSCHED_DROP_PERF_READ] = 9;
  iv.events = {{"l2-miss", 8, 0x1234}, {"raw:0xc0", 4, 0xFFFF'0000'0000'00C0}};
  iv.counter_times = {{0, "user_cycles", 10'000'000'000, 5'000'000'000},
                      {0, "l2-miss", 10'000'000'000, 10'000'000'000},
                      {1, "user_cycles", 0, 0}};
  iv.schedstat_cpu = {{0, "run_delay_ns", 123'456}, {0, "sched_count", 0}, {1, "sched_count", -4}};
  iv.schedstat_domain = {{0, 0, "SMT", "lb_count_idle", 3},
                         {0, 1, "MC", "lb_count_idle", 0},
                         {0, 1, "MC", "lb_failed_idle", 1}};
  write_ok(w, iv);

  auto r = open_reader(path);
  auto ivr = run(r, "SELECT groups, drops_perf_read FROM intervals");
  REQUIRE(ivr.rows.size() == 1);
  CHECK(as_int(ivr.rows[0][0]) == 0x23);
  CHECK(as_int(ivr.rows[0][1]) == 9);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread") == 2); // 'ipc-zero' had nothing

  auto ts = run(r, "SELECT ts, dur, tid, pid, comm, cgroup, voluntary_count, involuntary_count, "
                   "voluntary_hist, involuntary_hist, total_ns, voluntary_ns, involuntary_ns "
                   "FROM timeslice");
  REQUIRE(ts.rows.size() == 1);
  const auto &t = ts.rows[0];
  CHECK(as_int(t[0]) == t0);
  CHECK(as_int(t[1]) == iv.dur_ns);
  CHECK(as_int(t[2]) == 201);
  CHECK(as_int(t[3]) == 201);
  CHECK(as_text(t[4]) == "both");
  CHECK(as_text(t[5]) == "");
  CHECK(as_int(t[6]) == 2);
  CHECK(as_int(t[7]) == 1);
  CHECK(decoded(t[8]) == a.m[metric::slice_voluntary].hist);
  CHECK(decoded(t[9]) == a.m[metric::slice_involuntary].hist);
  CHECK(as_int(t[10]) == 4'350'000);
  CHECK(as_int(t[11]) == 350'000);
  CHECK(as_int(t[12]) == 4'000'000);

  for (const auto &[view, want] : std::vector<std::pair<std::string, const hist_value *>>{
           {"sleep", &a.m[metric::sleep]}, {"waking_delay", &a.m[metric::waking_delay]}}) {
    INFO(view);
    auto s = run(r, "SELECT ts, dur, tid, pid, comm, cgroup, count, total_ns, hist FROM " + view);
    REQUIRE(s.rows.size() == 1);
    CHECK(as_int(s.rows[0][0]) == t0);
    CHECK(as_int(s.rows[0][2]) == 201);
    CHECK(as_text(s.rows[0][4]) == "both");
    CHECK(as_int(s.rows[0][6]) == static_cast<std::int64_t>(want->count));
    CHECK(as_int(s.rows[0][7]) == static_cast<std::int64_t>(want->total));
    CHECK(decoded(s.rows[0][8]) == want->hist);
  }

  auto idle = run(r, "SELECT ts, dur, cpu, count, total_ns, hist FROM cpu_idle");
  REQUIRE(idle.rows.size() == 1);
  CHECK(as_int(idle.rows[0][2]) == 1);
  CHECK(as_int(idle.rows[0][3]) == 3);
  CHECK(as_int(idle.rows[0][4]) == 9'110'000);
  CHECK(decoded(idle.rows[0][5]) == cpu1.m[metric::cpu_idle].hist);
  // CPU 1 has idle only, CPU 2 delay only: each view sees its own.
  CHECK(scalar_int(r, "SELECT count(*) FROM cpu_sched_delay") == 1);
  CHECK(scalar_int(r, "SELECT cpu FROM cpu_sched_delay") == 2);

  auto mig = run(r, "SELECT tid, comm, count, cross_ccx, cross_numa FROM migration");
  REQUIRE(mig.rows.size() == 1);
  CHECK(as_int(mig.rows[0][0]) == 201);
  CHECK(as_int(mig.rows[0][2]) == 204);
  CHECK(as_int(mig.rows[0][3]) == 20);
  CHECK(as_int(mig.rows[0][4]) == 2);

  auto rate = run(r, "SELECT tid, seconds, total, hist FROM migration_rate");
  REQUIRE(rate.rows.size() == 1);
  CHECK(as_int(rate.rows[0][1]) == 3);
  CHECK(as_int(rate.rows[0][2]) == 204);
  auto rh = decoded(rate.rows[0][3]);
  CHECK(rh == a.m[metric::migration_rate].hist);
  CHECK(rh.kind == layout::count);

  auto perf = run(r, "SELECT tid, user_cycles, kernel_cycles, user_instructions, "
                     "kernel_instructions, ipc(user_instructions, user_cycles) FROM perf");
  REQUIRE(perf.rows.size() == 1); // 'plain' has no IPC data
  CHECK(as_int(perf.rows[0][0]) == 201);
  CHECK(as_int(perf.rows[0][1]) == 1'000'000);
  CHECK(as_int(perf.rows[0][2]) == 200'000);
  CHECK(as_int(perf.rows[0][3]) == 2'500'000);
  CHECK(as_int(perf.rows[0][4]) == 100'000);
  CHECK(as_real(perf.rows[0][5]) == Approx(2.5));

  auto ev = run(r, "SELECT tid, event, value, rate_hist FROM perf_events ORDER BY event");
  REQUIRE(ev.rows.size() == 2);
  CHECK(as_text(ev.rows[0][1]) == "l2-miss");
  CHECK(as_int(ev.rows[0][2]) == 5'000);
  auto eh = decoded(ev.rows[0][3]);
  CHECK(eh == hist_of(layout::log2, {400, 4'600}));
  CHECK(eh.kind == layout::log2);
  CHECK(as_text(ev.rows[1][1]) == "raw:0xc0");
  CHECK(as_int(ev.rows[1][2]) == 70);
  CHECK(is_null(ev.rows[1][3])); // no rate histogram given
  auto defs = run(r, "SELECT name, type, config, printf('%x', config) FROM perf_event ORDER BY id");
  REQUIRE(defs.rows.size() == 2);
  CHECK(as_int(defs.rows[0][1]) == 8);
  CHECK(as_int(defs.rows[0][2]) == 0x1234);
  CHECK(as_int(defs.rows[1][1]) == 4);
  CHECK(static_cast<std::uint64_t>(as_int(defs.rows[1][2])) == 0xFFFF'0000'0000'00C0);
  CHECK(as_text(defs.rows[1][3]) == "ffff0000000000c0");

  auto ct = run(r, "SELECT ts, dur, cpu, counter, enabled_ns, running_ns FROM perf_counter_time "
                   "ORDER BY cpu, counter");
  REQUIRE(ct.rows.size() == 3); // zeros are written as given
  CHECK(as_int(ct.rows[0][2]) == 0);
  CHECK(as_text(ct.rows[0][3]) == "l2-miss");
  CHECK(as_int(ct.rows[0][4]) == 10'000'000'000);
  CHECK(as_int(ct.rows[0][5]) == 10'000'000'000);
  CHECK(as_text(ct.rows[1][3]) == "user_cycles");
  CHECK(as_int(ct.rows[1][5]) == 5'000'000'000);
  CHECK(as_int(ct.rows[2][2]) == 1);
  CHECK(as_int(ct.rows[2][4]) == 0);

  auto sc = run(r, "SELECT ts, dur, cpu, field, delta FROM schedstat_cpu ORDER BY cpu, field");
  REQUIRE(sc.rows.size() == 2); // the zero delta is skipped
  CHECK(as_int(sc.rows[0][0]) == t0);
  CHECK(as_int(sc.rows[0][2]) == 0);
  CHECK(as_text(sc.rows[0][3]) == "run_delay_ns");
  CHECK(as_int(sc.rows[0][4]) == 123'456);
  CHECK(as_int(sc.rows[1][2]) == 1);
  CHECK(as_text(sc.rows[1][3]) == "sched_count");
  CHECK(as_int(sc.rows[1][4]) == -4);
  // Field names are stored once, including the one whose only delta was 0 (it was looked up).
  CHECK(scalar_int(r, "SELECT count(*) FROM schedstat_field") <= 4);

  auto sd = run(r, "SELECT ts, dur, cpu, domain, name, field, delta FROM schedstat_domain "
                   "ORDER BY domain, field");
  REQUIRE(sd.rows.size() == 2);
  CHECK(as_int(sd.rows[0][2]) == 0);
  CHECK(as_int(sd.rows[0][3]) == 0);
  CHECK(as_text(sd.rows[0][4]) == "SMT");
  CHECK(as_text(sd.rows[0][5]) == "lb_count_idle");
  CHECK(as_int(sd.rows[0][6]) == 3);
  CHECK(as_int(sd.rows[1][3]) == 1);
  CHECK(as_text(sd.rows[1][4]) == "MC");
  CHECK(as_text(sd.rows[1][5]) == "lb_failed_idle");
  CHECK(as_int(sd.rows[1][6]) == 1);

  // Thread 'plain' (v1 data only) is in sched_delay and nowhere else.
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE comm = 'plain'") == 1);
  for (const char *view : {"timeslice", "sleep", "waking_delay", "migration", "migration_rate",
                           "perf", "perf_events"}) {
    INFO(view);
    CHECK(scalar_int(r, std::string("SELECT count(*) FROM ") + view + " WHERE comm = 'plain'") ==
          0);
  }
}

TEST_CASE_METHOD(new_db, "timeslice has one row per thread with voluntary or involuntary slices",
                 "[store]") {
  auto vol = bare_thread(1, "vol-only");
  vol.m[metric::slice_voluntary] = value_of(layout::latency, {10'000, 20'000, 30'000});
  auto invol = bare_thread(2, "invol-only");
  invol.m[metric::slice_involuntary] = value_of(layout::latency, {5'000'000});
  auto both = bare_thread(3, "both");
  both.m[metric::slice_voluntary] = value_of(layout::latency, {1'000});
  both.m[metric::slice_involuntary] = value_of(layout::latency, {2'000, 3'000'000});
  auto none = make_thread(4, "delay-only", {1'000});
  write_ok(w, make_interval(t0, {vol, invol, both, none}));
  write_ok(w, make_interval(t0 + step, {invol}));

  auto r = open_reader(path);
  auto rows = run(r, "SELECT ts, comm, voluntary_count, involuntary_count, voluntary_hist, "
                     "involuntary_hist, total_ns, voluntary_ns, involuntary_ns FROM timeslice "
                     "ORDER BY ts, tid")
                  .rows;
  REQUIRE(rows.size() == 4);
  CHECK(as_text(rows[0][1]) == "vol-only");
  CHECK(as_int(rows[0][2]) == 3);
  CHECK(as_int(rows[0][3]) == 0);
  CHECK(decoded(rows[0][4]) == vol.m[metric::slice_voluntary].hist);
  CHECK(is_null(rows[0][5]));
  CHECK(as_int(rows[0][6]) == 60'000);
  CHECK(as_int(rows[0][7]) == 60'000);
  CHECK(as_int(rows[0][8]) == 0);

  CHECK(as_text(rows[1][1]) == "invol-only");
  CHECK(as_int(rows[1][2]) == 0);
  CHECK(as_int(rows[1][3]) == 1);
  CHECK(is_null(rows[1][4]));
  CHECK(decoded(rows[1][5]) == invol.m[metric::slice_involuntary].hist);
  CHECK(as_int(rows[1][6]) == 5'000'000);
  CHECK(as_int(rows[1][7]) == 0);
  CHECK(as_int(rows[1][8]) == 5'000'000);

  CHECK(as_text(rows[2][1]) == "both");
  CHECK(as_int(rows[2][2]) == 1);
  CHECK(as_int(rows[2][3]) == 2);
  CHECK(as_int(rows[2][6]) == 3'003'000);

  CHECK(as_int(rows[3][0]) == t0 + step);
  CHECK(as_text(rows[3][1]) == "invol-only");

  // NULL hists are skipped by hist_percentile; the per-comm aggregates work across rows.
  auto p = run(r, "SELECT hist_percentile(voluntary_hist, 50) FROM timeslice WHERE comm = "
                  "'invol-only'");
  REQUIRE(p.rows.size() == 1);
  CHECK(is_null(p.rows[0][0]));
  CHECK(scalar_int(r, "SELECT sum(involuntary_count) FROM timeslice") == 4);
  CHECK(scalar_int(r, "SELECT hist_percentile(involuntary_hist, 100) FROM timeslice") ==
        static_cast<std::int64_t>(
            rsched::stats::percentile(latency_hist({5'000'000, 5'000'000, 2'000, 3'000'000}), 100)
                ->value));
}

TEST_CASE_METHOD(new_db,
                 "migration_rate percentiles come from hist_percentile over the count layout",
                 "[store]") {
  // Per-second migration counts of two threads of one program over two intervals.
  const std::vector<std::uint64_t> s1 = {1, 1, 2, 3, 5};
  const std::vector<std::uint64_t> s2 = {8, 13, 21, 34, 55};
  const std::vector<std::uint64_t> s3 = {1'000, 70'000}; // log2 and open-ended buckets
  auto a = bare_thread(1, "mover");
  a.m[metric::migration_rate] = value_of(layout::count, s1);
  auto b = bare_thread(2, "mover");
  b.m[metric::migration_rate] = value_of(layout::count, s2);
  auto c = bare_thread(3, "jumpy");
  c.m[metric::migration_rate] = value_of(layout::count, s3);
  write_ok(w, make_interval(t0, {a, c}));
  write_ok(w, make_interval(t0 + step, {b}));

  auto r = open_reader(path);
  auto q = run(r, "SELECT comm, sum(seconds), sum(total), hist_percentile(hist, 50), "
                  "hist_percentile(hist, 99) FROM migration_rate GROUP BY comm ORDER BY comm");
  REQUIRE(q.rows.size() == 2);
  CHECK(as_text(q.rows[1][0]) == "mover");
  CHECK(as_int(q.rows[1][1]) == 10);
  CHECK(as_int(q.rows[1][2]) == 143);
  CHECK(as_int(q.rows[1][3]) == 5);  // exact below 64: the 5th of 10 samples
  CHECK(as_int(q.rows[1][4]) == 55); // the 10th
  // Above 63 the result is the bucket's interpolation, the same as stats::percentile.
  const auto h3 = hist_of(layout::count, s3);
  CHECK(as_text(q.rows[0][0]) == "jumpy");
  CHECK(as_int(q.rows[0][3]) ==
        static_cast<std::int64_t>(rsched::stats::percentile(h3, 50)->value));
  CHECK(as_int(q.rows[0][3]) >= 512);
  CHECK(as_int(q.rows[0][3]) <= 1'023);
  CHECK(as_int(q.rows[0][4]) == 65'536); // open-ended top bucket: its lower bound
  // Mixing with a latency histogram is an error.
  const auto err = run_error(r, "SELECT hist_percentile(hist, 50) FROM (SELECT hist FROM "
                                "migration_rate UNION ALL SELECT " +
                                    blob_literal(latency_hist({1})) + ")");
  CHECK_THAT(err, Catch::Contains("different layouts"));
}

TEST_CASE("perf events are stored once by name and summed per thread", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const std::vector<rsched::store::perf_event_def> defs = {{"l2-miss", 8, 0x10},
                                                           {"branch-miss", 0, 5}};
  {
    auto w = open_writer(path);
    auto a = bare_thread(1, "a");
    a.events = {{0, 100}, {1, 0}}; // zero value: no row
    a.event_rates = {{0, hist_of(layout::log2, {0, 100})}, {1, hist_of(layout::log2, {7})}};
    auto b = bare_thread(2, "b");
    b.events = {{1, 7}};
    auto iv = make_interval(t0, {a, b});
    iv.events = defs;
    write_ok(w, iv);
    // The same thread listed twice: values summed, rate histograms merged.
    auto a2 = a;
    a2.events = {{0, 50}};
    a2.event_rates = {{0, hist_of(layout::log2, {50})}};
    auto iv2 = make_interval(t0 + step, {a, a2});
    iv2.events = defs;
    write_ok(w, iv2);
  }
  {
    // A new writer (empty caches) with the events in another order and one redefined: the name
    // decides, the first definition stays.
    auto w = open_writer(path);
    auto a = bare_thread(1, "a");
    a.events = {{0, 1}, {1, 2}};
    auto iv = make_interval(t0 + 2 * step, {a});
    iv.events = {{"branch-miss", 0, 5}, {"l2-miss", 9, 0x99}};
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM perf_event") == 2);
  CHECK(scalar_int(r, "SELECT type FROM perf_event WHERE name = 'l2-miss'") == 8);
  CHECK(scalar_int(r, "SELECT config FROM perf_event WHERE name = 'l2-miss'") == 0x10);

  auto rows =
      run(r, "SELECT ts, comm, event, value, rate_hist FROM perf_events ORDER BY ts, comm, event")
          .rows;
  REQUIRE(rows.size() == 5);
  CHECK(as_text(rows[0][1]) == "a");
  CHECK(as_text(rows[0][2]) == "l2-miss");
  CHECK(as_int(rows[0][3]) == 100);
  CHECK(decoded(rows[0][4]) == hist_of(layout::log2, {0, 100}));
  CHECK(as_text(rows[1][1]) == "b");
  CHECK(as_text(rows[1][2]) == "branch-miss");
  CHECK(as_int(rows[1][3]) == 7);
  CHECK(is_null(rows[1][4]));
  CHECK(as_int(rows[2][0]) == t0 + step);
  CHECK(as_text(rows[2][2]) == "l2-miss");
  CHECK(as_int(rows[2][3]) == 150);
  CHECK(decoded(rows[2][4]) == hist_of(layout::log2, {0, 100, 50}));
  CHECK(as_int(rows[3][0]) == t0 + 2 * step);
  CHECK(as_text(rows[3][2]) == "branch-miss");
  CHECK(as_int(rows[3][3]) == 1);
  CHECK(as_text(rows[4][2]) == "l2-miss");
  CHECK(as_int(rows[4][3]) == 2);

  // The rate histogram gives per-second percentiles; totals per event over the run.
  CHECK(scalar_int(r, "SELECT hist_percentile(rate_hist, 100) FROM perf_events WHERE event = "
                      "'l2-miss'") ==
        static_cast<std::int64_t>(
            rsched::stats::percentile(hist_of(layout::log2, {0, 100, 0, 100, 50}), 100)->value));
  CHECK(scalar_int(r, "SELECT sum(value) FROM perf_events WHERE event = 'l2-miss'") == 252);
}

TEST_CASE("counter_time and schedstat deltas: duplicates summed, zero deltas skipped", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    auto iv = make_interval(t0, {});
    iv.counter_times = {{3, "kernel_cycles", 100, 50}, {3, "kernel_cycles", 10, 5}};
    iv.schedstat_cpu = {{0, "yld_count", 2}, {0, "yld_count", -2}, {1, "yld_count", 5}};
    iv.schedstat_domain = {{2, 0, "", "alb_pushed", 4}, {2, 0, "", "alb_pushed", 1}};
    write_ok(w, iv); // an interval without threads still carries these
    auto iv2 = make_interval(t0 + step, {});
    iv2.schedstat_cpu = {{1, "yld_count", 6}};
    iv2.schedstat_domain = {{2, 0, "", "alb_pushed", 1}, {2, 0, "DIE", "alb_pushed", 2}};
    write_ok(w, iv2);
  }
  {
    auto w = open_writer(path); // empty caches: ids found again
    auto iv = make_interval(t0 + 2 * step, {});
    iv.schedstat_cpu = {{1, "yld_count", 7}};
    iv.schedstat_domain = {{2, 0, "DIE", "alb_pushed", 3}};
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  auto ct = run(r, "SELECT cpu, counter, enabled_ns, running_ns FROM perf_counter_time");
  REQUIRE(ct.rows.size() == 1);
  CHECK(as_int(ct.rows[0][0]) == 3);
  CHECK(as_int(ct.rows[0][2]) == 110);
  CHECK(as_int(ct.rows[0][3]) == 55);

  auto sc = run(r, "SELECT ts, cpu, delta FROM schedstat_cpu ORDER BY ts, cpu").rows;
  REQUIRE(sc.size() == 3); // cpu 0's deltas cancel out: no row
  CHECK(as_int(sc[0][1]) == 1);
  CHECK(as_int(sc[0][2]) == 5);
  CHECK(as_int(sc[1][2]) == 6);
  CHECK(as_int(sc[2][2]) == 7);
  CHECK(scalar_int(r, "SELECT count(*) FROM schedstat_field") == 2);
  CHECK(scalar_int(r, "SELECT count(*) FROM schedstat_domain_def") == 2);

  auto sd = run(r, "SELECT ts, cpu, domain, name, field, delta FROM schedstat_domain "
                   "ORDER BY ts, name")
                .rows;
  REQUIRE(sd.size() == 4);
  CHECK(as_int(sd[0][5]) == 5);
  CHECK(as_text(sd[0][3]) == "");
  CHECK(as_text(sd[1][3]) == "");
  CHECK(as_int(sd[1][5]) == 1);
  CHECK(as_text(sd[2][3]) == "DIE");
  CHECK(as_int(sd[2][5]) == 2);
  CHECK(as_text(sd[3][3]) == "DIE");
  CHECK(as_int(sd[3][5]) == 3);
  CHECK(as_text(sd[3][4]) == "alb_pushed");
}

TEST_CASE_METHOD(new_db, "duplicate thread rows merge every v2 metric", "[store]") {
  auto a = bare_thread(5, "dup");
  a.m[metric::sleep] = value_of(layout::latency, {1'000});
  a.migrations = 1;
  a.has_ipc = true;
  a.user_cycles = 10;
  auto b = bare_thread(5, "dup");
  b.m[metric::sleep] = value_of(layout::latency, {2'000'000});
  b.m[metric::waking_delay] = value_of(layout::latency, {7'000});
  b.migrations = 2;
  b.cross_numa = 1;
  b.has_ipc = true;
  b.user_cycles = 5;
  b.kernel_instructions = 3;
  auto c = bare_thread(5, "dup");
  c.user_cycles = 1'000; // has_ipc false: ignored
  c.m[metric::migration_rate] = value_of(layout::count, {2});
  write_ok(w, make_interval(t0, {a, b, c}));
  auto r = open_reader(path);
  auto s = run(r, "SELECT count, total_ns, hist FROM sleep").rows;
  REQUIRE(s.size() == 1);
  CHECK(as_int(s[0][0]) == 2);
  CHECK(as_int(s[0][1]) == 2'001'000);
  CHECK(decoded(s[0][2]) == latency_hist({1'000, 2'000'000}));
  CHECK(scalar_int(r, "SELECT count FROM waking_delay") == 1);
  auto m = run(r, "SELECT count, cross_ccx, cross_numa FROM migration").rows;
  REQUIRE(m.size() == 1);
  CHECK(as_int(m[0][0]) == 3);
  CHECK(as_int(m[0][1]) == 0);
  CHECK(as_int(m[0][2]) == 1);
  auto p = run(r, "SELECT user_cycles, kernel_instructions FROM perf").rows;
  REQUIRE(p.size() == 1);
  CHECK(as_int(p[0][0]) == 15);
  CHECK(as_int(p[0][1]) == 3);
  CHECK(scalar_int(r, "SELECT seconds FROM migration_rate") == 1);
}

TEST_CASE_METHOD(new_db, "writer rejects bad v2 input without writing anything", "[store]") {
  auto expect_error = [&](const rsched::store::interval_row &iv, const char *msg) {
    auto res = w.write(iv);
    REQUIRE_FALSE(res.ok());
    CHECK_THAT(res.err().msg, Catch::Contains(msg));
  };
  auto t = bare_thread(1, "x");
  t.m[metric::migration_rate] = value_of(layout::latency, {1}); // must be the count layout
  expect_error(make_interval(t0, {t}), "wrong layout");
  t = bare_thread(1, "x");
  t.m[metric::slice_voluntary] = value_of(layout::count, {1});
  expect_error(make_interval(t0, {t}), "wrong layout");
  t = bare_thread(1, "x");
  t.events = {{2, 1}};
  auto iv = make_interval(t0, {t});
  iv.events = {{"e0", 0, 0}};
  expect_error(iv, "perf event index 2 out of range");
  t.events = {{0, 1}};
  t.event_rates = {{0, hist_of(layout::latency, {5})}};
  iv = make_interval(t0, {t});
  iv.events = {{"e0", 0, 0}};
  expect_error(iv, "wrong layout");
  iv.events = {{"", 0, 0}};
  t.event_rates.clear();
  iv.threads = {t};
  expect_error(iv, "empty name");
  rsched::store::cpu_row c;
  c.m[metric::cpu_idle] = value_of(layout::depth, {1});
  expect_error(make_interval(t0, {}, {c}), "wrong layout");
  iv = make_interval(t0, {});
  iv.schedstat_cpu = {{0, "", 1}};
  expect_error(iv, "schedstat field without a name");

  // An empty metric may keep any layout: it is not written.
  t = make_thread(1, "x", {1'000});
  t.m[metric::sleep].hist.kind = layout::depth;
  write_ok(w, make_interval(t0, {t}));
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);
}

TEST_CASE_METHOD(new_db, "a failed v2 write rolls back and keeps no ids of rolled-back rows",
                 "[store]") {
  // A trigger on the last table the writer fills makes the transaction fail after every id
  // lookup (event, field, domain, thread) ran.
  raw_exec(path, "CREATE TRIGGER fail_domain BEFORE INSERT ON schedstat_domain_delta "
                 "BEGIN SELECT RAISE(ABORT, 'injected failure'); END;");
  auto t = bare_thread(7, "t");
  t.events = {{0, 3}};
  auto iv = make_interval(t0, {t});
  iv.events = {{"ev", 1, 2}};
  iv.schedstat_cpu = {{0, "fld", 1}};
  iv.schedstat_domain = {{0, 0, "MC", "dfld", 1}};
  auto res = w.write(iv);
  REQUIRE_FALSE(res.ok());
  CHECK_THAT(res.err().msg, Catch::Contains("injected failure"));
  raw_exec(path, "DROP TRIGGER fail_domain;");
  {
    auto r = open_reader(path);
    for (const char *tbl : {"intervals", "thread", "perf_event", "schedstat_field",
                            "schedstat_domain_def", "thread_perf_event", "schedstat_cpu_delta"}) {
      INFO(tbl);
      CHECK(scalar_int(r, std::string("SELECT count(*) FROM ") + tbl) == 0);
    }
  }
  iv.start_ns = t0 + step;
  write_ok(w, iv);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM perf_events WHERE event = 'ev' AND comm = 't'") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM schedstat_cpu WHERE field = 'fld'") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM schedstat_domain WHERE field = 'dfld' AND "
                      "name = 'MC'") == 1);
}

TEST_CASE("a version 1 database is readable and upgraded in place by the writer", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  make_v1_database(path);

  std::vector<row_t> before;
  {
    // The reader is read-only and cannot upgrade: it sees the v1 schema as it is.
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 1);
    before = v1_query(r);
    REQUIRE(before.size() == 2);
    CHECK_FALSE(has_object(r, "view", "timeslice"));
    CHECK_THAT(run_error(r, "SELECT * FROM timeslice"), Catch::Contains("no such table"));
  }

  {
    auto w = open_writer(path);
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
    CHECK(scalar_int(r, "PRAGMA application_id") == 0x72736368);
    auto meta = run(r, "SELECT key, value FROM meta");
    std::map<std::string, std::string> kv;
    for (const auto &row : meta.rows) {
      kv[as_text(row[0])] = as_text(row[1]);
    }
    CHECK(kv["schema_version"] == std::to_string(rsched::store::schema_version));
    CHECK(kv["created_ns"] == "1690000000000000000"); // creation facts kept
    CHECK(kv["hostname"] == "old-host");
    CHECK(kv["rsched_version"] == "0.1.0");
    CHECK_THAT(kv["hist_layouts"], Catch::Contains("4=log2"));
    CHECK(std::stoll(kv["upgraded_ns"]) > 1'600'000'000'000'000'000LL);
    CHECK(kv["upgraded_by"] == "0.1.0");

    // Old rows unchanged through the v1 views; the old interval says what v1 recorded.
    CHECK(v1_query(r) == before);
    CHECK(scalar_int(r, "SELECT count(*) FROM runq_depth") == 1);
    CHECK(scalar_int(r, "SELECT count FROM cpu_sched_delay") == 3);
    auto ivr = run(r, "SELECT flags, drops_no_rq, groups, drops_perf_read FROM intervals");
    REQUIRE(ivr.rows.size() == 1);
    CHECK(as_int(ivr.rows[0][0]) == 1);
    CHECK(as_int(ivr.rows[0][1]) == 7);
    CHECK(as_int(ivr.rows[0][2]) == RSCHED_G_LATENCY);
    CHECK(as_int(ivr.rows[0][3]) == 0);
    CHECK(scalar_int(r, "SELECT count(*) FROM metric") == known_metrics());
    for (const char *view :
         {"timeslice", "sleep", "waking_delay", "cpu_idle", "migration", "migration_rate", "perf",
          "perf_events", "perf_counter_time", "schedstat_cpu", "schedstat_domain"}) {
      INFO(view);
      CHECK(has_object(r, "view", view));
      CHECK(scalar_int(r, std::string("SELECT count(*) FROM ") + view) == 0);
    }

    // The upgraded file takes v2 intervals, and an old thread identity is found again.
    auto t = bare_thread(11, "old-a");
    t.pid = 10;
    t.start_time_ns = 500;
    t.cgroup = "/a";
    t.m[metric::sleep] = value_of(layout::latency, {5'000});
    auto iv = make_interval(t0, {t});
    iv.boot_id = "boot-a";
    write_ok(w, iv);
    CHECK(scalar_int(r, "SELECT count(*) FROM thread") == 2);
    CHECK(scalar_int(r, "SELECT count(*) FROM sleep WHERE comm = 'old-a' AND cgroup = '/a'") == 1);
  }

  // Opening again changes nothing more.
  { auto w = open_writer(path); }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "SELECT count(*) FROM metric") == known_metrics());
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 2);

  // The upgraded schema is the schema of a new database, object by object and text by text.
  temp_dir dir2;
  const auto fresh = dir2.file("fresh.db");
  { auto w = open_writer(fresh); }
  auto rf = open_reader(fresh);
  CHECK(schema_of(r) == schema_of(rf));
}

TEST_CASE("a registry metric the database lacks gets its metric row and views on open, with "
          "no schema version",
          "[store]") {
  // A database written before a metric joined the registry: here the waking delay's row and
  // views are taken away, which is what a current database looks like to the next rsched that
  // adds a metric. Opening the writer gives them back, text for text as a new database has them.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  { auto w = open_writer(path); }
  raw_exec(path, "DELETE FROM metric WHERE id = 6; DROP VIEW waking_delay; "
                 "DROP VIEW waking_delay_1m; DROP VIEW waking_delay_1h;");
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "SELECT count(*) FROM metric") == known_metrics() - 1);
    CHECK_FALSE(has_object(r, "view", "waking_delay_1h"));
  }
  { auto w = open_writer(path); }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "SELECT count(*) FROM metric WHERE id = 6 AND name = 'waking_delay' AND "
                      "unit = 'ns' AND layout = 1") == 1);
  temp_dir dir2;
  const auto fresh = dir2.file("fresh.db");
  { auto w = open_writer(fresh); }
  auto rf = open_reader(fresh);
  CHECK(schema_of(r) == schema_of(rf));
}

TEST_CASE("a failed upgrade leaves the version 1 database as it was", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  make_v1_database(path);
  // Someone added an object whose name a v2 view needs: the upgrade fails half-way.
  raw_exec(path, "CREATE TABLE perf(x);");
  auto w = writer::open(path);
  REQUIRE_FALSE(w.ok());
  CHECK_THAT(w.err().msg, Catch::Contains("upgrading schema from version 1"));
  CHECK_THAT(w.err().msg, Catch::Contains("perf"));
  CHECK(w.err().msg.find('\n') == std::string::npos);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == 1);
  CHECK(scalar_int(r, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM metric") == 2);
  CHECK_FALSE(has_object(r, "table", "thread_migration"));
  CHECK_FALSE(has_object(r, "view", "timeslice"));
  CHECK(columns_of(r, "intervals").size() == 10);
  CHECK(v1_query(r).size() == 2);
}

TEST_CASE("a database newer than the current version is refused and left byte-identical",
          "[store]") {
  temp_dir dir;
  for (const bool from_v1 : {true, false}) {
    INFO("from_v1 = " << from_v1);
    const auto path = dir.file(from_v1 ? "v1.db" : "v2.db");
    if (from_v1) {
      make_v1_database(path);
    } else {
      auto w = open_writer(path);
      write_ok(w, make_interval(t0, {make_thread(1, "x", {1'000})}));
    }
    const int newer = rsched::store::schema_version + 1;
    raw_exec(path, "PRAGMA wal_checkpoint(TRUNCATE); PRAGMA user_version = " +
                       std::to_string(newer) + ";");
    const std::string before = read_file(path);
    auto w = writer::open(path);
    REQUIRE_FALSE(w.ok());
    CHECK_THAT(w.err().msg,
               Catch::Contains(
                   fmt::format("database schema version {} is newer than this rsched supports ({})",
                               newer, rsched::store::schema_version)));
    auto r = reader::open(path);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.err().msg,
               Catch::Contains(fmt::format("database schema version {} is newer", newer)));
    CHECK(read_file(path) == before);
  }
}

TEST_CASE("every SQL example of docs/SCHEMA.md runs on a database of the current version",
          "[store]") {
  // RSCHED_TEST_DATA_DIR is <source>/tests/store/data (which need not exist): go up lexically.
  const auto root = fs::path(RSCHED_TEST_DATA_DIR).parent_path().parent_path().parent_path();
  const std::string doc = read_file((root / "docs" / "SCHEMA.md").string());
  std::vector<std::string> examples;
  const std::string open = "```sql\n";
  for (auto pos = doc.find(open); pos != std::string::npos; pos = doc.find(open, pos)) {
    pos += open.size();
    const auto end = doc.find("```", pos);
    REQUIRE(end != std::string::npos);
    examples.push_back(doc.substr(pos, end - pos));
    pos = end + 3;
  }
  REQUIRE(examples.size() >= 10);

  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr)) * 1'000'000'000;
    auto t = make_thread(1, "app", {20'000, 30'000}, {1, 2});
    t.m[metric::slice_voluntary] = value_of(layout::latency, {100'000});
    t.m[metric::slice_involuntary] = value_of(layout::latency, {4'000'000});
    t.m[metric::migration_rate] = value_of(layout::count, {2, 3});
    t.migrations = 5;
    t.has_ipc = true;
    t.user_cycles = 100;
    t.user_instructions = 150;
    t.events = {{0, 10}};
    t.event_rates = {{0, hist_of(layout::log2, {10})}};
    rsched::store::cpu_row c;
    c.cpu = 0;
    c.m[metric::cpu_idle] = value_of(layout::latency, {1'000'000});
    c.m[metric::cpu_sched_delay].hist = latency_hist({20'000});
    c.m[metric::cpu_sched_delay].count = 1;
    auto iv = make_interval(now - 60'000'000'000, {t}, {c});
    iv.events = {{"l2-miss", 8, 1}};
    iv.drops[RSCHED_DROP_PERF_READ] = 1;
    iv.counter_times = {{0, "user_cycles", 10, 5}};
    iv.schedstat_cpu = {{0, "run_delay_ns", 1'000'000}};
    iv.schedstat_domain = {{0, 0, "SMT", "lb_count_idle", 2}};
    // Three hours earlier too, and the daemon's background work: 1-minute and 1-hour rollups.
    auto old = iv;
    old.start_ns = now - 3 * 3'600'000'000'000;
    write_ok(w, old);
    write_ok(w, iv);
    for (int i = 0; i < 10; ++i) {
      REQUIRE(w.maintain(now).ok());
    }
  }
  auto r = open_reader(path);
  for (const auto &sql : examples) {
    INFO(sql);
    auto t = run(r, sql);
    CHECK_FALSE(t.rows.empty());
  }
}
