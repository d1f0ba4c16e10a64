// Values are never SQL (issue 33): a comm, a cgroup and annotation texts holding a quote, "?1", a
// semicolon and the word "tid" go through every path of rsched-sql that once formatted a value
// into its SQL (the report's worst comms and its worst threads' plot, the annotations it lists,
// export openmetrics' cgroups, export perfetto's comms, the echo of .import-incidents) and come
// out as the data they are, counted as SQL counts them. Spliced into the SQL text instead, the
// quote ends a literal (a syntax error), and even quoted as a literal, the comm's "tid" read as
// part of a condition sends the report's worst-comm heatmap to other tiers than the rest (the
// report fails). A user's --where stays SQL, and may hold a literal with "?1" in it; a parameter
// of its own has no value and is refused.
#include "rsched/query/annotations.hpp"

#include "helpers.hpp"
#include "store_test_util.hpp"

#include <random>

namespace {

using rsched_sql_test::run_sql;
using namespace store_test;

constexpr std::int64_t t0 = 1'795'179'600LL * sec; // 2026-11-20 13:00:00 UTC, an hour boundary
constexpr std::int64_t step = minute;
constexpr std::int64_t t_end = t0 + 4 * hour;
constexpr std::int64_t burst_a = t0 + 3 * hour; // the hostile thread waits 20-40 ms for 10 min
constexpr std::int64_t burst_b = burst_a + 10 * minute;

const std::string evil_comm = "o'k ?1; tid";
const std::string evil_cgroup = "/x'y ?1; z.slice";
const std::string mark_text = "deploy 'v2'; ?1 -- x";
const std::string import_text = "it's ?2; DROP TABLE x; --";

// Four hours of one-minute intervals, two threads (the hostile one and "plain"), rollups
// built, an annotation over the hostile thread's burst. Once per test process.
const std::string &history() {
  static temp_dir dir;
  static const std::string path = [] {
    const std::string p = dir.file("params.db");
    auto w = open_writer(p);
    w.set_retention(forever());
    std::mt19937_64 rng(33);
    for (std::int64_t t = t0; t < t_end; t += step) {
      std::vector<std::uint64_t> evil;
      std::vector<std::uint64_t> plain;
      for (int j = 0; j < 30; ++j) {
        evil.push_back(4000 + rng() % 4000);
        plain.push_back(3000 + rng() % 3000);
      }
      if (t >= burst_a && t < burst_b) {
        for (int j = 0; j < 30; ++j) {
          evil.push_back(20'000'000 + rng() % 20'000'000);
        }
      }
      std::vector<rsched::store::thread_row> threads;
      threads.push_back(make_thread(4242, evil_comm, evil, {}, evil_cgroup));
      threads.push_back(make_thread(7, "plain", plain, {}, "/plain.slice"));
      std::vector<rsched::store::cpu_row> cpus(1);
      cpus[0].cpu = 0;
      cpus[0].m[metric::cpu_sched_delay] = value_of(layout::latency, plain);
      auto iv = make_interval(t, std::move(threads), std::move(cpus));
      iv.dur_ns = step;
      write_ok(w, iv);
      REQUIRE(w.maintain(t + step).ok());
    }
    for (int i = 0; i < 100000; ++i) {
      auto r = w.maintain(t_end + 2 * hour);
      REQUIRE(r.ok());
      if (r->idle()) {
        break;
      }
    }
    rsched::query::annotation a;
    a.start_ns = burst_a;
    a.end_ns = burst_b;
    a.text = mark_text;
    REQUIRE(rsched::query::add_annotation(p, a).ok());
    return p;
  }();
  return path;
}

std::string epoch(std::int64_t ns) {
  return std::to_string(ns / sec);
}

// The whole window, as rsched-sql's arguments.
std::vector<std::string> window() {
  return {"--from", epoch(t0), "--to", epoch(t_end)};
}

std::vector<std::string> args(std::vector<std::string> head, const std::vector<std::string> &tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// `s` as XML text (the report's and the SVGs' escaping of these characters).
std::string xml(const std::string &s) {
  std::string out;
  for (const char c : s) {
    out += c == '\'' ? std::string("&apos;") : std::string(1, c);
  }
  return out;
}

// sum(count) of sched_delay over the window where `column` is `v` (bound, as it should be).
std::int64_t samples_of(const std::string &column, const std::string &v) {
  auto db = open_reader(history());
  std::int64_t n = -1;
  rsched::query::result_sink sink;
  sink.on_row = [&](const std::vector<value> &row) { n = as_int(row[0]); };
  REQUIRE(db.exec("SELECT sum(count) FROM sched_delay WHERE " + column +
                      " = ?1 AND ts >= ?2 AND ts < ?3",
                  {v, t0, t_end}, sink)
              .ok());
  return n;
}

} // namespace

TEST_CASE("hostile values: the report reads its worst comms, threads and annotations as data",
          "[rsched-sql]") {
  REQUIRE(samples_of("comm", evil_comm) > 0);
  const auto r = run_sql(args({history(), "report"}, window()));
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.empty());
  // The worst comms: the hostile one among them, its heatmap panel named by it, the picture's
  // title showing the comms as the condition they are.
  CHECK(r.out.find("The comms with the highest p99") != std::string::npos);
  CHECK(r.out.find("comm = " + xml(evil_comm)) != std::string::npos);
  CHECK(r.out.find("comm IN (" + xml("'o''k ?1; tid'")) != std::string::npos);
  // The annotation's section, and its worst threads' plot with the hostile thread in it.
  CHECK(r.out.find("Annotation 1: " + xml(mark_text)) != std::string::npos);
  CHECK(r.out.find("The worst threads' p99") != std::string::npos);
  CHECK(r.out.find(xml(evil_comm) + " (tid 4242)") != std::string::npos);

  // --where is SQL: a literal holding the hostile comm (with its "?1") is a literal.
  const auto w = run_sql(args({history(), "report", "--where", "comm = 'o''k ?1; tid'"}, window()));
  INFO(w.err);
  REQUIRE(w.status == 0);
  CHECK(w.out.find("threads where comm = " + xml("'o''k ?1; tid'")) != std::string::npos);
  // Its worst comms: the hostile one alone, with every sample of it.
  CHECK(w.out.find(xml("sched_delay where (comm = 'o''k ?1; tid') AND comm IN ('o''k ?1; tid') "
                       "by comm (top 1) · ") +
                   std::to_string(samples_of("comm", evil_comm)) + " samples") !=
        std::string::npos);
}

TEST_CASE("hostile values: export reads its cgroups and comms as data", "[rsched-sql]") {
  const auto om = run_sql(args({history(), "export", "openmetrics"}, window()));
  INFO(om.err);
  REQUIRE(om.status == 0);
  // The hostile cgroup is a series of its own (not "other"), with every sample of it.
  const std::string count =
      "rsched_cgroup_sched_delay_seconds_count{cgroup=\"" + evil_cgroup + "\"} ";
  const auto last = om.out.rfind(count);
  REQUIRE(last != std::string::npos);
  const auto value_at = last + count.size();
  CHECK(om.out.substr(value_at, om.out.find(' ', value_at) - value_at) ==
        std::to_string(samples_of("cgroup", evil_cgroup)));

  const auto pf = run_sql(args({history(), "export", "perfetto"}, window()));
  INFO(pf.err);
  REQUIRE(pf.status == 0);
  // The hostile comm's delay track, and the annotation's slice.
  CHECK(pf.out.find("\"name\":\"" + evil_comm + "\",\"args\":{\"p50_ms\"") != std::string::npos);
  CHECK(pf.out.find("\"name\":\"" + mark_text + "\"") != std::string::npos);
  // --where narrows them to the hostile cgroup, written as an SQL literal.
  const auto only = run_sql(
      args({history(), "export", "perfetto", "--where", "cgroup = '/x''y ?1; z.slice'"}, window()));
  INFO(only.err);
  REQUIRE(only.status == 0);
  CHECK(only.out.find("\"name\":\"" + evil_comm + "\",\"args\":{\"p50_ms\"") != std::string::npos);
  CHECK(only.out.find("\"name\":\"plain\"") == std::string::npos);
}

TEST_CASE("hostile values: .import-incidents echoes what it added, found by id", "[rsched-sql]") {
  temp_dir dir;
  const std::string db = dir.file("copy.db");
  std::filesystem::copy_file(history(), db);
  const std::string csv = dir.file("incidents.csv");
  {
    std::ofstream f(csv, std::ios::binary);
    f << "start,text\n2026-11-20T15:00:00Z,\"" << import_text << "\"\n";
  }
  const auto r = run_sql({db, "--csv", "-c", ".import-incidents " + csv});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const auto rows = rsched_sql_test::parse_csv(r.out);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1][0] == "2");
  CHECK(rows[1][3] == import_text);
}

TEST_CASE("hostile values: --where is SQL without parameters of its own", "[rsched-sql]") {
  for (const char *cmd : {"heatmap", "report", "export"}) {
    for (const char *where : {"comm = ?1", "comm = ?", "comm = :c", "tid = @t + 1"}) {
      std::vector<std::string> a = {history(), cmd};
      if (std::string(cmd) == "export") {
        a.emplace_back("openmetrics");
      }
      const auto r = run_sql(args(a, {"--where", where}));
      INFO(cmd << " --where " << where);
      CHECK(r.status == 2);
      CHECK(r.out.empty());
      CHECK(r.err.find("--where is a condition in SQL and takes no parameter") !=
            std::string::npos);
    }
  }
  // In a literal or a comment, '?' and ':' are text.
  const auto h = run_sql(args({history(), "heatmap", "--by", "comm", "--where",
                               "comm = 'o''k ?1; tid' AND \"comm\" <> ':x' /* ?2 */"},
                              window()));
  INFO(h.err);
  REQUIRE(h.status == 0);
  CHECK(h.out.find("by comm (top 1) · " + std::to_string(samples_of("comm", evil_comm)) +
                   " samples") != std::string::npos);
}
