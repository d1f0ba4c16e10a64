#include "rsched/sql_shell/output.hpp"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <limits>
#include <sstream>

using namespace rsched::sql_shell;
using rsched::query::value;

namespace {

std::string field(const value &v, bool escape = false) {
  std::string out;
  append_csv_field(out, v, escape);
  return out;
}

value text(std::string s) {
  return value{std::move(s)};
}

bool has_control_byte(const std::string &s) {
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\n') || c == 0x7F) {
      return true;
    }
  }
  return false;
}

} // namespace

TEST_CASE("rsched-sql CSV: fields follow RFC 4180", "[rsched-sql]") {
  CHECK(field(text("plain")) == "plain");
  CHECK(field(text("a,b")) == "\"a,b\"");
  CHECK(field(text("say \"hi\"")) == "\"say \"\"hi\"\"\"");
  CHECK(field(text("\"")) == "\"\"\"\"");
  CHECK(field(text("line1\nline2")) == "\"line1\nline2\"");
  CHECK(field(text("cr\rhere")) == "\"cr\rhere\"");
  CHECK(field(text("crlf\r\n")) == "\"crlf\r\n\"");
  CHECK(field(text(" padded ")) == " padded "); // spaces are data, no quoting needed
}

TEST_CASE("rsched-sql CSV: NULL differs from the empty string", "[rsched-sql]") {
  CHECK(field(value{}).empty());
  CHECK(field(text("")) == "\"\"");
}

TEST_CASE("rsched-sql CSV: text bytes are written unchanged", "[rsched-sql]") {
  const std::string raw = std::string("\xff\xfe\x80 \x1b[2J\x07\\ \xc3\xa9") + '\0' + "z";
  CHECK(field(text(raw)) == raw);
  const std::string evil = "evil\"c,o\x1b[2Jm";
  CHECK(field(text(evil)) == "\"evil\"\"c,o\x1b[2Jm\"");
}

TEST_CASE("rsched-sql CSV: text is escaped for a terminal when asked", "[rsched-sql]") {
  CHECK(field(text("a\x1b[2Jb"), true) == "a\\x1b[2Jb");
  CHECK(field(text("x,\xff"), true) == "\"x,\\xff\"");
  CHECK(field(text("nl\n"), true) == "nl\\x0a");
}

TEST_CASE("rsched-sql CSV: numbers and blobs", "[rsched-sql]") {
  CHECK(field(value{std::int64_t{0}}) == "0");
  CHECK(field(value{std::int64_t{-42}}) == "-42");
  CHECK(field(value{std::numeric_limits<std::int64_t>::min()}) == "-9223372036854775808");
  CHECK(field(value{std::numeric_limits<std::int64_t>::max()}) == "9223372036854775807");
  CHECK(field(value{2.0}) == "2.0");
  CHECK(field(value{0.1}) == "0.1");
  CHECK(field(value{-1.5e-7}) == "-1.5e-07");
  CHECK(field(value{1e20}) == "1e+20");
  CHECK(field(value{std::vector<std::uint8_t>{0x00, 0xab, 0xff}}) == "x'00abff'");
  CHECK(field(value{std::vector<std::uint8_t>{}}) == "x''");
}

TEST_CASE("rsched-sql CSV: reals round-trip", "[rsched-sql]") {
  for (const double d : {0.1, 1.0 / 3.0, 2.0 / 3.0, 1e-300, 123456789.123456789, 5e-324,
                         std::numeric_limits<double>::max(), -0.0, 1.2345678901234567}) {
    const std::string s = format_real(d);
    CHECK(std::strtod(s.c_str(), nullptr) == d);
  }
  CHECK(format_real(std::numeric_limits<double>::infinity()) == "Inf");
  CHECK(format_real(-std::numeric_limits<double>::infinity()) == "-Inf");
}

TEST_CASE("rsched-sql CSV: records and headers end with CRLF", "[rsched-sql]") {
  CHECK(csv_record({text("a"), value{}, value{std::int64_t{3}}, text("")}, false) ==
        "a,,3,\"\"\r\n");
  CHECK(csv_header({"comm", "p99,ns"}, false) == "comm,\"p99,ns\"\r\n");
  CHECK(csv_header({"\x1b]0;title\x07"}, true) == "\\x1b]0;title\\x07\r\n");
}

TEST_CASE("rsched-sql table: cells", "[rsched-sql]") {
  CHECK(table_cell(value{}).text == "NULL");
  CHECK_FALSE(table_cell(value{}).right);
  CHECK(table_cell(value{std::int64_t{12}}).text == "12");
  CHECK(table_cell(value{std::int64_t{12}}).right);
  CHECK(table_cell(value{0.5}).right);
  CHECK(table_cell(value{std::vector<std::uint8_t>{1, 2, 3}}).text == "<blob 3 bytes>");
  const auto c = table_cell(text("evil\"c,o\x1b[2Jm"));
  CHECK(c.text == "evil\"c,o\\x1b[2Jm");
  CHECK_FALSE(c.right);
}

TEST_CASE("rsched-sql table: aligned with numbers right-aligned", "[rsched-sql]") {
  std::ostringstream out;
  render_table(
      out, {"comm", "n"},
      {{cell{"a", false}, cell{"1", true}}, {cell{"caf\xc3\xa9", false}, cell{"1234", true}}},
      true);
  CHECK(out.str() == "+------+------+\n"
                     "| comm | n    |\n"
                     "+------+------+\n"
                     "| a    |    1 |\n"
                     "| café | 1234 |\n"
                     "+------+------+\n");
}

TEST_CASE("rsched-sql table: without rows or without header", "[rsched-sql]") {
  std::ostringstream empty;
  render_table(empty, {"a"}, {}, true);
  CHECK(empty.str() == "+---+\n| a |\n+---+\n");
  std::ostringstream noheader;
  render_table(noheader, {"long name"}, {{cell{"x", false}}}, false);
  CHECK(noheader.str() == "+---+\n| x |\n+---+\n");
  std::ostringstream nothing;
  render_table(nothing, {"a"}, {}, false);
  CHECK(nothing.str().empty());
}

TEST_CASE("rsched-sql table: never carries raw control bytes", "[rsched-sql]") {
  std::ostringstream out;
  printer p(out, output_config{});
  p.begin({"\x1b[31mred", "comm"});
  p.row({text("\x1b[2J\x1b]0;pwned\x07"), text("ok\r\n\x9b\xc2\x9b\x7f")});
  p.row({value{}, value{std::int64_t{1}}});
  p.finish();
  const std::string s = out.str();
  CHECK_FALSE(has_control_byte(s));
  CHECK(s.find("\\x1b[31mred") != std::string::npos);
  CHECK(s.find("\\x1b[2J\\x1b]0;pwned\\x07") != std::string::npos);
  CHECK(s.find("ok\\x0d\\x0a\\x9b\\xc2\\x9b\\x7f") != std::string::npos);
}

TEST_CASE("rsched-sql printer: CSV streams rows with a header per statement", "[rsched-sql]") {
  std::ostringstream out;
  output_config cfg;
  cfg.mode = output_mode::csv;
  printer p(out, cfg);
  auto sink = p.sink();
  sink.on_columns({"a", "b"});
  sink.on_row({value{std::int64_t{1}}, text("x\x1b")});
  CHECK(out.str() == "a,b\r\n1,x\x1b\r\n"); // written before the statement ends
  sink.on_columns({"c"});
  p.finish();
  CHECK(out.str() == "a,b\r\n1,x\x1b\r\nc\r\n");
  p.config().headers = false;
  sink.on_columns({"d"});
  sink.on_row({value{}});
  CHECK(out.str() == "a,b\r\n1,x\x1b\r\nc\r\n\r\n");
}

TEST_CASE("rsched-sql printer: tables are drawn per statement", "[rsched-sql]") {
  std::ostringstream out;
  printer p(out, output_config{});
  auto sink = p.sink();
  sink.on_columns({"a"});
  sink.on_row({value{std::int64_t{1}}});
  CHECK(out.str().empty()); // buffered for the column widths
  sink.on_columns({"b"});
  CHECK(out.str() == "+---+\n| a |\n+---+\n| 1 |\n+---+\n");
  sink.on_row({text("xy")});
  p.finish();
  CHECK(out.str() == "+---+\n| a |\n+---+\n| 1 |\n+---+\n+----+\n| b  |\n+----+\n| xy |\n+----+\n");
}
