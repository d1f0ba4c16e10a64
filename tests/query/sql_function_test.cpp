// rsched's SQL functions (hist_percentile, ipc) and reader::exec / reader::complete.
#include "rsched/query/reader.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/hist_functions.hpp"
#include "rsched/store/writer.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

using metric = rsched::metrics::id;

using namespace store_test;

namespace {

reader memory_reader() {
  auto r = reader::open(":memory:", false);
  INFO("error: " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::uint64_t expected_percentile(const rsched::stats::histogram &h, double p) {
  const auto r = rsched::stats::percentile(h, p);
  REQUIRE(r.has_value());
  return r->value;
}

// Delays spread over the linear, log2 and open-ended ranges of the latency layout.
std::vector<std::uint64_t> random_delays(std::mt19937_64 &rng, std::size_t n) {
  std::vector<std::uint64_t> out;
  std::uniform_int_distribution<int> pick(0, 9);
  for (std::size_t i = 0; i < n; ++i) {
    const int k = pick(rng);
    if (k < 6) {
      out.push_back(std::uniform_int_distribution<std::uint64_t>(0, 499'999)(rng));
    } else if (k < 9) {
      out.push_back(std::uniform_int_distribution<std::uint64_t>(500'000, 50'000'000)(rng));
    } else {
      out.push_back(std::uniform_int_distribution<std::uint64_t>(50'000'000, 5'000'000'000)(rng));
    }
  }
  return out;
}

} // namespace

TEST_CASE("hist_percentile over stored rows equals the percentile of the merged histogram",
          "[store]") {
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  std::mt19937_64 rng(12345);
  rsched::stats::histogram merged_a{rsched::stats::layout::latency, {}};
  rsched::stats::histogram merged_b{rsched::stats::layout::latency, {}};
  rsched::stats::histogram merged_depth{rsched::stats::layout::depth, {}};
  {
    auto w = writer::open(path);
    REQUIRE(w.ok());
    for (int i = 0; i < 6; ++i) {
      auto ta = make_thread(1, "alpha", random_delays(rng, 50 + 10 * static_cast<std::size_t>(i)),
                            {0, 1, 2, static_cast<std::uint64_t>(i), 90});
      auto tb = make_thread(2, "beta", random_delays(rng, 7));
      REQUIRE(rsched::stats::merge_into(merged_a, ta.m[metric::sched_delay].hist).ok());
      REQUIRE(rsched::stats::merge_into(merged_b, tb.m[metric::sched_delay].hist).ok());
      REQUIRE(rsched::stats::merge_into(merged_depth, ta.m[metric::runq_depth].hist).ok());
      REQUIRE(w->write(make_interval(1'000 + i, {ta, tb})).ok());
    }
  }
  auto rr = reader::open(path);
  REQUIRE(rr.ok());
  auto &r = *rr;
  for (const double p : {0.001, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    INFO("p = " << p);
    const std::string ps = std::to_string(p);
    CHECK(
        static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_percentile(hist, " + ps +
                                                     ") FROM sched_delay WHERE comm = 'alpha'")) ==
        expected_percentile(merged_a, p));
    auto grouped = run(r, "SELECT comm, hist_percentile(hist, " + ps +
                              ") FROM sched_delay GROUP BY comm ORDER BY comm");
    REQUIRE(grouped.rows.size() == 2);
    CHECK(static_cast<std::uint64_t>(as_int(grouped.rows[0][1])) ==
          expected_percentile(merged_a, p));
    CHECK(static_cast<std::uint64_t>(as_int(grouped.rows[1][1])) ==
          expected_percentile(merged_b, p));
    CHECK(static_cast<std::uint64_t>(
              scalar_int(r, "SELECT hist_percentile(hist, " + ps + ") FROM runq_depth")) ==
          expected_percentile(merged_depth, p));
  }
  // Integer p works like REAL p.
  CHECK(static_cast<std::uint64_t>(scalar_int(
            r, "SELECT hist_percentile(hist, 99) FROM sched_delay WHERE comm = 'alpha'")) ==
        expected_percentile(merged_a, 99.0));
  // No rows, or only NULL blobs: NULL.
  auto none = run(r, "SELECT hist_percentile(hist, 50) FROM sched_delay WHERE comm = 'nobody'");
  REQUIRE(none.rows.size() == 1);
  CHECK(is_null(none.rows[0][0]));
  auto nulls = run(r, "SELECT hist_percentile(NULL, 50) FROM sched_delay");
  REQUIRE(nulls.rows.size() == 1);
  CHECK(is_null(nulls.rows[0][0]));
}

TEST_CASE("hist_percentile on literal blobs, as window function, and its errors", "[store]") {
  auto r = memory_reader();
  const auto h1 = latency_hist({1'000, 2'000, 15'000, 600'000});
  const auto h2 = latency_hist({3'000'000, 3'000'000, 40'000});
  const auto h3 = latency_hist({5'000'000'000'000}); // open-ended top bucket
  auto m12 = h1;
  REQUIRE(rsched::stats::merge_into(m12, h2).ok());
  const std::string rows = "(VALUES (1, " + blob_literal(h1) + "), (2, " + blob_literal(h2) +
                           "), (3, NULL), (4, " + blob_literal(h3) + "))";

  CHECK(static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_percentile(column2, 50) FROM " +
                                                     rows + " WHERE column1 <= 3")) ==
        expected_percentile(m12, 50));
  // The top bucket reports its lower bound, 2^32 us.
  CHECK(scalar_int(r, "SELECT hist_percentile(column2, 100) FROM " + rows) == 4'294'967'296'000LL);
  // An empty histogram (layout byte only) has no samples.
  auto empty = run(r, "SELECT hist_percentile(X'01', 50)");
  REQUIRE(empty.rows.size() == 1);
  CHECK(is_null(empty.rows[0][0]));

  SECTION("window function over a sliding frame") {
    auto t = run(r, "SELECT column1, hist_percentile(column2, 75) OVER (ORDER BY column1 ROWS "
                    "BETWEEN 1 PRECEDING AND CURRENT ROW) FROM " +
                        rows + " ORDER BY column1");
    REQUIRE(t.rows.size() == 4);
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[0][1])) == expected_percentile(h1, 75));
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[1][1])) == expected_percentile(m12, 75));
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[2][1])) == expected_percentile(h2, 75));
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[3][1])) == expected_percentile(h3, 75));
  }

  SECTION("p out of range") {
    for (const char *p : {"0", "-1", "100.0001", "101", "NULL", "'abc'", "1e999"}) {
      INFO("p = " << p);
      CHECK_THAT(
          run_error(r, std::string("SELECT hist_percentile(column2, ") + p + ") FROM " + rows),
          Catch::Contains("hist_percentile: p must be in (0, 100]"));
    }
  }

  SECTION("p not constant") {
    CHECK_THAT(run_error(r, "SELECT hist_percentile(column2, 40 + column1) FROM " + rows),
               Catch::Contains("hist_percentile: p must be"));
  }

  SECTION("layouts differ") {
    const auto d = depth_hist({1, 2, 3});
    CHECK_THAT(run_error(r, "SELECT hist_percentile(column1, 50) FROM (VALUES (" +
                                blob_literal(h1) + "), (" + blob_literal(d) + "))"),
               Catch::Contains("hist_percentile: histograms of different layouts"));
  }

  SECTION("malformed blobs") {
    CHECK_THAT(run_error(r, "SELECT hist_percentile(X'', 50)"),
               Catch::Contains("hist_percentile: histogram blob is empty"));
    CHECK_THAT(run_error(r, "SELECT hist_percentile(X'07', 50)"),
               Catch::Contains("hist_percentile: histogram blob has unknown layout id 7"));
    CHECK_THAT(run_error(r, "SELECT hist_percentile(X'0180', 50)"),
               Catch::Contains("hist_percentile: histogram blob is truncated"));
    CHECK_THAT(run_error(r, "SELECT hist_percentile(X'014B01', 50)"),
               Catch::Contains("past the last slot"));
    CHECK_THAT(run_error(r, "SELECT hist_percentile('text', 50)"),
               Catch::Contains("hist_percentile: hist must be a BLOB"));
    // Two rows whose counts sum past 2^64.
    CHECK_THAT(run_error(r, "SELECT hist_percentile(column1, 50) FROM (VALUES "
                            "(X'0100FFFFFFFFFFFFFFFFFF01'), (X'0100FFFFFFFFFFFFFFFFFF01'))"),
               Catch::Contains("overflow"));
  }
}

TEST_CASE("hist functions answer latency_fine rows at their precision, mixed ones in latency",
          "[store]") {
  using namespace rsched::stats;
  auto r = memory_reader();
  std::mt19937_64 rng(36);
  const auto fine_literal = [](const fine_histogram &h) { return "X'" + hex(encode(h)) + "'"; };
  for (int trial = 0; trial < 20; ++trial) {
    // an old row (before the upgrade) and two new ones
    histogram old_row{layout::latency, {}};
    fine_histogram new1;
    fine_histogram new2;
    for (int i = 0; i < 200; ++i) {
      const std::uint64_t v = 100'000 + (rng() >> (30 + rng() % 34)); // 100 us .. ~17 s
      if (i % 3 == 0) {
        old_row.add(v);
      } else if (i % 3 == 1) {
        new1.add(v);
      } else {
        new2.add(v);
      }
    }
    fine_histogram new12 = new1;
    merge_into(new12, new2);
    histogram mixed = old_row;
    REQUIRE(merge_into(mixed, new12).ok());
    const std::string rows = "(VALUES (1, " + blob_literal(old_row) + "), (2, " +
                             fine_literal(new1) + "), (3, " + fine_literal(new2) + "))";
    for (double p : {50.0, 99.0}) {
      const auto pf = percentile(new12, p);
      const auto pm = percentile(mixed, p);
      REQUIRE(pf.has_value());
      REQUIRE(pm.has_value());
      const std::string ps = std::to_string(p);
      INFO("p" << p);
      // new rows only: fine precision (the bucket at most 12.5 % wide)
      CHECK(static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_percentile(column2, " + ps +
                                                         ") FROM " + rows +
                                                         " WHERE column1 > 1")) == pf->value);
      CHECK(static_cast<std::uint64_t>(
                scalar_int(r, "SELECT hist_percentile_error(column2, " + ps + ") FROM " + rows +
                                  " WHERE column1 > 1")) == pf->bounds.width());
      CHECK(pf->bounds.width() * 8 <= pf->bounds.lo);
      // across the upgrade: latency's buckets, and hist_percentile_error says so
      CHECK(static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_percentile(column2, " + ps +
                                                         ") FROM " + rows)) == pm->value);
      CHECK(static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_percentile_error(column2, " + ps +
                                                         ") FROM " + rows)) == pm->bounds.width());
      // scalars on one fine blob
      CHECK(static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_error(" + fine_literal(new12) +
                                                         ", " + ps + ")")) == pf->bounds.width());
      CHECK(static_cast<std::uint64_t>(scalar_int(r, "SELECT hist_pct(" + fine_literal(new12) +
                                                         ", " + ps + ")")) == pf->value);
      // a sliding window: the frame of rows 2..3 is fine again once row 1 left it
      auto t = run(r, "SELECT column1, hist_percentile_error(column2, " + ps +
                          ") OVER (ORDER BY column1 ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) "
                          "FROM " +
                          rows + " ORDER BY column1");
      REQUIRE(t.rows.size() == 3);
      CHECK(static_cast<std::uint64_t>(as_int(t.rows[2][1])) == pf->bounds.width());
    }
    // hist_merge keeps the fine layout for new rows only, gives latency across the upgrade
    auto m = run(r, "SELECT hist_merge(column2) FROM " + rows + " WHERE column1 > 1");
    REQUIRE(m.rows.size() == 1);
    CHECK(as_blob(m.rows[0][0]) == encode(new12));
    m = run(r, "SELECT hist_merge(column2) FROM " + rows);
    CHECK(as_blob(m.rows[0][0]) == encode(mixed));
    CHECK(scalar_int(r, "SELECT hist_count(" + fine_literal(new12) + ")") ==
          static_cast<std::int64_t>(new12.total()));
  }
  // hist_buckets (one histogram of layout 1's size) reads a fine blob coarsened: latency's buckets
  {
    fine_histogram f;
    for (std::uint64_t v : {5'000ULL, 600'000ULL, 700'000ULL, 6'000'000ULL, 6'500'000ULL}) {
      f.add(v);
    }
    auto t = run(r, "SELECT lo_ns, hi_ns, count FROM hist_buckets(" + fine_literal(f) + ")");
    REQUIRE(t.rows.size() == 3);
    CHECK(as_int(t.rows[0][0]) == 0);
    CHECK(as_int(t.rows[1][0]) == 512'000);
    CHECK(as_int(t.rows[1][1]) == 1'023'999);
    CHECK(as_int(t.rows[1][2]) == 2);
    CHECK(as_int(t.rows[2][0]) == 4'096'000);
    CHECK(as_int(t.rows[2][2]) == 2);
  }
  // a fine blob does not merge with another layout
  CHECK_THAT(run_error(r, "SELECT hist_merge(column1) FROM (VALUES (X'050001'), (" +
                              blob_literal(depth_hist({1})) + "))"),
             Catch::Contains("hist_merge: histograms of different layouts"));
  CHECK_THAT(run_error(r, "SELECT hist_pct(X'05EC0101', 50)"),
             Catch::Contains("past the last slot"));
}

TEST_CASE("ipc", "[store]") {
  auto r = memory_reader();
  auto t = run(r, "SELECT ipc(300, 200), ipc(1, 0), ipc(5, NULL), ipc(NULL, 5), ipc(0, 7)");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_real(t.rows[0][0]) == Approx(1.5));
  CHECK(is_null(t.rows[0][1]));
  CHECK(is_null(t.rows[0][2]));
  CHECK(is_null(t.rows[0][3]));
  CHECK(as_real(t.rows[0][4]) == 0.0);
  // Deterministic functions are allowed where SQLite demands it (here: an index expression).
  run(r, "CREATE TEMP TABLE c(i, cy); CREATE INDEX temp.c_ipc ON c(ipc(i, cy));");
}

TEST_CASE("exec runs every statement and reports columns, rows and values", "[store]") {
  auto r = memory_reader();
  auto t = run(r, "-- leading comment\n"
                  "SELECT 1 AS a, 2.5 AS b, 'x' AS c, X'00FF' AS d, NULL AS e;\n"
                  "/* block */ SELECT name FROM metric WHERE 0;  \n"
                  "CREATE TEMP TABLE t(x);\n"
                  "SELECT CAST(X'61006200FF' AS TEXT) AS nul_text; -- trailing comment\n"
                  "  ;  \n");
  REQUIRE(t.headers.size() == 3); // the zero-row SELECT still reports its columns
  CHECK(t.headers[0] == std::vector<std::string>{"a", "b", "c", "d", "e"});
  CHECK(t.headers[1] == std::vector<std::string>{"name"});
  CHECK(t.headers[2] == std::vector<std::string>{"nul_text"});
  REQUIRE(t.rows.size() == 2);
  CHECK(as_int(t.rows[0][0]) == 1);
  CHECK(as_real(t.rows[0][1]) == 2.5);
  CHECK(as_text(t.rows[0][2]) == "x");
  CHECK(as_blob(t.rows[0][3]) == std::vector<std::uint8_t>{0x00, 0xFF});
  CHECK(is_null(t.rows[0][4]));
  CHECK(as_text(t.rows[1][0]) == std::string("a\0b\0\xff", 5)); // exact bytes, NULs included

  // Empty input and comment-only input are fine and call nothing.
  auto e = run(r, "  -- nothing\n /* at all */ ");
  CHECK(e.headers.empty());
  CHECK(e.rows.empty());
}

TEST_CASE("exec errors name the line and column", "[store]") {
  auto r = memory_reader();
  CHECK(run_error(r, "SELECT 1;\n\nSELEC 2;") == "line 3, column 1: near \"SELEC\": syntax error");
  CHECK(run_error(r, "SELECT 1;\nSELECT\n  nosuchcol FROM metric;") ==
        "line 3, column 3: no such column: nosuchcol");
  CHECK_THAT(run_error(r, "SELECT 1;\n\n\nSELECT hist_percentile(X'01', 0);"),
             Catch::StartsWith("line 4") && Catch::Contains("p must be in (0, 100]"));
  CHECK_THAT(run_error(r, "SELECT * FROM nosuchtable"), Catch::Contains("no such table"));
  // Statements before the error ran; statements after it did not.
  std::string err;
  auto t = run(r, "SELECT 1; SELEC 2; SELECT 3;", &err);
  CHECK(err == "line 1, column 11: near \"SELEC\": syntax error");
  CHECK(t.rows.size() == 1);
}

TEST_CASE("complete detects the end of a statement", "[store]") {
  CHECK(reader::complete("SELECT 1;"));
  CHECK(reader::complete("SELECT 1;\n"));
  CHECK_FALSE(reader::complete("SELECT 1"));
  CHECK_FALSE(reader::complete("SELECT ';"));
  CHECK_FALSE(reader::complete("CREATE TRIGGER x AFTER INSERT ON t BEGIN SELECT 1;"));
  CHECK(reader::complete("SELECT 1; -- done\n"));
}

TEST_CASE("time functions refuse times and windows outside 64-bit ns", "[store]") {
  auto r = memory_reader();
  r.set_zone(rsched::timefmt::zone::utc());
  r.set_now(1'700'000'000'000'000'000);
  for (const char *sql : {
           "SELECT t('9999-12-31')",
           "SELECT t('1600-01-01')",
           "SELECT t('2262-04-11 23:47:17')",
           "SELECT ago(-9223372036854775807)",
           "SELECT ago('1000000d')",
           "SELECT * FROM intervals WHERE start_ns IN around(9223372036854775000, '1h')",
           "SELECT * FROM intervals WHERE start_ns IN around(t('2026-01-01'), '106000d')",
           "SELECT * FROM intervals WHERE start_ns IN around('9999-12-31', '1h')",
           "SELECT * FROM intervals WHERE start_ns IN during(-9223372036854775807, "
           "9223372036854775807)",
       }) {
    const auto err = run_error(r, sql);
    CHECK(err.find('\n') == std::string::npos);
    CHECK((err.find("out of range") != std::string::npos ||
           err.find("too large") != std::string::npos ||
           err.find("longer than") != std::string::npos));
  }
  // The ends of the range are fine.
  CHECK(scalar_int(r, "SELECT t('2262-04-11 23:47:16.854775807Z')") ==
        std::numeric_limits<std::int64_t>::max());
  CHECK(scalar_int(r, "SELECT t('1677-09-21 00:12:43.145224192Z')") ==
        std::numeric_limits<std::int64_t>::min());
  CHECK(scalar_int(r, "SELECT ago('100000d')") ==
        1'700'000'000'000'000'000 - 8'640'000'000'000'000'000);
}

// issue 36: compare() of two windows of a fresh recording answers at layout 5's precision, so
// two tails 40 % apart inside one factor-2 bucket come out apart; with layout 1 rows (or one in
// the window) it answers in layout 1, as before. Whole minutes come from the rollups, the
// ragged ends from the raw intervals.
TEST_CASE("compare answers layout 5 windows at layout 5's precision", "[store]") {
  using namespace rsched::stats;
  const bool with_tails = GENERATE(true, false);
  INFO("fine tails " << with_tails);
  temp_dir dir;
  const auto path = dir.file("rsched.db");
  constexpr std::int64_t t0 = 1'700'000'040'000'000'000; // a whole minute
  constexpr std::int64_t step = 10 * sec;
  std::mt19937_64 rng(3636);
  fine_histogram fa;
  fine_histogram fb;
  histogram ca{layout::latency, {}};
  histogram cb{layout::latency, {}};
  {
    auto w = writer::open(path);
    REQUIRE(w.ok());
    for (int n = 0; n < 36; ++n) {
      const bool first = n < 18; // A: ~4.3-5.0 ms waits, B: ~6.6-7.0 ms; one layout 1 bucket
      std::vector<std::uint64_t> d;
      for (int k = 0; k < 30; ++k) {
        d.push_back(first ? 4'300'000 + rng() % 700'000 : 6'600'000 + rng() % 400'000);
      }
      auto t = make_thread(7, "svc", d);
      for (const std::uint64_t v : d) {
        (first ? fa : fb).add(v);
        (first ? ca : cb).add(v);
        if (with_tails) {
          auto &delay = t.m[metric::sched_delay];
          if (!delay.tail) {
            delay.tail = rsched::base::make_cached<rsched::metrics::fine_tail>();
          }
          delay.tail->slots[rsched_hist_fine_slot(v) - RSCHED_HIST_LINEAR_SLOTS - 1] += 1;
        }
      }
      auto iv = make_interval(t0 + n * step, {t});
      iv.dur_ns = step;
      write_ok(*w, iv);
    }
  }
  auto rr = reader::open(path);
  REQUIRE(rr.ok());
  auto &r = *rr;
  const auto at = [](std::int64_t ns) { return std::to_string(ns); };
  rsched::store::answered_precision() = {};
  auto t = run(r, "SELECT key, a_p50_ns, a_p99_ns, b_p50_ns, b_p99_ns FROM compare(" + at(t0) +
                      ", " + at(t0 + 3 * minute) + ", " + at(t0 + 3 * minute + 5 * sec) + ", " +
                      at(t0 + 6 * minute) + ")");
  REQUIRE(t.rows.size() == 1);
  CHECK(as_text(t.rows[0][0]) == "svc");
  const auto want = [&](const auto &a, const auto &b) {
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[0][1])) == percentile(a, 50)->value);
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[0][2])) == percentile(a, 99)->value);
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[0][3])) == percentile(b, 50)->value);
    CHECK(static_cast<std::uint64_t>(as_int(t.rows[0][4])) == percentile(b, 99)->value);
  };
  const auto p99a = static_cast<std::uint64_t>(as_int(t.rows[0][2]));
  const auto p99b = static_cast<std::uint64_t>(as_int(t.rows[0][4]));
  if (with_tails) {
    want(fa, fb);
    // apart: the two p99 buckets differ and are each at most 12.5 % wide
    CHECK(percentile(fa, 99)->bounds.hi < p99b);
    CHECK(percentile(fa, 99)->bounds.width() * 8 <= percentile(fa, 99)->bounds.lo);
    CHECK(rsched::store::answered_precision().all_fine());
    CHECK(p99a < p99b);
  } else {
    want(ca, cb);
    // one bucket, [4.096, 8.192) ms, holds both
    CHECK(percentile(ca, 99)->bounds.lo == percentile(cb, 99)->bounds.lo);
    CHECK(rsched::store::answered_precision().coarse > 0);
    CHECK(p99a == p99b); // the issue: two tails 40 % apart print the same
  }
}
