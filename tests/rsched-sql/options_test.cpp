#include "rsched/sql_shell/options.hpp"
#include "rsched/store/records.hpp"

#include <catch2/catch.hpp>

#include <string_view>
#include <vector>

using namespace rsched::sql_shell;

namespace {

rsched::result<options> parse(std::vector<std::string_view> args) {
  return parse_args(std::span<const std::string_view>(args));
}

} // namespace

TEST_CASE("rsched-sql options: no arguments means the default database in table mode",
          "[rsched-sql]") {
  auto o = parse({});
  REQUIRE(o.ok());
  CHECK(o->db_path == rsched::store::default_db_path);
  CHECK(o->commands.empty());
  CHECK(o->mode == output_mode::table);
  CHECK_FALSE(o->help);
  CHECK_FALSE(o->version);
}

TEST_CASE("rsched-sql options: DB and repeated -c in order and --csv in any order",
          "[rsched-sql]") {
  auto o = parse({"-c", "SELECT 1;", "x.db", "--csv", "-c", "-- comment\nSELECT 2", "-c", "--csv"});
  REQUIRE(o.ok());
  CHECK(o->db_path == "x.db");
  CHECK(o->mode == output_mode::csv);
  REQUIRE(o->commands.size() == 3);
  CHECK(o->commands[0] == "SELECT 1;");
  CHECK(o->commands[1] == "-- comment\nSELECT 2"); // -c takes the next argument as is
  CHECK(o->commands[2] == "--csv");
}

TEST_CASE("rsched-sql options: a '--' argument ends the options", "[rsched-sql]") {
  auto o = parse({"--", "-odd.db"});
  REQUIRE(o.ok());
  CHECK(o->db_path == "-odd.db");
  CHECK(o->mode == output_mode::table);
}

TEST_CASE("rsched-sql options: help and version", "[rsched-sql]") {
  CHECK(parse({"-h"})->help);
  CHECK(parse({"--help"})->help);
  CHECK(parse({"--version"})->version);
  CHECK(program_version == "0.1.0");
  const auto u = usage_text();
  CHECK(u.find("Usage: rsched-sql [DB] [-c SQL]... [--csv|--json|--jsonl] [-o FILE] [--bail]") ==
        0);
  CHECK(u.find(rsched::store::default_db_path) != std::string::npos);
  CHECK(u.back() == '\n');
}

TEST_CASE("rsched-sql options: bad usage is an error", "[rsched-sql]") {
  SECTION("unknown long option") {
    auto o = parse({"--bogus"});
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg == "unknown option '--bogus'");
  }
  SECTION("unknown short option") {
    CHECK_FALSE(parse({"-x", "a.db"}).ok());
  }
  SECTION("sqlite3's -csv is not -c sv") {
    auto o = parse({"-csv"});
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg == "unknown option '-csv'");
  }
  SECTION("-c without its SQL") {
    auto o = parse({"a.db", "-c"});
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg == "option '-c' needs an SQL argument");
  }
  SECTION("two databases") {
    auto o = parse({"a.db", "b.db"});
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg.find("too many arguments") == 0);
  }
  SECTION("empty database path") {
    CHECK_FALSE(parse({""}).ok());
  }
  SECTION("the message quotes the argument as given (main escapes it)") {
    auto o = parse({"--\x1b[31m"});
    REQUIRE_FALSE(o.ok());
    CHECK(o.err().msg == "unknown option '--\x1b[31m'");
  }
}

TEST_CASE("rsched-sql options: the argc/argv overload skips the program name", "[rsched-sql]") {
  const char *argv[] = {"rsched-sql", "db.sqlite", "--csv", nullptr};
  auto o = parse_args(3, argv);
  REQUIRE(o.ok());
  CHECK(o->db_path == "db.sqlite");
  CHECK(o->mode == output_mode::csv);
}

TEST_CASE("rsched-sql options: history file location", "[rsched-sql]") {
  CHECK(history_path(nullptr, "/home/u") == "/home/u/.rsched_sql_history");
  CHECK(history_path(nullptr, "/") == "/.rsched_sql_history");
  CHECK(history_path("/tmp/h", "/home/u") == "/tmp/h");
  CHECK_FALSE(history_path("", "/home/u").has_value()); // set but empty: no history
  CHECK_FALSE(history_path(nullptr, nullptr).has_value());
  CHECK_FALSE(history_path(nullptr, "").has_value());
}
