// The SQL toolbox of rsched-sql (docs/SQL.md): hist_* functions, time functions, windows,
// coverage and gaps, annotations, spikes and compare, diff-tested against a synthetic history
// with known samples (sql_fixture.hpp).
#include "rsched/base/text.hpp"
#include "rsched/query/annotations.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"

#include "sql_fixture.hpp"
#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace store_test;
using namespace sql_fixture;

namespace {

std::uint64_t exact_percentile(std::vector<std::uint64_t> v, double p) {
  REQUIRE(!v.empty());
  std::sort(v.begin(), v.end());
  const auto r = rsched::stats::percentile_rank(v.size(), p);
  return v[r - 1];
}

std::string q(std::int64_t v) {
  return std::to_string(v);
}

} // namespace

TEST_CASE("stored percentiles agree with the exact percentiles within the error bound", "[store]") {
  auto &h = fixture();
  auto r = open(h);
  struct win {
    std::int64_t a, b;
  };
  for (const std::string &comm :
       {std::string("web"), std::string("db"), std::string("hog"), std::string()}) {
    for (const win w : {win{t1300, history_end}, win{spike_start, spike_end},
                        win{t1300 + 50 * minute, t1300 + 60 * minute}}) {
      for (const double p : {1.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
        const auto samples = h.of(comm, w.a, w.b);
        const auto exact = static_cast<std::int64_t>(exact_percentile(samples, p));
        const std::string where = (comm.empty() ? std::string("1") : "comm = '" + comm + "'") +
                                  " AND ts >= " + q(w.a) + " AND ts < " + q(w.b);
        const std::string ps = std::to_string(p);
        auto t = run(
            r, "SELECT hist_percentile(hist, " + ps + "), hist_percentile_error(hist, " + ps +
                   "), hist_pct(hist_merge(hist), " + ps + "), hist_error(hist_merge(hist), " + ps +
                   "), sum(count), hist_count(hist_merge(hist)) FROM sched_delay WHERE " + where);
        INFO("comm " << comm << " p " << p << " window " << w.a);
        const auto v = as_int(t.rows[0][0]);
        const auto err = as_int(t.rows[0][1]);
        CHECK(std::llabs(v - exact) < err);
        CHECK(as_int(t.rows[0][2]) == v);
        CHECK(as_int(t.rows[0][3]) == err);
        CHECK(as_int(t.rows[0][4]) == static_cast<std::int64_t>(samples.size()));
        CHECK(as_int(t.rows[0][5]) == static_cast<std::int64_t>(samples.size()));
      }
    }
  }
}

TEST_CASE("hist_* scalars, hist_buckets and rate on known histograms", "[store]") {
  auto r = open(fixture());
  // 3 samples in [10, 20) us, 1 in [500, 512) us, 1 in the open-ended bucket (>= 2^32 us).
  const auto hist = latency_hist({12'000, 15'000, 19'000, 505'000, 5'000'000'000'000});
  const std::string b = blob_literal(hist);
  CHECK(scalar_int(r, "SELECT hist_count(" + b + ")") == 5);
  CHECK(scalar_int(r, "SELECT hist_max(" + b + ")") == 4'294'967'296'000);
  CHECK(scalar_int(r, "SELECT hist_max(" + blob_literal(latency_hist({12'000})) + ")") == 19'999);
  auto t = run(r, "SELECT hist_count_above(" + b + ", 10000), hist_count_above(" + b +
                      ", 15000), hist_count_above(" + b + ", 500000), hist_fraction_above(" + b +
                      ", 500000), hist_count_above(" + b + ", '1ms'), hist_mean(" + b + ")");
  CHECK(as_real(t.rows[0][0]) == 5.0);
  CHECK(as_real(t.rows[0][1]) == Approx(2.0 + 1.5)); // half of [10, 20) us is >= 15 us
  CHECK(as_real(t.rows[0][2]) == 2.0);
  CHECK(as_real(t.rows[0][3]) == Approx(0.4));
  CHECK(as_real(t.rows[0][4]) == 1.0);
  CHECK(as_real(t.rows[0][5]) == Approx((3 * 14'999.5 + 511'999.5 + 4'294'967'296'000.0) / 5));
  // Percentiles and their bounds.
  CHECK(scalar_int(r, "SELECT hist_pct(" + b + ", 50)") ==
        static_cast<std::int64_t>(rsched::stats::percentile(hist, 50)->value));
  CHECK(scalar_int(r, "SELECT hist_error(" + b + ", 50)") == 10'000);
  CHECK(scalar_int(r, "SELECT hist_error(" + b + ", 70)") == 12'000);
  CHECK(scalar_int(r, "SELECT hist_percentile(" + b + ", 70)") ==
        static_cast<std::int64_t>(rsched::stats::percentile(hist, 70)->value));
  // hist_buckets: non-empty buckets, inclusive bounds, NULL hi for the open-ended one.
  t = run(r, "SELECT lo_ns, hi_ns, count FROM hist_buckets(" + b + ")");
  REQUIRE(t.rows.size() == 3);
  CHECK(as_int(t.rows[0][0]) == 10'000);
  CHECK(as_int(t.rows[0][1]) == 19'999);
  CHECK(as_int(t.rows[0][2]) == 3);
  CHECK(as_int(t.rows[1][0]) == 500'000);
  CHECK(as_int(t.rows[1][1]) == 511'999);
  CHECK(as_int(t.rows[2][0]) == 4'294'967'296'000);
  CHECK(is_null(t.rows[2][1]));
  CHECK(scalar_int(r, "SELECT sum(b.count) FROM sched_delay AS d, hist_buckets(d.hist) AS b "
                      "WHERE d.comm = 'hog'") ==
        static_cast<std::int64_t>(fixture().of("hog", t1300, history_end).size()));
  // Depth layout.
  const std::string d = blob_literal(depth_hist({0, 1, 1, 70}));
  t = run(r, "SELECT lo_ns, hi_ns, count FROM hist_buckets(" + d + ")");
  REQUIRE(t.rows.size() == 3);
  CHECK(as_int(t.rows[2][0]) == 63);
  CHECK(is_null(t.rows[2][1]));
  CHECK(scalar_int(r, "SELECT hist_max(" + d + ")") == 63);
  // hist_merge equals the bucket-wise sum.
  const auto merged = as_blob(run(r, "SELECT hist_merge(hist) FROM sched_delay WHERE comm = "
                                     "'web'")
                                  .rows[0][0]);
  rsched::stats::histogram expect{rsched::stats::layout::latency, {}};
  for (auto v : fixture().of("web", t1300, history_end)) {
    expect.add(v);
  }
  CHECK(merged == rsched::stats::encode(expect));
  // NULL in, NULL out; rate.
  CHECK(is_null(run(r, "SELECT hist_count(NULL)").rows[0][0]));
  CHECK(is_null(run(r, "SELECT hist_merge(hist) FROM sched_delay WHERE 0").rows[0][0]));
  CHECK(as_real(run(r, "SELECT rate(50, 10000000000)").rows[0][0]) == Approx(5.0));
  CHECK(is_null(run(r, "SELECT rate(50, 0)").rows[0][0]));
  CHECK(as_real(run(r, "SELECT ipc(30, 10)").rows[0][0]) == Approx(3.0));
}

TEST_CASE("bad blobs and arguments are SQL errors with a message", "[store]") {
  auto r = open(fixture());
  for (const std::string sql :
       {"SELECT hist_count(X'09')", "SELECT hist_max(X'0105')", "SELECT hist_mean('text')",
        "SELECT * FROM hist_buckets(X'FF00')", "SELECT hist_merge(X'')",
        "SELECT hist_pct(X'01', 0)", "SELECT hist_count_above(X'01', 'soon')",
        "SELECT hist_merge(x) FROM (SELECT X'01' AS x UNION ALL SELECT X'02')",
        "SELECT t('next tuesday')", "SELECT dur('5 parsecs')", "SELECT * FROM around('now')",
        "SELECT * FROM spikes('nosuch', 5)", "SELECT * FROM spikes('sched_delay', 'abcx')",
        "SELECT * FROM compare(0, 1, 2, 3, 'tid')", "SELECT * FROM during(10, 5)"}) {
    const auto e = run_error(r, sql);
    INFO(sql << " -> " << e);
    CHECK(e.find('\n') == std::string::npos);
    CHECK(e.size() > 10);
  }
  CHECK(run_error(r, "SELECT hist_count(X'09')")
            .find("hist_count: histogram blob has unknown "
                  "layout id 9") != std::string::npos);
  CHECK(run_error(r, "SELECT t('next tuesday')").find("'next tuesday'") != std::string::npos);
  CHECK(run_error(r, "SELECT * FROM around('now')").find("missing argument half_width") !=
        std::string::npos);
}

TEST_CASE("time functions use the display zone and the fixed now", "[store]") {
  auto r = open(fixture());
  CHECK(scalar_int(r, "SELECT t('2026-11-20 14:03')") == t1403);
  CHECK(scalar_int(r, "SELECT t('2026-11-20T15:03:00+01:00')") == t1403);
  CHECK(scalar_int(r, "SELECT t('now')") == history_end);
  CHECK(scalar_int(r, "SELECT t('27m ago')") == t1403);
  CHECK(scalar_int(r, "SELECT ago('27m')") == t1403);
  CHECK(scalar_int(r, "SELECT t(" + q(t1403) + ")") == t1403);
  CHECK(scalar_int(r, "SELECT dur('1d2h')") == 26 * 3600 * sec);
  CHECK(scalar_int(r, "SELECT dur('500ms')") == 500'000'000);
  CHECK(as_text(run(r, "SELECT fmt_time(" + q(t1403 + 5'000'000) + ")").rows[0][0]) ==
        "2026-11-20 14:03:00.005+00:00");
  auto ny = rsched::timefmt::zone::parse("America/New_York");
  REQUIRE(ny.ok());
  r.set_zone(*ny);
  CHECK(r.zone() == *ny);
  CHECK(scalar_int(r, "SELECT t('2026-11-20 09:03')") == t1403);
  CHECK(as_text(run(r, "SELECT fmt_time(" + q(t1403) + ")").rows[0][0]) ==
        "2026-11-20 09:03:00-05:00");
}

TEST_CASE("during and around select the intervals of the window, through the index", "[store]") {
  auto r = open(fixture());
  CHECK(scalar_int(r, "SELECT count(*) FROM during('2026-11-20 14:00', '2026-11-20 14:01')") == 6);
  // Intervals overlapping [14:02:30, 14:03:30).
  auto t = run(r, "SELECT DISTINCT ts FROM sched_delay WHERE ts IN "
                  "around('2026-11-20 14:03', '30s') ORDER BY ts");
  REQUIRE(t.rows.size() == 6);
  CHECK(as_int(t.rows.front()[0]) == t1403 - 30 * sec);
  CHECK(as_int(t.rows.back()[0]) == t1403 + 20 * sec);
  // An interval that only overlaps the window's start is included.
  CHECK(scalar_int(r, "SELECT min(ts) FROM during(" + q(t1403 - 5 * sec) + ", " + q(t1403) + ")") ==
        t1403 - 10 * sec);
  CHECK(scalar_int(r, "SELECT count(*) FROM during('2026-11-20 13:41', '2026-11-20 13:44')") == 0);
  std::string plan;
  for (const auto &row :
       run(r, "EXPLAIN QUERY PLAN SELECT count(*) FROM main.sched_delay WHERE ts IN "
              "around('2026-11-20 14:03', '5m')")
           .rows) {
    plan += as_text(row[3]) + "\n";
  }
  INFO(plan);
  CHECK(plan.find("intervals_start_ns") != std::string::npos);
}

TEST_CASE("coverage and gaps", "[store]") {
  auto r = open(fixture());
  auto t = run(r, "SELECT ts, end_ts, covered_ns, coverage_pct, gaps FROM "
                  "coverage('2026-11-20 13:35', '2026-11-20 13:50')");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][2]) == 10 * minute);
  CHECK(as_real(t.rows[0][3]) == Approx(200.0 / 3));
  CHECK(as_int(t.rows[0][4]) == 1);
  t = run(r, "SELECT ts, end_ts, dur, reason FROM gaps()");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][0]) == gap_start);
  CHECK(as_int(t.rows[0][1]) == gap_end);
  CHECK(as_text(t.rows[0][3]) == "rschedd restarted");
  // A window reaching past the history.
  t = run(r, "SELECT coverage_pct, gaps FROM coverage('2026-11-20 14:20', '2026-11-20 14:40')");
  CHECK(as_real(t.rows[0][0]) == Approx(50.0));
  CHECK(as_int(t.rows[0][1]) == 1);
  t = run(r, "SELECT reason FROM gaps('2026-11-20 14:20', '2026-11-20 14:40')");
  CHECK(as_text(t.rows[0][0]) == "after the last interval");
  t = run(r, "SELECT coverage_pct, gaps FROM coverage('2026-11-21', '2026-11-22')");
  CHECK(as_real(t.rows[0][0]) == 0.0);
  CHECK(as_text(run(r, "SELECT reason FROM gaps('2026-11-21', '2026-11-22')").rows[0][0]) ==
        "no data");
  CHECK(as_real(run(r, "SELECT coverage_pct FROM coverage()").rows[0][0]) ==
        Approx(85.0 / 90.0 * 100));
}

TEST_CASE("gaps lists stretches that overlapping intervals claim twice; coverage counts them once",
          "[store]") {
  // A restart 60 s back in time (the clock stepped back, or a second recorder): before, coverage
  // and gaps said nothing of the doubled minute.
  constexpr std::int64_t t0 = 1'795'179'600LL * sec;
  temp_dir dir;
  const std::string path = dir.file("overlap.db");
  {
    auto w = open_writer(path);
    for (int i = 0; i < 12; ++i) { // [t0, t0 + 120 s)
      write_ok(w, make_interval(t0 + i * 10 * sec, {make_thread(7, "web", {1'000'000})}));
    }
    for (int i = 0; i < 12; ++i) { // [t0 + 60 s, t0 + 180 s): its first 60 s claimed twice
      write_ok(w,
               make_interval(t0 + 60 * sec + i * 10 * sec, {make_thread(7, "web", {1'000'000})}));
    }
  }
  auto r = open_reader(path);
  const auto g =
      run(r, fmt::format("SELECT ts, end_ts, reason FROM gaps({}, {})", t0, t0 + 180 * sec));
  REQUIRE(g.rows.size() == 1);
  CHECK(as_int(g.rows[0][0]) == t0 + 60 * sec);
  CHECK(as_int(g.rows[0][1]) == t0 + 120 * sec);
  CHECK(as_text(g.rows[0][2]).rfind("intervals overlap: the clock stepped back", 0) == 0);
  const auto c = run(r, fmt::format("SELECT covered_ns, coverage_pct, gaps FROM coverage({}, {})",
                                    t0, t0 + 180 * sec));
  CHECK(as_int(c.rows[0][0]) == 180 * sec); // the union, not 240 s
  CHECK(as_real(c.rows[0][1]) == Approx(100.0));
  CHECK(as_int(c.rows[0][2]) == 1);
  // A window inside the doubled stretch, and one that ends before it: none.
  CHECK(run(r, fmt::format("SELECT ts FROM gaps({}, {})", t0, t0 + 50 * sec)).rows.empty());
  const auto inside =
      run(r, fmt::format("SELECT ts, end_ts FROM gaps({}, {})", t0 + 70 * sec, t0 + 90 * sec));
  REQUIRE(inside.rows.size() == 1);
  CHECK(as_int(inside.rows[0][0]) == t0 + 70 * sec);
  CHECK(as_int(inside.rows[0][1]) == t0 + 90 * sec);
}

TEST_CASE("spikes finds the injected window and names hog first", "[store]") {
  auto r = open(fixture());
  for (const std::string thr : {"'3x'", "'10ms'", "10000000"}) {
    INFO(thr);
    // Merged over every thread (by 'all').
    auto t = run(r, "SELECT ts, end_ts, dur, peak_ns, peak_ts, top_comms, "
                    "threshold_ns, victim FROM spikes('sched_delay', " +
                        thr + ", NULL, NULL, NULL, 'all')");
    REQUIRE(t.rows.size() == 1);
    CHECK(as_text(t.rows[0][7]) == "all");
    CHECK(as_int(t.rows[0][0]) == spike_start);
    CHECK(as_int(t.rows[0][1]) == spike_end);
    CHECK(as_int(t.rows[0][2]) == 30 * sec);
    CHECK(as_int(t.rows[0][3]) > 20'000'000);
    CHECK(as_int(t.rows[0][4]) >= spike_start);
    CHECK(as_text(t.rows[0][5]).rfind("hog (", 0) == 0);
  }
  // Per comm (the default): hog and web, each with its cause from blame, throttling and
  // pressure.
  auto per = run(r, "SELECT ts, dur, victim, cause FROM spikes('sched_delay', '3x')");
  REQUIRE(per.rows.size() == 2);
  CHECK(as_text(per.rows[0][2]) == "hog");
  CHECK(as_text(per.rows[0][3]) ==
        "web[10] 90% of the wait, <unknown> 10%; throttled 12.0 s (/batch.slice); CPU pressure "
        "60%");
  CHECK(as_text(per.rows[1][2]) == "web");
  CHECK(as_text(per.rows[1][3]) == "hog[30] 90% of the wait, <idle> 10%; CPU pressure 60%");
  for (const auto &row : per.rows) {
    CHECK(as_int(row[0]) == spike_start);
    CHECK(as_int(row[1]) == 30 * sec);
  }
  // Window arguments restrict the search.
  CHECK(run(r, "SELECT * FROM spikes('sched_delay', '3x', '2026-11-20 13:00', "
               "'2026-11-20 14:00')")
            .rows.empty());
  auto t = run(r, "SELECT top_comms FROM spikes('cpu_sched_delay', '3x', NULL, NULL, NULL, 'all')");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_text(t.rows[0][0]).rfind("cpu 0 (", 0) == 0);
  // Per CPU (the default for a CPU metric): CPU 0, where hog and web wait.
  auto c = run(r, "SELECT victim, top_comms FROM spikes('cpu_sched_delay', '3x')");
  REQUIRE(c.rows.size() == 1);
  CHECK(as_int(c.rows[0][0]) == 0);
}

TEST_CASE("compare ranks hog first", "[store]") {
  auto r = open(fixture());
  auto t = run(r, "SELECT key, a_count, a_p50_ns, a_p99_ns, b_count, b_p50_ns, b_p99_ns, "
                  "d_p99_ns, ratio_p99 FROM compare('2026-11-20 13:50', '2026-11-20 14:00', "
                  "'2026-11-20 14:03', '2026-11-20 14:03:30')");
  REQUIRE(t.rows.size() == 4);
  CHECK(as_text(t.rows[0][0]) == "hog");
  CHECK(as_int(t.rows[0][4]) == 900);
  CHECK(as_int(t.rows[0][1]) == 120);
  const auto b99 = as_int(t.rows[0][6]);
  CHECK(as_int(t.rows[0][7]) == b99 - as_int(t.rows[0][3]));
  CHECK(as_real(t.rows[0][8]) > 100.0);
  CHECK(as_text(t.rows[1][0]) == "web");
  // The hostile comm comes back byte for byte.
  bool found = false;
  for (const auto &row : t.rows) {
    found = found || as_text(row[0]) == hostile;
  }
  CHECK(found);
  t = run(r, "SELECT key FROM compare('2026-11-20 13:50', '2026-11-20 14:00', "
             "'2026-11-20 14:03', '2026-11-20 14:03:30', 'cgroup')");
  CHECK(as_text(t.rows[0][0]) == "/batch.slice");
  t = run(r, "SELECT key FROM compare('2026-11-20 13:50', '2026-11-20 14:00', "
             "'2026-11-20 14:03', '2026-11-20 14:03:30', 'cpu')");
  CHECK(as_int(t.rows[0][0]) == 0);
}

TEST_CASE("hostile comm and cgroup names round-trip", "[store]") {
  auto r = open(fixture());
  auto t = run(r, "SELECT DISTINCT comm, cgroup FROM sched_delay WHERE tid = 40");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_text(t.rows[0][0]) == hostile);
  CHECK(as_text(t.rows[0][1]) == "/evil\"slice,\n");
}

TEST_CASE("annotations: add, import CSV and JSON, views", "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  {
    auto w = rsched::store::writer::open(path);
    REQUIRE(w.ok());
    REQUIRE(w->write(make_interval(t1403, {make_thread(1, "web", {1'000, 2'000})})).ok());
  }
  rsched::query::annotation a;
  a.start_ns = t1403 + sec;
  a.text = hostile + " \xe2\x9c\x93";
  a.tags = "x,y";
  auto id = rsched::query::add_annotation(path, a);
  REQUIRE(id.ok());
  CHECK(*id == 1);
  const std::string csv = "start,end,text,tags\r\n"
                          "2026-11-20T14:03:00Z,2026-11-20T14:05:00Z,\"deploy, \"\"v42\"\"\n"
                          "second line\",deploy\r\n"
                          "1795183500,,plain,\n";
  auto n = rsched::query::import_incidents(path, csv, rsched::query::incident_format::automatic,
                                           "import:x.csv", t1403);
  INFO((n.ok() ? std::string() : n.err().msg));
  REQUIRE(n.ok());
  CHECK(*n == 2);
  const std::string json = R"([{"start": "2026-11-20T14:10:00Z", "text": "json \"q\" \u00e9\n",
    "tags": ["a", "b"], "source": "pagerduty"}, {"start": 1795183800, "end": null, "text": "t"}])";
  n = rsched::query::import_incidents(path, json, rsched::query::incident_format::automatic,
                                      "import:x.json", t1403);
  INFO((n.ok() ? std::string() : n.err().msg));
  REQUIRE(n.ok());
  CHECK(*n == 2);
  auto rr = reader::open(path);
  REQUIRE(rr.ok());
  auto t = run(*rr, "SELECT id, start_ns, end_ns, source, text, tags FROM annotations ORDER BY id");
  REQUIRE(t.rows.size() == 5);
  CHECK(as_text(t.rows[0][4]) == a.text);
  CHECK(as_text(t.rows[0][3]) == "rsched-sql");
  CHECK(is_null(t.rows[0][2]));
  CHECK(as_int(t.rows[1][1]) == t1403);
  CHECK(as_int(t.rows[1][2]) == t1403 + 2 * minute);
  CHECK(as_text(t.rows[1][4]) == "deploy, \"v42\"\nsecond line");
  CHECK(as_text(t.rows[1][3]) == "import:x.csv");
  CHECK(as_int(t.rows[2][1]) == 1795183500 * sec);
  CHECK(as_text(t.rows[3][4]) == "json \"q\" \xc3\xa9\n");
  CHECK(as_text(t.rows[3][5]) == "a,b");
  CHECK(as_text(t.rows[3][3]) == "pagerduty");
  CHECK(as_int(t.rows[4][1]) == 1795183800 * sec);
  // Views: the interval [14:03:00, 14:03:10) overlaps the spans of annotations 1 (14:03:01) and
  // 2 (14:03-14:05), not of 3 (14:05) or 4-5 (14:10); with a 2-minute margin, 3 too.
  CHECK(scalar_int(*rr, "SELECT count(DISTINCT annotation_id) FROM annotation_delay") == 2);
  CHECK(scalar_int(*rr, "SELECT annotation_margin('2m')") == 2 * minute);
  CHECK(scalar_int(*rr, "SELECT count(DISTINCT annotation_id) FROM annotation_delay") == 3);
  CHECK(scalar_int(*rr, "SELECT annotation_margin(0)") == 0);
  t = run(*rr, "SELECT annotation_id, comm, samples, p99_ns FROM annotation_summary "
               "WHERE annotation_id = 1");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_int(t.rows[0][2]) == 2);
  // All or nothing: a bad row fails the whole import and names the row.
  for (const std::string &bad :
       {std::string("start,text\n2026-11-20T14:00:00Z,ok\nnot a time,bad\n"),
        std::string("start,text\n2026-11-20T14:00:00Z,\"unterminated\n"),
        std::string("when,text\n2026-11-20T14:00:00Z,no start column\n"),
        std::string(R"([{"start": "2026-11-20T14:00:00Z", "text": "ok"}, {"text": "no start"}])"),
        std::string(R"([{"start": "2026-11-20T14:00:00Z", "text": "x"} junk)"),
        std::string("start,end,text\n2026-11-20T14:00:00Z,2026-11-20T13:00:00Z,backwards\n")}) {
    INFO(bad);
    n = rsched::query::import_incidents(path, bad, rsched::query::incident_format::automatic,
                                        "import:bad", t1403);
    REQUIRE_FALSE(n.ok());
    CHECK(n.err().msg.find('\n') == std::string::npos);
  }
  CHECK(rsched::query::import_incidents(path, "start,text\n2026-11-20T14:00:00Z,ok\nbad,x\n",
                                        rsched::query::incident_format::csv, "s", t1403)
            .err()
            .msg.find("row 2") != std::string::npos);
  CHECK(scalar_int(*rr, "SELECT count(*) FROM annotations") == 5);
  // Columns used for nothing are ignored and reported (issue 17: a PagerDuty export was refused
  // for its assigned_to_user column).
  {
    rsched::query::incident_import o;
    o.source = "s";
    o.now_ns = t1403;
    auto rep =
        rsched::query::import_incidents(path, "start,text,color\n2026-11-20T14:00:00Z,x,red\n", o);
    REQUIRE(rep.ok());
    CHECK(rep->ids == std::vector<std::int64_t>{6});
    CHECK(rep->ignored == std::vector<std::string>{"color"});
    CHECK(rep->recognised.empty());
    auto m = rsched::query::parse_import_map("text=color");
    REQUIRE(m.ok());
    o.map = m.value();
    rep =
        rsched::query::import_incidents(path, "start,text,color\n2026-11-20T14:00:00Z,x,red\n", o);
    REQUIRE(rep.ok());
    CHECK(rep->ignored == std::vector<std::string>{"text"});
    CHECK(scalar_int(*rr, "SELECT count(*) FROM annotations WHERE text = 'red'") == 1);
    for (const char *bad : {"", "start", "=x", "start=", "when=x", "start=a,,text=b"}) {
      INFO(bad);
      CHECK_FALSE(rsched::query::parse_import_map(bad).ok());
    }
  }
  CHECK(scalar_int(*rr, "SELECT count(*) FROM annotations") == 7);
  // Refusals: missing file, a non-rsched file.
  CHECK_FALSE(rsched::query::add_annotation(dir.file("missing.db"), a).ok());
  write_file(dir.file("foreign.db"), "");
  raw_exec(dir.file("foreign.db"), "CREATE TABLE t(x)");
  const auto before = read_file(dir.file("foreign.db"));
  auto f = rsched::query::add_annotation(dir.file("foreign.db"), a);
  REQUIRE_FALSE(f.ok());
  CHECK(f.err().msg.find("not an rsched database") != std::string::npos);
  CHECK(read_file(dir.file("foreign.db")) == before);
  rsched::query::annotation empty;
  CHECK_FALSE(rsched::query::add_annotation(path, empty).ok());
}

TEST_CASE("every sql example in docs/SQL.md runs against the fixture", "[store]") {
  const std::string doc =
      (std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "docs" / "SQL.md").string();
  std::ifstream in(doc);
  REQUIRE(in.good());
  std::vector<std::string> blocks;
  std::string line;
  std::string cur;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line.rfind("```sql", 0) == 0) {
      inside = true;
      cur.clear();
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
      blocks.push_back(cur);
    } else if (inside) {
      cur += line + "\n";
    }
  }
  CHECK_FALSE(inside);
  CHECK(blocks.size() >= 20);
  auto r = open(fixture());
  for (const auto &b : blocks) {
    std::string err;
    run(r, b, &err);
    INFO(b);
    CHECK(err == "");
  }
}

// Diff test: each ```sql example of docs/SQL.md is followed by a ```csv block holding what
// `rsched-sql DB --csv` prints for it over the fixture (lines passed through
// escape_for_terminal; LF line ends). RSCHED_UPDATE_GOLDEN=1 rewrites the
// csv blocks from the current output (review the diff before committing it).
TEST_CASE("docs/SQL.md examples through rsched-sql match their expected CSV", "[store]") {
  const auto doc = std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "docs" / "SQL.md";
  std::ifstream in(doc);
  REQUIRE(in.good());
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
  }
  const bool update = std::getenv("RSCHED_UPDATE_GOLDEN") != nullptr;
  std::vector<std::string> out_lines;
  std::size_t examples = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out_lines.push_back(lines[i]);
    if (lines[i].rfind("```sql", 0) != 0) {
      continue;
    }
    std::string sql;
    std::size_t j = i + 1;
    for (; j < lines.size() && lines[j].rfind("```", 0) != 0; ++j) {
      sql += lines[j] + "\n";
      out_lines.push_back(lines[j]);
    }
    REQUIRE(j < lines.size());
    out_lines.push_back(lines[j]); // closing fence
    i = j;
    // an existing expected block: blank line, ```csv, ..., ```
    std::string expected;
    bool has_expected = false;
    std::size_t k = i + 1;
    if (k + 1 < lines.size() && lines[k].empty() && lines[k + 1] == "```csv") {
      has_expected = true;
      for (k += 2; k < lines.size() && lines[k] != "```"; ++k) {
        expected += lines[k] + "\n";
      }
    }
    int status = 0;
    // Kept in the doc through the terminal escaping, so the hostile comm's control bytes never
    // sit raw in a Markdown file; compared the same way.
    const std::string got = escaped_output(fixture().path, sql, status);
    INFO(sql);
    CHECK(WIFEXITED(status));
    CHECK((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 3));
    ++examples;
    if (update) {
      out_lines.push_back("");
      out_lines.push_back("```csv");
      std::istringstream gs(got);
      for (std::string l; std::getline(gs, l);) {
        out_lines.push_back(l);
      }
      out_lines.push_back("```");
      if (has_expected) {
        i = k; // skip the old expected block
      }
    } else {
      CHECK(has_expected);
      CHECK(got == expected);
    }
  }
  CHECK(examples >= 20);
  if (update) {
    std::ofstream out(doc, std::ios::trunc);
    for (const auto &l : out_lines) {
      out << l << "\n";
    }
  }
}

TEST_CASE("the reader refuses the ambiguous aggregation before running it", "[store]") {
  auto r = open(fixture());
  const auto err = run_error(r, "SELECT comm, hist_percentile(hist, 99) AS p99,\n"
                                "       hist_max(hist) AS mx FROM sched_delay GROUP BY comm");
  CHECK(err.find("line 2, column 8: hist_max(hist) would read one row of each group") == 0);
  CHECK(err.find("hist_max(hist_merge(hist))") != std::string::npos);
  // What it advises runs, and the max is not below the p99.
  const auto t = run(r, "SELECT comm, hist_percentile(hist, 99), hist_max(hist_merge(hist)) "
                        "FROM sched_delay GROUP BY comm");
  REQUIRE_FALSE(t.rows.empty());
  for (const auto &row : t.rows) {
    CHECK(as_int(row[2]) >= as_int(row[1]));
  }
}
