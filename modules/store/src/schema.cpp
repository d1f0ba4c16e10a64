#include "schema.hpp"

#include "rsched/store/records.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>

#include <array>
#include <ctime>
#include <memory>
#include <sqlite3.h>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

namespace rsched::store::detail {

namespace {

// Schema v1. Keep in sync with docs/SCHEMA.md and the view tests in tests/store. Views are the
// public interface; the tables behind them may change with the schema version.
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

constexpr const char *layouts_description =
    "1=latency: ns, 75 slots by whole us: 0..49 [10s,10s+9] us, 50 [500,511] us, "
    "51..73 [2^(s-42),2^(s-41)-1] us, 74 >= 2^32 us; "
    "2=depth: 64 slots, slot=value, 63 >= 63";

struct stmt_deleter {
  void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_deleter>;

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

result<void> insert_meta(sqlite3 *db) {
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db, "INSERT INTO meta(key, value) VALUES(?1, ?2)", -1, &raw, nullptr) !=
      SQLITE_OK) {
    return make_error(sqlite3_errmsg(db));
  }
  const stmt_ptr st(raw);
  const std::vector<std::pair<std::string_view, std::string>> rows = {
      {"schema_version", std::to_string(schema_version)},
      {"created_ns", realtime_ns()},
      {"hostname", hostname()},
      {"kernel_release", kernel_release()},
      {"rsched_version", RSCHED_VERSION},
      {"hist_layouts", layouts_description},
  };
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

} // namespace

result<std::int64_t> query_int(sqlite3 *db, const char *sql) {
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) {
    return make_error(sqlite3_errmsg(db));
  }
  const stmt_ptr st(raw);
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) {
    return make_error(rc == SQLITE_DONE ? std::string("no result") : sqlite3_errmsg(db));
  }
  return std::int64_t{sqlite3_column_int64(st.get(), 0)};
}

result<void> exec(sqlite3 *db, const char *sql) {
  char *msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg != nullptr ? msg : sqlite3_errmsg(db);
    sqlite3_free(msg);
    return make_error(std::move(m));
  }
  return {};
}

result<db_state> check(sqlite3 *db, const std::string &path) {
  // The first read of the header is where SQLite notices a file that is not a database.
  auto app = query_int(db, "PRAGMA application_id");
  if (!app) {
    return make_error(fmt::format("{}: {}", path, app.err().msg));
  }
  auto ver = query_int(db, "PRAGMA user_version");
  if (!ver) {
    return make_error(fmt::format("{}: {}", path, ver.err().msg));
  }
  auto objects = query_int(db, "SELECT count(*) FROM sqlite_master");
  if (!objects) {
    return make_error(fmt::format("{}: {}", path, objects.err().msg));
  }
  if (*app == 0 && *ver == 0 && *objects == 0) {
    return db_state::empty;
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
  if (*ver != schema_version) {
    return make_error(
        fmt::format("{}: rsched database without a valid schema version ({})", path, *ver));
  }
  return db_state::current;
}

result<void> create(sqlite3 *db, const std::string &path) {
  auto fail = [&](const std::string &what) {
    if (sqlite3_get_autocommit(db) == 0) {
      (void)exec(db, "ROLLBACK");
    }
    return make_error(fmt::format("{}: creating schema: {}", path, what));
  };
  if (auto r = exec(db, "BEGIN IMMEDIATE"); !r) {
    return fail(r.err().msg);
  }
  auto state = check(db, path);
  if (!state) {
    if (sqlite3_get_autocommit(db) == 0) {
      (void)exec(db, "ROLLBACK");
    }
    return state.err();
  }
  if (*state == db_state::current) {
    if (auto r = exec(db, "COMMIT"); !r) {
      return fail(r.err().msg);
    }
    return {};
  }
  // The header pragmas are transactional: they land with the tables or not at all.
  const std::string pragmas = fmt::format("PRAGMA application_id = {}; PRAGMA user_version = {};",
                                          application_id, schema_version);
  if (auto r = exec(db, schema_v1); !r) {
    return fail(r.err().msg);
  }
  if (auto r = insert_meta(db); !r) {
    return fail(r.err().msg);
  }
  if (auto r = exec(db, pragmas.c_str()); !r) {
    return fail(r.err().msg);
  }
  if (auto r = exec(db, "COMMIT"); !r) {
    return fail(r.err().msg);
  }
  return {};
}

} // namespace rsched::store::detail
