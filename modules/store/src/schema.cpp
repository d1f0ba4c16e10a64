#include "rsched/store/schema.hpp"

#include "rsched/metrics/registry.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/hist_functions.hpp"
#include "rsched/store/records.hpp"

#include "vtab_blame.hpp"
#include "vtab_hist.hpp"
#include "vtab_rows.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <memory>
#include <sqlite3.h>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace rsched::store {

namespace {

// Schema v1, exactly as rsched 0.1 created it: never edit it. A new database runs schema_v1 and
// then every upgrade step in order, so that a fresh and an upgraded database hold the very same
// schema (sqlite_master text included; ALTER TABLE rewrites the stored CREATE statement). Keep in
// sync with docs/SCHEMA.md and the view tests in tests/store. Views are the public interface; the
// tables behind them may change with the schema version.
constexpr const char *schema_v1 = R"sql(
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

// Schema v1 -> v2: the slice, sleep, waking, migration and perf groups, CPU idle, perf counter
// times and schedstat deltas. Only additions: every v1 table and view stays as it was.
constexpr const char *upgrade_v1_to_v2 = R"sql(
ALTER TABLE intervals ADD COLUMN groups INTEGER NOT NULL DEFAULT 0; -- enum rsched_group bits
ALTER TABLE intervals ADD COLUMN drops_perf_read INTEGER NOT NULL DEFAULT 0;
INSERT INTO metric(id, name, unit, layout) VALUES
  (3, 'slice_voluntary', 'ns', 1),
  (4, 'slice_involuntary', 'ns', 1),
  (5, 'sleep', 'ns', 1),
  (6, 'waking_delay', 'ns', 1),
  (7, 'migration_rate', 'migrations/s', 3),
  (8, 'cpu_idle', 'ns', 1),
  (9, 'migration_rate_cross_ccx', 'migrations/s', 3),
  (10, 'migration_rate_cross_numa', 'migrations/s', 3);
CREATE TABLE thread_migration(
  interval_id INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL,
  count       INTEGER NOT NULL,                  -- migrations of the thread in the interval
  cross_ccx   INTEGER NOT NULL,                  -- of those, to another die in the same node
  cross_numa  INTEGER NOT NULL,                  -- of those, to another NUMA node
  PRIMARY KEY(interval_id, thread_id)
) WITHOUT ROWID;
CREATE TABLE thread_perf(
  interval_id         INTEGER NOT NULL,
  thread_id           INTEGER NOT NULL,
  user_cycles         INTEGER NOT NULL,
  kernel_cycles       INTEGER NOT NULL,
  user_instructions   INTEGER NOT NULL,
  kernel_instructions INTEGER NOT NULL,
  PRIMARY KEY(interval_id, thread_id)
) WITHOUT ROWID;
-- Generic perf events, one row per name (the first definition of a name is kept).
CREATE TABLE perf_event(
  id     INTEGER PRIMARY KEY,
  name   TEXT NOT NULL UNIQUE,
  type   INTEGER NOT NULL,                       -- perf_event_attr.type
  config INTEGER NOT NULL                        -- perf_event_attr.config, 64-bit pattern
);
CREATE TABLE thread_perf_event(
  interval_id INTEGER NOT NULL,
  event_id    INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL,
  value       INTEGER NOT NULL,                  -- events counted in the interval
  rate_hist   BLOB,                              -- events per second, log2 layout; NULL = none
  PRIMARY KEY(interval_id, event_id, thread_id)
) WITHOUT ROWID;
CREATE TABLE counter_time(
  interval_id INTEGER NOT NULL,
  cpu         INTEGER NOT NULL,
  counter     TEXT NOT NULL,
  enabled_ns  INTEGER NOT NULL,
  running_ns  INTEGER NOT NULL,
  PRIMARY KEY(interval_id, cpu, counter)
) WITHOUT ROWID;
CREATE TABLE schedstat_field(
  id   INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE
);
-- One row per scheduling domain identity; name '' before schedstat v17.
CREATE TABLE schedstat_domain_def(
  id     INTEGER PRIMARY KEY,
  cpu    INTEGER NOT NULL,
  domain INTEGER NOT NULL,                       -- N of /proc/schedstat "domainN"
  name   TEXT NOT NULL DEFAULT '',
  UNIQUE(cpu, domain, name)
);
CREATE TABLE schedstat_cpu_delta(
  interval_id INTEGER NOT NULL,
  field_id    INTEGER NOT NULL,
  cpu         INTEGER NOT NULL,
  delta       INTEGER NOT NULL,                  -- non-zero
  PRIMARY KEY(interval_id, field_id, cpu)
) WITHOUT ROWID;
CREATE TABLE schedstat_domain_delta(
  interval_id INTEGER NOT NULL,
  field_id    INTEGER NOT NULL,
  domain_id   INTEGER NOT NULL,                  -- schedstat_domain_def.id
  delta       INTEGER NOT NULL,                  -- non-zero
  PRIMARY KEY(interval_id, field_id, domain_id)
) WITHOUT ROWID;
-- One row per thread and interval with voluntary or involuntary slices: h is the row of either
-- metric, kept when it is the voluntary one or when there is no voluntary row.
CREATE VIEW timeslice AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, coalesce(v.count, 0) AS voluntary_count,
         coalesce(n.count, 0) AS involuntary_count, v.hist AS voluntary_hist,
         n.hist AS involuntary_hist, coalesce(v.total, 0) + coalesce(n.total, 0) AS total_ns,
         coalesce(v.total, 0) AS voluntary_ns, coalesce(n.total, 0) AS involuntary_ns
  FROM intervals AS i
  CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric IN (3, 4)
  LEFT JOIN thread_hist AS v
    ON v.interval_id = h.interval_id AND v.metric = 3 AND v.thread_id = h.thread_id
  LEFT JOIN thread_hist AS n
    ON n.interval_id = h.interval_id AND n.metric = 4 AND n.thread_id = h.thread_id
  JOIN thread AS t ON t.id = h.thread_id
  WHERE h.metric = 3 OR v.thread_id IS NULL;
CREATE VIEW sleep AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, h.count AS count, h.total AS total_ns, h.hist AS hist
  FROM intervals AS i
  CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric = 5
  JOIN thread AS t ON t.id = h.thread_id;
CREATE VIEW waking_delay AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, h.count AS count, h.total AS total_ns, h.hist AS hist
  FROM intervals AS i
  CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric = 6
  JOIN thread AS t ON t.id = h.thread_id;
CREATE VIEW cpu_idle AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, c.cpu AS cpu, c.count AS count,
         c.total AS total_ns, c.hist AS hist
  FROM intervals AS i
  CROSS JOIN cpu_hist AS c ON c.interval_id = i.id AND c.metric = 8;
CREATE VIEW migration AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, m.count AS count, m.cross_ccx AS cross_ccx,
         m.cross_numa AS cross_numa
  FROM intervals AS i
  CROSS JOIN thread_migration AS m ON m.interval_id = i.id
  JOIN thread AS t ON t.id = m.thread_id;
CREATE VIEW migration_rate AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, h.count AS seconds, h.total AS total, h.hist AS hist,
         c.hist AS cross_ccx_hist, n.hist AS cross_numa_hist
  FROM intervals AS i
  CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric = 7
  JOIN thread AS t ON t.id = h.thread_id
  LEFT JOIN thread_hist AS c
    ON c.interval_id = h.interval_id AND c.metric = 9 AND c.thread_id = h.thread_id
  LEFT JOIN thread_hist AS n
    ON n.interval_id = h.interval_id AND n.metric = 10 AND n.thread_id = h.thread_id;
CREATE VIEW perf AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, p.user_cycles AS user_cycles, p.kernel_cycles AS kernel_cycles,
         p.user_instructions AS user_instructions,
         p.kernel_instructions AS kernel_instructions
  FROM intervals AS i
  CROSS JOIN thread_perf AS p ON p.interval_id = i.id
  JOIN thread AS t ON t.id = p.thread_id;
CREATE VIEW perf_events AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS pid, t.comm AS comm,
         t.cgroup AS cgroup, e.name AS event, p.value AS value, p.rate_hist AS rate_hist
  FROM intervals AS i
  CROSS JOIN thread_perf_event AS p ON p.interval_id = i.id
  JOIN perf_event AS e ON e.id = p.event_id
  JOIN thread AS t ON t.id = p.thread_id;
CREATE VIEW perf_counter_time AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, c.cpu AS cpu, c.counter AS counter,
         c.enabled_ns AS enabled_ns, c.running_ns AS running_ns
  FROM intervals AS i
  CROSS JOIN counter_time AS c ON c.interval_id = i.id;
CREATE VIEW schedstat_cpu AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, s.cpu AS cpu, f.name AS field, s.delta AS delta
  FROM intervals AS i
  CROSS JOIN schedstat_cpu_delta AS s ON s.interval_id = i.id
  JOIN schedstat_field AS f ON f.id = s.field_id;
CREATE VIEW schedstat_domain AS
  SELECT i.start_ns AS ts, i.dur_ns AS dur, d.cpu AS cpu, d.domain AS domain, d.name AS name,
         f.name AS field, s.delta AS delta
  FROM intervals AS i
  CROSS JOIN schedstat_domain_delta AS s ON s.interval_id = i.id
  JOIN schedstat_field AS f ON f.id = s.field_id
  JOIN schedstat_domain_def AS d ON d.id = s.domain_id;
-- Incident annotations: the only rows rsched-sql ever writes (rsched-sql mark, .mark,
-- .import-incidents). end_ns NULL = a point in time.
CREATE TABLE annotations(
  id         INTEGER PRIMARY KEY,
  start_ns   INTEGER NOT NULL,                   -- UTC ns
  end_ns     INTEGER,                            -- UTC ns, NULL for a point in time
  source     TEXT NOT NULL,                      -- 'rsched-sql', 'import:<file>', ...
  text       TEXT NOT NULL,
  tags       TEXT NOT NULL DEFAULT '',           -- comma-separated
  created_ns INTEGER NOT NULL                    -- UTC ns when the row was added
);
CREATE INDEX annotations_start_ns ON annotations(start_ns);
-- sched_delay rows of the intervals starting within 5 minutes of each annotation
-- ([start_ns - 5 min, coalesce(end_ns, start_ns) + 5 min]).
CREATE VIEW annotation_delay AS
  SELECT a.id AS annotation_id, a.text AS text, d.ts AS ts, d.dur AS dur, d.tid AS tid,
         d.comm AS comm, d.cgroup AS cgroup, d.count AS count, d.total_ns AS total_ns,
         d.hist AS hist
  FROM annotations AS a
  JOIN sched_delay AS d
    ON d.ts >= a.start_ns - 300000000000
   AND d.ts <= coalesce(a.end_ns, a.start_ns) + 300000000000;
-- Per annotation and comm: samples and p99 over the same rows (needs rsched's SQL functions,
-- registered by rsched-sql and rsched::store::reader).
CREATE VIEW annotation_summary AS
  SELECT d.annotation_id AS annotation_id, min(a.text) AS text, min(a.start_ns) AS start_ns,
         min(a.end_ns) AS end_ns, d.comm AS comm, sum(d.count) AS samples,
         hist_percentile(d.hist, 99) AS p99_ns
  FROM annotation_delay AS d JOIN annotations AS a ON a.id = d.annotation_id
  GROUP BY d.annotation_id, d.comm;
)sql";

// Schema v2 -> v3: rollup tiers (1 minute, 1 hour) in the same tables as the raw intervals,
// daemon health per interval, and thread.last_ns for retention. Only additions: the views are
// recreated with the same columns plus `tier` at the end (see view_specs).
constexpr const char *upgrade_v2_to_v3 = R"sql(
ALTER TABLE intervals ADD COLUMN tier INTEGER NOT NULL DEFAULT 0; -- 0 raw, 1 = 1 min, 2 = 1 h
ALTER TABLE intervals ADD COLUMN collect_ns INTEGER;  -- map read + deltas, ns
ALTER TABLE intervals ADD COLUMN write_ns INTEGER;    -- SQLite write of the interval, ns
ALTER TABLE intervals ADD COLUMN maint_ns INTEGER;    -- rollups + retention before it, ns
ALTER TABLE intervals ADD COLUMN cpu_ns INTEGER;      -- rschedd's CPU time (user + sys), ns
ALTER TABLE intervals ADD COLUMN rss_bytes INTEGER;   -- rschedd's VmRSS at the end, bytes
ALTER TABLE intervals ADD COLUMN bpf_run_ns INTEGER;  -- run_time_ns of its BPF programs, ns
ALTER TABLE intervals ADD COLUMN bpf_run_cnt INTEGER; -- run_cnt of its BPF programs
CREATE INDEX intervals_tier_start ON intervals(tier, start_ns);
ALTER TABLE thread ADD COLUMN last_ns INTEGER NOT NULL DEFAULT 0; -- newest bucket with data
-- One row per tier. built_ns: every bucket before it has been rolled up into this tier (0 for
-- raw); cutoff_ns: every row of this tier that starts before it has been deleted (retention).
CREATE TABLE tiers(
  tier      INTEGER PRIMARY KEY,
  name      TEXT NOT NULL UNIQUE,
  width_ns  INTEGER NOT NULL,                    -- bucket width; 0 = raw (the daemon interval)
  built_ns  INTEGER NOT NULL DEFAULT 0,
  cutoff_ns INTEGER NOT NULL DEFAULT 0
);
INSERT INTO tiers(tier, name, width_ns) VALUES
  (0, 'raw', 0), (1, '1m', 60000000000), (2, '1h', 3600000000000);
)sql";

// A public view: SELECT <select>, i.tier AS tier FROM <from> WHERE <tier filter> [AND <where>].
// Each is created three times: `name` (every time from the finest tier still kept there),
// `name_1m` (the 1-minute tier only) and `name_1h` (the 1-hour tier only).
struct view_spec {
  std::string name;
  std::string select;
  std::string from;
  std::string where; // "": none
};

// A view with columns after `tier` (", x AS y": schema v9's llc and node of per-CPU views).
struct tailed_view {
  view_spec v;
  std::string tail;
};

constexpr const char *thread_cols = "i.start_ns AS ts, i.dur_ns AS dur, t.tid AS tid, t.pid AS "
                                    "pid, t.comm AS comm, t.cgroup AS cgroup";

// Schema v9: the LLC group and NUMA node of the CPU `cpu` (an expression of the view) in the
// topology in force at the row's start (cpu_topology: the latest set of the row's boot that
// starts at or before it); NULL when none was recorded (intervals written before version 9)
// or the CPU is not in it (offline then).
std::string topology_tail(std::string_view cpu) {
  std::string out;
  for (const char *col : {"llc", "node"}) {
    out += fmt::format(
        ", (SELECT p.{0} FROM cpu_topology AS p WHERE p.boot_id = i.boot_id AND p.since_ns = "
        "(SELECT max(q.since_ns) FROM cpu_topology AS q WHERE q.boot_id = i.boot_id AND "
        "q.since_ns <= i.start_ns) AND p.cpu = {1}) AS {0}",
        col, cpu);
  }
  return out;
}

// The view of a metric alone (registry: `view`): one row per thread or CPU and interval.
view_spec metric_view(const metrics::def &d) {
  const std::string total =
      d.total_column.empty()
          ? std::string()
          : fmt::format(" {}.total AS {},", d.where == metrics::scope::cpu ? "c" : "h",
                        d.total_column);
  if (d.where == metrics::scope::cpu) {
    return {std::string(d.view),
            fmt::format("i.start_ns AS ts, i.dur_ns AS dur, c.cpu AS cpu, c.count AS count,{} "
                        "c.hist AS hist",
                        total),
            fmt::format("intervals AS i CROSS JOIN cpu_hist AS c ON c.interval_id = i.id AND "
                        "c.metric = {}",
                        d.db_id),
            ""};
  }
  return {std::string(d.view), fmt::format("{{T}}, h.count AS count,{} h.hist AS hist", total),
          fmt::format("intervals AS i CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND "
                      "h.metric = {} JOIN thread AS t ON t.id = h.thread_id",
                      d.db_id),
          ""};
}

int db_id(metrics::id m) {
  return metrics::of(m).db_id;
}

// The metrics that schema versions 1 and 2 created (and whose views the v3 step rebuilds). A
// registry metric with a higher id gets its `metric` row and view from add_new_metrics().
constexpr int last_schema_metric = 10;

// The public views of schema v3 (and v4): every metric view of the metrics known then, and the
// views that combine several metrics or other tables.
std::vector<view_spec> view_specs() {
  using metrics::id;
  std::vector<view_spec> v;
  for (const auto &d : metrics::registry) {
    if (!d.view.empty() && d.db_id <= last_schema_metric) {
      v.push_back(metric_view(d));
    }
  }
  v.push_back(
      {"timeslice",
       "{T}, coalesce(v.count, 0) AS voluntary_count, coalesce(n.count, 0) AS involuntary_count, "
       "v.hist AS voluntary_hist, n.hist AS involuntary_hist, "
       "coalesce(v.total, 0) + coalesce(n.total, 0) AS total_ns, coalesce(v.total, 0) AS "
       "voluntary_ns, coalesce(n.total, 0) AS involuntary_ns",
       fmt::format("intervals AS i CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND "
                   "h.metric IN ({0}, {1}) "
                   "LEFT JOIN thread_hist AS v ON v.interval_id = h.interval_id AND v.metric = {0} "
                   "AND v.thread_id = h.thread_id "
                   "LEFT JOIN thread_hist AS n ON n.interval_id = h.interval_id AND n.metric = {1} "
                   "AND n.thread_id = h.thread_id "
                   "JOIN thread AS t ON t.id = h.thread_id",
                   db_id(id::slice_voluntary), db_id(id::slice_involuntary)),
       fmt::format("(h.metric = {} OR v.thread_id IS NULL)", db_id(id::slice_voluntary))});
  v.push_back({"migration",
               "{T}, m.count AS count, m.cross_ccx AS cross_ccx, m.cross_numa AS cross_numa",
               "intervals AS i CROSS JOIN thread_migration AS m ON m.interval_id = i.id "
               "JOIN thread AS t ON t.id = m.thread_id",
               ""});
  v.push_back(
      {"migration_rate",
       "{T}, h.count AS seconds, h.total AS total, h.hist AS hist, c.hist AS cross_ccx_hist, "
       "n.hist AS cross_numa_hist",
       fmt::format("intervals AS i CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND "
                   "h.metric = {} JOIN thread AS t ON t.id = h.thread_id "
                   "LEFT JOIN thread_hist AS c ON c.interval_id = h.interval_id AND c.metric = {} "
                   "AND c.thread_id = h.thread_id "
                   "LEFT JOIN thread_hist AS n ON n.interval_id = h.interval_id AND n.metric = {} "
                   "AND n.thread_id = h.thread_id",
                   db_id(id::migration_rate), db_id(id::migration_rate_cross_ccx),
                   db_id(id::migration_rate_cross_numa)),
       ""});
  v.push_back({"perf",
               "{T}, p.user_cycles AS user_cycles, p.kernel_cycles AS kernel_cycles, "
               "p.user_instructions AS user_instructions, p.kernel_instructions AS "
               "kernel_instructions",
               "intervals AS i CROSS JOIN thread_perf AS p ON p.interval_id = i.id "
               "JOIN thread AS t ON t.id = p.thread_id",
               ""});
  v.push_back({"perf_events", "{T}, e.name AS event, p.value AS value, p.rate_hist AS rate_hist",
               "intervals AS i CROSS JOIN thread_perf_event AS p ON p.interval_id = i.id "
               "JOIN perf_event AS e ON e.id = p.event_id JOIN thread AS t ON t.id = p.thread_id",
               ""});
  v.push_back(
      {"perf_counter_time",
       "i.start_ns AS ts, i.dur_ns AS dur, c.cpu AS cpu, c.counter AS counter, c.enabled_ns AS "
       "enabled_ns, c.running_ns AS running_ns",
       "intervals AS i CROSS JOIN counter_time AS c ON c.interval_id = i.id", ""});
  v.push_back({"schedstat_cpu",
               "i.start_ns AS ts, i.dur_ns AS dur, s.cpu AS cpu, f.name AS field, s.delta AS delta",
               "intervals AS i CROSS JOIN schedstat_cpu_delta AS s ON s.interval_id = i.id "
               "JOIN schedstat_field AS f ON f.id = s.field_id",
               ""});
  v.push_back({"schedstat_domain",
               "i.start_ns AS ts, i.dur_ns AS dur, d.cpu AS cpu, d.domain AS domain, d.name AS "
               "name, f.name AS field, s.delta AS delta",
               "intervals AS i CROSS JOIN schedstat_domain_delta AS s ON s.interval_id = i.id "
               "JOIN schedstat_field AS f ON f.id = s.field_id "
               "JOIN schedstat_domain_def AS d ON d.id = s.domain_id",
               ""});
  return v;
}

// Rows of tier 0 always; a rollup row only where every finer tier was deleted by retention
// (its start is before the cutoff of every finer tier): each moment is counted once, from the
// finest data kept.
constexpr const char *finest_tier =
    "(i.tier = 0 OR i.start_ns < (SELECT min(x.cutoff_ns) FROM tiers AS x WHERE x.tier < i.tier))";

// Daemon health per raw interval, as schema v3 created it. `stalled` (intervals.flags bit 1): the
// recorder fell behind and coalesced the ticks it missed into this interval.
constexpr const char *health_view_v3 = R"sql(CREATE VIEW health AS
  SELECT start_ns AS ts, dur_ns AS dur, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes,
         bpf_run_ns, bpf_run_cnt,
         CASE WHEN bpf_run_cnt > 0 THEN bpf_run_ns / bpf_run_cnt END AS bpf_ns_per_event,
         drops_task_state + drops_graveyard + drops_stale_tid + drops_no_rq + drops_perf_read
           AS drops, discarded_too_long, (flags >> 1) & 1 AS stalled
  FROM intervals WHERE tier = 0;
)sql";

// Schema v3 -> v4: the clock of the scheduling delay per interval (the default became the
// monotonic clock), and the segment drops (an attribution that closed without room to record
// it); `health` shows both.
constexpr const char *upgrade_v3_to_v4 = R"sql(
ALTER TABLE intervals ADD COLUMN delay_clock TEXT; -- 'monotonic', 'runqueue', 'mixed' (rollup); NULL: not recorded
ALTER TABLE intervals ADD COLUMN drops_segment INTEGER NOT NULL DEFAULT 0;
DROP VIEW health;
CREATE VIEW health AS
  SELECT start_ns AS ts, dur_ns AS dur, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes,
         bpf_run_ns, bpf_run_cnt,
         CASE WHEN bpf_run_cnt > 0 THEN bpf_run_ns / bpf_run_cnt END AS bpf_ns_per_event,
         drops_task_state + drops_graveyard + drops_stale_tid + drops_no_rq + drops_perf_read +
           drops_segment AS drops, discarded_too_long, (flags >> 1) & 1 AS stalled,
         delay_clock, drops_segment
  FROM intervals WHERE tier = 0;
)sql";

// Schema v4 -> v5: blame (who ran while a thread waited, who preempted it) and CPU pressure and
// CFS throttling per cgroup. Only additions.
constexpr const char *upgrade_v4_to_v5_tables = R"sql(
-- The culprits of blame: a process under the comm and cgroup it ran as (per boot), the
-- pseudo-culprits, and the rollups' identities per (comm, cgroup) (boot_id '', pid 0).
CREATE TABLE culprit(
  id      INTEGER PRIMARY KEY,
  boot_id TEXT NOT NULL,              -- '' for pseudo-culprits and rollup identities
  pid     INTEGER NOT NULL,           -- the culprit process (tgid); 0: pseudo or rollup
  comm    TEXT NOT NULL,              -- what it ran as; '<idle>', '<unknown>', '<other>'
  cgroup  TEXT NOT NULL,              -- cgroup v2 path it ran in; '' unknown or pseudo
  kind    INTEGER NOT NULL,           -- 0 process, 1 <idle>, 2 <unknown>, 3 <other>
  last_ns INTEGER NOT NULL DEFAULT 0, -- newest bucket with data (retention)
  UNIQUE(boot_id, pid, comm, cgroup, kind)
);
INSERT INTO culprit(boot_id, pid, comm, cgroup, kind) VALUES
  ('', 0, '<idle>', '', 1), ('', 0, '<unknown>', '', 2), ('', 0, '<other>', '', 3);
CREATE TABLE thread_blame(
  interval_id INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL, -- the thread that waited or was preempted
  culprit_id  INTEGER NOT NULL,
  wait_ns     INTEGER NOT NULL, -- the culprit ran this long on the CPU while the thread waited
  waits       INTEGER NOT NULL, -- scheduling delays of the thread it had a part in
  preempts    INTEGER NOT NULL, -- involuntary switches of the thread in which it took the CPU
  PRIMARY KEY(interval_id, thread_id, culprit_id)
) WITHOUT ROWID;
CREATE TABLE cgroup(
  id      INTEGER PRIMARY KEY,
  path    TEXT NOT NULL UNIQUE,       -- cgroup v2 path; '/' is the whole system
  last_ns INTEGER NOT NULL DEFAULT 0  -- newest bucket with data (retention)
);
CREATE TABLE cgroup_cpu(
  interval_id  INTEGER NOT NULL,
  cgroup_id    INTEGER NOT NULL,
  some_ns      INTEGER, -- PSI cpu some: time at least one of its tasks waited for a CPU
  full_ns      INTEGER, -- PSI cpu full: time all its non-idle tasks waited at once
  usage_ns     INTEGER, -- CPU time its tasks used
  periods      INTEGER, -- CFS bandwidth periods with work (nr_periods)
  throttled    INTEGER, -- of which it was throttled (nr_throttled)
  throttled_ns INTEGER, -- time throttled
  PRIMARY KEY(interval_id, cgroup_id)
) WITHOUT ROWID;
-- Annotations read their own span (a point: its instant), widened by the connection's
-- annotation_margin() (0 unless set), no longer a fixed 5 minutes around them: the rows of the
-- intervals overlapping it (annotation_summary reads annotation_delay and follows).
DROP VIEW annotation_delay;
CREATE VIEW annotation_delay AS
  SELECT a.id AS annotation_id, a.text AS text, d.ts AS ts, d.dur AS dur, d.tid AS tid,
         d.comm AS comm, d.cgroup AS cgroup, d.count AS count, d.total_ns AS total_ns,
         d.hist AS hist, d.tier AS tier
  FROM annotations AS a
  JOIN sched_delay AS d
    ON d.ts < coalesce(a.end_ns, a.start_ns + 1) + annotation_margin()
   AND d.ts + d.dur > a.start_ns - annotation_margin();
)sql";

// The views schema v5 adds (every tier).
std::vector<view_spec> v5_view_specs() {
  const std::string by =
      "CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 THEN 0 END AS by_pid, c.comm AS by_comm, "
      "c.cgroup AS by_cgroup";
  const std::string blame_from =
      "intervals AS i CROSS JOIN thread_blame AS b ON b.interval_id = i.id "
      "JOIN thread AS t ON t.id = b.thread_id JOIN culprit AS c ON c.id = b.culprit_id";
  const std::string cgroup_from = "intervals AS i CROSS JOIN cgroup_cpu AS p ON p.interval_id = "
                                  "i.id JOIN cgroup AS g ON g.id = p.cgroup_id";
  return {
      {"delay_blame", "{T}, " + by + ", b.wait_ns AS wait_ns, b.waits AS count", blame_from,
       "b.waits > 0"},
      {"preemption", "{T}, " + by + ", b.preempts AS count", blame_from, "b.preempts > 0"},
      {"cpu_pressure",
       "i.start_ns AS ts, i.dur_ns AS dur, g.path AS cgroup, p.some_ns AS some_ns, "
       "p.full_ns AS full_ns, 100.0 * p.some_ns / i.dur_ns AS some_pct, "
       "100.0 * p.full_ns / i.dur_ns AS full_pct",
       cgroup_from, "p.some_ns IS NOT NULL"},
      {"cpu_throttling",
       "i.start_ns AS ts, i.dur_ns AS dur, g.path AS cgroup, p.usage_ns AS usage_ns, "
       "p.periods AS periods, p.throttled AS throttled, p.throttled_ns AS throttled_ns",
       cgroup_from, "(p.usage_ns IS NOT NULL OR p.periods IS NOT NULL)"},
  };
}

// CREATE VIEW statements of `v` for every tier, `tail` after the tier column.
std::string create_views(const view_spec &v, std::string_view tail = {}) {
  const std::pair<const char *, const char *> variants[] = {
      {"", finest_tier}, {"_1m", "i.tier = 1"}, {"_1h", "i.tier = 2"}};
  std::string select = v.select;
  if (auto pos = select.find("{T}"); pos != std::string::npos) {
    select.replace(pos, 3, thread_cols);
  }
  std::string sql;
  for (const auto &[suffix, filter] : variants) {
    sql += fmt::format(
        "CREATE VIEW {}{} AS\n  SELECT {}, i.tier AS tier{}\n  FROM {}\n  WHERE {}{}{};\n", v.name,
        suffix, select, tail, v.from, filter, v.where.empty() ? "" : " AND ", v.where);
  }
  return sql;
}

// Schema v4 -> v5: tables and views.
std::string upgrade_v4_to_v5() {
  std::string sql = upgrade_v4_to_v5_tables;
  for (const auto &v : v5_view_specs()) {
    sql += create_views(v);
  }
  return sql;
}

// Schema v5 -> v6: `timeline` names its instants and lengths as every other view does (ts, dur),
// before the intervals columns it always had.
std::string upgrade_v5_to_v6() {
  return fmt::format("DROP VIEW timeline;\nCREATE VIEW timeline AS\n  SELECT i.start_ns AS ts, "
                     "i.dur_ns AS dur, i.* FROM intervals AS i WHERE {};\n",
                     finest_tier);
}

// Schema v6 -> v7: annotation_summary gains the span every other view has (ts, dur; dur NULL for
// a point annotation) after its columns, which stay as they were.
constexpr const char *upgrade_v6_to_v7 = R"sql(DROP VIEW annotation_summary;
CREATE VIEW annotation_summary AS
  SELECT d.annotation_id AS annotation_id, min(a.text) AS text, min(a.start_ns) AS start_ns,
         min(a.end_ns) AS end_ns, d.comm AS comm, sum(d.count) AS samples,
         hist_percentile(d.hist, 99) AS p99_ns, min(a.start_ns) AS ts,
         min(a.end_ns) - min(a.start_ns) AS dur
  FROM annotation_delay AS d JOIN annotations AS a ON a.id = d.annotation_id
  GROUP BY d.annotation_id, d.comm;
)sql";

// Schema v7 -> v8: the raw tier of thread_hist packed, one row per interval and metric
// (rsched/store/hist_pack.hpp), ~2.5 times smaller than a b-tree row per thread. The table keeps
// the rollup tiers and the raw rows written before, under the name thread_hist_row (renamed in
// legacy mode, so the views that name thread_hist keep naming it); thread_hist is the virtual
// table that reads both (vtab_hist.hpp), with the columns it always had.
constexpr const char *upgrade_v7_to_v8 = R"sql(PRAGMA legacy_alter_table = ON;
ALTER TABLE thread_hist RENAME TO thread_hist_row;
PRAGMA legacy_alter_table = OFF;
CREATE TABLE thread_hist_pack(
  interval_id INTEGER NOT NULL,
  metric      INTEGER NOT NULL,
  threads     INTEGER NOT NULL,                  -- entries in data
  data        BLOB NOT NULL,                     -- hist_pack.hpp format, version byte first
  PRIMARY KEY(interval_id, metric)
);
CREATE VIRTUAL TABLE thread_hist USING rsched_thread_hist;
)sql";

// Schema v8 -> v9 (issue 18): each boot's CPU topology, so per-CPU views group by LLC and
// NUMA node; the kernel's sched_ext state per interval.
constexpr const char *upgrade_v8_to_v9_tables = R"sql(CREATE TABLE cpu_topology(
  boot_id     TEXT NOT NULL,
  since_ns    INTEGER NOT NULL,                  -- UTC ns the set is in force from; 0: the boot
  cpu         INTEGER NOT NULL,
  core        INTEGER,                           -- core_id (unique within a package); NULL unknown
  package     INTEGER,                           -- physical_package_id
  die         INTEGER,                           -- dense die/CCX id
  llc         INTEGER,                           -- dense last-level-cache group id
  node        INTEGER,                           -- NUMA node
  PRIMARY KEY(boot_id, since_ns, cpu)
) WITHOUT ROWID;
ALTER TABLE intervals ADD COLUMN scx_state TEXT; -- /sys/kernel/sched_ext/state; NULL: no sched_ext
ALTER TABLE intervals ADD COLUMN scx_ops TEXT;   -- the BPF scheduler (root/ops); NULL: none
ALTER TABLE intervals ADD COLUMN scx_enable_seq INTEGER; -- enable_seq
ALTER TABLE thread_blame ADD COLUMN cpu INTEGER;     -- the culprit ran there (process culprits)
ALTER TABLE thread_blame ADD COLUMN policy INTEGER;  -- its task->policy (SCHED_*)
ALTER TABLE thread_blame ADD COLUMN prio INTEGER;    -- its task->prio (0-99 RT, 100-139 nice)
ALTER TABLE thread_blame ADD COLUMN waiter_policy INTEGER; -- the waiting thread's, likewise
ALTER TABLE thread_blame ADD COLUMN waiter_prio INTEGER;
)sql";

// Schema v9 -> v10 (issue 19): raw intervals whose minute may be missing from the 1-minute tier
// are marked (intervals.flags bit 2), so that the data views can answer whole minutes and hours
// from the rollups wherever those are exact (vtab_tiered.hpp). A raw interval is written late
// when its minute was rolled up before it was written (a restart within the minute, a clock set
// back): the writer marks it as it inserts it. In an older file such minutes are found by
// their lengths: the 1-minute row of a boot's minute holds the sum of its raw intervals' dur_ns
// (maintenance.cpp), and every raw interval of a minute whose sum differs is marked.
constexpr const char *upgrade_v9_to_v10 = R"sql(WITH raw AS (
  SELECT start_ns - start_ns % 60000000000 AS m, boot_id, sum(dur_ns) AS d
  FROM intervals
  WHERE tier = 0 AND start_ns < (SELECT built_ns FROM tiers WHERE tier = 1)
  GROUP BY 1, 2
), bad AS (
  SELECT raw.m, raw.boot_id FROM raw
  LEFT JOIN intervals AS u ON u.tier = 1 AND u.start_ns = raw.m AND u.boot_id = raw.boot_id
  WHERE u.dur_ns IS NOT raw.d
)
UPDATE intervals SET flags = flags | 4
WHERE tier = 0 AND (start_ns - start_ns % 60000000000, boot_id) IN (SELECT m, boot_id FROM bad);
CREATE INDEX intervals_late ON intervals(start_ns) WHERE tier = 0 AND flags & 4 <> 0;
)sql";

// Schema v9: delay_blame and preemption end with where and how the culprit and the waiting
// thread were scheduled (priority inversion; NULL for pseudo-culprits and rollup rows).
constexpr const char *v9_blame_tail =
    ", b.cpu AS by_cpu, b.policy AS by_policy, b.prio AS by_prio, b.waiter_policy AS policy, "
    "b.waiter_prio AS prio";

// Schema v10 -> v11 (issue 31): the part of a culprit's wait_ns that was estimated (a share of
// a CPU's coarse epoch of old runners, in proportion to what ran in it; the true value lies
// within approx_ns of wait_ns). NULL in the rows written before: the kernel side estimated
// nothing then (that part was <unknown>). delay_blame and preemption end with it, after the
// v9 columns (upgrade_v10_to_v11).
constexpr const char *upgrade_v10_to_v11_tables =
    "ALTER TABLE thread_blame ADD COLUMN approx_ns INTEGER; -- ns of wait_ns estimated\n";

// Schema v11 -> v12 (issue 32): the raw tier's per-interval summary of sched_delay for
// spikes() (rsched/store/hist_summary.hpp): each thread's and comm's p99 and samples, so a day
// is read without decoding its histograms. Intervals written before have none (spikes() reads
// their histograms). A rowid table, as thread_hist_pack: a blob of a few KB fits its leaf page,
// where a WITHOUT ROWID row spills all past ~1 KB to an overflow page of its own (2.8 GB
// instead of 2.4 GB for a day of 200 threads).
constexpr const char *upgrade_v11_to_v12 = R"sql(CREATE TABLE hist_summary(
  interval_id INTEGER NOT NULL,
  metric      INTEGER NOT NULL,
  data        BLOB NOT NULL, -- hist_summary.hpp format, version byte first
  PRIMARY KEY(interval_id, metric)
);
)sql";

// Schema v12 -> v13 (issue 32): the raw tier of thread_blame packed, one row per interval
// (rsched/store/blame_pack.hpp), as thread_hist's in v8: the table keeps the rollup tiers and
// the raw rows written before, under the name thread_blame_row (renamed in legacy mode, so the
// views that name thread_blame keep naming it); thread_blame is the virtual table that reads
// both (vtab_blame.hpp), with the columns it always had. The blame rows were 61 % of a busy
// day's file, and every long-window question stepped through them one b-tree row at a time.
constexpr const char *upgrade_v12_to_v13 = R"sql(PRAGMA legacy_alter_table = ON;
ALTER TABLE thread_blame RENAME TO thread_blame_row;
PRAGMA legacy_alter_table = OFF;
CREATE TABLE thread_blame_pack(
  interval_id INTEGER PRIMARY KEY,
  rows        INTEGER NOT NULL,                  -- entries in data
  data        BLOB NOT NULL                      -- blame_pack.hpp format, version byte first
);
CREATE VIRTUAL TABLE thread_blame USING rsched_thread_blame;
)sql";

// The per-CPU views that schema v9 recreates with `llc` and `node` after `tier`: the CPU
// metrics' views and the per-CPU views of other tables (as view_specs() has them).
std::vector<tailed_view> v9_cpu_view_specs() {
  std::vector<tailed_view> v;
  for (const auto &d : metrics::registry) {
    if (!d.view.empty() && d.where == metrics::scope::cpu) {
      v.push_back({metric_view(d), topology_tail("c.cpu")});
    }
  }
  const std::pair<const char *, const char *> others[] = {
      {"perf_counter_time", "c.cpu"}, {"schedstat_cpu", "s.cpu"}, {"schedstat_domain", "d.cpu"}};
  for (const auto &spec : view_specs()) {
    for (const auto &[name, cpu] : others) {
      if (spec.name == name) {
        v.push_back({spec, topology_tail(cpu)});
      }
    }
  }
  return v;
}

std::string v3_views() {
  std::string sql;
  const auto specs = view_specs();
  for (const auto &v : specs) {
    sql += fmt::format("DROP VIEW {};\n", v.name);
  }
  sql += "DROP VIEW annotation_delay;\nDROP VIEW annotation_summary;\n";
  for (const auto &v : specs) {
    sql += create_views(v);
  }
  // The intervals the views above draw from: raw where kept, else the finest rollup.
  sql += fmt::format("CREATE VIEW timeline AS\n  SELECT i.* FROM intervals AS i WHERE {};\n",
                     finest_tier);
  // Daemon health per raw interval (replaced by schema v4's).
  sql += health_view_v3;
  sql += R"sql(CREATE VIEW annotation_delay AS
  SELECT a.id AS annotation_id, a.text AS text, d.ts AS ts, d.dur AS dur, d.tid AS tid,
         d.comm AS comm, d.cgroup AS cgroup, d.count AS count, d.total_ns AS total_ns,
         d.hist AS hist, d.tier AS tier
  FROM annotations AS a
  JOIN sched_delay AS d
    ON d.ts >= a.start_ns - 300000000000
   AND d.ts <= coalesce(a.end_ns, a.start_ns) + 300000000000;
CREATE VIEW annotation_summary AS
  SELECT d.annotation_id AS annotation_id, min(a.text) AS text, min(a.start_ns) AS start_ns,
         min(a.end_ns) AS end_ns, d.comm AS comm, sum(d.count) AS samples,
         hist_percentile(d.hist, 99) AS p99_ns
  FROM annotation_delay AS d JOIN annotations AS a ON a.id = d.annotation_id
  GROUP BY d.annotation_id, d.comm;
)sql";
  return sql;
}

std::string v3_views_with_tables() {
  return std::string(upgrade_v2_to_v3) + v3_views();
}

constexpr const char *layouts_description =
    "1=latency: ns, 75 slots by whole us: 0..49 [10s,10s+9] us, 50 [500,511] us, "
    "51..73 [2^(s-42),2^(s-41)-1] us, 74 >= 2^32 us; "
    "2=depth: 64 slots, slot=value, 63 >= 63; "
    "3=count: 75 slots, 0..63 slot=value, 64..73 [2^(s-58),2^(s-57)-1], 74 >= 2^16; "
    "4=log2: 65 slots, 0 = {0}, s=1..64 [2^(s-1),2^s-1] (64 open-ended)";

std::string hostname() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0) {
    return {};
  }
  return std::string(buf.data());
}

std::string kernel_release() {
  utsname u{};
  if (uname(&u) != 0) {
    return {};
  }
  return std::string(u.release);
}

std::string realtime_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::to_string(std::int64_t{ts.tv_sec} * 1'000'000'000 + std::int64_t{ts.tv_nsec});
}

// Writes `rows` into meta with `sql` (an INSERT taking key, value).
result<void> put_meta(sqlite3 *db, const char *sql,
                      const std::vector<std::pair<std::string_view, std::string>> &rows) {
  auto prepared = sqlite::prepare_stmt(db, sql);
  if (!prepared) {
    return prepared.err();
  }
  const auto &st = *prepared;
  for (const auto &[key, val] : rows) {
    sqlite3_reset(st.get());
    sqlite3_bind_text(st.get(), 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_text(st.get(), 2, val.data(), static_cast<int>(val.size()), SQLITE_STATIC);
    if (sqlite3_step(st.get()) != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
  }
  return {};
}

result<void> insert_meta(sqlite3 *db) {
  return put_meta(db, "INSERT INTO meta(key, value) VALUES(?1, ?2)",
                  {
                      {"schema_version", std::to_string(schema_version)},
                      {"created_ns", realtime_ns()},
                      {"hostname", hostname()},
                      {"kernel_release", kernel_release()},
                      {"rsched_version", RSCHED_VERSION},
                      {"hist_layouts", layouts_description},
                  });
}

} // namespace

result<void> register_storage(sqlite3 *db) {
  if (auto r = detail::register_hist_module(db); !r) {
    return r;
  }
  if (auto r = detail::register_blame_module(db); !r) {
    return r;
  }
  if (auto r = detail::register_packed_rows_module(db); !r) {
    return r;
  }
  return register_hist_functions(db);
}

result<db_state> check(sqlite3 *db, const std::string &path) {
  // The first read of the header is where SQLite notices a file that is not a database.
  auto app = sqlite::query_int(db, "PRAGMA application_id");
  if (!app) {
    return make_error(fmt::format("{}: {}", path, app.err().msg));
  }
  auto ver = sqlite::query_int(db, "PRAGMA user_version");
  if (!ver) {
    return make_error(fmt::format("{}: {}", path, ver.err().msg));
  }
  auto objects = sqlite::query_int(db, "SELECT count(*) FROM sqlite_master");
  if (!objects) {
    return make_error(fmt::format("{}: {}", path, objects.err().msg));
  }
  if (*app == 0 && *ver == 0 && *objects == 0) {
    return db_state{};
  }
  if (*app != application_id) {
    return make_error(fmt::format("{}: not an rsched database (application_id {:#010x})", path,
                                  static_cast<std::uint32_t>(*app)));
  }
  if (*ver > schema_version) {
    return make_error(
        fmt::format("{}: database schema version {} is newer than this rsched supports ({})", path,
                    *ver, schema_version));
  }
  if (*ver < 1) {
    return make_error(
        fmt::format("{}: rsched database without a valid schema version ({})", path, *ver));
  }
  return db_state{static_cast<int>(*ver)};
}

namespace {

result<void> insert_new_metrics(sqlite3 *db); // below

// Runs `body` in one IMMEDIATE transaction after checking the state again inside it (another
// process may have done the work since the caller's check): `body` only runs in state `from`;
// in state current nothing is done. Errors roll everything back and start with `path: what:`.
template <typename Body>
result<void> in_transaction(sqlite3 *db, const std::string &path, const char *what, db_state from,
                            Body body) {
  auto fail = [&](const std::string &msg) {
    if (sqlite3_get_autocommit(db) == 0) {
      (void)sqlite::exec(db, "ROLLBACK");
    }
    return make_error(fmt::format("{}: {}: {}", path, what, msg));
  };
  if (auto r = sqlite::exec(db, "BEGIN IMMEDIATE"); !r) {
    return fail(r.err().msg);
  }
  auto state = check(db, path);
  if (!state) {
    if (sqlite3_get_autocommit(db) == 0) {
      (void)sqlite::exec(db, "ROLLBACK");
    }
    return state.err();
  }
  if (!state->current()) {
    if (state->version != from.version) {
      return fail("unexpected database state");
    }
    if (auto r = body(*state); !r) {
      return fail(r.err().msg);
    }
  }
  if (auto r = sqlite::exec(db, "COMMIT"); !r) {
    return fail(r.err().msg);
  }
  return {};
}

result<void> set_user_version(sqlite3 *db) {
  const std::string pragma = fmt::format("PRAGMA user_version = {}", schema_version);
  return sqlite::exec(db, pragma.c_str());
}

} // namespace

namespace {
// Schema v8 -> v9: the table and columns, then every per-CPU view the database has dropped and
// created again with the topology columns (a CPU metric's view that it lacks is created by
// insert_new_metrics, already with them).
result<void> upgrade_v8_to_v9(sqlite3 *db) {
  if (auto r = sqlite::exec(db, upgrade_v8_to_v9_tables); !r) {
    return r;
  }
  std::vector<tailed_view> views = v9_cpu_view_specs();
  for (const auto &v : v5_view_specs()) {
    if (v.name == "delay_blame" || v.name == "preemption") {
      views.push_back({v, v9_blame_tail});
    }
  }
  for (const auto &[v, tail] : views) {
    const std::string exists = fmt::format(
        "SELECT count(*) FROM sqlite_master WHERE type = 'view' AND name = '{}'", v.name);
    auto n = sqlite::query_int(db, exists.c_str());
    if (!n) {
      return n.err();
    }
    if (*n == 0) {
      continue;
    }
    const std::string sql = fmt::format("DROP VIEW {0};\nDROP VIEW {0}_1m;\nDROP VIEW {0}_1h;\n{1}",
                                        v.name, create_views(v, tail));
    if (auto r = sqlite::exec(db, sql.c_str()); !r) {
      return r;
    }
  }
  return {};
}

// Schema v10 -> v11: the column, then delay_blame and preemption (all tiers) dropped and created
// again with approx_ns after the v9 columns.
result<void> upgrade_v10_to_v11(sqlite3 *db) {
  std::string sql = upgrade_v10_to_v11_tables;
  const std::string tail = std::string(v9_blame_tail) + ", b.approx_ns AS approx_ns";
  for (const auto &v : v5_view_specs()) {
    if (v.name == "delay_blame" || v.name == "preemption") {
      sql += fmt::format("DROP VIEW {0};\nDROP VIEW {0}_1m;\nDROP VIEW {0}_1h;\n{1}", v.name,
                         create_views(v, tail));
    }
  }
  return sqlite::exec(db, sql.c_str());
}

// Schema 14: the flight recorder's captures (rschedd --flight-recorder): one row per Perfetto
// trace file written beside the database, what asked for it and the window it holds.
constexpr const char *upgrade_v13_to_v14 = R"sql(CREATE TABLE captures(
  id            INTEGER PRIMARY KEY,
  start_ns      INTEGER NOT NULL,                -- UTC ns: the window's first moment
  end_ns        INTEGER NOT NULL,                -- UTC ns: its last (the trigger's moment)
  trigger       TEXT NOT NULL,                   -- 'signal', 'threshold' or 'annotation'
  reason        TEXT NOT NULL,                   -- what fired: the thread and its wait, ...
  annotation_id INTEGER,                         -- the annotation that asked, if one did
  file          TEXT NOT NULL,                   -- the trace file's absolute path
  bytes         INTEGER NOT NULL,                -- its size
  events        INTEGER NOT NULL,                -- scheduler events in it
  lossy_cpus    TEXT NOT NULL DEFAULT '',        -- CPUs that lost events in the window (0,3)
  created_ns    INTEGER NOT NULL                 -- UTC ns when the file was written
);
CREATE INDEX captures_start_ns ON captures(start_ns);
)sql";

// The schema, one numbered step per version: step N turns a database of version N - 1 into
// version N (step 1 makes version 1 from nothing). create() runs every step on an empty file and
// upgrade() the steps above a file's version, in one transaction either way, so a new database
// and an upgraded one are made by the same code (the test "upgraded schema equals new" compares
// them on a real file of every version). A new schema version is one step at the end, with
// schema_version (records.hpp) raised to its number.
struct migration {
  int to;
  result<void> (*run)(sqlite3 *db);
  // Counts what the step creates (a non-zero count skips the step): a file whose user_version
  // was lowered by hand may hold it already. nullptr: the step always runs.
  const char *present;
};

result<void> exec_all(sqlite3 *db, std::initializer_list<const char *> sql) {
  for (const char *s : sql) {
    if (auto r = sqlite::exec(db, s); !r) {
      return r;
    }
  }
  return {};
}

// blocked_stacks (v15; v16 adds `state` after `tier`, create_views' tail).
view_spec blocked_stacks_spec() {
  return {"blocked_stacks",
          "{T}, b.stack_id AS stack_id, coalesce((SELECT group_concat(f.func, ' <- ') FROM "
          "(SELECT func FROM kstack_frame WHERE stack_id = b.stack_id ORDER BY depth) AS f), "
          "'<other>') AS frames, b.sleep_ns AS sleep_ns, b.count AS count",
          "intervals AS i CROSS JOIN thread_blocked AS b ON b.interval_id = i.id "
          "JOIN thread AS t ON t.id = b.thread_id",
          ""};
}

// Schema v14 -> v15 (issue 34): the wakeup group. Who ended each thread's sleeps, by the state
// it slept in: one row per (interval, sleeping thread, waker, state). Wakers are `culprit` rows
// (processes per boot, their rollup identities, pseudo-wakers), three pseudo-wakers added.
std::string upgrade_v14_to_v15() {
  std::string sql = R"sql(INSERT OR IGNORE INTO culprit(boot_id, pid, comm, cgroup, kind) VALUES
  ('', 0, '<hardirq>', '', 4), ('', 0, '<softirq>', '', 5), ('', 0, '<timer>', '', 6);
CREATE TABLE thread_wakeup(
  interval_id INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL, -- the thread that slept
  waker_id    INTEGER NOT NULL, -- culprit.id of what ended the sleeps (sched_waking's context)
  state       INTEGER NOT NULL, -- the sleeper's state at switch-out: 0 S, 1 D, 2 other
  sleep_ns    INTEGER NOT NULL, -- switch-out -> sched_waking, summed over those sleeps
  count       INTEGER NOT NULL, -- sleeps it ended
  PRIMARY KEY(interval_id, thread_id, waker_id, state)
) WITHOUT ROWID;
-- Where D sleeps blocked: kernel stacks, per boot, by a hash of their return addresses (the
-- row with boot_id '' and hash 0 is <other>: stacks past the kernel's slots or not taken).
CREATE TABLE kstack(
  id      INTEGER PRIMARY KEY,
  boot_id TEXT NOT NULL,
  hash    INTEGER NOT NULL, -- FNV-1a of the return addresses (as a signed 64-bit integer)
  depth   INTEGER NOT NULL, -- frames in kstack_frame
  UNIQUE(boot_id, hash)
);
INSERT INTO kstack(boot_id, hash, depth) VALUES ('', 0, 0);
CREATE TABLE kstack_frame(
  stack_id INTEGER NOT NULL,
  depth    INTEGER NOT NULL, -- 0 innermost
  func     TEXT NOT NULL,    -- the kernel function (/proc/kallsyms), or 0x<address>
  PRIMARY KEY(stack_id, depth)
) WITHOUT ROWID;
CREATE TABLE thread_blocked(
  interval_id INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL, -- the thread whose D sleeps blocked there
  stack_id    INTEGER NOT NULL, -- kstack.id
  sleep_ns    INTEGER NOT NULL, -- switch-out -> sched_waking, summed over those D sleeps
  count       INTEGER NOT NULL, -- those D sleeps
  PRIMARY KEY(interval_id, thread_id, stack_id)
) WITHOUT ROWID;
)sql";
  const view_spec blocked = blocked_stacks_spec();
  sql += create_views(blocked);
  const view_spec v{
      "wakeups",
      "{T}, CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 THEN 0 END AS by_pid, c.comm AS "
      "by_comm, c.cgroup AS by_cgroup, CASE w.state WHEN 0 THEN 'S' WHEN 1 THEN 'D' ELSE 'other' "
      "END AS state, w.sleep_ns AS sleep_ns, w.count AS count",
      "intervals AS i CROSS JOIN thread_wakeup AS w ON w.interval_id = i.id "
      "JOIN thread AS t ON t.id = w.thread_id JOIN culprit AS c ON c.id = w.waker_id",
      ""};
  sql += create_views(v);
  return sql;
}

// Schema v15 -> v16 (issue 34): long sleeps' stacks. A kernel stack is now also taken for a
// sleep that is not D but lasted at least rschedd's --stack-sleep (from the sleeper, at the
// sched_waking that ends it): `kstack.state` says which sleeps a stack is of (0 S, 1 D, 2 other,
// as thread_wakeup.state; rows before v16 are D), and blocked_stacks shows it.
std::string upgrade_v15_to_v16() {
  std::string sql = "ALTER TABLE kstack ADD COLUMN state INTEGER NOT NULL DEFAULT 1;\n"
                    "DROP VIEW blocked_stacks;\nDROP VIEW blocked_stacks_1m;\n"
                    "DROP VIEW blocked_stacks_1h;\n";
  const view_spec blocked = blocked_stacks_spec();
  sql += create_views(blocked, ", (SELECT CASE k.state WHEN 0 THEN 'S' WHEN 1 THEN 'D' ELSE "
                               "'other' END FROM kstack AS k WHERE k.id = b.stack_id) AS state");
  return sql;
}

// Schema v16 -> v17 (issue 48): scheduler events that reached none of rschedd's programs (a
// switch-in, or the wakeup or switch-out that began a wait), found and counted from the kernel's
// own per-task account (sched_info) instead; `health` shows them. Not a loss: not in `drops`.
constexpr const char *upgrade_v16_to_v17 = R"sql(
ALTER TABLE intervals ADD COLUMN unseen_events INTEGER NOT NULL DEFAULT 0;
DROP VIEW health;
CREATE VIEW health AS
  SELECT start_ns AS ts, dur_ns AS dur, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes,
         bpf_run_ns, bpf_run_cnt,
         CASE WHEN bpf_run_cnt > 0 THEN bpf_run_ns / bpf_run_cnt END AS bpf_ns_per_event,
         drops_task_state + drops_graveyard + drops_stale_tid + drops_no_rq + drops_perf_read +
           drops_segment AS drops, discarded_too_long, (flags >> 1) & 1 AS stalled,
         delay_clock, drops_segment, unseen_events
  FROM intervals WHERE tier = 0;
)sql";

// Schema v17 -> v18 (issue 49): the raw tiers of thread_wakeup and thread_blocked packed, one
// row per interval each (rsched/store/row_pack.hpp), as thread_blame's in v13: each table keeps
// its rollup tiers and the raw rows written before, renamed <table>_row (in legacy mode, so the
// views that name the table keep naming it), and the name is the virtual table that reads both
// (vtab_rows.hpp). With the wakeup group on, a server of 10,000 threads that each sleep once a
// second wrote ~20,000 b-tree rows of them an interval: half of rschedd's write time.
constexpr const char *upgrade_v17_to_v18 = R"sql(PRAGMA legacy_alter_table = ON;
ALTER TABLE thread_wakeup RENAME TO thread_wakeup_row;
ALTER TABLE thread_blocked RENAME TO thread_blocked_row;
PRAGMA legacy_alter_table = OFF;
CREATE TABLE thread_wakeup_pack(
  interval_id INTEGER PRIMARY KEY,
  rows        INTEGER NOT NULL,                  -- rows in data
  data        BLOB NOT NULL                      -- row_pack.hpp format, version byte first
);
CREATE TABLE thread_blocked_pack(
  interval_id INTEGER PRIMARY KEY,
  rows        INTEGER NOT NULL,                  -- rows in data
  data        BLOB NOT NULL                      -- row_pack.hpp format, version byte first
);
CREATE VIRTUAL TABLE thread_wakeup USING rsched_packed_rows(thread_wakeup_row,
  thread_wakeup_pack, thread_id, waker_id, state, sleep_ns, count);
CREATE VIRTUAL TABLE thread_blocked USING rsched_packed_rows(thread_blocked_row,
  thread_blocked_pack, thread_id, stack_id, sleep_ns, count);
)sql";

// Version 19 (issue 50): which threads are a service (incident tools' service names, matched by
// explain() when an annotation names its service), written by rsched-sql only.
constexpr const char *upgrade_v18_to_v19 = R"sql(CREATE TABLE services(
  name       TEXT NOT NULL,                      -- a service, as incident tools name it
  pattern    TEXT NOT NULL,                      -- comm, comm:GLOB or cgroup:PATH (explain's victims)
  created_ns INTEGER NOT NULL,                   -- UTC ns when the row was added
  PRIMARY KEY (name, pattern)
) WITHOUT ROWID;
)sql";

// Version 20 (issue 50): each thread's I/O per interval, by the kernel's per-task accounting
// (the wakeup group), so that explain() names the processes a device was busy with when a
// thread blocked on I/O.
std::string upgrade_v19_to_v20() {
  std::string sql = R"sql(CREATE TABLE thread_io(
  interval_id INTEGER NOT NULL,
  thread_id   INTEGER NOT NULL,
  read_bytes  INTEGER NOT NULL,                  -- bytes it caused to be read from storage
  write_bytes INTEGER NOT NULL,                  -- bytes of page cache it dirtied or wrote
  PRIMARY KEY(interval_id, thread_id)
) WITHOUT ROWID;
)sql";
  sql += create_views({"io", "{T}, x.read_bytes AS read_bytes, x.write_bytes AS write_bytes",
                       "intervals AS i CROSS JOIN thread_io AS x ON x.interval_id = i.id "
                       "JOIN thread AS t ON t.id = x.thread_id",
                       ""});
  return sql;
}

// Version 21 (issue 51): the wall clock's steps as rschedd saw them (an interval is timed by the
// wall clock's mapping at its end, so the times before and after a step are each that clock's).
constexpr const char *upgrade_v20_to_v21 = R"sql(CREATE TABLE clock_steps(
  at_ns   INTEGER NOT NULL, -- UTC ns, by the wall clock after the step, when rschedd saw it
  step_ns INTEGER NOT NULL, -- how far the wall clock moved against the boot clock (> 0: forward)
  boot_id TEXT NOT NULL     -- /proc/sys/kernel/random/boot_id of the recorder that saw it
);
CREATE INDEX clock_steps_at_ns ON clock_steps(at_ns);
-- The 1-minute rollups of intervals written late, not yet in their hour (maintenance.cpp).
CREATE INDEX intervals_late_1m ON intervals(start_ns) WHERE tier = 1 AND flags & 4 <> 0;
)sql";

// Version 22 (issue 51): rows whose blobs no longer decode (bit rot that SQLite's own checks
// cannot see), moved aside by maintenance (damage.hpp) so that one damaged blob stops neither
// the rollups nor the retention that waits for them. Kept whatever retention deletes (the
// interval's place in time is copied), counted per raw interval by `health` and listed by
// gaps().
constexpr const char *upgrade_v21_to_v22 = R"sql(CREATE TABLE damaged_rows(
  id          INTEGER PRIMARY KEY,
  interval_id INTEGER NOT NULL,                  -- intervals.id it was in (may be gone since)
  tier        INTEGER NOT NULL,                  -- that interval's tier
  boot_id     TEXT NOT NULL,                     -- its boot
  start_ns    INTEGER NOT NULL,                  -- its start, UTC ns
  dur_ns      INTEGER NOT NULL,                  -- its length, ns
  source      TEXT NOT NULL,                     -- the table the row was in
  row_values  TEXT NOT NULL,                     -- the row's other columns, a JSON object
  data        BLOB NOT NULL,                     -- the bytes that do not decode, as stored
  error       TEXT NOT NULL,                     -- what the decoder said
  found_ns    INTEGER NOT NULL                   -- UTC ns when maintenance set it aside
);
CREATE INDEX damaged_rows_interval ON damaged_rows(interval_id);
CREATE INDEX damaged_rows_start ON damaged_rows(start_ns);
DROP VIEW health;
CREATE VIEW health AS
  SELECT start_ns AS ts, dur_ns AS dur, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes,
         bpf_run_ns, bpf_run_cnt,
         CASE WHEN bpf_run_cnt > 0 THEN bpf_run_ns / bpf_run_cnt END AS bpf_ns_per_event,
         drops_task_state + drops_graveyard + drops_stale_tid + drops_no_rq + drops_perf_read +
           drops_segment AS drops, discarded_too_long, (flags >> 1) & 1 AS stalled,
         delay_clock, drops_segment, unseen_events,
         (SELECT count(*) FROM damaged_rows AS d WHERE d.interval_id = intervals.id AND
           d.start_ns = intervals.start_ns) AS damaged_rows
  FROM intervals WHERE tier = 0;
)sql";

constexpr migration migrations[] = {
    {1, [](sqlite3 *db) { return sqlite::exec(db, schema_v1); }, nullptr},
    // Version 1 recorded the latency group only, always (no rows to mark in a new file).
    {2,
     [](sqlite3 *db) {
       return exec_all(db, {upgrade_v1_to_v2, "UPDATE intervals SET groups = 1"});
     },
     nullptr},
    // Existing thread identities count as seen now: they are kept until every row of theirs is
    // past retention (a year by default), without scanning their rows.
    {3,
     [](sqlite3 *db) {
       const std::string seen = "UPDATE thread SET last_ns = " + realtime_ns();
       return exec_all(db, {v3_views_with_tables().c_str(), seen.c_str()});
     },
     nullptr},
    // Intervals recorded before v4 keep delay_clock NULL: not recorded (rschedd used the
    // runqueue clock then).
    {4, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v3_to_v4); }, nullptr},
    {5, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v4_to_v5().c_str()); }, nullptr},
    {6, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v5_to_v6().c_str()); }, nullptr},
    {7, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v6_to_v7); }, nullptr},
    {8, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v7_to_v8); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'thread_hist_pack'"},
    {9, upgrade_v8_to_v9, "SELECT count(*) FROM sqlite_master WHERE name = 'cpu_topology'"},
    {10, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v9_to_v10); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'intervals_late'"},
    {11, upgrade_v10_to_v11,
     "SELECT count(*) FROM pragma_table_info('thread_blame') WHERE name = 'approx_ns'"},
    {12, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v11_to_v12); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'hist_summary'"},
    {13, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v12_to_v13); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'thread_blame_pack'"},
    {14, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v13_to_v14); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'captures'"},
    {15, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v14_to_v15().c_str()); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'thread_wakeup'"},
    {16, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v15_to_v16().c_str()); },
     "SELECT count(*) FROM pragma_table_info('kstack') WHERE name = 'state'"},
    {17, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v16_to_v17); },
     "SELECT count(*) FROM pragma_table_info('intervals') WHERE name = 'unseen_events'"},
    {18, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v17_to_v18); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'thread_wakeup_pack'"},
    {19, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v18_to_v19); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'services'"},
    {20, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v19_to_v20().c_str()); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'thread_io'"},
    {21, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v20_to_v21); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'clock_steps'"},
    {22, [](sqlite3 *db) { return sqlite::exec(db, upgrade_v21_to_v22); },
     "SELECT count(*) FROM sqlite_master WHERE name = 'damaged_rows'"},
};

constexpr bool steps_numbered() {
  int n = 0;
  for (const migration &m : migrations) {
    if (m.to != ++n) {
      return false;
    }
  }
  return n == schema_version;
}
static_assert(steps_numbered(), "one migration per schema version, numbered 1..schema_version");

// Runs the steps above version `from`, in order.
result<void> migrate(sqlite3 *db, int from) {
  for (const migration &m : migrations) {
    if (m.to <= from) {
      continue;
    }
    if (m.present != nullptr) {
      auto n = sqlite::query_int(db, m.present);
      if (!n) {
        return n.err();
      }
      if (*n != 0) {
        continue;
      }
    }
    if (auto r = m.run(db); !r) {
      return make_error(fmt::format("step {}: {}", m.to, r.err().msg));
    }
  }
  return {};
}

} // namespace

result<void> create(sqlite3 *db, const std::string &path) {
  // Retention deletes old rows; incremental auto-vacuum lets the daemon give the freed pages
  // back to the file system a few at a time. It must be chosen before the first table exists.
  if (auto r = sqlite::exec(db, "PRAGMA auto_vacuum = INCREMENTAL"); !r) {
    return make_error(fmt::format("{}: creating schema: {}", path, r.err().msg));
  }
  return in_transaction(db, path, "creating schema", db_state{}, [&](db_state) -> result<void> {
    if (auto r = migrate(db, 0); !r) {
      return r;
    }
    if (auto r = insert_new_metrics(db); !r) {
      return r;
    }
    if (auto r = insert_meta(db); !r) {
      return r;
    }
    // The header pragmas are transactional: they land with the tables or not at all.
    const std::string app = fmt::format("PRAGMA application_id = {}", application_id);
    if (auto r = sqlite::exec(db, app.c_str()); !r) {
      return r;
    }
    return set_user_version(db);
  });
}

result<void> upgrade(sqlite3 *db, const std::string &path, db_state from) {
  const std::string what = fmt::format("upgrading schema from version {}", from.version);
  return in_transaction(db, path, what.c_str(), from, [&](db_state state) -> result<void> {
    if (auto r = migrate(db, state.version); !r) {
      return r;
    }
    if (auto r = put_meta(db, "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)",
                          {
                              {"schema_version", std::to_string(schema_version)},
                              {"hist_layouts", layouts_description},
                              {"upgraded_ns", realtime_ns()},
                              {"upgraded_by", RSCHED_VERSION},
                          });
        !r) {
      return r;
    }
    return set_user_version(db);
  });
}

} // namespace rsched::store

namespace rsched::store {

namespace {
// The metric rows and views of registry metrics the database lacks (inside a transaction).
result<void> insert_new_metrics(sqlite3 *db) {
  for (const auto &d : metrics::registry) {
    const std::string exists = fmt::format("SELECT count(*) FROM metric WHERE id = {}", d.db_id);
    auto n = sqlite::query_int(db, exists.c_str());
    if (!n) {
      return n.err();
    }
    if (*n != 0) {
      continue; // known (a CPU metric may share its id with a thread metric)
    }
    std::string sql =
        fmt::format("INSERT INTO metric(id, name, unit, layout) VALUES({}, '{}', '{}', {});\n",
                    d.db_id, d.name, d.unit, static_cast<int>(d.layout));
    if (!d.view.empty()) {
      // A CPU metric's view has the topology columns (schema v9 made every per-CPU view so).
      sql += create_views(metric_view(d),
                          d.where == metrics::scope::cpu ? topology_tail("c.cpu") : std::string());
    }
    if (auto r = sqlite::exec(db, sql.c_str()); !r) {
      return r;
    }
  }
  return {};
}
} // namespace

result<void> add_new_metrics(sqlite3 *db, const std::string &path) {
  std::string known = "SELECT count(DISTINCT id) FROM metric WHERE id IN (";
  std::vector<int> wanted;
  for (const auto &d : metrics::registry) {
    if (std::find(wanted.begin(), wanted.end(), d.db_id) == wanted.end()) {
      known += fmt::format("{}{}", wanted.empty() ? "" : ", ", d.db_id);
      wanted.push_back(d.db_id);
    }
  }
  known += ")";
  auto have = sqlite::query_int(db, known.c_str());
  if (!have) {
    return make_error(fmt::format("{}: {}", path, have.err().msg));
  }
  if (static_cast<std::size_t>(*have) == wanted.size()) {
    return {};
  }
  auto fail = [&](const std::string &msg) {
    if (sqlite3_get_autocommit(db) == 0) {
      (void)sqlite::exec(db, "ROLLBACK");
    }
    return make_error(fmt::format("{}: adding new metrics: {}", path, msg));
  };
  if (auto r = sqlite::exec(db, "BEGIN IMMEDIATE"); !r) {
    return fail(r.err().msg);
  }
  if (auto r = insert_new_metrics(db); !r) {
    return fail(r.err().msg);
  }
  if (auto r = sqlite::exec(db, "COMMIT"); !r) {
    return fail(r.err().msg);
  }
  return {};
}

} // namespace rsched::store
