// Schema v5 in the store: blame (delay_blame, preemption) and CPU pressure and throttling
// (cpu_pressure, cpu_throttling): written rows, the views, rollups per (comm, cgroup) of both
// sides, retention of their identities, and the upgrade of a real version 4 database.
#include "rsched/query/annotations.hpp"

#include "store_test_util.hpp"

#include <fmt/format.h>

using namespace store_test;
using rsched::store::blame_row;
using rsched::store::cgroup_cpu_row;
using rsched::store::culprit_kind;

namespace {

constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute (UTC ns)

blame_row culprit(std::uint32_t pid, std::string comm, std::string cgroup, std::uint64_t wait_ns,
                  std::uint64_t waits, std::uint64_t preempts = 0) {
  blame_row b;
  b.kind = culprit_kind::process;
  b.pid = pid;
  b.comm = std::move(comm);
  b.cgroup = std::move(cgroup);
  b.wait_ns = wait_ns;
  b.waits = waits;
  b.preempts = preempts;
  return b;
}

blame_row pseudo(culprit_kind k, std::uint64_t wait_ns, std::uint64_t waits,
                 std::uint64_t preempts = 0) {
  blame_row b;
  b.kind = k;
  b.wait_ns = wait_ns;
  b.waits = waits;
  b.preempts = preempts;
  return b;
}

// A victim thread whose delays (1 ms + 3 ms) are blamed on a hog, <idle> and <unknown>.
rsched::store::thread_row victim(std::uint32_t tid, const std::string &comm) {
  auto t = make_thread(tid, comm, {1'000'000, 3'000'000}, {}, "/app");
  t.blame = {culprit(77, "hog", "/batch", 3'500'000, 2, 5), pseudo(culprit_kind::idle, 300'000, 1),
             pseudo(culprit_kind::unknown, 200'000, 1), pseudo(culprit_kind::other, 0, 0, 1)};
  return t;
}

} // namespace

TEST_CASE_METHOD(new_db, "blame rows: the views, names of pseudo-culprits, sums equal the delay",
                 "[store][blame]") {
  auto iv = make_interval(t0, {victim(10, "db"), victim(11, "db")});
  // A hostile culprit name and one that looks like a pseudo-culprit are data.
  iv.threads[1].blame.push_back(culprit(66, "<idle>", "/x", 0, 0, 2));
  iv.threads[1].blame.push_back(culprit(67, "a,\"b\"\x1b[2J", "", 0, 0, 1));
  write_ok(w, iv);
  auto r = open_reader(path);
  // Schema 9: where and how the culprit and the waiting thread were scheduled, after tier;
  // schema 11: the part of the wait estimated, last.
  CHECK(columns_of(r, "delay_blame") ==
        std::vector<std::string>{"ts", "dur", "tid", "pid", "comm", "cgroup", "by_pid", "by_comm",
                                 "by_cgroup", "wait_ns", "count", "tier", "by_cpu", "by_policy",
                                 "by_prio", "policy", "prio", "approx_ns"});
  CHECK(columns_of(r, "preemption") ==
        std::vector<std::string>{"ts", "dur", "tid", "pid", "comm", "cgroup", "by_pid", "by_comm",
                                 "by_cgroup", "count", "tier", "by_cpu", "by_policy", "by_prio",
                                 "policy", "prio", "approx_ns"});
  CHECK(columns_of(r, "delay_blame_1m") == columns_of(r, "delay_blame"));
  CHECK(columns_of(r, "delay_blame_1h") == columns_of(r, "delay_blame"));
  CHECK(columns_of(r, "preemption_1m") == columns_of(r, "preemption"));
  CHECK(columns_of(r, "preemption_1h") == columns_of(r, "preemption"));
  // Per thread, the parts add up to sched_delay.total_ns.
  auto eq = run(r, "SELECT d.tid, d.total_ns, (SELECT sum(wait_ns) FROM delay_blame AS b WHERE "
                   "b.tid = d.tid AND b.ts = d.ts) FROM sched_delay AS d ORDER BY d.tid");
  REQUIRE(eq.rows.size() == 2);
  for (const auto &row : eq.rows) {
    CHECK(as_int(row[1]) == 4'000'000);
    CHECK(as_int(row[2]) == 4'000'000);
  }
  auto t = run(r, "SELECT by_pid, by_comm, by_cgroup, wait_ns, count FROM delay_blame WHERE "
                  "tid = 10 ORDER BY wait_ns DESC");
  REQUIRE(t.rows.size() == 3); // <other> had preemptions only
  CHECK(as_int(t.rows[0][0]) == 77);
  CHECK(as_text(t.rows[0][1]) == "hog");
  CHECK(as_text(t.rows[0][2]) == "/batch");
  CHECK(as_int(t.rows[0][4]) == 2);
  CHECK(as_int(t.rows[1][0]) == 0); // <idle> is by_pid 0
  CHECK(as_text(t.rows[1][1]) == "<idle>");
  CHECK(is_null(t.rows[2][0])); // <unknown> has no pid
  CHECK(as_text(t.rows[2][1]) == "<unknown>");
  auto p = run(r, "SELECT by_pid, by_comm, count FROM preemption WHERE tid = 11 ORDER BY by_comm");
  REQUIRE(p.rows.size() == 4);
  CHECK(as_int(p.rows[0][0]) == 66); // a process named "<idle>" keeps its pid
  CHECK(as_text(p.rows[0][1]) == "<idle>");
  CHECK(is_null(p.rows[1][0]));
  CHECK(as_text(p.rows[1][1]) == "<other>");
  CHECK(as_text(p.rows[2][1]) == std::string("a,\"b\"\x1b[2J"));
  CHECK(as_int(p.rows[3][2]) == 5);
  // Pseudo-culprits are shared, one row each (and schema 15's three pseudo-wakers).
  CHECK(scalar_int(r, "SELECT count(*) FROM culprit WHERE kind > 0") == 6);
  CHECK(scalar_int(r, "SELECT count(*) FROM culprit WHERE kind BETWEEN 1 AND 3") == 3);
}

TEST_CASE_METHOD(new_db, "blame rows of one culprit given twice for a thread are summed",
                 "[store][blame]") {
  auto t = make_thread(5, "v", {2'000'000});
  t.blame = {culprit(9, "hog", "/", 1'000'000, 1), culprit(9, "hog", "/", 1'000'000, 1, 3)};
  write_ok(w, make_interval(t0, {t}));
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame") == 1);
  CHECK(scalar_int(r, "SELECT wait_ns FROM delay_blame") == 2'000'000);
  CHECK(scalar_int(r, "SELECT approx_ns FROM delay_blame") == 0);
  CHECK(scalar_int(r, "SELECT count FROM preemption") == 3);
  // A thread with nothing but a preemption (its delay comes next interval) still has its row.
  auto only = make_thread(6, "p", {});
  only.blame = {culprit(9, "hog", "/", 0, 0, 1)};
  write_ok(w, make_interval(t0 + 10 * sec, {only}));
  CHECK(scalar_int(r, "SELECT count(*) FROM preemption WHERE tid = 6") == 1);
}

TEST_CASE_METHOD(new_db,
                 "pressure and throttling rows: the views, NULL where the kernel says "
                 "nothing, percent of the interval",
                 "[store][pressure]") {
  auto iv = make_interval(t0, {make_thread(1, "a", {1000})});
  cgroup_cpu_row sys{"/", 2'000'000'000, 0, 9'000'000'000, {}, {}, {}};
  cgroup_cpu_row app{"/app", 500'000'000, 100'000'000, 4'000'000'000, 100, 30, 700'000'000};
  cgroup_cpu_row nopsi{"/nopsi", {}, {}, 1'000, {}, {}, {}};
  iv.cgroup_cpu = {sys, app, nopsi};
  write_ok(w, iv);
  auto r = open_reader(path);
  CHECK(columns_of(r, "cpu_pressure") == std::vector<std::string>{"ts", "dur", "cgroup", "some_ns",
                                                                  "full_ns", "some_pct", "full_pct",
                                                                  "tier"});
  CHECK(columns_of(r, "cpu_throttling") ==
        std::vector<std::string>{"ts", "dur", "cgroup", "usage_ns", "periods", "throttled",
                                 "throttled_ns", "tier"});
  auto p = run(r, "SELECT cgroup, some_ns, some_pct, full_pct FROM cpu_pressure ORDER BY cgroup");
  REQUIRE(p.rows.size() == 2); // /nopsi has no PSI
  CHECK(as_text(p.rows[0][0]) == "/");
  CHECK(as_real(p.rows[0][2]) == Approx(20.0)); // 2 s of a 10-s interval
  CHECK(as_real(p.rows[1][3]) == Approx(1.0));
  auto t = run(r, "SELECT cgroup, usage_ns, periods, throttled, throttled_ns FROM cpu_throttling "
                  "ORDER BY cgroup");
  REQUIRE(t.rows.size() == 3);
  CHECK(is_null(t.rows[0][2])); // no cpu controller data for the system
  CHECK(as_int(t.rows[1][3]) == 30);
  CHECK(as_int(t.rows[1][4]) == 700'000'000);
  CHECK(as_int(t.rows[2][1]) == 1'000);
  // A row without a cgroup path is refused, and nothing of the interval is written.
  auto bad = make_interval(t0 + 10 * sec, {make_thread(1, "a", {1000})});
  bad.cgroup_cpu = {cgroup_cpu_row{"", 1, 1, 1, 1, 1, 1}};
  auto res = w.write(bad);
  REQUIRE_FALSE(res.ok());
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);
}

TEST_CASE_METHOD(new_db, "blame and pressure roll up per (comm, cgroup) of both sides, exactly",
                 "[store][blame][rollup]") {
  // Two minutes of 10-s intervals; two threads of 'db' (one moves pids) blame two hog processes
  // of the same comm and cgroup: the 1-minute rows hold one row per (db, hog).
  for (int i = 0; i < 12; ++i) {
    auto a = victim(10, "db");
    auto b = victim(20 + static_cast<std::uint32_t>(i), "db");
    b.blame[0].pid = 78; // another hog process, same comm and cgroup
    auto iv = make_interval(t0 + i * 10 * sec, {a, b});
    iv.cgroup_cpu = {cgroup_cpu_row{"/app", 1'000, 10, 100, 1, 1, 5}};
    write_ok(w, iv);
  }
  write_ok(w, make_interval(t0 + 2 * minute, {make_thread(1, "later", {1})}));
  REQUIRE(w.maintain(t0 + 3 * minute).ok());
  auto r = open_reader(path);
  auto raw = run(r, "SELECT by_comm, sum(wait_ns), sum(count) FROM delay_blame GROUP BY by_comm "
                    "ORDER BY by_comm");
  auto m = run(r, "SELECT by_comm, sum(wait_ns), sum(count) FROM delay_blame_1m GROUP BY by_comm "
                  "ORDER BY by_comm");
  CHECK(m.rows == raw.rows);
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame_1m WHERE by_comm = 'hog'") == 2);
  CHECK(scalar_int(r, "SELECT count(DISTINCT by_pid) FROM delay_blame_1m WHERE by_comm = 'hog'") ==
        0); // rollups name no process
  CHECK(scalar_int(r, "SELECT sum(count) FROM preemption_1m") ==
        scalar_int(r, "SELECT sum(count) FROM preemption"));
  CHECK(scalar_int(r, "SELECT sum(throttled_ns) FROM cpu_throttling_1m") == 12 * 5);
  CHECK(scalar_int(r, "SELECT sum(some_ns) FROM cpu_pressure_1m") == 12 * 1'000);
  CHECK(scalar_int(r, "SELECT count(*) FROM culprit WHERE boot_id = '' AND kind = 0") == 1);
}

TEST_CASE("a real version 4 database is upgraded in place to the current version",
          "[store][blame]") {
  // tests/store/data/v4.db: 3 s recorded by rschedd at schema 4 (commit c580b87) with
  // -g latency,slice,sleep,migration.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v4.db", path);
  std::vector<std::vector<value>> before;
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 4);
    before = run(r, "SELECT comm, sum(count), sum(total_ns) FROM sched_delay GROUP BY comm "
                    "ORDER BY comm")
                 .rows;
    REQUIRE_FALSE(before.empty());
    std::string err;
    run(r, "SELECT * FROM delay_blame", &err);
    CHECK(err.find("no such table") != std::string::npos);
  }
  {
    auto w = open_writer(path);
    const std::int64_t next = [&] {
      auto r = open_reader(path);
      return scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
    }();
    auto iv = make_interval(next, {victim(3, "new")});
    iv.cgroup_cpu = {cgroup_cpu_row{"/", 5, 0, 7, {}, {}, {}}};
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "SELECT count(*) FROM timeline WHERE ts = start_ns AND dur = dur_ns") ==
        scalar_int(r, "SELECT count(*) FROM timeline"));
  CHECK(run(r, "SELECT comm, sum(count), sum(total_ns) FROM sched_delay WHERE comm <> 'new' "
               "GROUP BY comm ORDER BY comm")
            .rows == before);
  CHECK(scalar_int(r, "SELECT sum(wait_ns) FROM delay_blame") == 4'000'000);
  CHECK(scalar_int(r, "SELECT count(*) FROM cpu_pressure") == 1);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE("a version 5 database is upgraded: timeline names ts and dur as every view does",
          "[store]") {
  // issue 17: max(dur) failed on timeline, which had only start_ns and dur_ns.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0, {victim(3, "a")}));
  }
  // Back to version 5 as that schema had it: timeline = the intervals columns only.
  raw_exec(path, "DROP VIEW timeline; CREATE VIEW timeline AS SELECT i.* FROM intervals AS i "
                 "WHERE (i.tier = 0 OR i.start_ns < (SELECT min(x.cutoff_ns) FROM tiers AS x "
                 "WHERE x.tier < i.tier)); PRAGMA user_version = 5;");
  {
    auto r = open_reader(path); // read-only: version 5 is read as it is
    CHECK(scalar_int(r, "PRAGMA user_version") == 5);
    std::string err;
    run(r, "SELECT max(dur) FROM timeline", &err);
    CHECK(err.find("no such column") != std::string::npos);
    CHECK(scalar_int(r, "SELECT count(*) FROM coverage()") == 1); // the functions still work
  }
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0 + 10 * sec, {victim(3, "a")}));
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  CHECK(scalar_int(r, "SELECT max(dur) FROM timeline") ==
        scalar_int(r, "SELECT max(dur_ns) FROM intervals"));
  CHECK(scalar_int(r, "SELECT min(ts) FROM timeline") == t0);
  CHECK(run(r, "SELECT name FROM pragma_table_info('timeline') LIMIT 2").rows ==
        std::vector<std::vector<value>>{{value{std::string("ts")}}, {value{std::string("dur")}}});
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE("a version 6 database is upgraded: annotation_summary gains ts and dur", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0, {victim(3, "a")}));
  }
  rsched::query::annotation span;
  span.start_ns = t0;
  span.end_ns = t0 + 4 * sec;
  span.text = "span";
  rsched::query::annotation point;
  point.start_ns = t0 + 2 * sec;
  point.text = "point";
  REQUIRE(rsched::query::add_annotation(path, span).ok());
  REQUIRE(rsched::query::add_annotation(path, point).ok());
  // Back to version 6 as that schema had it.
  raw_exec(path, "DROP VIEW annotation_summary; CREATE VIEW annotation_summary AS SELECT "
                 "d.annotation_id AS annotation_id, min(a.text) AS text, min(a.start_ns) AS "
                 "start_ns, min(a.end_ns) AS end_ns, d.comm AS comm, sum(d.count) AS samples, "
                 "hist_percentile(d.hist, 99) AS p99_ns FROM annotation_delay AS d JOIN "
                 "annotations AS a ON a.id = d.annotation_id GROUP BY d.annotation_id, d.comm; "
                 "PRAGMA user_version = 6;");
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 6);
    std::string err;
    run(r, "SELECT max(dur) FROM annotation_summary", &err);
    CHECK(err.find("no such column") != std::string::npos);
  }
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0 + 10 * sec, {victim(3, "a")}));
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // The columns it had, in their places, then ts and dur.
  std::vector<std::vector<value>> names;
  for (const char *n :
       {"annotation_id", "text", "start_ns", "end_ns", "comm", "samples", "p99_ns", "ts", "dur"}) {
    names.push_back({value{std::string(n)}});
  }
  CHECK(run(r, "SELECT name FROM pragma_table_info('annotation_summary')").rows == names);
  auto t = run(r, "SELECT text, ts, dur, start_ns FROM annotation_summary ORDER BY text");
  REQUIRE(t.rows.size() == 2);
  CHECK(as_text(t.rows[0][0]) == "point");
  CHECK(as_int(t.rows[0][1]) == t0 + 2 * sec);
  CHECK(is_null(t.rows[0][2]));
  CHECK(as_int(t.rows[1][1]) == t0);
  CHECK(as_int(t.rows[1][2]) == 4 * sec);
  CHECK(as_int(t.rows[1][3]) == t0);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}

// issue 17, "one naming across views": every view and table function that has ts has dur right
// after it, and none names an instant or a span length the old way; the table functions' old
// names still work, hidden from SELECT *.
TEST_CASE("one naming across views and table functions", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(t0, {victim(3, "a")}));
    write_ok(w, make_interval(t0 + 20 * sec, {victim(3, "a")}));
  }
  auto r = open_reader(path);
  std::vector<std::string> sources;
  for (const auto &row : run(r, "SELECT name FROM sqlite_schema WHERE type = 'view'").rows) {
    sources.push_back(as_text(row[0]));
  }
  REQUIRE(sources.size() > 40);
  for (const char *f : {"gaps()", "coverage()", "spikes('sched_delay', 1)",
                        "blame('a', 0, 9000000000000000000)", "compare(0, 1, 2, 3)"}) {
    sources.emplace_back(f);
  }
  for (const auto &src : sources) {
    INFO(src);
    std::vector<std::string> cols;
    rsched::query::result_sink sink;
    sink.on_columns = [&](const std::vector<std::string> &c) { cols = c; };
    REQUIRE(r.exec("SELECT * FROM " + src + " LIMIT 0", sink).ok());
    REQUIRE_FALSE(cols.empty());
    const auto ts = std::find(cols.begin(), cols.end(), "ts");
    if (ts != cols.end()) {
      REQUIRE(ts + 1 != cols.end());
      CHECK(*(ts + 1) == "dur");
    }
    if (src == "timeline" || src == "annotation_summary") {
      continue; // they also carry their tables' names (docs/SCHEMA.md, "Names")
    }
    for (const auto &c : cols) {
      INFO(c);
      CHECK(c != "dur_ns");
      CHECK(c != "duration_ns");
      CHECK(c != "start_ns");
      CHECK(c != "end_ns");
    }
  }
  const auto now = run(r, "SELECT ts, dur, end_ts, reason FROM gaps(0, 9000000000000000000) "
                          "ORDER BY ts");
  const auto old = run(r, "SELECT start_ns, duration_ns, end_ns, reason FROM gaps(0, "
                          "9000000000000000000) ORDER BY start_ns");
  REQUIRE(now.rows.size() == 3); // before, between and after the two intervals
  CHECK(now.rows == old.rows);
  for (const auto &row : now.rows) {
    CHECK(as_int(row[0]) + as_int(row[1]) == as_int(row[2]));
  }
  CHECK(run(r, "SELECT start_ns, end_ns FROM coverage(0, 100)").rows ==
        run(r, "SELECT ts, end_ts FROM coverage(0, 100)").rows);
  CHECK(scalar_int(r, "SELECT dur FROM coverage(0, 100)") == 100);
  CHECK(scalar_int(r, "SELECT count(*) FROM gaps(0, 9000000000000000000) WHERE start_ns < "
                      "end_ns AND duration_ns > 0") == 3);
}

TEST_CASE_METHOD(new_db,
                 "spikes per victim: a storm of cheap samples no longer hides a service's spike, "
                 "and the spike names the storm as its cause",
                 "[store][blame]") {
  // 80 intervals of 10 s: 'storm' has 10,000 delays of ~5 us each interval; 'svc' has 20 of
  // 0.6 ms, except for intervals 70..72 where they are 7.7 ms and the storm's threads ran while
  // it waited (blame).
  for (int i = 0; i < 80; ++i) {
    const bool spike = i >= 70 && i < 73;
    auto storm = make_thread(1, "storm", std::vector<std::uint64_t>(10'000, 5'000), {}, "/");
    auto svc = make_thread(2, "svc", std::vector<std::uint64_t>(20, spike ? 7'700'000 : 600'000),
                           {}, "/svc.slice");
    if (spike) {
      svc.blame = {culprit(1, "storm", "/", std::uint64_t{20} * 7'700'000 * 95 / 100, 20),
                   pseudo(culprit_kind::idle, std::uint64_t{20} * 7'700'000 * 5 / 100, 20)};
    }
    write_ok(w, make_interval(t0 + i * 10 * sec, {storm, svc}));
  }
  auto r = open_reader(path);
  // Merged over every thread (the old behaviour, by 'all'), the p99 is the storm's: no spike.
  CHECK(run(r, "SELECT * FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'all')").rows.empty());
  // Per comm (the default): svc's three intervals, and why.
  auto t = run(r, "SELECT ts, dur, victim, cause FROM spikes('sched_delay', '3x')");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][0]) == t0 + 70 * 10 * sec);
  CHECK(as_int(t.rows[0][1]) == 30 * sec);
  CHECK(as_text(t.rows[0][2]) == "svc");
  CHECK(as_text(t.rows[0][3]) == "storm[1] 95% of the wait, <idle> 5%");
  // A victim pattern narrows the search; by cgroup names the cgroup.
  CHECK(run(r, "SELECT * FROM spikes('sched_delay', '3x', NULL, NULL, 'storm')").rows.empty());
  auto c =
      run(r, "SELECT victim FROM spikes('sched_delay', '5ms', NULL, NULL, 'cgroup:/svc.slice', "
             "'cgroup')");
  REQUIRE(c.rows.size() == 1);
  CHECK(as_text(c.rows[0][0]) == "/svc.slice");
  auto p = run(r, "SELECT victim FROM spikes('sched_delay', '5ms', NULL, NULL, 'pid:2', 'pid')");
  REQUIRE(p.rows.size() == 1);
  CHECK(as_int(p.rows[0][0]) == 2);
  // blame() over the spike: the storm first, with its share.
  auto b = run(r, "SELECT by_comm, share_pct, victim_wait_ns FROM blame('svc', " +
                      std::to_string(t0 + 70 * 10 * sec) + ", " +
                      std::to_string(t0 + 73 * 10 * sec) + ")");
  REQUIRE(b.rows.size() == 2);
  CHECK(as_text(b.rows[0][0]) == "storm");
  CHECK(as_real(b.rows[0][1]) == Approx(95.0));
  CHECK(as_int(b.rows[0][2]) == 3 * 20 * 7'700'000);
  // Bad arguments are one-line errors.
  CHECK(run_error(r, "SELECT * FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'cpu')")
            .find("comm, cgroup, pid or all") != std::string::npos);
  CHECK(run_error(r, "SELECT * FROM spikes('cpu_sched_delay', '3x', NULL, NULL, 'svc')")
            .find("CPU metrics have none") != std::string::npos);
  CHECK(run_error(r, "SELECT * FROM blame('pid:x')").find("needs a process or thread id") !=
        std::string::npos);
  CHECK(run_error(r, "SELECT * FROM blame('comm:')").find("empty victim pattern") !=
        std::string::npos);
}

TEST_CASE_METHOD(new_db,
                 "spikes' '3x' baseline is the median p99 of the previous 60 intervals outside "
                 "incidents; a level that lasts 300 intervals becomes the baseline",
                 "[store]") {
  // 'svc', 20 delays an interval of 10 s: 0.1 ms for 100 intervals, 3 ms for 320, 6 ms for 3,
  // then 20 ms for 3 (each p99 is the top of its histogram bucket: ~0.11, 4.1, 8.2 and 32.8
  // ms). The 3-ms level is an incident whose intervals stay out of the baseline, until it has
  // lasted 300 intervals (100..399): then its last 60 are the baseline and it ends. 6 ms is not
  // above 3 x 4.1 ms (it would be against 0.1 ms); 20 ms is.
  const auto level = [](int i) -> std::uint64_t {
    if (i < 100) {
      return 100'000;
    }
    if (i < 420) {
      return 3'000'000;
    }
    return i < 423 ? 6'000'000 : 20'000'000;
  };
  for (int i = 0; i < 426; ++i) {
    write_ok(w, make_interval(t0 + i * 10 * sec,
                              {make_thread(2, "svc", std::vector<std::uint64_t>(20, level(i)))}));
  }
  auto r = open_reader(path);
  auto t = run(r, "SELECT ts, dur, victim FROM spikes('sched_delay', '3x')");
  REQUIRE(t.rows.size() == 2);
  CHECK(as_int(t.rows[0][0]) == t0 + 100 * 10 * sec);
  CHECK(as_int(t.rows[0][1]) == 300 * 10 * sec);
  CHECK(as_text(t.rows[0][2]) == "svc");
  CHECK(as_int(t.rows[1][0]) == t0 + 423 * 10 * sec);
  CHECK(as_int(t.rows[1][1]) == 3 * 10 * sec);
  // A window that starts late still judges its first intervals against the 60 before it: its
  // part of the incident.
  auto late = run(r, "SELECT ts, dur FROM spikes('sched_delay', '3x', " +
                         std::to_string(t0 + 120 * 10 * sec) + ", NULL)");
  REQUIRE(late.rows.size() == 2);
  CHECK(as_int(late.rows[0][0]) == t0 + 120 * 10 * sec);
  CHECK(as_int(late.rows[0][1]) == 280 * 10 * sec);
}

TEST_CASE_METHOD(new_db, "annotation_summary reads each annotation's own span, plus a margin",
                 "[store][blame]") {
  // Two incidents 2.5 minutes apart, one minute each: with the old fixed 5 minutes both read the
  // same rows. 'a' has delays of 1 ms in the first, 'b' of 9 ms in the second.
  for (int i = 0; i < 60; ++i) {
    const std::int64_t ts = t0 + i * 10 * sec;
    const bool first = ts >= t0 + 2 * minute && ts < t0 + 3 * minute;
    const bool second = ts >= t0 + 4 * minute + 30 * sec && ts < t0 + 5 * minute + 30 * sec;
    std::vector<rsched::store::thread_row> th;
    if (first) {
      th.push_back(make_thread(1, "a", {1'000'000}));
    }
    if (second) {
      th.push_back(make_thread(2, "b", {9'000'000}));
    }
    th.push_back(make_thread(3, "bg", {1'000}));
    write_ok(w, make_interval(ts, th));
  }
  raw_exec(path, fmt::format("INSERT INTO annotations(start_ns, end_ns, source, text, created_ns) "
                             "VALUES ({}, {}, 't', 'first', 0), ({}, {}, 't', 'second', 0), "
                             "({}, NULL, 't', 'point', 0)",
                             t0 + 2 * minute, t0 + 3 * minute, t0 + 4 * minute + 30 * sec,
                             t0 + 5 * minute + 30 * sec, t0 + 5 * sec));
  auto r = open_reader(path);
  auto s = run(r, "SELECT text, group_concat(comm, ',') FROM (SELECT text, comm FROM "
                  "annotation_summary ORDER BY text, comm) GROUP BY text ORDER BY text");
  REQUIRE(s.rows.size() == 3);
  CHECK(as_text(s.rows[0][0]) == "first");
  CHECK(as_text(s.rows[0][1]) == "a,bg");
  CHECK(as_text(s.rows[1][0]) == "point"); // its instant: the interval that holds it
  CHECK(as_text(s.rows[1][1]) == "bg");
  CHECK(as_text(s.rows[2][1]) == "b,bg");
  CHECK(scalar_int(r, "SELECT samples FROM annotation_summary WHERE text = 'point'") == 1);
  // A margin widens every window: 2 minutes reach from the first incident into the second.
  CHECK(scalar_int(r, "SELECT annotation_margin('2m')") == 2 * minute);
  CHECK(scalar_int(r, "SELECT count(*) FROM annotation_summary WHERE text = 'first' AND comm = "
                      "'b'") == 1);
  CHECK(run_error(r, "SELECT annotation_margin(-1)").find("negative") != std::string::npos);
  CHECK(run_error(r, "SELECT annotation_margin('soon')").find("invalid duration") !=
        std::string::npos);
}

TEST_CASE("priority inversion: a higher class's low-priority task outranking a thread raised "
          "in its own",
          "[store][blame]") {
  using rsched::store::priority_inversion;
  // (policy, task->prio): SCHED_NORMAL 0 with prio 120 + nice, SCHED_FIFO 1 with 99 - rt prio.
  CHECK(priority_inversion(0, 100, 1, 98));        // nice -20 behind FIFO 1: the staged case
  CHECK(priority_inversion(7, 100, 1, 98));        // sched_ext counts as the fair class
  CHECK(priority_inversion(0, 110, 2, 51));        // nice -10 behind RR 48
  CHECK_FALSE(priority_inversion(0, 110, 1, 24));  // nice -10 behind FIFO 75: meant higher
  CHECK_FALSE(priority_inversion(0, 120, 1, 98));  // nice 0 asked for nothing
  CHECK_FALSE(priority_inversion(0, 100, 1, 0));   // behind FIFO 99
  CHECK_FALSE(priority_inversion(0, 139, 1, 98));  // nice 19 asked for nothing
  CHECK_FALSE(priority_inversion(5, 120, 1, 98));  // SCHED_IDLE asked for nothing
  CHECK_FALSE(priority_inversion(0, 100, 0, 139)); // one class: the kernel weighs nice itself
  CHECK_FALSE(priority_inversion(1, 0, 1, 98));
  CHECK_FALSE(priority_inversion(1, 49, 6, 0)); // deadline tasks are meant to meet deadlines
  CHECK(priority_inversion(1, 0, 6, 0) == false);
  CHECK_FALSE(priority_inversion(0, 100, -1, -1)); // not known
  CHECK_FALSE(priority_inversion(-1, -1, 1, 98));
}

TEST_CASE("inversions(): episodes of a raised thread waiting behind a low real-time task",
          "[store][blame]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const auto batch = [](std::uint64_t ns, int cpu) {
    blame_row b = culprit(88, "batch", "/batch", ns, 3);
    b.cpu = cpu;
    b.policy = 1; // SCHED_FIFO priority 1
    b.prio = 98;
    b.waiter_policy = 0; // nice -20
    b.waiter_prio = 100;
    return b;
  };
  const auto web = [] { // the same thread behind a nice 0 thread: not an inversion
    blame_row b = culprit(99, "web", "/web", 9'000'000, 4);
    b.cpu = 0;
    b.policy = 0;
    b.prio = 120;
    b.waiter_policy = 0;
    b.waiter_prio = 100;
    return b;
  };
  {
    auto w = open_writer(path);
    w.set_retention(forever());
    // Intervals 0, 1, 2 and 4 (one without it in between): one episode; 8: another.
    for (int k = 0; k < 12; ++k) {
      auto t = make_thread(5, "ui\x1b[1m", {1'000'000});
      if (k <= 2 || k == 4) {
        t.blame = {batch(10'000'000, 1), web(), pseudo(culprit_kind::idle, 100'000, 1)};
      } else if (k == 8) {
        t.blame = {batch(5'000'000, 0)};
      } else {
        t.blame = {web()};
      }
      write_ok(w, make_interval(t0 + k * 10 * sec, {t}));
      REQUIRE(w.maintain(t0 + (k + 1) * 10 * sec).ok());
    }
  }
  auto r = open_reader(path);
  const auto all = run(r, "SELECT ts, dur, end_ts, tid, pid, comm, policy, prio, by_pid, by_comm, "
                          "by_policy, by_prio, cpu, wait_ns, waits, intervals FROM inversions()");
  REQUIRE(all.rows.size() == 2);
  const auto &e = all.rows[0];
  CHECK(as_int(e[0]) == t0);
  CHECK(as_int(e[1]) == 50 * sec);
  CHECK(as_int(e[2]) == t0 + 50 * sec);
  CHECK(as_int(e[3]) == 5);
  CHECK(as_text(e[5]) == "ui\x1b[1m");
  CHECK(as_int(e[6]) == 0);
  CHECK(as_int(e[7]) == 100);
  CHECK(as_int(e[8]) == 88);
  CHECK(as_text(e[9]) == "batch");
  CHECK(as_int(e[10]) == 1);
  CHECK(as_int(e[11]) == 98);
  CHECK(as_int(e[12]) == 1);
  CHECK(as_int(e[13]) == 40'000'000);
  CHECK(as_int(e[14]) == 12);
  CHECK(as_int(e[15]) == 4);
  CHECK(as_int(all.rows[1][0]) == t0 + 80 * sec);
  CHECK(as_int(all.rows[1][12]) == 0);
  CHECK(as_int(all.rows[1][13]) == 5'000'000);
  // min_wait leaves the short one out; a window takes the intervals overlapping it.
  CHECK(scalar_int(r, "SELECT count(*) FROM inversions(NULL, NULL, '20ms')") == 1);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM inversions({}, {})", t0 + 75 * sec,
                                  t0 + 200 * sec)) == 1);
  // The views have the columns too; rollup rows keep no priorities.
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame WHERE by_comm = 'batch' AND by_prio = 98 "
                      "AND policy = 0 AND prio = 100 AND tier = 0") == 5);
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame_1m WHERE by_prio IS NOT NULL") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame WHERE by_comm = '<idle>' AND by_prio IS "
                      "NULL") == 4);
}

namespace {

// Maintenance until it has nothing left to do.
void settle(writer &w, std::int64_t now) {
  for (int i = 0; i < 10000; ++i) {
    auto r = w.maintain(now);
    INFO("maintain: " << (r.ok() ? std::string() : r.err().msg));
    REQUIRE(r.ok());
    if (r->idle()) {
      return;
    }
  }
  FAIL("maintenance never settled");
}

// victim() with estimated parts (schema 11): 1.5 ms of hog's 3.5 ms, 0.1 ms of <idle>'s 0.3 ms.
rsched::store::thread_row estimated_victim(std::uint32_t tid, const std::string &comm) {
  auto t = victim(tid, comm);
  t.blame[0].approx_ns = 1'500'000;
  t.blame[1].approx_ns = 100'000;
  return t;
}

} // namespace

TEST_CASE("approx_ns: written, merged per culprit, rolled up exactly from the sums and from the "
          "rows, summed by blame()",
          "[store][blame][rollup]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  // Six 10-s intervals a minute. The thread has two rows of hog (the writer merges them: 4.5 ms,
  // 2 ms of it estimated) and a preemption-only <other>.
  const auto iv = [](int i) {
    auto t = estimated_victim(10, "db");
    auto more = culprit(77, "hog", "/batch", 1'000'000, 1);
    more.approx_ns = 500'000;
    t.blame.push_back(more);
    return make_interval(t0 + i * 10 * sec, {t});
  };
  {
    auto w = open_writer(path);
    w.set_retention(forever());
    for (int i = 0; i < 7; ++i) {
      write_ok(w, iv(i));
    }
    auto m = w.maintain(t0 + 70 * sec); // minute 0, from this writer's sums
    REQUIRE(m.ok());
    CHECK(m->buckets_from_sums == 1);
    for (int i = 7; i < 9; ++i) {
      write_ok(w, iv(i));
    }
  }
  {
    auto w = open_writer(path); // minute 1 by two writers: rolled up from the rows
    w.set_retention(forever());
    for (int i = 9; i < 12; ++i) {
      write_ok(w, iv(i));
    }
    write_ok(w, make_interval(t0 + 2 * minute, {make_thread(1, "later", {1})}));
    auto m = w.maintain(t0 + 3 * minute);
    REQUIRE(m.ok());
    CHECK(m->buckets_from_sums == 0);
    settle(w, t0 + 3 * minute);
  }
  auto r = open_reader(path);
  auto raw = run(r, "SELECT by_comm, wait_ns, approx_ns FROM delay_blame WHERE ts = " +
                        std::to_string(t0) + " ORDER BY by_comm");
  REQUIRE(raw.rows.size() == 3); // <other> had a preemption only
  CHECK(as_text(raw.rows[0][0]) == "<idle>");
  CHECK(as_int(raw.rows[0][2]) == 100'000);
  CHECK(as_text(raw.rows[1][0]) == "<unknown>");
  CHECK(as_int(raw.rows[1][2]) == 0); // written as 0, not NULL
  CHECK(as_text(raw.rows[2][0]) == "hog");
  CHECK(as_int(raw.rows[2][1]) == 4'500'000);
  CHECK(as_int(raw.rows[2][2]) == 2'000'000);
  CHECK(scalar_int(r, "SELECT approx_ns FROM preemption WHERE by_comm = '<other>' AND ts = " +
                          std::to_string(t0)) == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame WHERE approx_ns IS NULL") == 0);
  // Both minutes' rollups hold the exact sums, whichever way they were merged.
  auto m = run(r, "SELECT ts, by_comm, wait_ns, approx_ns FROM delay_blame_1m ORDER BY ts, "
                  "by_comm");
  REQUIRE(m.rows.size() == 6);
  for (std::size_t k = 0; k < 6; ++k) {
    INFO(k);
    CHECK(as_int(m.rows[k][0]) == t0 + static_cast<std::int64_t>(k / 3) * minute);
    CHECK(as_int(m.rows[k][2]) == 6 * as_int(raw.rows[k % 3][1]));
    CHECK(as_int(m.rows[k][3]) == 6 * as_int(raw.rows[k % 3][2]));
  }
  CHECK(scalar_int(r, "SELECT sum(approx_ns) FROM preemption_1m WHERE by_comm = '<other>'") == 0);
  // blame() sums the window's estimates per culprit, after the existing columns.
  auto b = run(r, "SELECT * FROM blame('db')");
  REQUIRE(b.headers.size() == 1);
  CHECK(b.headers[0].back() == "approx_ns");
  CHECK(b.headers[0].size() == 14);
  auto hog = run(r, "SELECT by_pid, wait_ns, approx_ns FROM blame('db') WHERE by_comm = 'hog'");
  REQUIRE(hog.rows.size() == 1);
  CHECK(as_int(hog.rows[0][0]) == 77);
  CHECK(as_int(hog.rows[0][1]) == 12 * 4'500'000);
  CHECK(as_int(hog.rows[0][2]) == 12 * 2'000'000);
  CHECK(scalar_int(r, "SELECT approx_ns FROM blame('db') WHERE by_comm = '<unknown>'") == 0);
  // Routed through the rollups (a sum over a ts window), the same.
  CHECK(scalar_int(r, "SELECT sum(approx_ns) FROM delay_blame WHERE ts >= " + std::to_string(t0) +
                          " AND ts < " + std::to_string(t0 + 2 * minute)) ==
        12 * (2'000'000 + 100'000));
}

TEST_CASE_METHOD(new_db, "an estimate is part of the wait: approx_ns is at most wait_ns",
                 "[store][blame]") {
  auto t = make_thread(5, "v", {1'000'000});
  auto b = culprit(9, "hog", "/", 1'000'000, 1);
  b.approx_ns = 3'000'000; // inconsistent input
  t.blame = {b};
  write_ok(w, make_interval(t0, {t}));
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT approx_ns FROM delay_blame") == 1'000'000);
}

TEST_CASE("a real version 10 database is upgraded: thread_blame.approx_ns, NULL in the rows "
          "before, last in the blame views",
          "[store][blame]") {
  // tests/store/data/v10.db: v9.db (recorded by rschedd at schema 9) upgraded by the schema 10
  // writer (commit 72b1b54), which wrote two intervals of blame (victim() of 'db', hog pid 77)
  // and rolled their minute up.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v10.db", path);
  const std::string old_cols = "ts, dur, tid, pid, comm, cgroup, by_pid, by_comm, by_cgroup, "
                               "wait_ns, count, tier, by_cpu, by_policy, by_prio, policy, prio";
  const std::string order = " ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17";
  std::vector<std::vector<value>> raw_before, m_before;
  std::vector<std::string> blame_cols, preempt_cols;
  std::int64_t old_rows = 0;
  std::int64_t next = 0;
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 10);
    blame_cols = columns_of(r, "delay_blame");
    preempt_cols = columns_of(r, "preemption");
    CHECK(blame_cols.back() == "prio");
    raw_before = run(r, "SELECT " + old_cols + " FROM delay_blame" + order).rows;
    m_before = run(r, "SELECT " + old_cols + " FROM delay_blame_1m" + order).rows;
    REQUIRE(raw_before.size() > 10);
    REQUIRE_FALSE(m_before.empty());
    old_rows = scalar_int(r, "SELECT count(*) FROM thread_blame");
    next = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
    // Read as it is: blame() has the column, NULL throughout.
    CHECK(scalar_int(r, "SELECT count(*) FROM blame(NULL) WHERE approx_ns IS NULL") ==
          scalar_int(r, "SELECT count(*) FROM blame(NULL)"));
  }
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(next, {estimated_victim(3, "fresh")}));
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // The columns they had, in their places, then approx_ns; every tier alike.
  blame_cols.emplace_back("approx_ns");
  preempt_cols.emplace_back("approx_ns");
  for (const char *tier : {"", "_1m", "_1h"}) {
    INFO(tier);
    CHECK(columns_of(r, std::string("delay_blame") + tier) == blame_cols);
    CHECK(columns_of(r, std::string("preemption") + tier) == preempt_cols);
  }
  // The old rows are all there, unchanged, without an estimate.
  const std::string before = " WHERE ts < " + std::to_string(next);
  CHECK(run(r, "SELECT " + old_cols + " FROM delay_blame" + before + order).rows == raw_before);
  CHECK(run(r, "SELECT " + old_cols + " FROM delay_blame_1m" + order).rows == m_before);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame WHERE approx_ns IS NULL") == old_rows);
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame" + before + " AND approx_ns IS NOT NULL") ==
        0);
  CHECK(scalar_int(r, "SELECT count(*) FROM delay_blame_1m WHERE approx_ns IS NOT NULL") == 0);
  // The new rows carry theirs.
  auto fresh = run(r, "SELECT by_comm, approx_ns FROM delay_blame WHERE comm = 'fresh' ORDER BY "
                      "by_comm");
  REQUIRE(fresh.rows.size() == 3);
  CHECK(as_int(fresh.rows[0][1]) == 100'000); // <idle>
  CHECK(as_int(fresh.rows[1][1]) == 0);       // <unknown>
  CHECK(as_int(fresh.rows[2][1]) == 1'500'000);
  // blame(): the sum of what is known (hog[77] ran in old and new rows), NULL where every row is
  // older.
  CHECK(scalar_int(r, "SELECT approx_ns FROM blame(NULL) WHERE by_comm = 'hog'") == 1'500'000);
  CHECK(scalar_int(r, "SELECT count(*) FROM blame(NULL, 0, " + std::to_string(next) +
                          ") WHERE approx_ns IS NOT NULL") == 0);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}

TEST_CASE("spikes' cause names culprit processes with their pid; rollup culprits by comm",
          "[store][blame]") {
  // 'svc' waits 20 times a minute; in minutes 70..72 for 7.7 ms each, behind two compilers of
  // one name (46 % and 44 %) and <idle> (10 %). One 60-s interval a minute.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  auto w = open_writer(path);
  w.set_retention(forever());
  const std::uint64_t total = 20 * 7'700'000;
  for (int i = 0; i < 80; ++i) {
    const bool spike = i >= 70 && i < 73;
    auto svc = make_thread(2, "svc", std::vector<std::uint64_t>(20, spike ? 7'700'000 : 600'000));
    if (spike) {
      svc.blame = {culprit(31337, "cc1plus", "/build", total * 46 / 100, 20),
                   culprit(31340, "cc1plus", "/build", total * 44 / 100, 20),
                   pseudo(culprit_kind::idle, total * 10 / 100, 20)};
      svc.blame[0].approx_ns = 1'000'000;
    }
    auto iv = make_interval(t0 + i * minute, {svc});
    iv.dur_ns = minute;
    write_ok(w, iv);
  }
  write_ok(w, make_interval(t0 + 80 * minute, {make_thread(1, "later", {1})}));
  settle(w, t0 + 81 * minute);
  {
    auto r = open_reader(path);
    auto t = run(r, "SELECT ts, dur, victim, cause FROM spikes('sched_delay', '3x')");
    REQUIRE(t.rows.size() == 1);
    CHECK(as_int(t.rows[0][0]) == t0 + 70 * minute);
    CHECK(as_text(t.rows[0][3]) == "cc1plus[31337] 46% of the wait, cc1plus[31340] 44%");
    // blame() has them apart too.
    auto b = run(r, "SELECT by_pid, by_comm FROM blame('svc') ORDER BY wait_ns DESC");
    REQUIRE(b.rows.size() == 3);
    CHECK(as_int(b.rows[0][0]) == 31337);
    CHECK(as_int(b.rows[1][0]) == 31340);
  }
  // Raw rows past retention: the timeline is the 1-minute tier, whose culprits are per comm.
  rsched::store::retention keep = forever();
  keep.keep_raw_ns = minute;
  w.set_retention(keep);
  settle(w, t0 + 82 * minute);
  auto r = open_reader(path);
  REQUIRE(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0 AND start_ns < " +
                            std::to_string(t0 + 80 * minute)) == 0);
  auto t = run(r, "SELECT ts, victim, cause FROM spikes('sched_delay', '3x')");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][0]) == t0 + 70 * minute);
  CHECK(as_text(t.rows[0][2]) == "cc1plus 90% of the wait, <idle> 10%");
  auto b = run(r, "SELECT by_pid, by_comm, wait_ns, approx_ns FROM blame('svc') ORDER BY wait_ns "
                  "DESC");
  REQUIRE(b.rows.size() == 2);
  CHECK(is_null(b.rows[0][0]));
  CHECK(as_text(b.rows[0][1]) == "cc1plus");
  CHECK(as_int(b.rows[0][2]) ==
        static_cast<std::int64_t>(3 * (total * 46 / 100 + total * 44 / 100)));
  CHECK(as_int(b.rows[0][3]) == 3 * 1'000'000);
}

// issue 32: a tid:N victim showed its comm in spikes' victim column, and a recording whose PSI
// deltas ran past the interval said "CPU pressure 101%".
TEST_CASE("spikes names a tid victim as the thread; the cause's CPU pressure is at most 100%",
          "[store][blame]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  auto w = open_writer(path);
  w.set_retention(forever());
  for (int i = 0; i < 40; ++i) {
    const bool spike = i >= 30 && i < 33;
    auto a = make_thread(2, "svc", std::vector<std::uint64_t>(20, spike ? 7'700'000 : 600'000));
    auto b = make_thread(3, "svc", std::vector<std::uint64_t>(20, 600'000));
    auto iv = make_interval(t0 + i * 10 * sec, {a, b});
    iv.dur_ns = 10 * sec;
    // The system's PSI some delta a little longer than the interval (read 1.2 % late).
    cgroup_cpu_row sys;
    sys.cgroup = "/";
    sys.some_ns = 10'120'000'000;
    iv.cgroup_cpu.push_back(sys);
    write_ok(w, iv);
  }
  auto r = open_reader(path);
  auto t = run(r, "SELECT victim, cause FROM spikes('sched_delay', '3x', NULL, NULL, 'tid:2')");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_text(t.rows[0][0]) == "tid 2 (svc)");
  CHECK(as_text(t.rows[0][1]) == "CPU pressure 100%");
  // Asked by comm, the victim is the comm, as before.
  auto c = run(r, "SELECT victim FROM spikes('sched_delay', '3x', NULL, NULL, 'svc')");
  REQUIRE(c.rows.size() == 1);
  CHECK(as_text(c.rows[0][0]) == "svc");
}

TEST_CASE("blame: each culprit process's own CPU time and its cgroup's usage over the window",
          "[store][blame]") {
  // Three 10-s intervals. 'web' waits behind hog[77] (threads 77 and 771), hog[79] (another
  // process of that name, same cgroup) and cc[78]. The hogs' threads record time slices
  // (voluntary + involuntary); cc records none; /batch its usage, /build an unknown one.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  const auto sliced = [](std::uint32_t tid, std::uint32_t pid, std::uint64_t vol,
                         std::uint64_t invol) {
    auto t = make_thread(tid, "hog", {}, {}, "/batch");
    t.pid = pid;
    t.m[metric::slice_voluntary] = value_of(layout::latency, {vol});
    t.m[metric::slice_involuntary] = value_of(layout::latency, {invol});
    return t;
  };
  {
    auto w = open_writer(path);
    w.set_retention(forever());
    for (int k = 0; k < 3; ++k) {
      auto web = make_thread(5, "web", {1'000'000}, {}, "/app");
      web.blame = {culprit(77, "hog", "/batch", 3'000'000, 1),
                   culprit(79, "hog", "/batch", 2'000'000, 1),
                   culprit(78, "cc", "/build", 1'000'000, 1)};
      auto iv = make_interval(t0 + k * 10 * sec,
                              {web, sliced(77, 77, 1'000'000, 2'000'000),
                               sliced(771, 77, 500'000, 0), sliced(79, 79, 4'000'000, 0)});
      iv.cgroup_cpu = {{"/batch", std::nullopt, std::nullopt, 10'000'000, std::nullopt,
                        std::nullopt, std::nullopt},
                       {"/build", std::nullopt, std::nullopt, std::nullopt, std::nullopt,
                        std::nullopt, std::nullopt}};
      write_ok(w, iv);
    }
  }
  auto r = open_reader(path);
  auto b =
      run(r, "SELECT by_pid, by_comm, cpu_ns, cgroup_cpu_ns FROM blame('web') ORDER BY by_pid");
  REQUIRE(b.rows.size() == 3);
  CHECK(as_int(b.rows[0][0]) == 77);
  CHECK(as_int(b.rows[0][2]) == 3 * 3'500'000); // both of its threads, both halves
  CHECK(as_int(b.rows[0][3]) == 3 * 10'000'000);
  CHECK(as_int(b.rows[1][0]) == 78);
  CHECK(is_null(b.rows[1][2])); // no time slices recorded
  CHECK(is_null(b.rows[1][3])); // usage unknown
  CHECK(as_int(b.rows[2][0]) == 79);
  CHECK(as_int(b.rows[2][2]) == 3 * 4'000'000); // its own process only
  CHECK(as_int(b.rows[2][3]) == 3 * 10'000'000);
  // A window of one interval: that interval's.
  auto one = run(r, "SELECT cpu_ns FROM blame('web', " + std::to_string(t0 + 10 * sec) + ", " +
                        std::to_string(t0 + 20 * sec) + ") WHERE by_pid = 77");
  REQUIRE(one.rows.size() == 1);
  CHECK(as_int(one.rows[0][0]) == 3'500'000);
  // A statement that reads neither (the report's tables) gets the same rows of what it reads;
  // the reads behind cpu_ns and cgroup_cpu_ns, and the pressure, are left out.
  const auto all = run(r, "SELECT * FROM blame('web') ORDER BY by_pid").rows;
  const auto first7 = run(r, "SELECT by_pid, by_comm, by_cgroup, wait_ns, share_pct, waits, "
                             "preempts FROM blame('web') ORDER BY by_pid")
                          .rows;
  REQUIRE(first7.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(first7[i] == std::vector<value>(all[i].begin(), all[i].begin() + 7));
  }
  const auto cpu = run(r, "SELECT cpu_ns FROM blame('web') ORDER BY by_pid").rows;
  REQUIRE(cpu.size() == all.size());
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(cpu[i][0] == all[i][7]);
  }
}

TEST_CASE("a real version 12 database is upgraded: its blame rows stay rows, new ones are packed, "
          "and every question reads both",
          "[store][blame][pack]") {
  // tests/store/data/v12.db: v11.db upgraded by the schema 12 rschedd (commit 3e316a9), which
  // recorded 3 s of this machine into it with -g latency,migration,blame.
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  copy_fixture("v12.db", path);
  const std::string all_cols = "ts, dur, tid, pid, comm, cgroup, by_pid, by_comm, by_cgroup, "
                               "wait_ns, count, tier, by_cpu, by_policy, by_prio, policy, prio, "
                               "approx_ns";
  const std::string order =
      " ORDER BY 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18";
  std::vector<std::vector<value>> rows_before, preempt_before, blame_before;
  std::int64_t old_rows = 0;
  std::int64_t next = 0;
  const std::string blame_q = "SELECT * FROM blame(NULL, 0, {}) ORDER BY by_pid, by_comm, "
                              "by_cgroup";
  {
    auto r = open_reader(path);
    CHECK(scalar_int(r, "PRAGMA user_version") == 12);
    CHECK(scalar_int(r, "SELECT count(*) FROM sqlite_master WHERE name = 'thread_blame_pack'") ==
          0);
    next = scalar_int(r, "SELECT max(start_ns + dur_ns) FROM intervals");
    rows_before = run(r, "SELECT " + all_cols + " FROM delay_blame" + order).rows;
    preempt_before = run(r, "SELECT * FROM preemption ORDER BY 1, 2, 3, 7, 8, 9").rows;
    blame_before = run(r, fmt::format(fmt::runtime(blame_q), next)).rows;
    old_rows = scalar_int(r, "SELECT count(*) FROM thread_blame");
    REQUIRE(rows_before.size() > 20);
    REQUIRE(blame_before.size() > 3);
  }
  {
    auto w = open_writer(path);
    write_ok(w, make_interval(next, {estimated_victim(3, "fresh")}));
  }
  auto r = open_reader(path);
  CHECK(scalar_int(r, "PRAGMA user_version") == rsched::store::schema_version);
  // The rows written before stay b-tree rows; the new interval's are one pack.
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame_row") == old_rows);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame_pack") == 1);
  // The victim's rows: 3 culprits it waited behind and the one that preempted it.
  const auto packed = scalar_int(r, "SELECT rows FROM thread_blame_pack");
  CHECK(packed == 4);
  CHECK(scalar_int(r, "SELECT count(*) FROM thread_blame") == old_rows + packed);
  // The views and blame() read both: the old window as before, the new rows as written.
  const std::string before = " WHERE ts < " + std::to_string(next);
  CHECK(run(r, "SELECT " + all_cols + " FROM delay_blame" + before + order).rows == rows_before);
  CHECK(run(r, "SELECT * FROM preemption" + before + " ORDER BY 1, 2, 3, 7, 8, 9").rows ==
        preempt_before);
  CHECK(run(r, fmt::format(fmt::runtime(blame_q), next)).rows == blame_before);
  auto fresh = run(r, "SELECT by_comm, wait_ns, approx_ns FROM delay_blame WHERE comm = 'fresh' "
                      "ORDER BY by_comm");
  REQUIRE(fresh.rows.size() == 3);
  CHECK(as_int(fresh.rows[0][2]) == 100'000); // <idle>
  CHECK(as_int(fresh.rows[2][2]) == 1'500'000);
  // One thread of one interval (the lookup form of the virtual table) and a range of intervals.
  const auto id = scalar_int(r, "SELECT max(id) FROM intervals");
  const auto thread = scalar_int(r, "SELECT thread_id FROM thread_blame_row LIMIT 1");
  const auto iv = scalar_int(r, "SELECT interval_id FROM thread_blame_row LIMIT 1");
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_blame WHERE interval_id = {} AND "
                                  "thread_id = {}",
                                  iv, thread)) ==
        scalar_int(r, fmt::format("SELECT count(*) FROM thread_blame_row WHERE interval_id = {} "
                                  "AND thread_id = {}",
                                  iv, thread)));
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_blame WHERE interval_id = {} AND "
                                  "thread_id = (SELECT min(thread_id) FROM thread_blame WHERE "
                                  "interval_id = {})",
                                  id, id)) == packed);
  CHECK(scalar_int(r, fmt::format("SELECT count(*) FROM thread_blame WHERE interval_id BETWEEN "
                                  "{} AND {}",
                                  iv, id)) ==
        scalar_int(r, fmt::format("SELECT count(*) FROM thread_blame_row WHERE interval_id "
                                  "BETWEEN {} AND {}",
                                  iv, id)) +
            packed);
  CHECK(as_text(run(r, "PRAGMA quick_check").rows.at(0).at(0)) == "ok");
}
