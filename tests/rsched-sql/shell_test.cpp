#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/shell.hpp"

#include "helpers.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace rsched::sql_shell;
using rsched_sql_test::evil_comm;
using fixture = rsched_sql_test::shell_fixture;

TEST_CASE("rsched-sql shell: SQL into a table with hostile text escaped", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_sql("SELECT comm, count FROM sched_delay ORDER BY comm") == shell::status::ok);
  const std::string s = f.out.str();
  CHECK(s.find('\x1b') == std::string::npos);
  CHECK(s.find("| evil\"c,o\\x1b[2Jm |   100 |") != std::string::npos);
  CHECK(s.find("| plain            |     1 |") != std::string::npos);
  CHECK(f.err.str().empty());
}

TEST_CASE("rsched-sql shell: a failed statement is one error line", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_sql("SELECT * FROM no_such_table;") == shell::status::failed);
  const std::string e = f.err.str();
  CHECK(e.rfind("rsched-sql: ", 0) == 0);
  CHECK(e.find("no_such_table") != std::string::npos);
  CHECK(e.find('\n') == e.size() - 1);
}

TEST_CASE("rsched-sql shell: a statement that fails while running prints no header or empty "
          "table, in any mode",
          "[rsched-sql]") {
  for (const char *mode : {"table", "box", "markdown", "line", "csv", "json", "jsonl"}) {
    fixture f;
    INFO(mode);
    REQUIRE(f.sh.run_dot(std::string(".mode ") + mode) == shell::status::ok);
    // The columns are known at prepare time; the error comes from the first step.
    CHECK(f.sh.run_sql("SELECT t('not a time') AS at, 1 AS n;") == shell::status::failed);
    CHECK(f.out.str().empty());
    CHECK(f.err.str().find("not a time") != std::string::npos);
    // An empty result that succeeds still shows its header (CSV) or empty table (human modes).
    CHECK(f.sh.run_sql("SELECT 1 AS n WHERE 0;") == shell::status::ok);
    if (std::string(mode) == "csv") {
      CHECK(f.out.str() == "n\r\n");
    }
  }
}

TEST_CASE("rsched-sql shell: error messages are escaped", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_sql("SELECT * FROM \"\x1b[2J\";") == shell::status::failed);
  CHECK(f.err.str().find('\x1b') == std::string::npos);
}

TEST_CASE("rsched-sql shell: the database is read-only", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_sql("DELETE FROM thread;") == shell::status::failed);
  CHECK(f.sh.run_sql("SELECT count(*) AS n FROM thread") == shell::status::ok);
  CHECK(f.out.str().find("| 2 |") != std::string::npos);
}

TEST_CASE("rsched-sql shell: dot commands", "[rsched-sql]") {
  fixture f;
  SECTION(".tables lists tables and views") {
    CHECK(f.sh.run_dot(".tables") == shell::status::ok);
    const std::string s = f.out.str();
    for (const char *name : {"sched_delay\n", "cpu_sched_delay\n", "runq_depth\n", "intervals\n",
                             "thread\n", "thread_hist\n"}) {
      CHECK(s.find(name) != std::string::npos);
    }
    CHECK(s.find("sqlite_") == std::string::npos);
  }
  SECTION(".help names every view of the database, rollups once") {
    CHECK(f.sh.run_dot(".help") == shell::status::ok);
    const std::string s = f.out.str();
    const auto views = s.substr(s.find("Views: "));
    std::vector<std::string> names;
    rsched::query::result_sink sink;
    sink.on_row = [&](const std::vector<rsched::query::value> &row) {
      names.push_back(std::get<std::string>(row.at(0)));
    };
    REQUIRE(f.db.exec("SELECT name FROM sqlite_schema WHERE type = 'view'", sink));
    REQUIRE(names.size() > 30);
    for (const auto &n : names) {
      const bool rollup = n.ends_with("_1m") || n.ends_with("_1h");
      INFO(n);
      // a rollup is named through its base view's star, every other view by name
      CHECK((views.find(rollup ? n.substr(0, n.size() - 3) + "*" : n) != std::string::npos));
    }
    CHECK(views.find("sched_delay*") != std::string::npos);
    CHECK(views.find("delay_blame*") != std::string::npos);
    CHECK(views.find("timeline") != std::string::npos);
    CHECK(views.find("_1m,") == std::string::npos);
  }
  SECTION(".schema with a pattern") {
    CHECK(f.sh.run_dot(".schema sched%") == shell::status::ok);
    const std::string s = f.out.str();
    CHECK(s.find("CREATE VIEW sched_delay") != std::string::npos);
    CHECK(s.find("CREATE TABLE intervals") == std::string::npos);
    CHECK(std::count(s.begin(), s.end(), '\n') > 2); // the statement keeps its lines...
    CHECK(s.find("\\x0a") == std::string::npos);     // ...not escaped as \x0a
    f.out.str("");
    CHECK(f.sh.run_dot(".schema \"x' OR 1=1 --\"") == shell::status::ok); // a literal, not SQL
    CHECK(f.out.str().empty());
    f.out.str("");
    CHECK(f.sh.run_dot(".schema") == shell::status::ok);
    CHECK(f.out.str().find("CREATE TABLE intervals") != std::string::npos);
  }
  SECTION(".mode csv and .headers off") {
    CHECK(f.sh.run_dot(".mode csv") == shell::status::ok);
    CHECK(f.sh.config().mode == output_mode::csv);
    CHECK(f.sh.run_sql("SELECT 1 AS a, 'x' AS b;") == shell::status::ok);
    CHECK(f.out.str() == "a,b\r\n1,x\r\n");
    CHECK(f.sh.run_dot(".headers off") == shell::status::ok);
    f.out.str("");
    CHECK(f.sh.run_sql("SELECT 1 AS a;") == shell::status::ok);
    CHECK(f.out.str() == "1\r\n");
    CHECK(f.sh.run_dot(".mode table") == shell::status::ok);
    CHECK(f.sh.run_dot(".headers on") == shell::status::ok);
    f.out.str("");
    CHECK(f.sh.run_sql("SELECT 1 AS a;") == shell::status::ok);
    CHECK(f.out.str() == "+---+\n| a |\n+---+\n| 1 |\n+---+\n");
  }
  SECTION("bad arguments and unknown commands fail") {
    CHECK(f.sh.run_dot(".mode yaml") == shell::status::failed);
    CHECK(f.sh.run_dot(".headers") == shell::status::failed);
    CHECK(f.sh.run_dot(".frobnicate\x1b") == shell::status::failed);
    CHECK(f.err.str().find("unknown command '.frobnicate\\x1b'") != std::string::npos);
    CHECK(f.sh.config().mode == output_mode::table);
  }
  SECTION(".help, .quit and .exit") {
    CHECK(f.sh.run_dot(".help") == shell::status::ok);
    CHECK(f.out.str().find(".schema [PATTERN]") != std::string::npos);
    CHECK(f.sh.run_dot(".quit") == shell::status::quit);
    CHECK(f.sh.run_dot(".exit") == shell::status::quit);
  }
}

TEST_CASE("rsched-sql shell: -c text is a dot command or SQL", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_command(".mode csv") == shell::status::ok);
  CHECK(f.sh.run_command("SELECT 2 AS two") == shell::status::ok);
  CHECK(f.out.str() == "two\r\n2\r\n");
}

TEST_CASE("rsched-sql shell: scripts run statements and dot commands and stop at the first error",
          "[rsched-sql]") {
  fixture f;
  SECTION("success, last statement without ';'") {
    std::istringstream in("-- header comment\n.mode csv\nSELECT 1\n AS a;\n\nSELECT 'x;y' AS b");
    CHECK(f.sh.run_script(in) == exit_ok);
    CHECK(f.out.str() == "a\r\n1\r\nb\r\nx;y\r\n");
  }
  SECTION("error with --bail: exit 1, later statements not run, input line named") {
    f.sh.set_bail(true);
    std::istringstream in(
        ".mode csv\nSELECT 1 AS a;\n\nSELECT nope\nFROM nowhere;\nSELECT 3 AS c;\n");
    CHECK(f.sh.run_script(in) == exit_failure);
    CHECK(f.out.str() == "a\r\n1\r\n");
    INFO(f.err.str());
    // The statement starts on line 4 (SQLite gives no column for a missing table).
    CHECK(f.err.str() == "rsched-sql: line 4: no such table: nowhere\n");
  }
  SECTION("error without --bail: the script goes on and exits 1") {
    std::istringstream in(
        ".mode csv\nSELECT 1 AS a;\nSELECT nope FROM nowhere;\n.bogus\nSELECT 3 AS c;\n");
    CHECK(f.sh.run_script(in) == exit_failure);
    CHECK(f.out.str() == "a\r\n1\r\nc\r\n3\r\n");
    const std::string e = f.err.str();
    CHECK(std::count(e.begin(), e.end(), '\n') == 2);
  }
  SECTION(".quit ends the script") {
    std::istringstream in(".quit\nSELECT nope;\n");
    CHECK(f.sh.run_script(in) == exit_ok);
  }
  SECTION("a bad dot command fails the script") {
    f.sh.set_bail(true);
    std::istringstream in(".nope\n");
    CHECK(f.sh.run_script(in) == exit_failure);
  }
}

TEST_CASE("rsched-sql shell: error positions relative to the whole input", "[rsched-sql]") {
  CHECK(locate("line 1, column 8: near \"x\": syntax error", 10) ==
        "line 10, column 8: near \"x\": syntax error");
  CHECK(locate("line 3: interrupted", 2) == "line 4: interrupted");
  CHECK(locate("line 1, column 1: x", 1) == "line 1, column 1: x");
  CHECK(locate("out of memory", 7) == "out of memory (input line 7)");
  CHECK(locate("line x", 7) == "line x (input line 7)");
}

TEST_CASE("rsched-sql shell: completion candidates", "[rsched-sql]") {
  fixture f;
  const auto names = f.sh.schema_names();
  CHECK(std::find(names.begin(), names.end(), "sched_delay") != names.end());
  CHECK(std::find(names.begin(), names.end(), "comm") != names.end());
  CHECK(completions("", ".ta", true, names) == std::vector<std::string>{".tables"});
  CHECK(completions("  ", ".he", true, names) ==
        std::vector<std::string>{".headers", ".heatmap", ".help"});
  CHECK(completions(".mode ", "c", true, names) == std::vector<std::string>{"csv"});
  CHECK(completions(".headers ", "o", true, names) == std::vector<std::string>{"off", "on"});
  CHECK(completions("SELECT * FROM ", "sched_", true, names) ==
        std::vector<std::string>{"sched_delay", "sched_delay_1h", "sched_delay_1m"});
  CHECK(completions("SELECT * FROM ", "SCHED_D", true, names) ==
        std::vector<std::string>{"sched_delay", "sched_delay_1h", "sched_delay_1m"});
  CHECK(completions("", "sel", true, names) == std::vector<std::string>{"select"});
  CHECK(completions("", "SEL", true, names) == std::vector<std::string>{"SELECT"});
  CHECK(completions("SELECT ", "hist_p", false, names) ==
        std::vector<std::string>{"hist_percentile", "hist_percentile_error"});
  CHECK(completions("SELECT ", ".t", false, names).empty()); // not a dot command mid-statement
}
