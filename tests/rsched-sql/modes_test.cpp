// Output modes for people (box, markdown, line, units) and for data (JSON, JSON lines).
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/output.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/hist_functions.hpp"

#include "store_test_util.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace rsched::sql_shell;
using rsched::query::value;
namespace timefmt = rsched::timefmt;

namespace {

value text(std::string s) {
  return value{std::move(s)};
}

std::string json(const value &v) {
  std::string out;
  append_json_value(out, v);
  return out;
}

std::string run(output_mode mode, const std::vector<std::string> &cols,
                const std::vector<std::vector<value>> &rows, bool headers = true,
                std::size_t max_rows = 0) {
  std::ostringstream out;
  output_config cfg;
  cfg.mode = mode;
  cfg.headers = headers;
  cfg.zone = timefmt::zone::utc();
  cfg.max_rows = max_rows;
  printer p(out, cfg);
  p.begin(cols);
  for (const auto &r : rows) {
    p.row(r);
  }
  p.finish();
  return out.str();
}

} // namespace

TEST_CASE("rsched-sql JSON: strings follow RFC 8259 and stay terminal-safe", "[rsched-sql]") {
  CHECK(json(text("plain")) == "\"plain\"");
  CHECK(json(text("evil\"c,o\x1b[2Jm")) == "\"evil\\\"c,o\\u001b[2Jm\"");
  CHECK(json(text("a\\b\n\r\t\b\f")) == "\"a\\\\b\\n\\r\\t\\b\\f\"");
  CHECK(json(text(std::string("nul\0x", 5))) == "\"nul\\u0000x\"");
  CHECK(json(text("del\x7f")) == "\"del\\u007f\"");
  CHECK(json(text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80")) ==
        "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""); // valid UTF-8 passes through
  CHECK(json(text("csi\xc2\x9b")) == "\"csi\\u009b\"");   // C1 control escaped
  // Bytes that are not UTF-8: U+FFFD each (never a raw byte, never a lone surrogate \udcXX that
  // strict parsers refuse); json_object adds the exact bytes as "<column>_hex".
  const std::string r = "\xef\xbf\xbd";
  CHECK(json(text("bad\xff\xfe")) == "\"bad" + r + r + "\"");
  CHECK(json(text("trunc\xc3")) == "\"trunc" + r + "\"");
  CHECK(json(text("\xed\xa0\x80")) == "\"" + r + r + r + "\""); // an encoded surrogate
  CHECK(json(text("\xc0\xaf")) == "\"" + r + r + "\"");         // overlong '/'
}

TEST_CASE("rsched-sql JSON: a text that is not UTF-8 has its exact bytes in <column>_hex",
          "[rsched-sql]") {
  const std::string r = "\xef\xbf\xbd";
  CHECK(json_object({"comm", "n"}, {text("a\xff"), value{std::int64_t{1}}}) ==
        "{\"comm\":\"a" + r + "\",\"comm_hex\":\"61ff\",\"n\":1}");
  // Valid UTF-8 (U+FFFD itself included): no _hex member.
  CHECK(json_object({"comm"}, {text("a" + r)}) == "{\"comm\":\"a" + r + "\"}");
  // The name is taken by a column (or by another _hex member of the row): "_hex" again.
  CHECK(json_object({"c", "c_hex", "d"}, {text("\xff"), text("\xfe"), text("ok")}) ==
        "{\"c\":\"" + r + "\",\"c_hex_hex\":\"ff\",\"c_hex\":\"" + r +
            "\",\"c_hex_hex_hex\":\"fe\",\"d\":\"ok\"}");
  CHECK(run(output_mode::jsonl, {"s"}, {{text("\x80")}, {text("x")}}) ==
        "{\"s\":\"" + r + "\",\"s_hex\":\"80\"}\n{\"s\":\"x\"}\n");
}

TEST_CASE("rsched-sql JSON: values", "[rsched-sql]") {
  CHECK(json(value{}) == "null");
  CHECK(json(value{std::int64_t{-9}}) == "-9");
  CHECK(json(value{std::int64_t{1'700'000'000'000'000'000}}) == "1700000000000000000");
  CHECK(json(value{0.5}) == "0.5");
  CHECK(json(value{std::numeric_limits<double>::infinity()}) == "null");
  CHECK(json(value{std::vector<std::uint8_t>{0x00, 0xab}}) == "\"00ab\"");
  CHECK(json_object({"a", "b\""}, {value{std::int64_t{1}}, text("x")}) ==
        "{\"a\":1,\"b\\\"\":\"x\"}");
}

TEST_CASE("rsched-sql JSON modes: arrays per statement, lines per row", "[rsched-sql]") {
  const std::vector<std::vector<value>> rows = {{value{std::int64_t{1}}, text("a")},
                                                {value{}, text("b\x1b")}};
  CHECK(run(output_mode::json, {"n", "s"}, rows) ==
        "[{\"n\":1,\"s\":\"a\"},\n{\"n\":null,\"s\":\"b\\u001b\"}]\n");
  CHECK(run(output_mode::json, {"n"}, {}) == "[]\n");
  CHECK(run(output_mode::jsonl, {"n", "s"}, rows) ==
        "{\"n\":1,\"s\":\"a\"}\n{\"n\":null,\"s\":\"b\\u001b\"}\n");
  // Raw ns in data modes, whatever the column name.
  CHECK(run(output_mode::json, {"p99_ns", "ts"},
            {{value{std::int64_t{4'100'000}}, value{std::int64_t{1'700'000'000'000'000'000}}}}) ==
        "[{\"p99_ns\":4100000,\"ts\":1700000000000000000}]\n");
}

TEST_CASE("rsched-sql units: durations with three significant digits", "[rsched-sql]") {
  CHECK(format_duration_ns(0) == "0 ns");
  CHECK(format_duration_ns(950) == "950 ns");
  CHECK(format_duration_ns(12.5) == "12.5 ns");
  CHECK(format_duration_ns(999.4) == "999 ns");
  CHECK(format_duration_ns(999.6) == "1.00 \xc2\xb5s");
  CHECK(format_duration_ns(1'500) == "1.50 \xc2\xb5s");
  CHECK(format_duration_ns(4'100'000) == "4.10 ms");
  CHECK(format_duration_ns(45'670'000) == "45.7 ms");
  CHECK(format_duration_ns(999'999'999) == "1.00 s");
  CHECK(format_duration_ns(12'345'000'000) == "12.3 s");
  CHECK(format_duration_ns(250e9) == "250 s");
  CHECK(format_duration_ns(7200e9) == "7200 s");
  CHECK(format_duration_ns(-2'000'000) == "-2.00 ms");
}

TEST_CASE("rsched-sql units: columns by name", "[rsched-sql]") {
  CHECK(classify_column("ts") == column_kind::time);
  CHECK(classify_column("PEAK_TS") == column_kind::time);
  CHECK(classify_column("start_ns") == column_kind::time);
  CHECK(classify_column("end_ns") == column_kind::time);
  // issue 17: tiers.built_ns printed as "1795468800 s"
  for (const char *instant :
       {"built_ns", "cutoff_ns", "last_ns", "created_ns", "first_ns", "spike_ts"}) {
    INFO(instant);
    CHECK(classify_column(instant) == column_kind::time);
  }
  CHECK(classify_column("dur") == column_kind::duration);
  CHECK(classify_column("dur_ns") == column_kind::duration);
  CHECK(classify_column("d_p99_ns") == column_kind::duration); // a difference: no bucket
  CHECK(classify_column("p99_err_ns") == column_kind::duration);
  CHECK(classify_column("pp99_ns") == column_kind::duration);
  CHECK(classify_column("p_ns") == column_kind::duration);
  CHECK(classify_column("p99__9_ns") == column_kind::duration);
  for (const char *pct :
       {"p99_ns", "P50_NS", "p999_ns", "p99_9_ns", "a_p50_ns", "b_p99_ns", "peak_ns"}) {
    INFO(pct);
    CHECK(classify_column(pct) == column_kind::percentile);
  }
  CHECK(classify_column("p99") == column_kind::plain); // no unit: a depth or a count
  CHECK(classify_column("dur_ns") == column_kind::duration);
  CHECK(classify_column("_ns") == column_kind::plain);
  CHECK(classify_column("count") == column_kind::plain);
  CHECK(classify_column("tsx") == column_kind::plain);
  const auto utc = timefmt::zone::utc();
  CHECK(human_cell(value{std::int64_t{1'700'000'000'000'000'000}}, column_kind::time, utc).text ==
        "2023-11-14 22:13:20+00:00");
  CHECK(human_cell(value{std::int64_t{5}}, column_kind::time, utc).text == "5"); // not UTC ns
  CHECK(human_cell(value{std::int64_t{4'100'000}}, column_kind::duration, utc).text == "4.10 ms");
  CHECK(human_cell(value{2500.0}, column_kind::duration, utc).text == "2.50 \xc2\xb5s");
  CHECK(human_cell(text("x"), column_kind::duration, utc).text == "x");
  CHECK(human_cell(value{}, column_kind::time, utc).text == "NULL");
}

namespace {
// "lo–hi unit" as format_percentile_ns writes it (an en dash between the ends).
std::string range(const std::string &lo, const std::string &hi) {
  return lo + "\xe2\x80\x93" + hi;
}
} // namespace

// issue 17: a p99 printed as "15.0 ms" whose bucket error is ±8 ms.
TEST_CASE("rsched-sql units: percentiles show the bucket that holds them", "[rsched-sql]") {
  CHECK(format_percentile_ns(15'000'000) == range("8.19", "16.4 ms"));
  CHECK(format_percentile_ns(8'192'000) == range("8.19", "16.4 ms"));
  CHECK(format_percentile_ns(16'383'999) == range("8.19", "16.4 ms"));
  CHECK(format_percentile_ns(16'384'000) == range("16.4", "32.8 ms"));
  CHECK(format_percentile_ns(123'456) == range("120", "130 \xc2\xb5s")); // 10 µs linear
  CHECK(format_percentile_ns(5'000.5) == range("0", "10 \xc2\xb5s"));
  CHECK(format_percentile_ns(505'000) == range("500", "512 \xc2\xb5s"));
  CHECK(format_percentile_ns(600'000) == range("0.51", "1.02 ms"));
  CHECK(format_percentile_ns(3e9) == range("2.10", "4.19 s"));
  // The open-ended top bucket: at least its lower bound.
  CHECK(format_percentile_ns(4'294'967'296'000.0) == "\xe2\x89\xa5 4295 s");
  CHECK(format_percentile_ns(1e19) == "\xe2\x89\xa5 4295 s");
  CHECK(format_percentile_ns(2e19) == format_duration_ns(2e19)); // past 2^64: no bucket
  CHECK(format_percentile_ns(-5) == "-5 ns");
  // Each value a percentile can take is inside the bucket shown.
  for (std::uint64_t slot = 0; slot + 1 < rsched::stats::slot_count(rsched::stats::layout::latency);
       ++slot) {
    const auto b = rsched::stats::bucket_bounds(rsched::stats::layout::latency, slot);
    CHECK(format_percentile_ns(static_cast<double>(b.lo)) ==
          format_percentile_ns(static_cast<double>(b.hi)));
    CHECK(format_percentile_ns(static_cast<double>(b.hi)) !=
          format_percentile_ns(static_cast<double>(b.hi) + 1));
  }
  const auto utc = timefmt::zone::utc();
  CHECK(human_cell(value{std::int64_t{15'000'000}}, column_kind::percentile, utc).text ==
        range("8.19", "16.4 ms"));
  CHECK(human_cell(value{15e6}, column_kind::percentile, utc).text == range("8.19", "16.4 ms"));
  CHECK(human_cell(value{}, column_kind::percentile, utc).text == "NULL");
  // Data modes keep the value.
  CHECK(run(output_mode::csv, {"p99_ns"}, {{value{std::int64_t{15'000'000}}}}) ==
        "p99_ns\r\n15000000\r\n");
}

// issue 36: a value answered at layout 5's precision is printed as its layout 5 bucket, and only
// a statement whose every percentile was answered at it is; the layout 1 bucket otherwise.
TEST_CASE("rsched-sql units: a statement of fine percentiles prints fine buckets", "[rsched-sql]") {
  using namespace rsched::stats;
  // the fine bucket [5.632, 6.144) ms inside layout 1's [4.096, 8.192) ms
  CHECK(format_percentile_ns(5'900'000, true) == range("5.63", "6.14 ms"));
  CHECK(format_percentile_ns(5'900'000) == range("4.10", "8.19 ms"));
  CHECK(format_percentile_ns(123'456, true) == range("120", "130 \xc2\xb5s")); // shared below
  CHECK(format_percentile_ns(4'294'967'296'000.0, true) == "\xe2\x89\xa5 4295 s");
  for (std::size_t slot = 0; slot + 1 < fine_slots; ++slot) {
    const auto b = bucket_bounds(layout::latency_fine, slot);
    CHECK(format_percentile_ns(static_cast<double>(b.lo), true) ==
          format_percentile_ns(static_cast<double>(b.hi), true));
    CHECK(format_percentile_ns(static_cast<double>(b.hi), true) !=
          format_percentile_ns(static_cast<double>(b.hi) + 1, true));
  }

  auto opened = rsched::query::reader::open(":memory:", false);
  REQUIRE(opened.ok());
  auto &db = *opened;
  fine_histogram fine;
  histogram coarse{layout::latency, {}};
  for (int i = 0; i < 100; ++i) {
    fine.add(5'700'000 + 2'000 * static_cast<std::uint64_t>(i)); // 5.70 .. 5.90 ms
    coarse.add(5'700'000 + 2'000 * static_cast<std::uint64_t>(i));
  }
  const std::string f = "X'" + store_test::hex(encode(fine)) + "'";
  const std::string c = store_test::blob_literal(coarse);
  const auto show = [&](const std::string &sql) {
    std::ostringstream out;
    output_config cfg;
    cfg.zone = rsched::timefmt::zone::utc();
    printer p(out, cfg);
    const auto r = db.exec(sql, p.sink());
    INFO(sql << ": " << (r.ok() ? std::string() : r.err().msg));
    REQUIRE(r.ok());
    p.finish();
    return out.str();
  };
  const std::string fine_cell = range("5.63", "6.14 ms");
  const std::string coarse_cell = range("4.10", "8.19 ms");
  // the aggregate over fine rows only, and the scalar on a fine blob: fine
  std::string s =
      show("SELECT hist_percentile(column1, 99) AS p99_ns FROM (VALUES (" + f + "), (" + f + "))");
  INFO(s);
  CHECK(s.find(fine_cell) != std::string::npos);
  s = show("SELECT hist_pct(" + f + ", 99) AS p99_ns");
  CHECK(s.find(fine_cell) != std::string::npos);
  // a window across the upgrade: layout 1's answer and bucket
  s = show("SELECT hist_percentile(column1, 99) AS p99_ns FROM (VALUES (" + f + "), (" + c + "))");
  CHECK(s.find(coarse_cell) != std::string::npos);
  // one coarse answer anywhere in the statement: every percentile column in layout 1's buckets
  s = show("SELECT hist_pct(" + f + ", 99) AS p99_ns, hist_pct(" + c + ", 99) AS p50_ns");
  CHECK(s.find(fine_cell) == std::string::npos);
  CHECK(s.find(coarse_cell) != std::string::npos);
  // a number no histogram answered: layout 1's bucket, as before
  s = show("SELECT 5900000 AS p99_ns");
  CHECK(s.find(coarse_cell) != std::string::npos);
  // statement by statement: the coarse one does not spill into the next
  s = show("SELECT hist_pct(" + c + ", 99) AS p99_ns; SELECT hist_pct(" + f + ", 99) AS p99_ns");
  CHECK(s.find(coarse_cell) != std::string::npos);
  CHECK(s.find(fine_cell) != std::string::npos);
  CHECK(s.find(coarse_cell) < s.find(fine_cell));
  // the tally is this statement's (the last, fine)
  CHECK(rsched::store::answered_precision().all_fine());
}

// issue 32: blame()'s share_pct printed as 97.58212931224679 in a table.
TEST_CASE("rsched-sql units: percentages with one decimal for people, whole in data modes",
          "[rsched-sql]") {
  const std::vector<std::string> cols{"by_comm", "share_pct", "coverage_pct", "pct"};
  const std::vector<std::vector<value>> rows{
      {text("hog"), value{97.58212931224679}, value{100.0}, value{2.345}},
      {text("web"), value{2.41787068775321}, value{}, value{std::int64_t{7}}}};
  const std::string table = run(output_mode::table, cols, rows);
  INFO(table);
  CHECK(table.find("97.6 ") != std::string::npos);
  CHECK(table.find("2.4 ") != std::string::npos);
  CHECK(table.find("100.0 ") != std::string::npos);
  CHECK(table.find("97.58") == std::string::npos);
  CHECK(table.find("2.345") != std::string::npos); // "pct" alone: not known as a percentage
  CHECK(table.find("NULL") != std::string::npos);
  const std::string line = run(output_mode::line, cols, rows);
  CHECK(line.find("share_pct = 97.6\n") != std::string::npos);
  // Data modes keep the value as computed.
  CHECK(run(output_mode::csv, {"share_pct"}, {{value{97.58212931224679}}}) ==
        "share_pct\r\n97.58212931224679\r\n");
  CHECK(run(output_mode::jsonl, {"share_pct"}, {{value{97.58212931224679}}}) ==
        "{\"share_pct\":97.58212931224679}\n");
}

TEST_CASE("rsched-sql human modes: table with units and times", "[rsched-sql]") {
  const std::string s =
      run(output_mode::table, {"ts", "p99_ns", "max_ns", "n"},
          {{value{std::int64_t{1'700'000'000'000'000'000}}, value{std::int64_t{4'100'000}},
            value{std::int64_t{4'100'000}}, value{std::int64_t{3}}}});
  const std::string rule = "+---------------------------+--------------+---------+---+\n";
  CHECK(s == rule + "| ts                        | p99_ns       | max_ns  | n |\n" + rule +
                 range("| 2023-11-14 22:13:20+00:00 | 4.10", "8.19 ms | 4.10 ms | 3 |\n") + rule);
}

TEST_CASE("rsched-sql human modes: box", "[rsched-sql]") {
  CHECK(run(output_mode::box, {"a", "b"}, {{value{std::int64_t{1}}, text("x")}}) ==
        "\xe2\x94\x8c\xe2\x94\x80\xe2\x94\x80\xe2\x94\x80\xe2\x94\xac\xe2\x94\x80\xe2\x94\x80\xe2"
        "\x94\x80\xe2\x94\x90\n"
        "\xe2\x94\x82 a \xe2\x94\x82 b \xe2\x94\x82\n"
        "\xe2\x94\x9c\xe2\x94\x80\xe2\x94\x80\xe2\x94\x80\xe2\x94\xbc\xe2\x94\x80\xe2\x94\x80\xe2"
        "\x94\x80\xe2\x94\xa4\n"
        "\xe2\x94\x82 1 \xe2\x94\x82 x \xe2\x94\x82\n"
        "\xe2\x94\x94\xe2\x94\x80\xe2\x94\x80\xe2\x94\x80\xe2\x94\xb4\xe2\x94\x80\xe2\x94\x80\xe2"
        "\x94\x80\xe2\x94\x98\n");
  CHECK(run(output_mode::box, {"a"}, {}).find("\xe2\x94\x94") != std::string::npos); // closed
}

TEST_CASE("rsched-sql human modes: markdown escapes pipes and control bytes", "[rsched-sql]") {
  CHECK(run(output_mode::markdown, {"comm", "n|x"},
            {{text("a|b\x1b[2J"), value{std::int64_t{2}}}}) == "| comm | n\\|x |\n"
                                                               "|---|---:|\n"
                                                               "| a\\|b\\x1b[2J | 2 |\n");
}

TEST_CASE("rsched-sql human modes: line", "[rsched-sql]") {
  CHECK(run(output_mode::line, {"comm", "p99_ns"},
            {{text("a\x1b"), value{std::int64_t{1'500}}}, {text("b"), value{}}}) ==
        "  comm = a\\x1b\n"
        "p99_ns = 0\xe2\x80\x93"
        "10 \xc2\xb5s\n"
        "\n"
        "  comm = b\n"
        "p99_ns = NULL\n");
}

TEST_CASE("rsched-sql human modes: long results are truncated when asked", "[rsched-sql]") {
  std::vector<std::vector<value>> rows;
  for (int i = 0; i < 5; ++i) {
    rows.push_back({value{std::int64_t{i}}});
  }
  const std::string s = run(output_mode::table, {"n"}, rows, true, 2);
  CHECK(s == "+---+\n| n |\n+---+\n| 0 |\n| 1 |\n+---+\n"
             "... 3 more rows (use .output FILE or --csv for all)\n");
  CHECK(run(output_mode::csv, {"n"}, rows, true, 2) == "n\r\n0\r\n1\r\n2\r\n3\r\n4\r\n");
}

TEST_CASE("rsched-sql printer: counts results without rows", "[rsched-sql]") {
  std::ostringstream out;
  printer p(out, output_config{});
  p.begin({"a"});
  p.begin({"b"});
  p.row({value{std::int64_t{1}}});
  p.finish();
  CHECK(p.empty_results() == 1);
  p.reset_counts();
  CHECK(p.empty_results() == 0);
}
