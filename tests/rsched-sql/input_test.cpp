#include "rsched/sql_shell/input.hpp"

#include <catch2/catch.hpp>

using namespace rsched::sql_shell;

TEST_CASE("rsched-sql: statement buffer accumulates lines until sqlite3_complete", "[rsched-sql]") {
  statement_buffer b;
  CHECK(b.empty());
  CHECK_FALSE(b.add_line("SELECT 1", 3));
  CHECK_FALSE(b.empty());
  CHECK(b.first_line() == 3);
  CHECK_FALSE(b.add_line("  + 2", 4));
  CHECK(b.add_line(";", 5));
  CHECK(b.take() == "SELECT 1\n  + 2\n;");
  CHECK(b.empty());
  CHECK(b.text().empty());
}

TEST_CASE("rsched-sql: statement buffer - a semicolon inside a literal or comment does not end it",
          "[rsched-sql]") {
  statement_buffer b;
  CHECK_FALSE(b.add_line("SELECT 'a;"));
  CHECK_FALSE(b.add_line("b' -- c;"));
  CHECK(b.add_line(";"));
  CHECK(b.take() == "SELECT 'a;\nb' -- c;\n;");
}

TEST_CASE("rsched-sql: statement buffer with an injected completeness test", "[rsched-sql]") {
  statement_buffer b([](std::string_view s) { return s.find('!') != std::string_view::npos; });
  CHECK_FALSE(b.add_line("x"));
  CHECK(b.add_line("y!"));
  CHECK(b.text() == "x\ny!");
  b.clear();
  CHECK(b.empty());
  CHECK_FALSE(b.add_line("   ")); // blank input is never a statement
}

TEST_CASE("rsched-sql: blank SQL is whitespace and closed comments", "[rsched-sql]") {
  CHECK(is_blank_sql(""));
  CHECK(is_blank_sql(" \t\r\n"));
  CHECK(is_blank_sql("-- just a comment"));
  CHECK(is_blank_sql("/* a */ -- b\n  /* c */"));
  CHECK_FALSE(is_blank_sql("/* unterminated"));
  CHECK_FALSE(is_blank_sql("-- c\nSELECT 1"));
  CHECK_FALSE(is_blank_sql("- 1"));
  CHECK(is_blank(" \t"));
  CHECK_FALSE(is_blank("-- c"));
}

TEST_CASE("rsched-sql: dot command recognition and splitting", "[rsched-sql]") {
  CHECK(is_dot_command(".tables"));
  CHECK(is_dot_command("   .mode csv"));
  CHECK_FALSE(is_dot_command("SELECT .5;"));
  CHECK_FALSE(is_dot_command(""));
  auto d = parse_dot_command("  .schema  'sched%' \"a b\" plain  'open");
  CHECK(d.name == ".schema");
  REQUIRE(d.args.size() == 4);
  CHECK(d.args[0] == "sched%");
  CHECK(d.args[1] == "a b");
  CHECK(d.args[2] == "plain");
  CHECK(d.args[3] == "open");
  CHECK(parse_dot_command(".quit").args.empty());
}

TEST_CASE("rsched-sql: SQL string literals", "[rsched-sql]") {
  CHECK(sql_quote("abc") == "'abc'");
  CHECK(sql_quote("it's") == "'it''s'");
  CHECK(sql_quote("") == "''");
}
