// The shell's newer tools: output redirection (.output, .once, -o), .timer, .read, .tz, .mark,
// .import-incidents, --bail, the "no data in that window" exit status and the command line.
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/options.hpp"
#include "rsched/sql_shell/shell.hpp"

#include "helpers.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sqlite3.h>
#include <sstream>

using namespace rsched::sql_shell;
using namespace rsched_sql_test;

namespace {

// The shell knows its database's file, as in rsched-sql (.mark and .import-incidents write to it).
struct fixture : shell_fixture {
  fixture() { sh.set_db_path(path); }
};

rsched::result<options> parse(std::vector<std::string_view> args) {
  return parse_args(std::span<const std::string_view>(args));
}

} // namespace

TEST_CASE("rsched-sql options: output modes, -o, --bail", "[rsched-sql]") {
  auto o = parse({"x.db", "--json", "-o", "out.json", "--bail"});
  REQUIRE(o.ok());
  CHECK(o->mode == output_mode::json);
  CHECK(o->output_file == "out.json");
  CHECK(o->bail);
  CHECK(parse({"--jsonl"})->mode == output_mode::jsonl);
  CHECK(parse({"--csv"})->mode == output_mode::csv);
  CHECK(parse({"-o"}).err().msg == "option '-o' needs a file name");
  CHECK_FALSE(parse({"-o", ""}).ok());
  CHECK(parse_mode("markdown") == output_mode::markdown);
  CHECK_FALSE(parse_mode("yaml").has_value());
  CHECK(mode_name(output_mode::box) == "box");
}

TEST_CASE("rsched-sql options: the mark subcommand", "[rsched-sql]") {
  auto o = parse({"x.db", "mark", "deploy v42", "--at", "2026-11-20 14:03", "--until", "14:10",
                  "--tags", "deploy,web"});
  REQUIRE(o.ok());
  CHECK(o->db_path == "x.db");
  REQUIRE(o->mark.has_value());
  CHECK(o->mark->text == "deploy v42");
  CHECK(o->mark->at == "2026-11-20 14:03");
  CHECK(o->mark->until == "14:10");
  CHECK(o->mark->tags == "deploy,web");
  auto p = parse({"x.db", "mark", "--at", "now", "--", "-dash text"});
  REQUIRE(p.ok());
  CHECK(p->mark->text == "-dash text");
  CHECK_FALSE(p->mark->until.has_value());
  CHECK_FALSE(parse({"x.db", "mark"}).ok());                 // no text
  CHECK_FALSE(parse({"x.db", "mark", "a", "b"}).ok());       // two texts
  CHECK_FALSE(parse({"x.db", "mark", "a", "--bogus"}).ok()); // unknown option
  CHECK_FALSE(parse({"x.db", "mark", "a", "--at"}).ok());    // --at without value
  CHECK(parse({"x.db", "mark", "a", "--tag", "capture"})->mark->tags == "capture");
  CHECK(parse({"x.db", "mark", "--tag", "x", "a", "--tag", "capture"})->mark->tags == "x,capture");
  CHECK_FALSE(parse({"x.db", "-c", "SELECT 1", "mark", "a"}).ok()); // not with -c
  CHECK(parse({"mark"})->db_path == "mark");                        // a database named mark
}

TEST_CASE("rsched-sql shell: .mark arguments", "[rsched-sql]") {
  auto m = parse_mark_args({"deploy", "v42", "--at", "2h ago", "--tags", "a,b"});
  REQUIRE(m.ok());
  CHECK(m->text == "deploy v42");
  CHECK(m->at == "2h ago");
  CHECK(m->tags == "a,b");
  // --tag adds one tag (the flight recorder's capture); repeatable, after --tags too.
  auto t = parse_mark_args({"checkout", "slow", "--tags", "a", "--tag", "capture", "--tag", "b"});
  REQUIRE(t.ok());
  CHECK(t->text == "checkout slow");
  CHECK(t->tags == "a,capture,b");
  CHECK_FALSE(parse_mark_args({}).ok());
  CHECK_FALSE(parse_mark_args({"x", "--tag"}).ok());
  CHECK_FALSE(parse_mark_args({"x", "--until"}).ok());
  CHECK_FALSE(parse_mark_args({"x", "--frob", "y"}).ok());
}

TEST_CASE("rsched-sql shell: time window statements without rows", "[rsched-sql]") {
  CHECK(names_time_window("SELECT * FROM x WHERE ts >= t('2026-11-20 14:00')"));
  CHECK(names_time_window("select 1 where ts > AGO('2h')"));
  CHECK(names_time_window("SELECT * FROM sched_delay WHERE ts IN around('14:03', '5m')"));
  CHECK(names_time_window("SELECT * FROM during(1, 2)"));
  CHECK_FALSE(names_time_window("SELECT * FROM x WHERE ts BETWEEN 1 AND 2"));
  CHECK_FALSE(names_time_window("SELECT 't(' AS s, \"ago(\" -- around(\n /* between( */"));
  CHECK_FALSE(names_time_window("SELECT count(*), sort(x), at(y)"));

  fixture f;
  CHECK(f.sh.run_sql("SELECT 1 WHERE 0") == shell::status::ok);
  CHECK_FALSE(f.sh.no_data()); // no window: an empty result is just empty
  CHECK(f.sh.run_sql("SELECT 1 AS x WHERE length('t(') = 0") == shell::status::ok);
  CHECK_FALSE(f.sh.no_data());
  CHECK(f.err.str().empty());
  CHECK(f.sh.run_sql("SELECT start_ns FROM intervals WHERE start_ns > t('2099-01-01 00:00')") ==
        shell::status::ok);
  CHECK(f.sh.no_data());
  CHECK(f.err.str() == "rsched-sql: no recorded data in that window\n");

  // A table function's window is a window whatever its times are spelled as (issue 17: an empty
  // compare exited 0 with text times and 3 with t()).
  for (const char *sql :
       {"SELECT * FROM compare('2001-01-01 00:00', '2001-01-01 00:10', '2001-01-01 00:10', "
        "'2001-01-01 00:20')",
        "SELECT * FROM compare(t('2001-01-01 00:00'), t('2001-01-01 00:10'), "
        "t('2001-01-01 00:10'), t('2001-01-01 00:20'))",
        "SELECT * FROM compare(978307200000000000, 978307800000000000, 978307800000000000, "
        "978308400000000000)",
        "SELECT * FROM spikes('sched_delay', '3x', '2001-01-01 00:00', '2001-01-01 01:00')",
        "SELECT * FROM blame('web', '2001-01-01 00:00', '2001-01-01 01:00')"}) {
    fixture g;
    INFO(sql);
    CHECK(g.sh.run_sql(sql) == shell::status::ok);
    CHECK(g.sh.no_data());
    CHECK(g.err.str() == "rsched-sql: no recorded data in that window\n");
  }
  // Without a window of its own, an empty table function result is just empty.
  fixture h;
  CHECK(h.sh.run_sql("SELECT * FROM gaps() WHERE 0") == shell::status::ok);
  CHECK_FALSE(h.sh.no_data());
  // A recorded window where nothing matched (no spike an hour long, no inversion): empty, not
  // missing; a note says the window is recorded.
  for (const char *fn : {"spikes('sched_delay', '1h', ", "inversions(", "blame('no-such-comm', "}) {
    fixture k;
    INFO(fn);
    const std::string sql = std::string("SELECT * FROM ") + fn +
                            "(SELECT min(start_ns) FROM intervals), (SELECT max(start_ns + dur_ns) "
                            "FROM intervals))";
    CHECK(k.sh.run_sql(sql) == shell::status::ok);
    CHECK_FALSE(k.sh.no_data());
    CHECK(k.err.str().starts_with("rsched-sql: note: no rows; the window "));
    CHECK(k.err.str().ends_with(" is recorded (100.0% covered)\n"));
  }
}

TEST_CASE("rsched-sql shell: .once writes one statement's CSV to a file, then reverts",
          "[rsched-sql]") {
  fixture f;
  const std::string file = f.dir.file("once.csv");
  CHECK(f.sh.run_dot(".mode csv") == shell::status::ok);
  CHECK(f.sh.run_dot(".once " + file) == shell::status::ok);
  CHECK(f.sh.run_sql("SELECT comm FROM sched_delay WHERE tid = 42") == shell::status::ok);
  CHECK(f.out.str().empty());
  const auto recs = parse_csv(slurp(file));
  REQUIRE(recs.size() == 2);
  CHECK(recs[1][0] == evil_comm); // byte-exact in a file
  CHECK(f.sh.run_sql("SELECT 2 AS b") == shell::status::ok);
  CHECK(f.out.str() == "b\r\n2\r\n");
  CHECK(parse_csv(slurp(file)).size() == 2); // the file is closed and unchanged
  CHECK(f.sh.run_dot(".once") == shell::status::failed);
  CHECK(f.sh.run_dot(".once " + f.dir.file("no/such/dir/x")) == shell::status::failed);
}

TEST_CASE("rsched-sql shell: .output is sticky until .output alone", "[rsched-sql]") {
  fixture f;
  const std::string file = f.dir.file("out.txt");
  output_config terminal;
  terminal.escape_csv_text = true; // as on a terminal
  terminal.mode = output_mode::csv;
  shell sh{f.db, f.out, f.err, terminal};
  CHECK(sh.run_dot(".output " + file) == shell::status::ok);
  CHECK(sh.run_sql("SELECT comm FROM sched_delay WHERE tid = 42") == shell::status::ok);
  CHECK(sh.run_sql("SELECT 1 AS a") == shell::status::ok);
  CHECK(f.out.str().empty());
  CHECK(sh.run_dot(".output") == shell::status::ok);
  CHECK(sh.run_sql("SELECT comm FROM sched_delay WHERE tid = 42") == shell::status::ok);
  const std::string data = slurp(file);
  CHECK(data.find(evil_comm.substr(5)) != std::string::npos); // raw in the file
  CHECK(data.find("a\r\n1\r\n") != std::string::npos);
  CHECK(f.out.str().find('\x1b') == std::string::npos); // escaped on the "terminal"
  CHECK(f.out.str().find("\\x1b") != std::string::npos);
}

TEST_CASE("rsched-sql shell: .timer, .headers, .tz and .help", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_dot(".timer on") == shell::status::ok);
  CHECK(f.sh.run_sql("SELECT 1") == shell::status::ok);
  const std::string e = f.err.str();
  CHECK(e.rfind("Run Time: real ", 0) == 0);
  CHECK(e.find(" s\n") != std::string::npos);
  CHECK(f.sh.run_dot(".timer off") == shell::status::ok);
  f.err.str("");
  CHECK(f.sh.run_sql("SELECT 1") == shell::status::ok);
  CHECK(f.err.str().empty());
  CHECK(f.sh.run_dot(".timer maybe") == shell::status::failed);

  CHECK(f.sh.run_dot(".tz UTC") == shell::status::ok);
  CHECK(f.sh.config().zone == rsched::timefmt::zone::utc());
  f.out.str("");
  CHECK(f.sh.run_sql("SELECT start_ns, dur_ns FROM intervals") == shell::status::ok);
  CHECK(f.out.str().find("| 2023-11-14 22:13:20+00:00 | 10.0 s |") != std::string::npos);
  f.out.str("");
  CHECK(f.sh.run_dot(".tz") == shell::status::ok);
  CHECK(f.out.str() == "UTC\n");
  CHECK(f.sh.run_dot(".tz Mars/Olympus") == shell::status::failed);

  f.out.str("");
  CHECK(f.sh.run_dot(".help") == shell::status::ok);
  for (const auto &c : shell::dot_commands()) {
    CHECK(f.out.str().find(c) != std::string::npos);
  }
}

namespace {
// The virtual-table modules a connection knows (pragma_module_list).
std::set<std::string> modules_of(sqlite3 *db) {
  std::set<std::string> out;
  sqlite3_stmt *st = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, "SELECT name FROM pragma_module_list", -1, &st, nullptr) ==
          SQLITE_OK);
  while (sqlite3_step(st) == SQLITE_ROW) {
    out.emplace(reinterpret_cast<const char *>(sqlite3_column_text(st, 0)));
  }
  sqlite3_finalize(st);
  return out;
}

// `name` in `text` as a word of its own (not part of a longer identifier).
bool names_word(const std::string &text, const std::string &name) {
  const auto ident = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  };
  for (auto at = text.find(name); at != std::string::npos; at = text.find(name, at + 1)) {
    const bool before = at > 0 && ident(text[at - 1]);
    const bool after = at + name.size() < text.size() && ident(text[at + name.size()]);
    if (!before && !after) {
      return true;
    }
  }
  return false;
}
} // namespace

// issue 32: .help left out inversions(). Every table function registered on the connection (its
// modules less SQLite's own, its pragma_* ones made on first use, and rsched's internal rsched_*
// ones) is named in .help.
TEST_CASE("rsched-sql shell: .help names every table function registered", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_dot(".mode csv") == shell::status::ok);
  CHECK(f.sh.run_dot(".headers off") == shell::status::ok);
  f.out.str("");
  REQUIRE(f.sh.run_sql("SELECT name FROM pragma_module_list WHERE substr(name, 1, 7) NOT IN "
                       "('rsched_', 'pragma_') ORDER BY name") == shell::status::ok);
  std::set<std::string> registered;
  std::istringstream lines(f.out.str());
  for (std::string l; std::getline(lines, l);) {
    if (!l.empty() && l.back() == '\r') {
      l.pop_back();
    }
    registered.insert(l);
  }
  sqlite3 *bare = nullptr;
  REQUIRE(sqlite3_open(":memory:", &bare) == SQLITE_OK);
  for (const auto &m : modules_of(bare)) {
    registered.erase(m);
  }
  sqlite3_close(bare);
  // The functions as the store defines them: a change there shows here.
  for (const char *known :
       {"blame", "spikes", "inversions", "coverage", "gaps", "compare", "explain"}) {
    INFO(known);
    CHECK(registered.count(known) == 1);
  }
  f.out.str("");
  CHECK(f.sh.run_dot(".help") == shell::status::ok);
  const std::string help = f.out.str();
  for (const auto &name : registered) {
    INFO(name);
    CHECK(names_word(help, name));
  }
}

TEST_CASE("rsched-sql shell: every mode through the shell", "[rsched-sql]") {
  fixture f;
  const struct {
    const char *mode;
    const char *sql;
    const char *out;
  } modes[] = {
      {"json", "SELECT comm FROM sched_delay WHERE tid = 42",
       "[{\"comm\":\"evil\\\"c,o\\u001b[2Jm\"}]\n"},
      {"jsonl", "SELECT 1 AS a UNION ALL SELECT 2", "{\"a\":1}\n{\"a\":2}\n"},
      {"markdown", "SELECT 'a|b' AS x", "| x |\n|---|\n| a\\|b |\n"},
      {"line", "SELECT 1 AS a", "a = 1\n"},
  };
  for (const auto &m : modes) {
    INFO(".mode " << m.mode);
    CHECK(f.sh.run_dot(std::string(".mode ") + m.mode) == shell::status::ok);
    CHECK(f.sh.run_sql(m.sql) == shell::status::ok);
    CHECK(f.out.str() == m.out);
    f.out.str("");
  }
  CHECK(f.sh.run_dot(".mode box") == shell::status::ok);
  CHECK(f.sh.config().mode == output_mode::box);
}

TEST_CASE("rsched-sql shell: .read runs a file", "[rsched-sql]") {
  fixture f;
  const std::string script = f.dir.file("s.sql");
  std::ofstream(script) << ".mode csv\nSELECT 1 AS a;\nSELECT nope;\nSELECT 2 AS b;\n";
  CHECK(f.sh.run_dot(".read " + script) == shell::status::failed); // one statement failed...
  CHECK(f.out.str() == "a\r\n1\r\nb\r\n2\r\n");                    // ...the rest ran
  CHECK(f.sh.run_dot(".read " + f.dir.file("missing.sql")) == shell::status::failed);
  const std::string self = f.dir.file("self.sql");
  std::ofstream(self) << ".read " << self << "\n";
  CHECK(f.sh.run_dot(".read " + self) == shell::status::failed); // no endless recursion
}

TEST_CASE("rsched-sql shell: .mark and .import-incidents write annotations", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_dot(".tz UTC") == shell::status::ok);
  CHECK(f.sh.run_dot(".mark deploy v42 --at \"2026-11-20 14:03\" --tags deploy") ==
        shell::status::ok);
  CHECK(f.err.str().find("annotation ") == 0);
  const std::string csv = f.dir.file("incidents.csv");
  std::ofstream(csv) << "start,end,text\n2026-11-20T14:00:00Z,2026-11-20T14:30:00Z,outage\n";
  CHECK(f.sh.run_dot(".import-incidents " + csv) == shell::status::ok);
  CHECK(f.err.str().find("1 annotations imported") != std::string::npos);
  CHECK(f.sh.run_dot(".mode csv") == shell::status::ok);
  f.out.str("");
  CHECK(f.sh.run_sql("SELECT start_ns, text, tags FROM annotations ORDER BY start_ns") ==
        shell::status::ok);
  CHECK(f.out.str() == "start_ns,text,tags\r\n"
                       "1795183200000000000,outage,\"\"\r\n"
                       "1795183380000000000,deploy v42,deploy\r\n");
  CHECK(f.sh.run_dot(".mark") == shell::status::failed);
  CHECK(f.sh.run_dot(".mark x --at never") == shell::status::failed);
  CHECK(f.sh.run_dot(".import-incidents " + f.dir.file("missing.csv")) == shell::status::failed);
}

TEST_CASE("rsched-sql shell: a PagerDuty incidents export imports as it comes, other timelines "
          "through --map",
          "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_dot(".tz UTC") == shell::status::ok);
  CHECK(f.sh.run_dot(".mode csv") == shell::status::ok);
  // The columns of PagerDuty's Incidents > Export CSV (a subset, in its order), a quoted comma.
  const std::string pd = f.dir.file("pagerduty.csv");
  std::ofstream(pd) << "id,incident_number,description,service_name,created_on,resolved_on,"
                       "assigned_to_user,urgency\n"
                    << "Q1ABC,412,\"postgres p99 > 50ms, checkout slow\",db,2026-11-20T14:02:00Z,"
                       "2026-11-20T14:07:30Z,alice,high\n"
                    << "Q1ABD,413,deploy rollback,web,2026-11-20T14:20:00-05:00,,bob,low\n";
  CHECK(f.sh.run_dot(".import-incidents " + pd) == shell::status::ok);
  CHECK(f.err.str() == "2 annotations imported from " + pd +
                           " (PagerDuty incidents export): start=created_on, end=resolved_on, "
                           "text=description, tags=service_name+incident_number; ignored columns: "
                           "assigned_to_user, id, urgency\n");
  // issue 32: the service and the incident number are kept, as tags.
  CHECK(f.out.str() == "id,start_ns,end_ns,text,source,tags\r\n"
                       "1,1795183320000000000,1795183650000000000,\"postgres p99 > 50ms, "
                       "checkout slow\",import:" +
                           pd +
                           ",\"service_name:db,incident_number:412\"\r\n"
                           "2,1795202400000000000,,deploy rollback,import:" +
                           pd + ",\"service_name:web,incident_number:413\"\r\n");
  // A service name with a comma stays one tag; a column --map gives a field is no tag.
  const std::string pd2 = f.dir.file("pagerduty2.csv");
  std::ofstream(pd2) << "incident_number,title,service_name,created_on\n"
                     << "7,cpu hog,\"shop, EU\",2026-11-22T10:00:00Z\n";
  f.out.str("");
  CHECK(f.sh.run_dot(".import-incidents " + pd2) == shell::status::ok);
  CHECK(f.out.str().find(",\"service_name:shop; EU,incident_number:7\"\r\n") != std::string::npos);
  f.out.str("");
  f.err.str("");
  CHECK(f.sh.run_dot(".import-incidents " + pd2 + " --map text=service_name") == shell::status::ok);
  CHECK(f.err.str().find("text=service_name, tags=incident_number; ignored columns: title\n") !=
        std::string::npos);
  CHECK(f.out.str().find(",\"shop, EU\",import:" + pd2 + ",incident_number:7\r\n") !=
        std::string::npos);

  // Any other timeline: --map names its columns (case as the file has it, for JSON keys).
  const std::string js = f.dir.file("alerts.json");
  std::ofstream(js) << R"([{"createdAt": "2026-11-21T09:00:00Z", "message": "disk full",
    "team": "storage"}])";
  f.err.str("");
  CHECK(f.sh.run_dot(".import-incidents " + js + " --map start=createdAt,text=message") ==
        shell::status::ok);
  CHECK(f.err.str() == "1 annotations imported from " + js +
                           ": start=createdAt, text=message; ignored columns: team\n");
  // Errors: one line each, nothing imported.
  for (const std::string &bad :
       {js, js + " --map start=created", js + " --map when=createdAt", js + " --map start"}) {
    f.err.str("");
    INFO(bad);
    CHECK(f.sh.run_dot(".import-incidents " + bad) == shell::status::failed);
    CHECK(f.err.str().find('\n') == f.err.str().size() - 1);
  }
  f.out.str("");
  CHECK(f.sh.run_sql("SELECT count(*) FROM annotations") == shell::status::ok);
  CHECK(f.out.str() == "count(*)\r\n5\r\n");
}

// issue 32: the echo of an import said start_ns over formatted times.
TEST_CASE("rsched-sql shell: the import's echo names its times as it shows them", "[rsched-sql]") {
  fixture f;
  CHECK(f.sh.run_dot(".tz UTC") == shell::status::ok);
  const std::string csv = f.dir.file("incidents.csv");
  std::ofstream(csv) << "start,end,text\n2026-11-20T14:00:00Z,2026-11-20T14:30:00Z,outage\n"
                     << "2026-11-20T15:00:00Z,,blip\n";
  CHECK(f.sh.run_dot(".mode table") == shell::status::ok);
  f.out.str("");
  CHECK(f.sh.run_dot(".import-incidents " + csv) == shell::status::ok);
  const std::string table = f.out.str();
  INFO(table);
  CHECK(table.find("start_ns") == std::string::npos);
  CHECK(table.find("end_ns") == std::string::npos);
  CHECK(table.find("| start ") != std::string::npos);
  CHECK(table.find("| end ") != std::string::npos);
  CHECK(table.find("| 2026-11-20 14:00:00+00:00 | 2026-11-20 14:30:00+00:00 | outage ") !=
        std::string::npos);
  // The data modes: the stored UTC ns, under the stored names.
  const std::string csv2 = f.dir.file("incidents2.csv");
  std::ofstream(csv2) << "start,text\n2026-11-21T14:00:00Z,later\n";
  CHECK(f.sh.run_dot(".mode csv") == shell::status::ok);
  f.out.str("");
  CHECK(f.sh.run_dot(".import-incidents " + csv2) == shell::status::ok);
  CHECK(f.out.str() == "id,start_ns,end_ns,text,source,tags\r\n"
                       "3,1795269600000000000,,later,import:" +
                           csv2 + ",\"\"\r\n");
}

TEST_CASE("rsched-sql completion: new dot commands, modes and functions", "[rsched-sql]") {
  const std::vector<std::string> names;
  CHECK(completions("", ".ti", true, names) == std::vector<std::string>{".tiers", ".timer"});
  CHECK(completions("", ".o", true, names) == std::vector<std::string>{".once", ".output"});
  CHECK(completions("", ".im", true, names) == std::vector<std::string>{".import-incidents"});
  CHECK(completions(".mode ", "j", true, names) == std::vector<std::string>{"json", "jsonl"});
  CHECK(completions(".timer ", "o", true, names) == std::vector<std::string>{"off", "on"});
  CHECK(completions(".tz ", "U", true, names) == std::vector<std::string>{"UTC"});
  CHECK(completions("SELECT * FROM ", "spi", false, names) == std::vector<std::string>{"spikes"});
  CHECK(completions("SELECT ", "ag", false, names) == std::vector<std::string>{"ago"});
  CHECK(completions("SELECT ", "hist_me", false, names) ==
        std::vector<std::string>{"hist_mean", "hist_merge"});
  CHECK(completes_file_name(".once ", true));
  CHECK(completes_file_name(".read ", true));
  CHECK_FALSE(completes_file_name(".mode ", true));
  CHECK_FALSE(completes_file_name(".once ", false));
  fixture f;
  const auto all = f.sh.completion_names();
  CHECK(std::find(all.begin(), all.end(), "sched_delay") != all.end());
  CHECK(std::find(all.begin(), all.end(), "hist_percentile") != all.end());
}
