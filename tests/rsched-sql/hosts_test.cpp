// rsched-sql over several hosts (--host NAME=PATH, issue 15): one query across hosts' databases
// with a leading host column in every view, the table functions run per host, bad arguments
// refused in one line (exit 2), files of other schema versions, and every file left exactly as
// it was. The "Several hosts" examples of docs/SQL.md run here against the same two hosts.
#include "rsched/query/annotations.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/sql_shell/options.hpp"
#include "rsched/sql_shell/shell.hpp"
#include "rsched/store/writer.hpp"

#include "helpers.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace rsched_sql_test;
namespace fs = std::filesystem;
using rsched::query::reader;
using rsched::query::value;

namespace {

constexpr std::int64_t sec = 1'000'000'000;
constexpr std::int64_t t1400 = std::int64_t{1795183200} * sec; // 2026-11-20T14:00:00Z
constexpr std::int64_t interval = 10 * sec;
constexpr std::int64_t history_end = t1400 + 10 * 60 * sec; // 14:10
constexpr std::int64_t spike_start = t1400 + 3 * 60 * sec;  // 14:03, on db2 only
constexpr std::int64_t spike_end = spike_start + 60 * sec;  // 14:04
const std::string quoted_comm = "o'brien \"pg\"";           // quotes are data

using samples = std::vector<std::uint64_t>;

// One thread of an interval with these scheduling delays, also counted on CPU 0.
void add_thread(rsched::store::interval_row &iv, std::uint32_t tid, const std::string &comm,
                const samples &ns) {
  rsched::store::thread_row t;
  t.tid = tid;
  t.pid = tid;
  t.start_time_ns = 1000 + tid;
  t.comm = comm;
  t.cgroup = "/system.slice";
  if (iv.cpus.empty()) {
    iv.cpus.emplace_back();
    iv.cpus.back().cpu = 0;
  }
  auto &cpu = iv.cpus.back().m[metric::cpu_sched_delay];
  for (const auto v : ns) {
    t.m[metric::sched_delay].hist.add(v);
    t.m[metric::sched_delay].total += v;
    cpu.hist.add(v);
    cpu.total += v;
    ++cpu.count;
  }
  t.m[metric::sched_delay].count = ns.size();
  iv.threads.push_back(std::move(t));
}

// One host's history: 10 s intervals from 14:00 to 14:10 UTC on 2026-11-20 with postgres (30
// wakeups an interval), web (20) and a comm with quotes (5). With `spike`, postgres waits 5-20 ms
// from 14:03 to 14:04; otherwise 10-200 us.
void write_host(const std::string &path, bool spike, std::uint64_t seed) {
  auto w = rsched::store::writer::open(path);
  REQUIRE(w.ok());
  std::mt19937_64 rng(seed);
  const auto uniform = [&](std::size_t n, std::uint64_t lo, std::uint64_t hi) {
    std::uniform_int_distribution<std::uint64_t> d(lo, hi);
    samples out;
    for (std::size_t i = 0; i < n; ++i) {
      out.push_back(d(rng));
    }
    return out;
  };
  for (std::int64_t ts = t1400; ts < history_end; ts += interval) {
    const bool hot = spike && ts >= spike_start && ts < spike_end;
    rsched::store::interval_row iv;
    iv.start_ns = ts;
    iv.dur_ns = interval;
    iv.boot_id =
        spike ? "00000000-0000-0000-0000-0000000000d2" : "00000000-0000-0000-0000-0000000000d1";
    iv.delay_clock = "monotonic";
    add_thread(iv, 100, "postgres",
               hot ? uniform(30, 5'000'000, 20'000'000) : uniform(30, 10'000, 200'000));
    add_thread(iv, 200, "web", uniform(20, 20'000, 100'000));
    add_thread(iv, 300, quoted_comm, samples(5, 50'000));
    REQUIRE(w->write(iv).ok());
  }
}

// Two hosts: db1 quiet, db2 with postgres's spike and an annotation over it.
struct fleet {
  temp_dir dir{"rsched-hosts"};
  std::string db1 = dir.file("db1.db");
  std::string db2 = dir.file("db2.db");
  fleet() {
    write_host(db1, false, 1);
    write_host(db2, true, 2);
    rsched::query::annotation a;
    a.start_ns = spike_start;
    a.end_ns = spike_end;
    a.text = "failover";
    REQUIRE(rsched::query::add_annotation(db2, a).ok());
    // add_annotation's connection, the last to close, removed db2's -wal and -shm: open the
    // writer once more to leave them as rschedd does (it keeps both, SQLITE_FCNTL_PERSIST_WAL).
    REQUIRE(rsched::store::writer::open(db2).ok());
  }
};

reader pinned(rsched::result<reader> r) {
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  r->set_zone(rsched::timefmt::zone::utc());
  r->set_now(history_end);
  return std::move(r).value();
}

reader open_fleet(const fleet &f) {
  return pinned(reader::open_hosts({{"db1", f.db1}, {"db2", f.db2}}));
}

reader open_one(const std::string &path) {
  return pinned(reader::open(path, true));
}

struct table {
  std::vector<std::string> columns;
  std::vector<std::vector<value>> rows;
};

table query(reader &db, const std::string &sql) {
  table t;
  rsched::query::result_sink sink;
  sink.on_columns = [&](const std::vector<std::string> &c) { t.columns = c; };
  sink.on_row = [&](const std::vector<value> &r) { t.rows.push_back(r); };
  auto r = db.exec(sql, sink);
  INFO(sql);
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return t;
}

std::string query_error(reader &db, const std::string &sql) {
  rsched::query::result_sink sink;
  auto r = db.exec(sql, sink);
  INFO(sql);
  REQUIRE_FALSE(r.ok());
  return r.err().msg;
}

std::string text(const value &v) {
  const auto *s = std::get_if<std::string>(&v);
  return s != nullptr ? *s : std::string("<not text>");
}

std::int64_t integer(const value &v) {
  const auto *i = std::get_if<std::int64_t>(&v);
  REQUIRE(i != nullptr);
  return *i;
}

// A row without its first column (the host).
std::vector<value> tail(const std::vector<value> &r) {
  return {r.begin() + 1, r.end()};
}

// The rows of `t` whose first column is `host`, without it.
std::vector<std::vector<value>> of_host(const table &t, const std::string &host) {
  std::vector<std::vector<value>> out;
  for (const auto &r : t.rows) {
    if (text(r[0]) == host) {
      out.push_back(tail(r));
    }
  }
  return out;
}

std::size_t lines(const std::string &s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

} // namespace

TEST_CASE("several hosts: the worst p99 of a comm, host by host, as each file alone has it",
          "[rsched-sql][hosts]") {
  const fleet f;
  auto all = open_fleet(f);
  const std::string where = "comm = 'postgres' AND ts BETWEEN t('2026-11-20 14:00') AND "
                            "t('2026-11-20 14:10')";
  const auto t = query(all, "SELECT host, hist_pct(hist_merge(hist), 99) AS p99_ns FROM "
                            "sched_delay WHERE " +
                                where + " GROUP BY host ORDER BY p99_ns DESC");
  REQUIRE(t.columns == std::vector<std::string>{"host", "p99_ns"});
  REQUIRE(t.rows.size() == 2);
  CHECK(text(t.rows[0][0]) == "db2");
  CHECK(text(t.rows[1][0]) == "db1");
  // Each host's number is the one its file gives alone.
  const std::map<std::string, std::string> files = {{"db1", f.db1}, {"db2", f.db2}};
  for (const auto &r : t.rows) {
    auto one = open_one(files.at(text(r[0])));
    const auto alone =
        query(one, "SELECT hist_pct(hist_merge(hist), 99) FROM sched_delay WHERE " + where);
    REQUIRE(alone.rows.size() == 1);
    INFO(text(r[0]));
    CHECK(integer(r[1]) == integer(alone.rows[0][0]));
  }
  CHECK(integer(t.rows[0][1]) >= 5'000'000); // the spike: 30 of 1800 samples at 5-20 ms
  CHECK(integer(t.rows[1][1]) < 210'000);
  // The aggregate form and other SQL over the combined views.
  const auto agg = query(all, "SELECT host, hist_percentile(hist, 99) FROM sched_delay WHERE " +
                                  where + " GROUP BY host ORDER BY host");
  REQUIRE(agg.rows.size() == 2);
  CHECK(integer(agg.rows[0][1]) == integer(t.rows[1][1]));
  CHECK(integer(agg.rows[1][1]) == integer(t.rows[0][1]));
  // A comm with quotes is data: selected as a literal, on both hosts.
  const auto q = query(all, "SELECT host, sum(count) FROM sched_delay WHERE comm = 'o''brien "
                            "\"pg\"' GROUP BY host ORDER BY host");
  REQUIRE(q.rows.size() == 2);
  CHECK(integer(q.rows[0][1]) == 5 * 60);
  CHECK(integer(q.rows[1][1]) == 5 * 60);
  const auto names = query(all, "SELECT DISTINCT comm FROM sched_delay WHERE host = 'db1' "
                                "ORDER BY comm");
  REQUIRE(names.rows.size() == 3);
  CHECK(text(names.rows[0][0]) == quoted_comm);
}

TEST_CASE("several hosts: host is the first column of every view and table",
          "[rsched-sql][hosts]") {
  const fleet f;
  auto all = open_fleet(f);
  auto one = open_one(f.db1);
  const auto objects = query(one, "SELECT name FROM sqlite_master WHERE type IN ('table', "
                                  "'view') AND name NOT LIKE 'sqlite%' ORDER BY name");
  REQUIRE(objects.rows.size() > 40);
  for (const auto &o : objects.rows) {
    const std::string name = text(o[0]);
    INFO(name);
    const std::string cols = "SELECT name FROM pragma_table_info('" + name + "')";
    const auto own = query(one, cols);
    const auto combined = query(all, cols);
    REQUIRE(combined.rows.size() == own.rows.size() + 1);
    CHECK(text(combined.rows[0][0]) == "host");
    CHECK(std::vector(combined.rows.begin() + 1, combined.rows.end()) == own.rows);
  }
  for (const std::string view : {"sched_delay", "cpu_sched_delay", "health", "annotations",
                                 "annotation_summary", "timeline", "intervals"}) {
    INFO(view);
    const auto star = query(all, "SELECT * FROM " + view + " LIMIT 1");
    REQUIRE_FALSE(star.columns.empty());
    CHECK(star.columns.front() == "host");
    // Each host's rows are its file's rows.
    const auto counts =
        query(all, "SELECT host, count(*) FROM " + view + " GROUP BY host ORDER BY host");
    for (const auto &[host, path] :
         std::vector<std::pair<std::string, std::string>>{{"db1", f.db1}, {"db2", f.db2}}) {
      auto alone = open_one(path);
      const auto n = integer(query(alone, "SELECT count(*) FROM " + view).rows[0][0]);
      std::int64_t got = 0;
      for (const auto &r : counts.rows) {
        if (text(r[0]) == host) {
          got = integer(r[1]);
        }
      }
      CHECK(got == n);
    }
  }
  // The combined views stay: dropping one would leave its name to the first host's own object.
  CHECK(query_error(all, "DROP VIEW sched_delay").find("it combines the hosts' rows") !=
        std::string::npos);
  query(all, "CREATE TEMP VIEW mine AS SELECT host, comm FROM sched_delay; DROP VIEW mine");
  // "NAME".view is the host's own view, without the host column.
  const auto own = query(all, "SELECT * FROM \"db2\".sched_delay LIMIT 1");
  CHECK(own.columns.front() == "ts");
  const auto a = query(all, "SELECT host, text FROM annotations");
  REQUIRE(a.rows.size() == 1);
  CHECK(text(a.rows[0][0]) == "db2");
  CHECK(text(a.rows[0][1]) == "failover");
}

TEST_CASE("several hosts: spikes, compare, coverage, gaps and during run on each host",
          "[rsched-sql][hosts]") {
  const fleet f;
  auto all = open_fleet(f);
  auto one1 = open_one(f.db1);
  auto one2 = open_one(f.db2);

  SECTION("spikes: a host column, each host's spikes against its own baseline") {
    const std::string sql = "SELECT * FROM spikes('sched_delay', '3x')";
    const auto t = query(all, sql);
    const auto s1 = query(one1, sql);
    const auto s2 = query(one2, sql);
    REQUIRE(t.columns.size() == s2.columns.size() + 1);
    CHECK(t.columns.front() == "host");
    CHECK(std::vector(t.columns.begin() + 1, t.columns.end()) == s2.columns);
    CHECK(s1.rows.empty());
    REQUIRE(s2.rows.size() == 1);
    CHECK(of_host(t, "db2") == s2.rows);
    CHECK(of_host(t, "db1").empty());
    CHECK(text(t.rows[0][8]) == "postgres"); // victim
    CHECK(integer(t.rows[0][1]) == spike_start);
    // The hidden aliases keep working after the host column.
    const auto al = query(all, "SELECT start_ns, duration_ns, host FROM spikes('sched_delay', "
                               "'3x')");
    REQUIRE(al.rows.size() == 1);
    CHECK(integer(al.rows[0][0]) == spike_start);
    CHECK(integer(al.rows[0][1]) == spike_end - spike_start);
    CHECK(text(al.rows[0][2]) == "db2");
  }

  SECTION("compare: every host's keys, ranked together") {
    const std::string sql = "SELECT * FROM compare('2026-11-20 14:00', '2026-11-20 14:03', "
                            "'2026-11-20 14:03', '2026-11-20 14:04')";
    const auto t = query(all, sql);
    CHECK(t.columns.front() == "host");
    REQUIRE(t.rows.size() == 6); // 3 comms on each host
    CHECK(text(t.rows[0][0]) == "db2");
    CHECK(text(t.rows[0][1]) == "postgres");
    CHECK(of_host(t, "db1") == query(one1, sql).rows);
    CHECK(of_host(t, "db2") == query(one2, sql).rows);
    const auto cpu = query(all, "SELECT host, key FROM compare('2026-11-20 14:00', "
                                "'2026-11-20 14:03', '2026-11-20 14:03', '2026-11-20 14:04', "
                                "'cpu') ORDER BY host");
    REQUIRE(cpu.rows.size() == 2);
    CHECK(integer(cpu.rows[0][1]) == 0);
  }

  SECTION("coverage and gaps: one answer per host") {
    const auto c = query(all, "SELECT host, coverage_pct, gaps FROM coverage('2026-11-20 "
                              "14:00', '2026-11-20 14:20')");
    REQUIRE(c.rows.size() == 2);
    CHECK(text(c.rows[0][0]) == "db1");
    CHECK(text(c.rows[1][0]) == "db2");
    CHECK(std::get<double>(c.rows[0][1]) == Approx(50.0));
    const auto g = query(all, "SELECT host, reason, start_ns FROM gaps('2026-11-20 14:00', "
                              "'2026-11-20 14:20')");
    REQUIRE(g.rows.size() == 2);
    CHECK(text(g.rows[0][1]) == "after the last interval");
    CHECK(integer(g.rows[0][2]) == history_end);
  }

  SECTION("during and around: every host's interval starts, for ts IN") {
    const auto d = query(all, "SELECT * FROM during('2026-11-20 14:00', '2026-11-20 14:05')");
    CHECK(d.columns == std::vector<std::string>{"ts"});
    CHECK(d.rows.size() == 30); // both hosts start their intervals at the same instants
    const auto in = query(all, "SELECT host, sum(count) FROM sched_delay WHERE ts IN "
                               "during('2026-11-20 14:00', '2026-11-20 14:05') GROUP BY host "
                               "ORDER BY host");
    REQUIRE(in.rows.size() == 2);
    const std::string alone = "SELECT sum(count) FROM sched_delay WHERE ts IN "
                              "during('2026-11-20 14:00', '2026-11-20 14:05')";
    CHECK(integer(in.rows[0][1]) == integer(query(one1, alone).rows[0][0]));
    CHECK(integer(in.rows[1][1]) == integer(query(one2, alone).rows[0][0]));
    const auto ar = query(all, "SELECT count(*) FROM around('2026-11-20 14:03', '30s')");
    CHECK(integer(ar.rows[0][0]) == 6);
  }

  SECTION("hist_buckets reads no database: no host column") {
    const auto b = query(all, "SELECT * FROM hist_buckets((SELECT hist_merge(hist) FROM "
                              "sched_delay WHERE host = 'db2' AND comm = 'postgres'))");
    CHECK(b.columns == std::vector<std::string>{"lo_ns", "hi_ns", "count"});
    CHECK_FALSE(b.rows.empty());
  }

  SECTION("blame: a host column") {
    const auto b = query(all, "SELECT * FROM blame('postgres')");
    CHECK(b.columns.front() == "host");
  }
}

TEST_CASE("several hosts: ts IN during() is refused where starts alone cannot tell the rows "
          "apart",
          "[rsched-sql][hosts]") {
  // Host a: 10 s intervals from 14:00; host b: one 30 s interval from 14:00, then 10 s ones. The
  // window [14:00:15, 14:01) overlaps b's first interval but not a's, which starts at the same
  // instant: `ts IN during()` would select a's row too.
  temp_dir dir;
  const auto write = [](const std::string &path, std::int64_t first_len) {
    auto w = rsched::store::writer::open(path);
    REQUIRE(w.ok());
    std::int64_t ts = t1400;
    for (int i = 0; i < 10; ++i) {
      rsched::store::interval_row iv;
      iv.start_ns = ts;
      iv.dur_ns = i == 0 ? first_len : interval;
      iv.boot_id = "00000000-0000-0000-0000-0000000000aa";
      add_thread(iv, 1, "x", samples(10, 10'000));
      REQUIRE(w->write(iv).ok());
      ts += iv.dur_ns;
    }
  };
  write(dir.file("a.db"), interval);
  write(dir.file("b.db"), 3 * interval);
  auto all = pinned(reader::open_hosts({{"a", dir.file("a.db")}, {"b", dir.file("b.db")}}));
  const auto err = query_error(all, "SELECT host, count(*) FROM sched_delay WHERE ts IN "
                                    "during('2026-11-20 14:00:15', '2026-11-20 14:01') GROUP BY "
                                    "host");
  CHECK(err.find("during: over several hosts") != std::string::npos);
  CHECK(err.find("host a's interval starting at 2026-11-20 14:00:00+00:00") != std::string::npos);
  CHECK(err.find("ts >= t(...) AND ts < t(...)") != std::string::npos);
  CHECK(err.find('\n') == std::string::npos);
  // A window both hosts' intervals at that instant overlap is answered.
  const auto ok = query(all, "SELECT count(*) FROM during('2026-11-20 14:00:05', '2026-11-20 "
                             "14:01')");
  CHECK(integer(ok.rows[0][0]) > 0);
}

TEST_CASE("several hosts: names and paths are data, and bad ones are refused",
          "[rsched-sql][hosts]") {
  const fleet f;
  SECTION("a name with quotes (the store quotes it; the command line does not allow it)") {
    const std::string odd = "o'b\"x";
    auto all = pinned(reader::open_hosts({{odd, f.db1}, {"db2", f.db2}}));
    const auto h = query(all, "SELECT DISTINCT host FROM sched_delay ORDER BY host = 'db2'");
    REQUIRE(h.rows.size() == 2);
    CHECK(text(h.rows[0][0]) == odd);
    CHECK(integer(query(all, "SELECT count(*) FROM \"o'b\"\"x\".sched_delay").rows[0][0]) == 180);
    const auto s = query(all, "SELECT DISTINCT host FROM coverage()");
    CHECK(text(s.rows[0][0]) == odd);
  }
  SECTION("a path with URI characters") {
    const std::string odd = f.dir.file("a?b#c%20d.db");
    fs::copy_file(f.db1, odd);
    auto all = pinned(reader::open_hosts({{"odd", odd}, {"db2", f.db2}}));
    CHECK(integer(query(all, "SELECT count(*) FROM sched_delay WHERE host = 'odd'").rows[0][0]) ==
          180);
  }
  SECTION("refusals") {
    const auto fails = [](const std::vector<rsched::query::host_file> &hosts, int errnum,
                          const std::string &says) {
      auto r = reader::open_hosts(hosts);
      REQUIRE_FALSE(r.ok());
      INFO(r.err().msg);
      CHECK(r.err().errnum == errnum);
      CHECK(r.err().msg.find(says) != std::string::npos);
      CHECK(r.err().msg.find('\n') == std::string::npos);
    };
    fails({}, EINVAL, "no host");
    fails({{"db1", f.db1}, {"DB1", f.db2}}, EINVAL, "host name 'DB1' is given twice");
    fails({{"Main", f.db1}}, EINVAL, "reserved");
    fails({{"", f.db1}}, EINVAL, "empty");
    fails({{"a", f.db1}, {"b", f.db1}}, EINVAL,
          "host b: " + f.db1 + " is the same file as host a's");
    fails({{"a", f.db1}, {"b", f.dir.file("nope.db")}}, ENOENT,
          "host b: " + f.dir.file("nope.db") + ": no such file");
    std::vector<rsched::query::host_file> many;
    for (int i = 0; i <= reader::max_hosts(); ++i) {
      many.push_back({"h" + std::to_string(i), f.db1});
    }
    fails(many, EINVAL, "at most");
  }
}

TEST_CASE("several hosts: files of other schema versions", "[rsched-sql][hosts]") {
  const fleet f;
  const fs::path data = fs::path(__FILE__).parent_path() / ".." / "store" / "data";
  const std::string v3 = f.dir.file("v3.db");
  fs::copy_file(data / "v3.db", v3);
  std::string note;
  auto all = pinned(reader::open_hosts({{"new", f.db1}, {"old", v3}}, &note));
  CHECK(note.find("different schema versions (new " +
                  std::to_string(rsched::store::schema_version) + ", old 3)") != std::string::npos);
  // health gained delay_clock in schema 4: NULL in the old host's rows, there in the new one's.
  const auto h = query(all, "SELECT host, count(*), count(delay_clock) FROM health GROUP BY host "
                            "ORDER BY host");
  REQUIRE(h.rows.size() == 2);
  CHECK(integer(h.rows[0][1]) == 60);
  CHECK(integer(h.rows[0][2]) == 60);
  CHECK(integer(h.rows[1][1]) > 0);
  CHECK(integer(h.rows[1][2]) == 0);
  // A view the old file lacks has only the new host's rows.
  CHECK(query(all, "SELECT DISTINCT host FROM delay_blame WHERE host = 'old'").rows.empty());
  // The table functions read each file as it is.
  const auto c = query(all, "SELECT host, count(*) FROM coverage() GROUP BY host ORDER BY host");
  CHECK(c.rows.size() == 2);
  const auto s = query(all, "SELECT host, victim FROM spikes('sched_delay', 1000)");
  CHECK_FALSE(s.rows.empty());
  // Nothing differs: no note.
  auto same = reader::open_hosts({{"db1", f.db1}, {"db2", f.db2}}, &note);
  REQUIRE(same.ok());
  CHECK(note.empty());
}

TEST_CASE("rsched-sql --host: command line", "[rsched-sql][hosts]") {
  using rsched::sql_shell::parse_args;
  using rsched::sql_shell::parse_host_arg;
  const auto parse = [](std::vector<std::string_view> a) {
    return parse_args(std::span<const std::string_view>(a));
  };
  auto o =
      parse({"--host", "db1=a.db", "-c", "SELECT 1", "--host", "db-2.example_x=b=c.db", "--csv"});
  REQUIRE(o.ok());
  REQUIRE(o->hosts.size() == 2);
  CHECK(o->hosts[0].name == "db1");
  CHECK(o->hosts[0].path == "a.db");
  CHECK(o->hosts[1].name == "db-2.example_x");
  CHECK(o->hosts[1].path == "b=c.db"); // split at the first '='
  CHECK(o->db_path.empty());
  CHECK(o->commands.size() == 1);
  CHECK(parse({"--host", "a=x.db", "plot", "-c", "SELECT 1, 2"}).ok());
  const auto bad = [&](std::vector<std::string_view> a, const std::string &says) {
    auto r = parse(std::move(a));
    REQUIRE_FALSE(r.ok());
    INFO(r.err().msg);
    CHECK(r.err().msg.find(says) != std::string::npos);
  };
  bad({"--host"}, "option '--host' needs NAME=PATH");
  bad({"--host", "db1"}, "--host needs NAME=PATH, got 'db1'");
  bad({"--host", "=a.db"}, "the host name is empty");
  bad({"--host", "a="}, "the path is empty");
  bad({"--host", "db 1=a.db"}, "a host name holds letters, digits");
  bad({"--host", "o'b=a.db"}, "a host name holds letters, digits");
  bad({"--host", "-x=a.db"}, "starting with a letter or digit");
  bad({"--host", "TEMP=a.db"}, "'TEMP' is reserved");
  bad({"--host", std::string(rsched::sql_shell::max_host_name + 1, 'h') + "=a.db"}, "longer");
  bad({"--host", "a=x.db", "--host", "A=y.db"}, "host name 'A' is given twice");
  bad({"--host", "a=x.db", "some.db"}, "--host cannot be combined with a database path");
  bad({"some.db", "--host", "a=x.db"}, "--host cannot be combined with a database path");
  bad({"--host", "a=x.db", "heatmap"}, "heatmap reads one database");
  bad({"--host", "a=x.db", "report"}, "report reads one database");
  bad({"--host", "a=x.db", "export", "openmetrics"}, "export reads one database");
  bad({"--host", "a=x.db", "x.db", "mark", "text"}, "mark writes one database");
  CHECK(parse_host_arg("a=b").ok());
  CHECK(rsched::sql_shell::usage_text().find("--host NAME=PATH") != std::string::npos);
}

TEST_CASE("rsched-sql --host: bad arguments exit 2 with one line", "[rsched-sql][hosts]") {
  const fleet f;
  const std::string h1 = "db1=" + f.db1;
  std::vector<std::vector<std::string>> cases = {
      {"--host"},
      {"--host", "db1"},
      {"--host", "=" + f.db1},
      {"--host", "db 1=" + f.db1},
      {"--host", "o'b=" + f.db1},
      {"--host", "db1="},
      {"--host", "main=" + f.db1},
      {"--host", h1, "--host", "DB1=" + f.db2},
      {"--host", h1, f.db2},
      {"--host", h1, "heatmap"},
      {"--host", h1, "--host", "again=" + f.db1, "-c", "SELECT 1"}, // the same file twice
  };
  std::vector<std::string> many;
  for (int i = 0; i <= reader::max_hosts(); ++i) {
    many.push_back("--host");
    many.push_back("h" + std::to_string(i) + "=" + f.db1);
  }
  cases.push_back(many);
  for (auto &args : cases) {
    args.push_back("-c");
    args.push_back("SELECT 1");
    const auto r = run_sql(args);
    INFO(args[args.size() > 3 ? 3 : args.size() - 1]);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
  }
  // Files that cannot be read: one line naming the host and the path, exit 1.
  const std::string empty = f.dir.file("empty.db");
  { std::ofstream(empty, std::ios::binary).flush(); }
  const std::string missing = f.dir.file("missing.db");
  for (const auto &[host, says] : std::vector<std::pair<std::string, std::string>>{
           {"db3=" + missing, "rsched-sql: host db3: " + missing + ": no such file"},
           {"db3=" + empty, "rsched-sql: host db3: " + empty + ": not an rsched database"},
           {"db3=" + f.dir.str(), "rsched-sql: host db3: " + f.dir.str() + ": is a directory"}}) {
    const auto r = run_sql({"--host", h1, "--host", host, "-c", "SELECT 1"});
    INFO(r.err);
    CHECK(r.status == 1);
    CHECK(r.out.empty());
    CHECK(lines(r.err) == 1);
    CHECK(r.err.rfind(says, 0) == 0);
  }
}

TEST_CASE("rsched-sql --host: the hosts' files are left exactly as they were",
          "[rsched-sql][hosts]") {
  const fleet f;
  struct snapshot {
    std::string bytes;
    std::int64_t mtime_ns = 0;
    bool exists = false;
  };
  const auto snap = [](const std::string &path) {
    snapshot s;
    struct stat st {};
    if (stat(path.c_str(), &st) == 0) {
      s.exists = true;
      s.mtime_ns = std::int64_t{st.st_mtim.tv_sec} * sec + st.st_mtim.tv_nsec;
      s.bytes = slurp(path);
    }
    return s;
  };
  // The database and its WAL (the -shm is SQLite's shared-memory index, which every reader of a
  // WAL database maps; it holds no data).
  const std::vector<std::string> files = {f.db1, f.db1 + "-wal", f.db2, f.db2 + "-wal"};
  std::vector<snapshot> before;
  for (const auto &p : files) {
    before.push_back(snap(p));
  }
  REQUIRE(before[0].exists);
  REQUIRE(before[2].exists);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string script = R"sql(
SELECT host, hist_pct(hist_merge(hist), 99) AS p99_ns FROM sched_delay GROUP BY host;
SELECT * FROM spikes('sched_delay', '3x');
SELECT * FROM compare('2026-11-20 14:00', '2026-11-20 14:03', '2026-11-20 14:03', '2026-11-20 14:04');
SELECT * FROM coverage();
SELECT host, count(*) FROM annotation_summary GROUP BY host;
CREATE TEMP TABLE mine AS SELECT host, comm FROM sched_delay;
INSERT INTO annotations(start_ns, text) VALUES (1, 'no');
INSERT INTO "db1".annotations(start_ns, text) VALUES (1, 'no');
DELETE FROM "db2".intervals;
ATTACH 'x.db' AS x;
DETACH "db1";
PRAGMA "db1".user_version = 9;
VACUUM "db2";
.mark nope
.import-incidents /dev/null
.tables
)sql";
  const auto r = run_sql({"--host", "db1=" + f.db1, "--host", "db2=" + f.db2, "--csv"}, script);
  INFO(r.err);
  CHECK(r.status == 1); // the refused statements
  CHECK(r.out.find("host,p99_ns") != std::string::npos);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 9);
  CHECK(r.err.find("rsched-sql: .mark writes one database") != std::string::npos);
  for (std::size_t i = 0; i < files.size(); ++i) {
    INFO(files[i]);
    const auto after = snap(files[i]);
    CHECK(after.exists == before[i].exists);
    CHECK(after.mtime_ns == before[i].mtime_ns);
    CHECK(after.bytes == before[i].bytes);
  }
  CHECK_FALSE(fs::exists(f.dir.file("x.db")));
}

TEST_CASE("rsched-sql --host: the shell", "[rsched-sql][hosts]") {
  const fleet f;
  auto all = open_fleet(f);
  std::ostringstream out;
  std::ostringstream err;
  rsched::sql_shell::output_config cfg;
  cfg.zone = rsched::timefmt::zone::utc();
  rsched::sql_shell::shell sh(all, out, err, cfg);
  using st = rsched::sql_shell::shell::status;
  CHECK(sh.run_command(".tables") == st::ok);
  CHECK(out.str().find("\nsched_delay\n") != std::string::npos);
  out.str("");
  CHECK(sh.run_command(".help") == st::ok);
  CHECK(out.str().find("sched_delay*") != std::string::npos);
  CHECK(out.str().find("Each starts with a host column") != std::string::npos);
  CHECK(sh.run_command(".heatmap") == st::failed);
  CHECK(err.str().find(".heatmap reads one database") != std::string::npos);
  CHECK(sh.run_command(".mark deploy") == st::failed);
  CHECK(err.str().find(".mark writes one database") != std::string::npos);
  err.str("");
  // A window partly recorded: one note per host.
  CHECK(sh.run_command("SELECT count(*) FROM sched_delay WHERE ts IN during('2026-11-20 13:55', "
                       "'2026-11-20 14:05')") == st::ok);
  CHECK(err.str().find("note: host db1: the window 2026-11-20 13:55:00+00:00") !=
        std::string::npos);
  CHECK(err.str().find("note: host db2: the window") != std::string::npos);
  CHECK(lines(err.str()) == 2);
  // Completion knows the combined views and their host column.
  const auto names = sh.schema_names();
  CHECK(std::find(names.begin(), names.end(), "host") != names.end());
}

// docs/SQL.md, "Several hosts": each ```sh block runs (in a directory holding this test's db1.db
// and db2.db, rsched-sql on PATH, TZ=UTC, now = 14:10) and prints the ```text block after it,
// standard error included. RSCHED_UPDATE_GOLDEN=1 rewrites those blocks from the current output
// (review the diff).
TEST_CASE("docs/SQL.md: the Several hosts examples print what the text says",
          "[rsched-sql][hosts]") {
  const fleet f;
  const auto doc = fs::path(__FILE__).parent_path() / ".." / ".." / "docs" / "SQL.md";
  std::ifstream in(doc);
  REQUIRE(in.good());
  std::vector<std::string> doc_lines;
  for (std::string l; std::getline(in, l);) {
    doc_lines.push_back(l);
  }
  const bool update = std::getenv("RSCHED_UPDATE_GOLDEN") != nullptr;
  const std::string bin_dir = fs::path(binary).parent_path().string();
  std::vector<std::string> out_lines;
  bool inside = false;
  std::size_t examples = 0;
  for (std::size_t i = 0; i < doc_lines.size(); ++i) {
    const std::string &l = doc_lines[i];
    out_lines.push_back(l);
    if (l.rfind("## ", 0) == 0) {
      inside = l == "## Several hosts";
      continue;
    }
    if (!inside || l != "```sh") {
      continue;
    }
    std::string script;
    std::size_t j = i + 1;
    for (; j < doc_lines.size() && doc_lines[j] != "```"; ++j) {
      script += doc_lines[j] + "\n";
      out_lines.push_back(doc_lines[j]);
    }
    REQUIRE(j < doc_lines.size());
    out_lines.push_back(doc_lines[j]);
    i = j;
    std::string expected;
    bool has_expected = false;
    std::size_t k = i + 1;
    if (k + 1 < doc_lines.size() && doc_lines[k].empty() && doc_lines[k + 1] == "```text") {
      has_expected = true;
      for (k += 2; k < doc_lines.size() && doc_lines[k] != "```"; ++k) {
        expected += doc_lines[k] + "\n";
      }
    }
    const std::string file = f.dir.file("example.sh");
    {
      std::ofstream s(file, std::ios::binary | std::ios::trunc);
      s << script;
    }
    const std::string cmd =
        "cd '" + f.dir.str() + "' && PATH='" + bin_dir +
        "':\"$PATH\" TZ=UTC RSCHED_SQL_NOW=" + std::to_string(history_end / sec) +
        " sh example.sh 2>&1";
    FILE *p = popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    std::string raw;
    std::array<char, 4096> buf{};
    std::size_t n = 0;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) {
      raw.append(buf.data(), n);
    }
    const int status = pclose(p);
    std::string got;
    for (std::size_t c = 0; c < raw.size(); ++c) {
      if (!(raw[c] == '\r' && c + 1 < raw.size() && raw[c + 1] == '\n')) {
        got += raw[c];
      }
    }
    INFO(script);
    CHECK(WIFEXITED(status));
    ++examples;
    if (update) {
      out_lines.push_back("");
      out_lines.push_back("```text");
      std::istringstream gs(got);
      for (std::string g; std::getline(gs, g);) {
        out_lines.push_back(g);
      }
      out_lines.push_back("```");
      if (has_expected) {
        i = k;
      }
    } else {
      CHECK(has_expected);
      CHECK(got == expected);
    }
  }
  CHECK(examples >= 6);
  if (update) {
    std::ofstream o(doc, std::ios::trunc);
    for (const auto &l : out_lines) {
      o << l << "\n";
    }
  }
}
