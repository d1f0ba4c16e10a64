// Schema, writer and reader of rsched::store: creation, round trips, refusals, file modes,
// failure handling.
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <map>
#include <sqlite3.h>
#include <string>
#include <vector>

using metric = rsched::metrics::id;

using namespace store_test;

namespace {

// A comm as hostile as the kernel allows: quotes, comma, an ESC sequence, invalid UTF-8, newline.
const std::string hostile_comm = "a\"b,c\x1b[31m\xff\n";

// The writer refuses to open `path` with an error that says `writer_says`, and so does the reader
// with `reader_says` (when given); the file is left as it was. Returns the writer's error.
std::string check_refused(const std::string &path, const std::string &writer_says,
                          const char *reader_says = nullptr) {
  const std::string before = read_file(path);
  auto w = writer::open(path);
  REQUIRE_FALSE(w.ok());
  CHECK_THAT(w.err().msg, Catch::Contains(writer_says));
  if (reader_says != nullptr) {
    auto r = reader::open(path);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.err().msg, Catch::Contains(reader_says));
  }
  CHECK(read_file(path) == before);
  return w.err().msg;
}

} // namespace

TEST_CASE("writer creates the current schema version in a new file", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  { auto w = open_writer(path); }

  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "PRAGMA application_id") == 0x72736368);
  auto jm = run(r, "PRAGMA journal_mode");
  REQUIRE(jm.rows.size() == 1);
  CHECK(as_text(jm.rows[0][0]) == "wal");

  auto meta = run(r, "SELECT key, value FROM meta ORDER BY key");
  std::map<std::string, std::string> kv;
  for (const auto &row : meta.rows) {
    kv[as_text(row[0])] = as_text(row[1]);
  }
  CHECK(kv["schema_version"] == std::to_string(rsched::store::schema_version));
  CHECK(kv.count("upgraded_ns") == 0); // created at version 2, not upgraded
  CHECK(kv["rsched_version"] == "0.1.0");
  CHECK(kv.count("created_ns") == 1);
  CHECK(std::stoll(kv["created_ns"]) > 1'600'000'000'000'000'000LL);
  CHECK(kv.count("hostname") == 1);
  CHECK(kv.count("kernel_release") == 1);
  CHECK(kv.count("hist_layouts") == 1);

  auto metrics = run(r, "SELECT id, name, unit, layout FROM metric ORDER BY id");
  struct metric_row {
    std::int64_t id;
    const char *name;
    const char *unit;
    std::int64_t layout;
  };
  const std::vector<metric_row> want = {
      {1, "sched_delay", "ns", 1},
      {2, "runq_depth", "tasks", 2},
      {3, "slice_voluntary", "ns", 1},
      {4, "slice_involuntary", "ns", 1},
      {5, "sleep", "ns", 1},
      {6, "waking_delay", "ns", 1},
      {7, "migration_rate", "migrations/s", 3},
      {8, "cpu_idle", "ns", 1},
      {9, "migration_rate_cross_ccx", "migrations/s", 3},
      {10, "migration_rate_cross_numa", "migrations/s", 3},
      {11, "cpu_busy", "ns", 1},
  };
  REQUIRE(metrics.rows.size() == want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(as_int(metrics.rows[i][0]) == want[i].id);
    CHECK(as_text(metrics.rows[i][1]) == want[i].name);
    CHECK(as_text(metrics.rows[i][2]) == want[i].unit);
    CHECK(as_int(metrics.rows[i][3]) == want[i].layout);
  }
  // The registry and the metric table agree.
  for (const auto &d : rsched::metrics::registry) {
    INFO(d.name);
    CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM metric WHERE id = {} AND name = '{}' AND "
                                    "unit = '{}' AND layout = {}",
                                    d.db_id, d.name, d.unit, static_cast<int>(d.layout))) == 1);
  }

  // Reopening an existing database keeps it.
  { auto w = open_writer(path); }
  CHECK(scalar_int(r, "SELECT count(*) FROM metric") == known_metrics());
  CHECK(scalar_int(r, "SELECT count(*) FROM meta WHERE key = 'created_ns'") == 1);
}

// A schema-3 database made before health had `stalled` (tests/store/data/v3.db with the health
// view it had then) gets the current health view when the writer next opens it: the version 4
// upgrade recreates the view; a stalled interval shows there. (No ';' in the title: CTest would
// split the name there and run two filters that match nothing.)
TEST_CASE("the writer brings an older health view up to date and stalled intervals show in it",
          "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v3.db", path);
  {
    sqlite3 *db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "DROP VIEW health; CREATE VIEW health AS SELECT start_ns AS ts, dur_ns "
                         "AS dur FROM intervals WHERE tier = 0;",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  std::int64_t next = 0;
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 3);
    CHECK(columns_of(r, "health") == std::vector<std::string>{"ts", "dur"});
    next = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
  }
  {
    auto w = open_writer(path);
    rsched::store::interval_row iv;
    iv.start_ns = next;
    iv.dur_ns = 4'000'000'000;
    iv.boot_id = "b";
    iv.stalled = true;
    REQUIRE(w.write(iv).ok());
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(columns_of(r, "health").size() == 17); // the version 22 view, `stalled` included
  CHECK(scalar_int(r, "SELECT count(*) FROM health WHERE stalled = 1") == 1);
  CHECK(scalar_int(r, "SELECT ts FROM health WHERE stalled = 1") == next);
  CHECK(scalar_int(r, "SELECT flags FROM intervals WHERE start_ns = " + std::to_string(next)) == 2);
  CHECK(scalar_int(r, "SELECT count(*) FROM gaps() WHERE reason = 'recorder stalled'") == 1);
}

TEST_CASE("a span lost to failing writes is a gap that says so, with the error", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const std::int64_t t0 = 1'700'000'000 * sec;
  {
    auto w = open_writer(path);
    for (std::int64_t i : {0, 1, 2, 8, 9}) { // 3..7 were lost
      rsched::store::interval_row iv;
      iv.start_ns = t0 + i * sec;
      iv.dur_ns = sec;
      iv.boot_id = "b";
      write_ok(w, iv);
    }
    REQUIRE(w.note_write_failure(t0 + 3 * sec, t0 + 8 * sec, 5,
                                 "rsched.db: writing interval: database or disk is full")
                .ok());
    // A later hole with no failure noted stays "not recording".
    rsched::store::interval_row iv;
    iv.start_ns = t0 + 20 * sec;
    iv.dur_ns = sec;
    iv.boot_id = "b";
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto t = run(r, "SELECT ts, end_ts, reason FROM gaps() ORDER BY ts");
  REQUIRE(t.rows.size() == 2);
  CHECK(as_int(t.rows[0][0]) == t0 + 3 * sec);
  CHECK(as_int(t.rows[0][1]) == t0 + 8 * sec);
  CHECK(as_text(t.rows[0][2]) ==
        "write failed: rsched.db: writing interval: database or disk is full (5 intervals lost)");
  CHECK(as_text(t.rows[1][2]) == "not recording");
  CHECK(scalar_int(r, "SELECT count(*) FROM annotations WHERE source = 'rschedd' AND tags = "
                      "'write-failed'") == 1);
}

TEST_CASE("public views have exactly the documented columns", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  { auto w = open_writer(path); }
  auto r = open_reader(path);
  using v = std::vector<std::string>;
  CHECK(columns_of(r, "sched_delay") ==
        v{"ts", "dur", "tid", "pid", "comm", "cgroup", "count", "total_ns", "hist", "tier"});
  // Schema 9: per-CPU views end with the CPU's LLC group and NUMA node.
  CHECK(columns_of(r, "cpu_sched_delay") ==
        v{"ts", "dur", "cpu", "count", "total_ns", "hist", "tier", "llc", "node"});
  CHECK(columns_of(r, "cpu_busy") ==
        v{"ts", "dur", "cpu", "count", "total_ns", "hist", "tier", "llc", "node"});
  CHECK(columns_of(r, "runq_depth") ==
        v{"ts", "dur", "tid", "pid", "comm", "cgroup", "count", "hist", "tier"});
  for (const char *suffix : {"_1m", "_1h"}) {
    CHECK(columns_of(r, std::string("sched_delay") + suffix) == columns_of(r, "sched_delay"));
    CHECK(columns_of(r, std::string("timeslice") + suffix) == columns_of(r, "timeslice"));
    CHECK(columns_of(r, std::string("cpu_sched_delay") + suffix) ==
          columns_of(r, "cpu_sched_delay"));
  }
  CHECK(columns_of(r, "intervals") == v{"id",
                                        "start_ns",
                                        "dur_ns",
                                        "boot_id",
                                        "flags",
                                        "drops_task_state",
                                        "drops_graveyard",
                                        "drops_stale_tid",
                                        "drops_no_rq",
                                        "discarded_too_long",
                                        "groups",
                                        "drops_perf_read",
                                        "tier",
                                        "collect_ns",
                                        "write_ns",
                                        "maint_ns",
                                        "cpu_ns",
                                        "rss_bytes",
                                        "bpf_run_ns",
                                        "bpf_run_cnt",
                                        "delay_clock",
                                        "drops_segment",
                                        "scx_state",
                                        "scx_ops",
                                        "scx_enable_seq",
                                        "unseen_events"});
  CHECK(columns_of(r, "cpu_topology") ==
        v{"boot_id", "since_ns", "cpu", "core", "package", "die", "llc", "node"});
  // timeline: ts and dur (schema 6), then every column of intervals.
  auto timeline_cols = v{"ts", "dur"};
  for (const auto &c : columns_of(r, "intervals")) {
    timeline_cols.push_back(c);
  }
  CHECK(columns_of(r, "timeline") == timeline_cols);
  CHECK(columns_of(r, "health") == v{"ts", "dur", "collect_ns", "write_ns", "maint_ns", "cpu_ns",
                                     "rss_bytes", "bpf_run_ns", "bpf_run_cnt", "bpf_ns_per_event",
                                     "drops", "discarded_too_long", "stalled", "delay_clock",
                                     "drops_segment", "unseen_events", "damaged_rows"});
  CHECK(columns_of(r, "tiers") == v{"tier", "name", "width_ns", "built_ns", "cutoff_ns"});
  CHECK(columns_of(r, "thread") ==
        v{"id", "boot_id", "tid", "pid", "start_time_ns", "comm", "cgroup", "last_ns"});
  CHECK(columns_of(r, "thread_hist") ==
        v{"interval_id", "metric", "thread_id", "count", "total", "hist"});
  CHECK(columns_of(r, "cpu_hist") == v{"interval_id", "metric", "cpu", "count", "total", "hist"});
  // intervals_start_ns, intervals_tier_start (rollups), intervals_late (schema 10: the late raw
  // intervals that keep the routed views from a rollup) and intervals_late_1m (schema 21: their
  // 1-minute rollups not yet in their hour).
  CHECK(scalar_int(r, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND "
                      "tbl_name = 'intervals' AND sql LIKE '%start_ns%'") == 4);
}

TEST_CASE("time-range queries on the views use the start_ns index", "[store]") {
  auto rr = reader::open(":memory:", false);
  REQUIRE(rr.ok());
  for (const char *view : {"sched_delay", "cpu_sched_delay", "runq_depth"}) {
    for (const char *where : {"ts > 10", "ts BETWEEN 10 AND 20", "ts >= 10 AND comm = 'x'"}) {
      if (std::string(view) == "cpu_sched_delay" &&
          std::string(where).find("comm") != std::string::npos) {
        continue;
      }
      INFO(view << " WHERE " << where);
      // main.VIEW: the file's view (VIEW itself is the connection's routed table, whose scans
      // run these same queries).
      const std::string details =
          query_plan(*rr, std::string("SELECT * FROM main.") + view + " WHERE " + where);
      INFO(details);
      CHECK_THAT(details, Catch::Contains("INDEX intervals_start_ns (start_ns>"));
      if (std::string(view) == "cpu_sched_delay") {
        CHECK_THAT(details, Catch::Contains("PRIMARY KEY (interval_id=? AND metric=?)"));
        CHECK_THAT(details, !Catch::Contains("SCAN"));
        continue;
      }
      CHECK(indexed_hist_plan(details));
    }
  }
}

TEST_CASE("in-memory reader gets the schema", "[store]") {
  auto r = open_reader(":memory:", false);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "PRAGMA application_id") == 0x72736368);
  CHECK(scalar_int(r, "SELECT count(*) FROM sqlite_master WHERE type = 'view'") == 70);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay") == 0);
  CHECK(columns_of(r, "sched_delay").size() == 10);
}

TEST_CASE_METHOD(new_db, "intervals round trip through writer and reader", "[store]") {

  const std::vector<std::uint64_t> d1 = {1'500, 25'000, 25'500, 700'000, 3'000'000'000};
  const std::vector<std::uint64_t> d2 = {9'000, 9'999};
  auto t1 = make_thread(101, hostile_comm, d1, {0, 1, 1, 2, 70}, "/system.slice/x.service");
  auto t2 = make_thread(102, "worker", d2); // no depth samples: no runq_depth row
  auto idle = make_thread(103, "idle", {}); // nothing at all: skipped
  rsched::store::cpu_row c0;
  c0.cpu = 3;
  c0.m[metric::cpu_sched_delay].hist = latency_hist(d1);
  c0.m[metric::cpu_sched_delay].count = d1.size();
  c0.m[metric::cpu_sched_delay].total = 42;
  rsched::store::cpu_row c_empty;
  c_empty.cpu = 4;
  auto iv = make_interval(1'700'000'000'000'000'000, {t1, t2, idle}, {c0, c_empty});
  iv.final_interval = true;
  iv.drops = {1, 2, 3, 4, 5, 0, 0, 0};
  write_ok(w, iv);

  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);
  auto ivr = run(r, "SELECT start_ns, dur_ns, boot_id, flags, drops_task_state, drops_graveyard, "
                    "drops_stale_tid, drops_no_rq, discarded_too_long FROM intervals");
  REQUIRE(ivr.rows.size() == 1);
  CHECK(as_int(ivr.rows[0][0]) == iv.start_ns);
  CHECK(as_int(ivr.rows[0][1]) == iv.dur_ns);
  CHECK(as_text(ivr.rows[0][2]) == iv.boot_id);
  CHECK(as_int(ivr.rows[0][3]) == 1);
  for (int i = 0; i < 5; ++i) {
    CHECK(as_int(ivr.rows[0][static_cast<std::size_t>(4 + i)]) == i + 1);
  }

  auto sd = run(r, "SELECT ts, dur, tid, pid, comm, cgroup, count, total_ns, hist FROM "
                   "sched_delay ORDER BY tid");
  REQUIRE(sd.rows.size() == 2);
  const auto &a = sd.rows[0];
  CHECK(as_int(a[0]) == iv.start_ns);
  CHECK(as_int(a[1]) == iv.dur_ns);
  CHECK(as_int(a[2]) == 101);
  CHECK(as_int(a[3]) == 101);
  CHECK(as_text(a[4]) == hostile_comm); // byte-exact
  CHECK(as_text(a[5]) == "/system.slice/x.service");
  CHECK(as_int(a[6]) == 5);
  CHECK(as_int(a[7]) == static_cast<std::int64_t>(t1.m[metric::sched_delay].total));
  auto h1 = rsched::stats::decode(as_blob(a[8]));
  REQUIRE(h1.ok());
  CHECK(*h1 == t1.m[metric::sched_delay].hist);
  const auto &b = sd.rows[1];
  CHECK(as_text(b[4]) == "worker");
  CHECK(as_text(b[5]).empty()); // unknown cgroup is ''
  CHECK(as_int(b[6]) == 2);
  auto h2 = rsched::stats::decode(as_blob(b[8]));
  REQUIRE(h2.ok());
  CHECK(*h2 == t2.m[metric::sched_delay].hist);

  auto rq = run(r, "SELECT tid, comm, count, hist FROM runq_depth");
  REQUIRE(rq.rows.size() == 1);
  CHECK(as_int(rq.rows[0][0]) == 101);
  CHECK(as_text(rq.rows[0][1]) == hostile_comm);
  CHECK(as_int(rq.rows[0][2]) == 5);
  auto hd = rsched::stats::decode(as_blob(rq.rows[0][3]));
  REQUIRE(hd.ok());
  CHECK(*hd == t1.m[metric::runq_depth].hist);
  CHECK(hd->kind == rsched::stats::layout::depth);
  CHECK(scalar_int(r, "SELECT total FROM thread_hist WHERE metric = 2") == 74);

  auto cpu = run(r, "SELECT ts, dur, cpu, count, total_ns, hist FROM cpu_sched_delay");
  REQUIRE(cpu.rows.size() == 1); // the empty CPU is skipped
  CHECK(as_int(cpu.rows[0][2]) == 3);
  CHECK(as_int(cpu.rows[0][3]) == 5);
  CHECK(as_int(cpu.rows[0][4]) == 42);
  auto hc = rsched::stats::decode(as_blob(cpu.rows[0][5]));
  REQUIRE(hc.ok());
  CHECK(*hc == c0.m[metric::cpu_sched_delay].hist);

  // The hostile comm can be matched exactly with a bound literal too.
  CHECK(scalar_int(r, "SELECT count(*) FROM thread WHERE comm = CAST(X'6122622C631B5B33316DFF0A' "
                      "AS TEXT)") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread") == 2);
}

TEST_CASE("thread identities are deduplicated across intervals and runs", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0, {make_thread(1, "a", {1000}), make_thread(2, "b", {2000})}));
    write_ok(w, make_interval(t0 + 10, {make_thread(1, "a", {1000})}));
    // A comm change makes a new identity.
    write_ok(w, make_interval(t0 + 20, {make_thread(1, "a-renamed", {1000})}));
    // The same identity twice in one interval is summed into one row.
    write_ok(w, make_interval(t0 + 30, {make_thread(2, "b", {2000}), make_thread(2, "b", {3000})}));
  }
  {
    // A new writer has an empty cache: the INSERT OR IGNORE + SELECT path finds the old rows.
    auto w = open_writer(path);
    write_ok(w, make_interval(t0 + 40, {make_thread(1, "a", {1000}), make_thread(2, "b", {5})}));
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread") == 3);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 5);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE comm = 'a'") == 3);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE comm = 'a-renamed'") == 1);
  auto dup =
      run(r, "SELECT count, total_ns, hist FROM sched_delay WHERE ts = " + std::to_string(t0 + 30));
  REQUIRE(dup.rows.size() == 1);
  CHECK(as_int(dup.rows[0][0]) == 2);
  CHECK(as_int(dup.rows[0][1]) == 5000);
  auto h = rsched::stats::decode(as_blob(dup.rows[0][2]));
  REQUIRE(h.ok());
  CHECK(*h == latency_hist({2000, 3000}));
}

TEST_CASE("writer rejects histograms of the wrong layout", "[store]") {
  temp_dir dir;
  auto w = open_writer(dir.file("rsched.db"));
  auto t = make_thread(1, "x", {1000});
  t.m[metric::sched_delay].hist.kind = rsched::stats::layout::depth;
  auto res = w.write(make_interval(1, {t}));
  REQUIRE_FALSE(res.ok());
  CHECK_THAT(res.err().msg, Catch::Contains("wrong layout"));
}

TEST_CASE("new file gets mode 0640 and new directories 0750", "[store]") {
  temp_dir dir;
  const mode_t old = umask(077); // the modes must not depend on the daemon's umask
  const auto path = (dir.path() / "var" / "lib" / "rsched.db").string();
  auto w = writer::open(path);
  umask(old);
  REQUIRE(w.ok());
  CHECK(file_mode(path) == 0640);
  CHECK(file_mode((dir.path() / "var").string()) == 0750);
  CHECK(file_mode((dir.path() / "var" / "lib").string()) == 0750);
  write_ok(*w, make_interval(1, {make_thread(1, "x", {1000})}));
  CHECK(file_mode(path + "-wal") == 0640);
  CHECK(file_mode(path + "-shm") == 0640);
}

TEST_CASE("an existing directory and file keep their modes", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  write_file(path, "");
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  REQUIRE(chmod(dir.path().c_str(), 0711) == 0);
  { auto w = open_writer(path); }
  CHECK(file_mode(path) == 0600);
  CHECK(file_mode(dir.path().string()) == 0711);
}

TEST_CASE("files that are not rsched databases are refused and left untouched", "[store]") {
  temp_dir dir;

  SECTION("not SQLite at all") {
    const auto path = dir.file("notes.txt");
    std::string text;
    for (int i = 0; i < 200; ++i) {
      text += "this is not a database, line " + std::to_string(i) + "\n";
    }
    write_file(path, text);
    const std::string err = check_refused(path, "file is not a database", "file is not a database");
    CHECK(err.find('\n') == std::string::npos);
  }

  SECTION("SQLite with a foreign application_id") {
    const auto path = dir.file("other.db");
    raw_exec(path, "PRAGMA application_id = 42; PRAGMA user_version = 1; CREATE TABLE t(x);");
    check_refused(path, "not an rsched database", "not an rsched database");
  }

  SECTION("SQLite with tables but no application_id and user_version 0") {
    const auto path = dir.file("plain.db");
    raw_exec(path, "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    check_refused(path, "not an rsched database");
  }

  SECTION("a newer schema version") {
    const auto path = dir.file("rsched.db");
    { auto w = open_writer(path); }
    raw_exec(path, "PRAGMA user_version = " + std::to_string(rsched::store::schema_version + 1));
    const std::string newer =
        fmt::format("database schema version {} is newer", rsched::store::schema_version + 1);
    check_refused(
        path,
        fmt::format("{} than this rsched supports ({})", newer, rsched::store::schema_version),
        newer.c_str());
  }

  SECTION("rsched application_id without a schema version") {
    const auto path = dir.file("rsched.db");
    raw_exec(path, "PRAGMA application_id = 1920164712; CREATE TABLE t(x);");
    auto w = writer::open(path);
    REQUIRE_FALSE(w.ok());
    CHECK_THAT(w.err().msg, Catch::Contains("without a valid schema version"));
  }

  SECTION("a directory in place of the file") {
    const auto path = dir.file("db.d");
    fs::create_directory(path);
    CHECK_FALSE(writer::open(path).ok());
    CHECK_FALSE(reader::open(path).ok());
  }
}

TEST_CASE("reader does not create missing or empty databases", "[store]") {
  temp_dir dir;
  const auto path = dir.file("missing.db");
  auto r = reader::open(path);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.err().msg, Catch::Contains("no such file"));
  CHECK_FALSE(fs::exists(path));
  auto rw = reader::open(path, false);
  REQUIRE_FALSE(rw.ok());
  CHECK_FALSE(fs::exists(path));

  const auto empty = dir.file("empty.db");
  write_file(empty, "");
  auto re = reader::open(empty);
  REQUIRE_FALSE(re.ok());
  CHECK_THAT(re.err().msg, Catch::Contains("not an rsched database"));
  CHECK(read_file(empty).empty());
}

TEST_CASE_METHOD(new_db, "read-only reader cannot write", "[store]") {
  write_ok(w, make_interval(1, {make_thread(1, "x", {1000})}));
  auto r = open_reader(path);
  const auto err = run_error(r, "INSERT INTO meta(key, value) VALUES ('k', 'v')");
  CHECK_THAT(err, Catch::Contains("readonly"));
  run_error(r, "DELETE FROM intervals");
  run_error(r, "PRAGMA user_version = 7");
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);

  // The same statement works on a writable connection, so the failure above is the mode.
  auto rw = open_reader(path, false);
  run(rw, "INSERT INTO meta(key, value) VALUES ('k', 'v')");
}

TEST_CASE_METHOD(new_db, "reader sees new intervals and holds no snapshot between statements",
                 "[store]") {
  write_ok(w, make_interval(1, {make_thread(1, "x", {1000})}));
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);
  write_ok(w, make_interval(2, {make_thread(1, "x", {1000})}));
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 2);

  // A TRUNCATE checkpoint from another connection completes (busy = 0) only when no reader
  // still holds a read transaction on an older snapshot.
  sqlite3 *db = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  sqlite3_busy_timeout(db, 200);
  sqlite3_stmt *st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "PRAGMA wal_checkpoint(TRUNCATE)", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  const int busy = sqlite3_column_int(st, 0);
  sqlite3_finalize(st);
  sqlite3_close(db);
  CHECK(busy == 0);
  CHECK(fs::file_size(path + "-wal") == 0);
}

TEST_CASE_METHOD(new_db, "a failed write (file size limit) is a clean error and rolls back",
                 "[store]") {
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  write_ok(w, make_interval(t0, {make_thread(1, "first", {1000})}));

  // A big interval whose WAL frames cannot fit under RLIMIT_FSIZE: the write() fails with
  // EFBIG, which SQLite reports like a full disk.
  std::vector<rsched::store::thread_row> many;
  for (std::uint32_t i = 0; i < 4000; ++i) {
    many.push_back(make_thread(1000 + i, "t" + std::to_string(i), {1000 + i, 20000, 800000}));
  }
  many.push_back(make_thread(2, "second", {2000}));
  rlimit old{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  const auto limit = std::max(fs::file_size(path), fs::file_size(path + "-wal")) + 4096;
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN); // EFBIG instead of a fatal signal
  rlimit lim = old;
  lim.rlim_cur = limit;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  auto res = w.write(make_interval(t0 + 1, many));
  REQUIRE(setrlimit(RLIMIT_FSIZE, &old) == 0);
  std::signal(SIGXFSZ, old_handler);
  REQUIRE_FALSE(res.ok());
  INFO(res.err().msg);
  CHECK(res.err().msg.find('\n') == std::string::npos);
  CHECK_THAT(res.err().msg, Catch::Contains("writing interval"));

  // Nothing of the failed interval is visible.
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);
    CHECK(scalar_int(r, "SELECT count(*) FROM thread") == 1);
  }
  // The writer recovers, and its thread-id cache did not keep ids of rolled-back rows: thread
  // "second" must get a real row that the view can join.
  write_ok(w, make_interval(t0 + 2,
                            {make_thread(2, "second", {2000}), make_thread(1, "first", {1000})}));
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 2);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay WHERE comm = 'second'") == 1);
  CHECK(scalar_int(r, "SELECT count(*) FROM sched_delay") == 3);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_hist WHERE thread_id NOT IN "
                      "(SELECT id FROM thread)") == 0);
}

TEST_CASE_METHOD(new_db, "moved-from writer and reader report errors instead of crashing",
                 "[store]") {
  writer w2 = std::move(w);
  CHECK_FALSE(w.write(make_interval(1, {})).ok()); // NOLINT(bugprone-use-after-move)
  CHECK(w2.write(make_interval(1, {})).ok());
  auto r = open_reader(path);
  reader r2 = std::move(r);
  CHECK_FALSE(r.exec("SELECT 1", {}).ok()); // NOLINT(bugprone-use-after-move)
  CHECK(r2.exec("SELECT 1", {}).ok());
}

TEST_CASE("many threads in one interval are written exactly, batch or not", "[store]") {
  // 101 threads (three whole batches of the writer's multi-row insert and 5 rows alone), given
  // in shuffled order, one listed twice (summed), some with only one of the two metrics.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  rsched::store::interval_row iv;
  iv.start_ns = 1'700'000'000LL * sec;
  iv.dur_ns = sec;
  iv.boot_id = "boot";
  std::map<std::uint32_t, std::pair<std::uint64_t, std::uint64_t>> want; // tid -> (delay, depth)
  for (std::uint32_t k = 0; k < 101; ++k) {
    const std::uint32_t tid = 1000 + (k * 37) % 101; // shuffled
    auto &t = iv.threads.emplace_back();
    t.tid = tid;
    t.pid = 1000;
    t.start_time_ns = tid;
    t.comm = fmt::format("w{}", tid % 7);
    if (tid % 5 != 0) {
      t.m[metric::sched_delay] = value_of(layout::latency, {1000ULL * tid, 2000});
      want[tid].first = 1000ULL * tid + 2000;
    }
    if (tid % 3 != 0) {
      t.m[metric::runq_depth] = value_of(layout::depth, {tid % 4});
      want[tid].second = tid % 4;
    }
    // Blame rows: 101 + 51 of them, over the writer's multi-row insert too.
    rsched::store::blame_row idle;
    idle.kind = rsched::store::culprit_kind::idle;
    idle.wait_ns = tid;
    idle.waits = 1;
    t.blame.push_back(idle);
    if (tid % 2 == 0) {
      rsched::store::blame_row hog;
      hog.kind = rsched::store::culprit_kind::process;
      hog.pid = 7;
      hog.comm = "hog";
      hog.wait_ns = 10ULL * tid;
      hog.waits = 2;
      t.blame.push_back(hog);
    }
  }
  auto dup = iv.threads[10]; // the same identity again: its values are summed
  const std::uint32_t dup_tid = dup.tid;
  iv.threads.push_back(dup);
  if (want[dup_tid].first != 0) {
    want[dup_tid].first *= 2;
  }
  {
    auto w = open_writer(path);
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  const auto rows = run(r, "SELECT tid, count, total_ns FROM sched_delay ORDER BY tid").rows;
  const auto depth = run(r, "SELECT tid, hist FROM runq_depth ORDER BY tid").rows;
  std::size_t n_delay = 0;
  std::size_t n_depth = 0;
  for (const auto &[tid, w] : want) {
    n_delay += w.first != 0 ? 1 : 0;
    n_depth += tid % 3 != 0 ? 1 : 0;
  }
  REQUIRE(rows.size() == n_delay);
  REQUIRE(depth.size() == n_depth);
  for (const auto &row : rows) {
    const auto tid = static_cast<std::uint32_t>(as_int(row[0]));
    INFO("tid " << tid);
    CHECK(static_cast<std::uint64_t>(as_int(row[2])) == want[tid].first);
    CHECK(as_int(row[1]) == (tid == dup_tid ? 4 : 2));
  }
  for (const auto &row : depth) {
    const auto tid = static_cast<std::uint32_t>(as_int(row[0]));
    auto h = rsched::stats::decode(as_blob(row[1]));
    REQUIRE(h.ok());
    const std::uint64_t d = want[tid].second;
    CHECK(*h == (tid == dup_tid ? hist_of(layout::depth, {d, d}) : hist_of(layout::depth, {d})));
  }
  const auto blame =
      run(r, "SELECT tid, by_comm, wait_ns, count FROM delay_blame ORDER BY tid, by_comm").rows;
  std::vector<std::vector<value>> want_blame;
  for (std::uint32_t tid = 1000; tid <= 1100; ++tid) { // blame also of threads without hists
    const std::int64_t k = tid == dup_tid ? 2 : 1;
    if (tid % 2 == 0) {
      want_blame.push_back(
          {value{std::int64_t{tid}}, value{std::string("<idle>")}, value{k * tid}, value{k}});
      want_blame.push_back(
          {value{std::int64_t{tid}}, value{std::string("hog")}, value{k * 10 * tid}, value{2 * k}});
    } else {
      want_blame.push_back(
          {value{std::int64_t{tid}}, value{std::string("<idle>")}, value{k * tid}, value{k}});
    }
  }
  REQUIRE(blame.size() == want_blame.size());
  for (std::size_t i = 0; i < blame.size(); ++i) {
    INFO("row " << i << ": tid " << as_int(blame[i][0]) << " " << as_text(blame[i][1]) << " "
                << as_int(blame[i][2]) << " " << as_int(blame[i][3]));
    CHECK(blame[i] == want_blame[i]);
  }
}

TEST_CASE("the reader binds values to ?1, ?2, ...: text, numbers, blobs and NULL go in as values",
          "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const std::int64_t t0 = 1'700'000'000'000'000'000;
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0, {make_thread(7, "it's \"x\", y", {1000, 2000})}));
  }
  auto r = open_reader(path);
  std::vector<std::vector<value>> rows;
  rsched::query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<value> &row) { rows.push_back(row); };
  // A comm with quotes, as a value: never part of the text.
  const std::vector<value> params = {std::string("it's \"x\", y"), std::int64_t{7}, 2.5,
                                     std::vector<std::uint8_t>{0, 1, 0xff}, value{}};
  REQUIRE(r.exec("SELECT sum(count), ?3 * 2, hex(?4), ?5 IS NULL FROM sched_delay WHERE comm = ?1 "
                 "AND tid = ?2",
                 params, sink)
              .ok());
  REQUIRE(rows.size() == 1);
  CHECK(std::get<std::int64_t>(rows[0][0]) == 2);
  CHECK(std::get<double>(rows[0][1]) == 5.0);
  CHECK(std::get<std::string>(rows[0][2]) == "0001FF");
  CHECK(std::get<std::int64_t>(rows[0][3]) == 1);
  // Text that would be SQL if spliced is only a value that matches nothing.
  rows.clear();
  REQUIRE(r.exec("SELECT count(*) FROM sched_delay WHERE comm = ?1",
                 {std::string("x' OR '1' = '1")}, sink)
              .ok());
  CHECK(std::get<std::int64_t>(rows[0][0]) == 0);
  // More parameters than values: an error, not NULLs.
  auto e = r.exec("SELECT ?1, ?2", {std::int64_t{1}}, sink);
  REQUIRE_FALSE(e.ok());
  CHECK_THAT(e.err().msg, Catch::Contains("the statement has 2 parameters, 1 values given"));
}
