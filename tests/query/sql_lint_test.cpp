// check_histogram_aggregation: per-blob histogram functions on a bare column of an aggregating
// query are refused; every per-row or per-group use that SQLite evaluates as written is not.
#include "rsched/query/sql_lint.hpp"

#include <catch2/catch.hpp>

#include <string>

using rsched::query::check_histogram_aggregation;

TEST_CASE("a histogram scalar on a bare column of an aggregating query is refused", "[store]") {
  struct refused {
    std::string sql;
    std::string at; // the text at the reported offset
    std::string advice;
  };
  for (const refused &c : {
           refused{"SELECT comm, hist_percentile(hist, 99), hist_max(hist) FROM sched_delay "
                   "GROUP BY comm",
                   "hist_max(hist)", "hist_max(hist_merge(hist))"},
           refused{"SELECT HIST_MEAN(d.hist), count(*) FROM sched_delay AS d", "HIST_MEAN", ""},
           refused{"select count(*), hist_count(\"hist\") from sched_delay", "hist_count", ""},
           refused{"SELECT comm, round(hist_pct(hist, 99) / 1e6, 1) FROM sched_delay GROUP BY 1",
                   "hist_pct", "hist_percentile(hist, 99)"},
           refused{"SELECT comm, hist_error(hist, 50) FROM sched_delay GROUP BY comm", "hist_error",
                   "hist_percentile_error(hist, 50)"},
           refused{"SELECT comm FROM sched_delay GROUP BY comm HAVING hist_max(hist) > 5",
                   "hist_max", ""},
           refused{"SELECT comm FROM sched_delay GROUP BY comm ORDER BY "
                   "hist_fraction_above(hist, '1ms')",
                   "hist_fraction_above", "hist_fraction_above(hist_merge(hist), '1ms')"},
           // In a subquery, a CTE and a compound part, each checked on its own.
           refused{"SELECT * FROM (SELECT comm, hist_count_above(hist, 5) AS n FROM sched_delay "
                   "GROUP BY comm)",
                   "hist_count_above", ""},
           refused{"WITH x AS (SELECT max(ts), hist_max(hist) FROM sched_delay) SELECT * FROM x",
                   "hist_max", ""},
           refused{"SELECT hist_max(hist) FROM sched_delay UNION ALL SELECT hist_max(hist) FROM "
                   "sched_delay GROUP BY comm",
                   "hist_max", ""},
           // A result alias does not hide a bare column in the result list itself.
           refused{"SELECT comm, hist_max(hist) AS hist FROM sched_delay GROUP BY comm", "hist_max",
                   ""},
       }) {
    INFO(c.sql);
    const auto e = check_histogram_aggregation(c.sql);
    REQUIRE(e.has_value());
    CHECK(c.sql.substr(e->offset, c.at.size()) == c.at);
    CHECK(e->message.find('\n') == std::string::npos);
    CHECK(e->message.find("one row of each group") != std::string::npos);
    if (!c.advice.empty()) {
      CHECK(e->message.find(c.advice) != std::string::npos);
    }
  }
  // The second offending core of a compound is found even when the first is fine.
  const std::string two = "SELECT hist_max(hist) FROM sched_delay UNION ALL SELECT count(*), "
                          "hist_mean(hist) FROM sched_delay";
  const auto e = check_histogram_aggregation(two);
  REQUIRE(e.has_value());
  CHECK(two.substr(e->offset, 9) == "hist_mean");
}

// Found by the sql_lint fuzz target: the hint quotes the statement, whose newlines made it
// two lines. Whitespace runs are one space there.
TEST_CASE("the refusal's hint is one line whatever the statement's layout", "[store][lint]") {
  const auto e = check_histogram_aggregation(
      "SELECT comm,\n  hist_mean(\n    hist\n  )\nFROM sched_delay\nGROUP BY comm");
  REQUIRE(e.has_value());
  CHECK(e->message.find('\n') == std::string::npos);
  CHECK(e->message.find("hist_mean(hist)") != std::string::npos);
  CHECK(e->message.find("hist_mean(hist_merge(hist))") != std::string::npos);
}

TEST_CASE("per-row and per-group uses of the histogram scalars are allowed", "[store]") {
  for (const std::string sql : {
           "SELECT ts, comm, hist_max(hist), hist_pct(hist, 99) FROM sched_delay",
           "SELECT comm, hist_max(hist_merge(hist)) FROM sched_delay GROUP BY comm",
           "SELECT comm, max(hist_max(hist)), avg(hist_mean(d.hist)) FROM sched_delay d "
           "GROUP BY comm",
           "SELECT sum(hist_count(hist)) FROM sched_delay",
           "SELECT comm, count(*) FROM sched_delay WHERE hist_max(hist) > 1000000 GROUP BY comm",
           "SELECT hist_max(hist), count(*) FROM sched_delay GROUP BY hist",
           "SELECT comm, hist_merge(hist) AS m FROM sched_delay GROUP BY comm ORDER BY "
           "hist_max(m)",
           "WITH g AS (SELECT comm, hist_merge(hist) AS m FROM sched_delay GROUP BY comm) "
           "SELECT comm, hist_pct(m, 99), hist_count(m) FROM g",
           "SELECT comm, (SELECT hist_max(hist) FROM sched_delay LIMIT 1), count(*) FROM "
           "sched_delay GROUP BY comm",
           "SELECT hist_count(hist), count(*) OVER () FROM sched_delay",
           "SELECT hist_max(hist), sum(count) OVER (PARTITION BY comm ORDER BY ts) FROM "
           "sched_delay",
           "SELECT comm, count(*) FILTER (WHERE hist_max(hist) > 5) FROM sched_delay GROUP BY "
           "comm",
           "SELECT max(ts, 5), hist_max(hist) FROM sched_delay",
           "SELECT hist_max(X'01'), count(*) FROM sched_delay",
           "SELECT hist_max(NULL), count(*) FROM sched_delay",
           "SELECT 'hist_max(hist) GROUP BY', count(*) FROM sched_delay",
           "SELECT \"hist_max(hist)\" FROM t GROUP BY 1",
           "SELECT comm /* hist_max(hist) */, count(*) FROM sched_delay -- hist_mean(hist)\n"
           "GROUP BY comm",
           "SELECT comm, count(*) FROM sched_delay GROUP BY comm; SELECT hist_max(hist) FROM "
           "sched_delay",
           "SELECT comm, count(*) FROM sched_delay WHERE tid IN (SELECT tid FROM sched_delay "
           "WHERE hist_max(hist) > 5) GROUP BY comm",
           "SELECT hist_max((SELECT hist_merge(hist) FROM sched_delay)), count(*) FROM t",
           "SELECT (", // unbalanced: not our business (SQLite reports it)
           "",
       }) {
    INFO(sql);
    const auto e = check_histogram_aggregation(sql);
    CHECK_FALSE(e.has_value());
  }
}

TEST_CASE("tier_variant_reason: which statements the rollups may answer", "[store][lint][tiers]") {
  using rsched::query::tier_variant_reason;
  // Sums, merges and percentiles over a window, grouped by what rollups keep.
  CHECK_FALSE(tier_variant_reason("SELECT comm, hist_percentile(hist, 99) FROM sched_delay WHERE "
                                  "ts >= 5 GROUP BY comm"));
  CHECK_FALSE(tier_variant_reason("select sum(count) from sched_delay where 10 < ts and ts<=20"));
  CHECK_FALSE(tier_variant_reason("SELECT hist_max(hist_merge(hist)) FROM cpu_idle WHERE d.ts "
                                  "BETWEEN 1 AND 2"));
  CHECK_FALSE(tier_variant_reason("SELECT comm, total(total_ns) FROM \"sched_delay\" -- ts\n "
                                  "WHERE ts != 3 GROUP BY comm"));
  // Anything that sees rows one by one, or cuts time finer than a bucket.
  CHECK(tier_variant_reason("SELECT comm, count(*) FROM sched_delay GROUP BY comm").value() ==
        "count() describes rows, and rollup rows are not raw ones");
  CHECK(tier_variant_reason("SELECT max(count) FROM sched_delay").has_value());
  CHECK(tier_variant_reason("SELECT AVG(total_ns) FROM sched_delay").has_value());
  CHECK(tier_variant_reason("SELECT sum(count) OVER (ORDER BY comm) FROM sched_delay"));
  CHECK(tier_variant_reason("SELECT ts / 60e9, sum(count) FROM sched_delay GROUP BY 1"));
  CHECK(tier_variant_reason("SELECT comm, sum(count) FROM sched_delay GROUP BY comm ORDER BY ts"));
  CHECK(tier_variant_reason("SELECT sum(count) / sum(dur) FROM sched_delay"));
  CHECK(tier_variant_reason("SELECT comm, count FROM sched_delay WHERE ts > 0"));
  // Text that only looks like them is not.
  CHECK_FALSE(tier_variant_reason("SELECT comm, sum(count) FROM sched_delay WHERE comm = 'ts, "
                                  "count(*), dur' GROUP BY comm"));
}

TEST_CASE("tier_variant_reason: measures only summed or merged as they are",
          "[store][lint][tiers]") {
  using rsched::query::tier_variant_reason;
  CHECK_FALSE(tier_variant_reason("SELECT comm, sum(d.count), hist_percentile(d.hist, 99) FROM "
                                  "sched_delay AS d WHERE d.ts >= 1 GROUP BY comm"));
  CHECK_FALSE(tier_variant_reason("SELECT hist_max(hist_merge(hist)), sum(total_ns) / "
                                  "sum(count) FROM sched_delay WHERE ts >= 1"));
  // A condition on a measure, a measure in an expression or a DISTINCT: per row.
  CHECK(tier_variant_reason("SELECT comm, sum(count) FROM sched_delay WHERE count > 10 GROUP BY "
                            "comm")
            .value() ==
        "it uses count other than summed or merged as it is (a rollup row holds many samples)");
  CHECK(tier_variant_reason("SELECT sum(CASE WHEN count > 5 THEN count END) FROM sched_delay"));
  CHECK(tier_variant_reason("SELECT sum(count * 2) FROM sched_delay"));
  CHECK(tier_variant_reason("SELECT sum(DISTINCT count) FROM sched_delay"));
  CHECK(tier_variant_reason("SELECT hist_percentile(hist, 99) FROM sched_delay WHERE "
                            "hist_max(hist) > 1000"));
  CHECK(tier_variant_reason("SELECT sum(some_pct) FROM cpu_pressure"));
  CHECK(tier_variant_reason("SELECT group_concat(comm) FROM sched_delay GROUP BY cgroup"));
  // Sums of anything but a measure count rows.
  CHECK(tier_variant_reason("SELECT comm, sum(1) FROM sched_delay GROUP BY comm").value() ==
        "sum() of something other than a measure column as it is");
  CHECK(tier_variant_reason("SELECT total(length(comm)) FROM sched_delay"));
  CHECK(tier_variant_reason("SELECT hist_percentile(hist_merge(hist), 99) FROM sched_delay"));
  CHECK_FALSE(tier_variant_reason("SELECT hist_percentile(d.hist, 99) FROM sched_delay AS d"));
}
