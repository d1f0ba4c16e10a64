// rsched-sql writes nothing but annotations: statements that would write the database, another
// file (VACUUM INTO, ATTACH) or a setting are refused in one line with exit status 1; times
// outside 64-bit ns are errors; endless inputs are bounded (issue 10).
#include "helpers.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

using namespace rsched_sql_test;
namespace fs = std::filesystem;

namespace {

std::size_t lines(const std::string &s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

// One refused statement: exit 1, nothing on stdout, one "not allowed" line on stderr.
void check_refused(const std::string &db, const std::string &sql, const std::string &why) {
  INFO(sql);
  const auto r = run_sql({db, "-c", sql});
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(r.out.empty());
  CHECK(lines(r.err) == 1);
  CHECK(r.err.rfind("rsched-sql: not allowed: rsched-sql only reads the database (", 0) == 0);
  CHECK(r.err.find(why) != std::string::npos);
}

std::string count_annotations(const std::string &db) {
  return run_sql({db, "--csv", "-c", "SELECT count(*) AS n FROM annotations"}).out;
}

} // namespace

TEST_CASE("rsched-sql writes: VACUUM INTO creates no copy and overwrites no file", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string copy = dir.file("copy.db");
  check_refused(db, "VACUUM INTO '" + copy + "'", "VACUUM INTO writes a copy");
  CHECK_FALSE(fs::exists(copy));
  // An existing empty file (SQLite would fill it) stays empty.
  const std::string empty = dir.file("empty.db");
  { std::ofstream(empty, std::ios::binary).flush(); }
  REQUIRE(fs::exists(empty));
  check_refused(db, "vacuum main into '" + empty + "'", "VACUUM INTO writes a copy");
  check_refused(db, "/* c */ VACUUM /* c */ INTO '" + empty + "'", "VACUUM INTO writes a copy");
  CHECK(fs::file_size(empty) == 0);
  check_refused(db, "VACUUM", "VACUUM rewrites the database");
  // From a script too (the error names the input line).
  const auto s = run_sql({db}, "SELECT 1;\nVACUUM INTO '" + copy + "';\n");
  CHECK(s.status == 1);
  CHECK(s.err.find("not allowed") != std::string::npos);
  CHECK(s.err.find("(input line 2)") != std::string::npos);
  CHECK_FALSE(fs::exists(copy));
}

TEST_CASE("rsched-sql writes: ATTACH, PRAGMA assignments and DDL/DML are refused", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string other = dir.file("other.db");
  check_refused(db, "ATTACH '" + other + "' AS o", "ATTACH opens another database file");
  check_refused(db, "ATTACH ':memory:' AS m", "ATTACH");
  CHECK_FALSE(fs::exists(other));
  check_refused(db, "PRAGMA writable_schema=1", "PRAGMA writable_schema = 1");
  check_refused(db, "PRAGMA journal_mode=DELETE", "PRAGMA journal_mode = DELETE");
  check_refused(db, "PRAGMA user_version = 7", "PRAGMA user_version = 7");
  check_refused(db, "PRAGMA wal_checkpoint", "PRAGMA wal_checkpoint");
  check_refused(db, "PRAGMA optimize", "PRAGMA optimize");
  check_refused(db, "INSERT INTO meta(key, value) VALUES ('k', 'v')", "INSERT INTO meta");
  check_refused(db, "DELETE FROM thread", "DELETE FROM thread");
  check_refused(db, "UPDATE thread SET comm = 'x'", "UPDATE thread");
  check_refused(db, "DELETE FROM annotations", "annotations are added with mark");
  check_refused(db, "DROP TABLE thread", "DROP changes the schema");
  check_refused(db, "CREATE TABLE x(a)", "CREATE changes the schema");
  check_refused(db, "CREATE INDEX i ON thread(comm)", "CREATE changes the schema");
  check_refused(db, "ANALYZE", "ANALYZE");
  check_refused(db, "SELECT load_extension('/nonexistent')", "load_extension");
  // Nothing changed, reads keep working, and so do annotations.
  const auto q = run_sql({db, "--csv", "-c",
                          "SELECT (SELECT count(*) FROM thread) AS threads, (SELECT count(*) FROM "
                          "meta WHERE key = 'k') AS k, (SELECT user_version FROM "
                          "pragma_user_version) AS v"});
  CHECK(q.status == 0);
  CHECK(q.out == "threads,k,v\r\n2,0," + std::to_string(rsched::store::schema_version) + "\r\n");
  const auto m = run_sql({db, "mark", "still works", "--at", "2026-11-20T14:03:00Z"});
  CHECK(m.status == 0);
  CHECK(m.out == "1\n");
  CHECK(count_annotations(db) == "n\r\n1\r\n");
}

TEST_CASE("rsched-sql writes: reads, read-only PRAGMAs and TEMP objects still work",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const auto r =
      run_sql({db, "--csv", "-c",
               "CREATE TEMP TABLE c AS SELECT comm, count FROM sched_delay; "
               "CREATE TEMP VIEW v AS SELECT count(*) AS n FROM c; "
               "CREATE INDEX temp.ci ON c(comm); INSERT INTO c VALUES ('x', 1); "
               "DELETE FROM c WHERE comm = 'x'; SELECT n FROM v",
               "-c", "SELECT count(*) AS cols FROM pragma_table_info('thread')", "-c",
               "PRAGMA quick_check", "-c", "PRAGMA user_version", "-c", "PRAGMA table_info(meta)"});
  INFO(r.err);
  CHECK(r.status == 0);
  CHECK(r.err.empty());
  CHECK(r.out.rfind("n\r\n2\r\ncols\r\n8\r\nquick_check\r\nok\r\nuser_version\r\n" +
                        std::to_string(rsched::store::schema_version) + "\r\n",
                    0) == 0);
}

TEST_CASE("rsched-sql writes: mark --at outside 64-bit ns is an error and stores nothing",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  for (const char *at : {"9999-12-31", "1600-01-01", "2262-04-11T23:47:17Z", "999999999999"}) {
    INFO(at);
    const auto r = run_sql({db, "mark", "far", "--at", at});
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(lines(r.err) == 1);
    CHECK(r.err.find("out of range") != std::string::npos);
  }
  const auto u = run_sql({db, "mark", "far", "--until", "9999-12-31"});
  CHECK(u.status == 1);
  const auto s = run_sql({db}, ".mark far --at 9999-12-31\n");
  CHECK(s.status == 1);
  CHECK(s.err.find("out of range") != std::string::npos);
  CHECK(count_annotations(db) == "n\r\n0\r\n");
}

TEST_CASE("rsched-sql writes: an incident import with a time outside 64-bit ns imports nothing",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string csv = dir.file("incidents.csv");
  std::ofstream(csv, std::ios::binary) << "start,end,text\n"
                                       << "2026-11-20 14:00,2026-11-20 14:05,fine\n"
                                       << "2026-11-20 14:10,9999-12-31,too late\n";
  const auto r = run_sql({db, "-c", ".import-incidents " + csv});
  INFO(r.err);
  CHECK(r.status == 1);
  CHECK(lines(r.err) == 1);
  CHECK(r.err.find("row 2: end: invalid time '9999-12-31': out of range") != std::string::npos);
  const std::string json = dir.file("incidents.json");
  std::ofstream(json, std::ios::binary) << R"([{"start": "1600-01-01", "text": "too early"}])";
  const auto j = run_sql({db, "-c", ".import-incidents " + json});
  CHECK(j.status == 1);
  CHECK(j.err.find("row 1: start: invalid time '1600-01-01': out of range") != std::string::npos);
  CHECK(count_annotations(db) == "n\r\n0\r\n");
}

TEST_CASE("rsched-sql writes: endless inputs are bounded, not an abort", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string script = dir.file("script.sql");
  std::ofstream(script, std::ios::binary) << "SELECT 1 AS one;\n";
  // .import-incidents of /dev/zero: at most 64 MiB are read.
  const auto i = run_sql_bounded({db, "-c", ".import-incidents /dev/zero"}, script);
  INFO(i.err);
  CHECK(i.status == 1);
  CHECK(lines(i.err) == 1);
  CHECK(i.err == "rsched-sql: '/dev/zero' is larger than 64 MiB, the most .import-incidents "
                 "reads\n");
  // .read of /dev/zero and /dev/zero on stdin: one line longer than 64 MiB.
  const auto rd = run_sql_bounded({db, "-c", ".read /dev/zero"}, script);
  CHECK(rd.status == 1);
  CHECK(rd.err == "rsched-sql: /dev/zero: line 1 is longer than 64 MiB (stopped reading)\n");
  const auto in = run_sql_bounded({db}, "/dev/zero");
  CHECK(in.status == 1);
  CHECK(in.err == "rsched-sql: standard input: line 1 is longer than 64 MiB (stopped reading)\n");
  // A statement of many short lines that never ends.
  const std::string big = dir.file("big.sql");
  {
    std::ofstream f(big, std::ios::binary);
    f << "SELECT 1\n";
    const std::string line(1023, ' ');
    for (int k = 0; k < 66 * 1024; ++k) {
      f << line << '\n';
    }
  }
  const auto b = run_sql_bounded({db}, big);
  CHECK(b.status == 1);
  CHECK(b.err.find("the statement starting at line 1 is longer than 64 MiB") != std::string::npos);
  // A small pipe still works: /dev/stdin as the incident file.
  const std::string csv = dir.file("one.csv");
  std::ofstream(csv, std::ios::binary) << "start,text\n2026-11-20 14:00,from a pipe\n";
  const auto p = run_sql_bounded({db, "-c", ".import-incidents /dev/stdin"}, csv);
  INFO(p.err);
  CHECK(p.status == 0);
  CHECK(count_annotations(db) == "n\r\n1\r\n");
}

TEST_CASE("rsched-sql writes: importing the same incidents twice adds them once (issue 30)",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string json = dir.file("incidents.json");
  std::ofstream(json, std::ios::binary)
      << R"([{"start": "2026-11-20T14:00:00Z", "end": "2026-11-20T14:05:00Z", "text": "outage"},
             {"start": "2026-11-20T14:10:00Z", "text": "deploy"}])";
  const auto first = run_sql({db, "--csv", "-c", ".import-incidents " + json});
  INFO(first.err);
  CHECK(first.status == 0);
  CHECK(first.err == "2 annotations imported from " + json + ": start=start, end=end, text=text\n");
  const auto again = run_sql({db, "--csv", "-c", ".import-incidents " + json});
  INFO(again.err);
  CHECK(again.status == 0);
  CHECK(again.err == "0 annotations imported (2 already there) from " + json +
                         ": start=start, end=end, "
                         "text=text\n");
  CHECK(again.out.empty()); // nothing added, nothing listed
  // One more incident in the file: only it is added.
  std::ofstream(json, std::ios::binary)
      << R"([{"start": "2026-11-20T14:00:00Z", "end": "2026-11-20T14:05:00Z", "text": "outage"},
             {"start": "2026-11-20T14:10:00Z", "text": "deploy"},
             {"start": "2026-11-20T14:20:00Z", "text": "rollback"}])";
  const auto third = run_sql({db, "--csv", "-c", ".import-incidents " + json});
  CHECK(third.status == 0);
  CHECK(third.err.rfind("1 annotations imported (2 already there) from ", 0) == 0);
  CHECK(third.out ==
        "id,start_ns,end_ns,text,source,tags\r\n3,1795184400000000000,,rollback,import:" + json +
            ",\"\"\r\n");
  CHECK(count_annotations(db) == "n\r\n3\r\n");
}

TEST_CASE("rsched-sql writes: an incident file that is not an array of incidents exits 1",
          "[rsched-sql]") {
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string f = dir.file("incidents.json");
  for (const std::string &content :
       {std::string(R"({"incidents": [{"start": "2026-11-20T14:00:00Z", "text": "x"}]})"),
        std::string("42\n"), std::string("\"2026-11-20T14:00:00Z\"\n")}) {
    INFO(content);
    std::ofstream(f, std::ios::binary | std::ios::trunc) << content;
    const auto r = run_sql({db, "-c", ".import-incidents " + f});
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(r.err == "rsched-sql: importing incidents: JSON: expected an array of objects\n");
  }
  CHECK(count_annotations(db) == "n\r\n0\r\n");
}

TEST_CASE("rsched-sql never waits on a FIFO at the database or an import's path", "[rsched-sql]") {
  // Another user may plant a FIFO at a path root reads: SQLite opened the database and
  // .import-incidents its file, each waiting for a writer that never came.
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string fifo_db = dir.file("fifo.db");
  REQUIRE(::mkfifo(fifo_db.c_str(), 0600) == 0);
  const auto r = run_sql({fifo_db, "-c", "SELECT 1"});
  CHECK(r.status == 1);
  CHECK(r.err == "rsched-sql: " + fifo_db + ": not a regular file (a FIFO, socket or device)\n");
  const std::string fifo_csv = dir.file("incidents.csv");
  REQUIRE(::mkfifo(fifo_csv.c_str(), 0600) == 0);
  const std::string before = count_annotations(db);
  const auto i = run_sql({db, "-c", ".import-incidents " + fifo_csv});
  CHECK(i.status == 1);
  CHECK(i.err.find("no header row") != std::string::npos); // read as empty: nobody writes to it
  CHECK(count_annotations(db) == before);
}

TEST_CASE("rsched-sql's .read refuses a FIFO in one line instead of waiting (issue 51)",
          "[rsched-sql]") {
  // .read opened its file as SQLite did the database: a FIFO nobody writes to waited forever,
  // and one another user planted would feed root's shell their statements.
  temp_dir dir;
  const std::string db = make_db(dir);
  const std::string fifo = dir.file("script.sql");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string empty = dir.file("empty");
  std::ofstream(empty, std::ios::binary) << "";
  const auto r = run_sql_bounded({db, "-c", ".read " + fifo}, empty, 10);
  CHECK(r.status == 1); // not -1: the alarm of a run that waited
  CHECK(r.out.empty());
  CHECK(r.err == "rsched-sql: cannot read '" + fifo +
                     "': not a regular file (a FIFO, socket or directory)\n");
  // A directory likewise; this process's own descriptor by name (a pipe) and a device still run.
  const auto d = run_sql_bounded({db, "-c", ".read " + dir.str()}, empty, 10);
  CHECK(d.status == 1);
  CHECK(d.err == "rsched-sql: cannot read '" + dir.str() +
                     "': not a regular file (a FIFO, socket or directory)\n");
  const std::string script = dir.file("s.sql");
  std::ofstream(script, std::ios::binary) << "SELECT 7 AS seven;\n";
  const auto in = run_sql_bounded({db, "--csv", "-c", ".read /dev/stdin"}, script, 10);
  INFO(in.err);
  CHECK(in.status == 0);
  CHECK(in.out == "seven\r\n7\r\n");
  const auto null = run_sql_bounded({db, "-c", ".read /dev/null"}, empty, 10);
  CHECK(null.status == 0);
}
