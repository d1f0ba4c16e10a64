// rsched-sql's pictures over a synthetic three-hour history (10 s intervals, a five-minute hole,
// an annotation, a latency burst, hostile comm bytes, rollup tiers built): heatmap cells add up
// to what SQL counts for the same view, filter and window (raw rows and tier-routed long
// windows alike), --by panels, gaps and annotations where they are, the plot and the report,
// the documents parse (python3's xml.etree and html.parser), bad arguments are one-line errors
// with exit 2, and (tagged [browser], its own CTest entry) the report renders in headless
// Chromium with its pictures drawn and no console error.
#include "rsched/base/text.hpp"
#include "rsched/query/annotations.hpp"
#include "rsched/sql_shell/pictures.hpp"
#include "rsched/sql_shell/shell.hpp"
#include "rsched/stats/percentile.hpp"

#include "root_guard.hpp"
#include "store_test_util.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace store_test;
using rsched::sql_shell::heatmap_args;
using rsched::store::retention;

namespace {

constexpr std::int64_t t0 = 1'795'179'600LL * sec; // 2026-11-20 13:00:00 UTC, an hour boundary
constexpr std::int64_t step = 10 * sec;
constexpr std::int64_t hole_a = t0 + 70 * minute; // nothing recorded in [hole_a, hole_b)
constexpr std::int64_t hole_b = t0 + 75 * minute;
constexpr std::int64_t burst_a = t0 + 100 * minute; // "web" waits 30-60 ms in [burst_a, +2 min)
constexpr std::int64_t mark_a = t0 + 90 * minute;   // the annotation [mark_a, mark_b]
constexpr std::int64_t mark_b = t0 + 95 * minute;
constexpr std::int64_t t_end = t0 + 3 * hour;

const std::string evil_comm = "ev\"il,<b>&\x1b[2J\xff";
const std::string mark_text = "deploy <v2> & \"rollback\"";

const std::string binary = RSCHED_BINARY_DIR "/apps/rsched-sql/rsched-sql";
const std::string checker = RSCHED_SOURCE_DIR "/tests/pictures/render_check.py";

// The history, written through store::writer as rschedd would (maintain() after each write),
// rollups built; once per test process.
const std::string &history() {
  static temp_dir dir;
  static const std::string path = [] {
    const std::string p = dir.file("history.db");
    auto w = open_writer(p);
    retention keep;
    keep.keep_raw_ns = keep.keep_1m_ns = keep.keep_1h_ns = 0;
    keep.max_bytes = 0;
    w.set_retention(keep);
    std::mt19937_64 rng(20261124);
    const char *comms[] = {"web", "db", "batch"};
    const char *cgroups[] = {"/web.slice", "/db.slice", "/batch.slice", "/evil"};
    for (std::int64_t t = t0; t < t_end; t += step) {
      if (t >= hole_a && t < hole_b) {
        continue;
      }
      std::vector<rsched::store::thread_row> threads;
      for (std::uint32_t i = 0; i < 4; ++i) {
        for (std::uint32_t k = 0; k < 2; ++k) {
          std::vector<std::uint64_t> d;
          const std::size_t n = rng() % 20;
          for (std::size_t j = 0; j < n; ++j) {
            d.push_back((1000 + rng() % 1000) << (rng() % 14));
          }
          if (i == 0 && t >= burst_a && t < burst_a + 2 * minute) {
            for (int j = 0; j < 5; ++j) {
              d.push_back(30'000'000 + rng() % 30'000'000);
            }
          }
          auto th = make_thread(100 + i * 10 + k, i < 3 ? comms[i] : evil_comm, d, {}, cgroups[i]);
          th.pid = 100 + i * 10;
          th.m[metric::slice_voluntary] =
              value_of(layout::latency, {(5000 + rng() % 5000) << (rng() % 10)});
          if (rng() % 2 == 0) {
            th.m[metric::slice_involuntary] = value_of(layout::latency, {4'000'000});
          }
          threads.push_back(std::move(th));
        }
      }
      std::vector<rsched::store::cpu_row> cpus(2);
      for (std::uint32_t c = 0; c < 2; ++c) {
        cpus[c].cpu = c;
        std::vector<std::uint64_t> d;
        for (std::size_t j = 0; j < 1 + rng() % 30; ++j) {
          d.push_back((1000 + rng() % 1000) << (rng() % 12));
        }
        cpus[c].m[metric::cpu_sched_delay] = value_of(layout::latency, d);
      }
      auto iv = make_interval(t, std::move(threads), std::move(cpus));
      iv.dur_ns = step;
      iv.groups = 1 | 2;
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
    a.start_ns = mark_a;
    a.end_ns = mark_b;
    a.text = mark_text;
    REQUIRE(rsched::query::add_annotation(p, a).ok());
    return p;
  }();
  return path;
}

reader open_history() {
  auto r = reader::open(history(), true);
  REQUIRE(r.ok());
  r->set_zone(rsched::timefmt::zone::utc());
  return std::move(r).value();
}

std::string epoch(std::int64_t ns) {
  return std::to_string(ns / sec);
}

// Sum of one integer attribute over every element that has it.
std::uint64_t attr_sum(const std::string &doc, const std::string &attr) {
  std::uint64_t sum = 0;
  const std::regex re(" " + attr + "=\"([0-9]+)\"");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), re); it != std::sregex_iterator();
       ++it) {
    sum += std::stoull((*it)[1].str());
  }
  return sum;
}

std::size_t occurrences(const std::string &doc, const std::string &what) {
  std::size_t n = 0;
  for (auto p = doc.find(what); p != std::string::npos; p = doc.find(what, p + 1)) {
    ++n;
  }
  return n;
}

std::uint64_t sql_count(reader &db, const std::string &sql) {
  return static_cast<std::uint64_t>(scalar_int(db, sql));
}

std::string heatmap_svg_of(reader &db, const heatmap_args &a, std::size_t columns = 180) {
  auto panels = rsched::sql_shell::load_heatmap(db, a, columns);
  INFO("error: " << (panels.ok() ? std::string() : panels.err().msg));
  REQUIRE(panels.ok());
  return rsched::sql_shell::heatmap_svg(*panels, a, rsched::timefmt::zone::utc());
}

rsched::test::program_output exec(const std::vector<std::string> &argv) {
  return rsched::test::run_program(argv);
}

// python3 checks that `file` is well-formed: XML (an SVG) or HTML whose tags balance and whose
// inline SVGs are well-formed XML. Prints "ok N" (N = SVG documents checked) or the problem.
std::string parse_check(const std::string &file, bool html) {
  const std::string script = R"py(
import sys, re, xml.etree.ElementTree as ET
from html.parser import HTMLParser
data = open(sys.argv[1], encoding="utf-8").read()
if sys.argv[2] == "svg":
    root = ET.fromstring(data)
    assert root.tag == "{http://www.w3.org/2000/svg}svg", root.tag
    print("ok 1")
    sys.exit(0)
void = {"meta", "br", "img", "hr", "link", "input", "col", "area", "base", "wbr", "source"}
class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack = []
    def handle_starttag(self, tag, attrs):
        if tag not in void:
            self.stack.append(tag)
    def handle_startendtag(self, tag, attrs):
        pass
    def handle_endtag(self, tag):
        if tag in void:
            return
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()
p = P()
p.feed(data)
p.close()
assert not p.stack, f"unclosed: {p.stack}"
svgs = re.findall(r"<svg .*?</svg>", data, re.S)
for s in svgs:
    ET.fromstring(s)
print(f"ok {len(svgs)}")
)py";
  const auto r = exec({"python3", "-c", script, file, html ? "html" : "svg"});
  return r.status == 0 ? r.out : "python3 failed (" + std::to_string(r.status) + "): " + r.err;
}

} // namespace

TEST_CASE("heatmap cells add up to SQL's samples for the same view, filter and window",
          "[pictures]") {
  auto db = open_history();
  struct probe {
    std::string view;
    std::string where;
    std::int64_t from;
    std::int64_t to;
    std::string count_sql; // the samples of one row in SQL
  };
  const std::vector<probe> probes = {
      {"sched_delay", "", t0 + 10 * minute, t0 + 30 * minute, "sum(hist_count(hist))"},
      {"sched_delay", "comm = 'web'", t0 + 95 * minute, t0 + 110 * minute, "sum(count)"},
      {"sched_delay", "cgroup LIKE '/evil%' AND tid % 2 = 1", t0, t_end, "sum(count)"},
      {"timeslice", "", t0 + 5 * minute, t0 + 65 * minute,
       "sum(voluntary_count + involuntary_count)"},
      {"cpu_sched_delay", "cpu = 1", t0 + 61 * minute, t0 + 80 * minute, "sum(count)"},
      // odd edges: mid-interval, across the hole
      {"sched_delay", "", t0 + 69 * minute + 5 * sec, t0 + 76 * minute + 15 * sec, "sum(count)"},
  };
  for (const auto &p : probes) {
    heatmap_args a;
    a.view = p.view;
    a.where = p.where;
    a.from = epoch(p.from);
    a.to = epoch(p.to);
    const std::string svg = heatmap_svg_of(db, a);
    const std::string cond = p.where.empty() ? "" : " AND (" + p.where + ")";
    const auto want = sql_count(db, fmt::format("SELECT {} FROM {} WHERE ts >= {} AND ts < {}{}",
                                                p.count_sql, p.view, p.from, p.to, cond));
    INFO(p.view << " where " << p.where);
    CHECK(want > 0);
    CHECK(attr_sum(svg, "data-count") == want);
    CHECK(svg.find("data-source=\"" + p.view + "\"") != std::string::npos);
  }
}

TEST_CASE("a long window is read from the rollup tiers, exactly", "[pictures]") {
  auto db = open_history();
  // The whole history: columns of 2 min from the 1-minute tier (raw rows at the ragged ends).
  heatmap_args a;
  a.from = epoch(t0 - 90 * sec);
  a.to = epoch(t_end + 50 * sec);
  const std::string svg = heatmap_svg_of(db, a);
  CHECK(svg.find("data-source=\"sched_delay + sched_delay_1m") != std::string::npos);
  CHECK(svg.find("data-step=\"120000000000\"") != std::string::npos);
  const auto all = sql_count(db, fmt::format("SELECT sum(count) FROM sched_delay WHERE ts >= {} "
                                             "AND ts < {}",
                                             t0 - 90 * sec, t_end + 50 * sec));
  CHECK(attr_sum(svg, "data-count") == all);
  // Hours: the 1-hour tier.
  a.step = "1h";
  const std::string hourly = heatmap_svg_of(db, a);
  CHECK(hourly.find("sched_delay_1h") != std::string::npos);
  CHECK(attr_sum(hourly, "data-count") == all);
  // A condition on a comm is answered by the rollups too; one on a tid only by raw rows.
  a.step = "5m";
  a.where = "comm = 'db'";
  const std::string db_only = heatmap_svg_of(db, a);
  CHECK(db_only.find("sched_delay_1m") != std::string::npos);
  a.where = "tid = 110";
  const std::string tid_only = heatmap_svg_of(db, a);
  CHECK(tid_only.find("data-source=\"sched_delay\"") != std::string::npos);
  CHECK(attr_sum(db_only, "data-count") ==
        sql_count(db, "SELECT sum(count) FROM sched_delay WHERE comm = 'db'"));
  CHECK(attr_sum(tid_only, "data-count") ==
        sql_count(db, "SELECT sum(count) FROM sched_delay WHERE tid = 110"));
}

TEST_CASE("heatmap --by draws the top panels, each adding up to its key's samples", "[pictures]") {
  auto db = open_history();
  heatmap_args a;
  a.from = epoch(t0);
  a.to = epoch(t0 + hour);
  a.by = "comm";
  a.top = 3;
  auto panels = rsched::sql_shell::load_heatmap(db, a, 180);
  REQUIRE(panels.ok());
  REQUIRE(panels->size() == 3);
  const auto per_comm = run(db, fmt::format("SELECT comm, sum(count) FROM sched_delay WHERE ts >= "
                                            "{} AND ts < {} GROUP BY comm ORDER BY 2 DESC",
                                            t0, t0 + hour));
  REQUIRE(per_comm.rows.size() == 4);
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK((*panels)[i].title == "comm = " + as_text(per_comm.rows[i][0]));
    CHECK((*panels)[i].total() == static_cast<std::uint64_t>(as_int(per_comm.rows[i][1])));
  }
  // Every panel shares the rows and the columns.
  for (const auto &p : *panels) {
    CHECK(p.bins.size() == panels->front().bins.size());
    CHECK(p.columns() == panels->front().columns());
  }
  // The hostile comm is a title like any other: escaped text, never markup.
  a.top = 4;
  const std::string svg = heatmap_svg_of(db, a);
  CHECK(occurrences(svg, "class=\"heatmap\"") == 4);
  CHECK(svg.find("ev&quot;il,&lt;b&gt;&amp;\\x1b[2J\\xff") != std::string::npos);
  CHECK(svg.find('\x1b') == std::string::npos);
  CHECK(svg.find("<b>") == std::string::npos);
}

TEST_CASE("heatmaps read together are the heatmaps read one by one, and their merged columns "
          "give SQL's percentiles per column",
          "[pictures]") {
  auto db = open_history();
  using rsched::sql_shell::heatmap_plan;
  const auto same = [](const std::vector<rsched::charts::heatmap> &x,
                       const std::vector<rsched::charts::heatmap> &y) {
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      INFO("panel " << i);
      CHECK(x[i].title == y[i].title);
      CHECK(x[i].from == y[i].from);
      CHECK(x[i].to == y[i].to);
      CHECK(x[i].step == y[i].step);
      CHECK(x[i].col0 == y[i].col0);
      CHECK(x[i].bins.size() == y[i].bins.size());
      CHECK(x[i].counts == y[i].counts);
      CHECK(x[i].gaps.size() == y[i].gaps.size());
      CHECK(x[i].marks.size() == y[i].marks.size());
      CHECK(x[i].source == y[i].source);
    }
  };
  // A raw window, one across the hole, and a long one the rollups answer (2-minute columns).
  const std::vector<std::pair<std::int64_t, std::int64_t>> windows = {
      {t0 + 92 * minute, t0 + 112 * minute},
      {t0 + 69 * minute + 5 * sec, t0 + 76 * minute + 15 * sec},
      {t0 - 90 * sec, t_end + 50 * sec}};
  const std::vector<std::string> wheres = {"", "comm IN ('web', 'batch')", "cgroup <> '/db.slice'",
                                           "comm = 'web'"};
  int rollups = 0;
  for (const auto &[from, to] : windows) {
    for (const auto &where : wheres) {
      INFO("[" << from << ", " << to << ") where " << where);
      heatmap_args main;
      main.from_ns = from;
      main.to_ns = to;
      main.where = where;
      auto mp = rsched::sql_shell::plan_heatmap(db, main, 180);
      REQUIRE(mp.ok());
      main.step_ns = mp->step;
      std::vector<heatmap_args> args = {main};
      heatmap_args by_comm = main;
      by_comm.by = "comm";
      by_comm.top = 2;
      by_comm.where = where.empty() ? "comm <> 'db'" : "(" + where + ") AND comm <> 'db'";
      args.push_back(by_comm);
      heatmap_args by_cgroup = main;
      by_cgroup.by = "cgroup";
      by_cgroup.top = 3;
      args.push_back(by_cgroup);
      std::vector<heatmap_plan> plans;
      for (const auto &a : args) {
        auto p = rsched::sql_shell::plan_heatmap(db, a, 180);
        REQUIRE(p.ok());
        plans.push_back(std::move(*p));
      }
      std::vector<std::optional<rsched::stats::histogram>> merged;
      auto together = rsched::sql_shell::load_heatmaps(db, plans, &merged);
      REQUIRE(together.ok());
      REQUIRE(together->size() == args.size());
      for (std::size_t i = 0; i < args.size(); ++i) {
        auto alone = rsched::sql_shell::load_heatmap(db, args[i], 180);
        REQUIRE(alone.ok());
        same((*together)[i], *alone);
      }
      rollups += (*together)[0].front().source.find("_1m") != std::string::npos ? 1 : 0;
      // The merged columns: what GROUP BY bucket(ts, step) with hist_percentile says.
      const auto sql = run(
          db, fmt::format("SELECT bucket(ts, {0}), hist_percentile(hist, 50), "
                          "hist_percentile(hist, 99), sum(count) FROM sched_delay WHERE ts >= {1} "
                          "AND ts < {2}{3} GROUP BY 1 ORDER BY 1",
                          mp->step, from, to, where.empty() ? "" : " AND (" + where + ")"));
      const std::int64_t col0 = (*together)[0].front().col0;
      std::size_t k = 0;
      for (std::size_t i = 0; i < merged.size(); ++i) {
        if (!merged[i]) {
          continue;
        }
        REQUIRE(k < sql.rows.size());
        const auto &row = sql.rows[k++];
        CHECK(as_int(row[0]) == col0 + static_cast<std::int64_t>(i) * mp->step);
        const auto p50 = rsched::stats::percentile(*merged[i], 50);
        const auto p99 = rsched::stats::percentile(*merged[i], 99);
        CHECK((p50 ? static_cast<std::int64_t>(p50->value) : -1) ==
              (is_null(row[1]) ? -1 : as_int(row[1])));
        CHECK((p99 ? static_cast<std::int64_t>(p99->value) : -1) ==
              (is_null(row[2]) ? -1 : as_int(row[2])));
        CHECK(static_cast<std::int64_t>(merged[i]->total()) == as_int(row[3]));
      }
      CHECK(k == sql.rows.size());
      CHECK(k > 0);
    }
  }
  CHECK(rollups == static_cast<int>(wheres.size())); // the long window, for every condition
  // Plans that cannot share a read (another column width) are read one by one; merged columns
  // need them read together.
  heatmap_args fine;
  fine.from_ns = t0;
  fine.to_ns = t0 + hour;
  heatmap_args coarse = fine;
  coarse.step = "5m";
  auto p1 = rsched::sql_shell::plan_heatmap(db, fine, 180);
  auto p2 = rsched::sql_shell::plan_heatmap(db, coarse, 180);
  REQUIRE(p1.ok());
  REQUIRE(p2.ok());
  auto apart = rsched::sql_shell::load_heatmaps(db, {*p1, *p2});
  REQUIRE(apart.ok());
  auto coarse_alone = rsched::sql_shell::load_heatmap(db, coarse, 180);
  REQUIRE(coarse_alone.ok());
  same((*apart)[1], *coarse_alone);
  std::vector<std::optional<rsched::stats::histogram>> merged;
  CHECK_FALSE(rsched::sql_shell::load_heatmaps(db, {*p1, *p2}, &merged).ok());
}

TEST_CASE("gaps and annotations are drawn where they are", "[pictures]") {
  auto db = open_history();
  heatmap_args a;
  a.from = epoch(t0 + 60 * minute);
  a.to = epoch(t0 + 120 * minute);
  const std::string svg = heatmap_svg_of(db, a);
  // The hole: one gap band from the end of the last interval before it to the next start.
  const std::regex gap(R"re(class="gap"[^>]* data-start="([0-9]+)" data-end="([0-9]+)")re");
  std::vector<std::pair<std::int64_t, std::int64_t>> gaps;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), gap); it != std::sregex_iterator();
       ++it) {
    gaps.emplace_back(std::stoll((*it)[1].str()), std::stoll((*it)[2].str()));
  }
  REQUIRE(gaps.size() == 1);
  CHECK(gaps[0].first == hole_a);
  CHECK(gaps[0].second == hole_b);
  // No cell inside it.
  const std::regex cell(R"re(data-t0="([0-9]+)")re");
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), cell); it != std::sregex_iterator();
       ++it) {
    const std::int64_t c = std::stoll((*it)[1].str());
    CHECK_FALSE((c >= hole_a && c + 20 * sec <= hole_b));
  }
  // The annotation: a band with its exact span and its text, escaped.
  CHECK(svg.find(R"(class="mark")") != std::string::npos);
  CHECK(svg.find(fmt::format(R"(data-start="{}" data-end="{}")", mark_a, mark_b)) !=
        std::string::npos);
  CHECK(svg.find("deploy &lt;v2&gt; &amp; &quot;rollback&quot;") != std::string::npos);
  // A window that holds neither has none.
  a.from = epoch(t0);
  a.to = epoch(t0 + 30 * minute);
  const std::string quiet = heatmap_svg_of(db, a);
  CHECK(quiet.find("class=\"gap\"") == std::string::npos);
  CHECK(quiet.find("class=\"mark\"") == std::string::npos);
}

TEST_CASE("heatmap --max clips outliers into one open top row", "[pictures]") {
  auto db = open_history();
  heatmap_args a;
  a.from = epoch(burst_a - 10 * minute);
  a.to = epoch(burst_a + 10 * minute);
  a.where = "comm = 'web'";
  a.max = "8ms";
  auto panels = rsched::sql_shell::load_heatmap(db, a, 180);
  REQUIRE(panels.ok());
  const auto &h = panels->front();
  REQUIRE(!h.bins.empty());
  CHECK(h.bins.back().open);
  CHECK(h.bins.back().lo >= 8'000'000); // the first row from 8 ms up (8.19 ms: a bucket edge)
  CHECK(h.bins.back().lo < 16'000'000);
  std::uint64_t top = 0;
  for (const auto &col : h.counts) {
    top += col.back();
  }
  CHECK(top ==
        sql_count(db, fmt::format("SELECT CAST(sum(hist_count_above(hist, {})) AS INTEGER) "
                                  "FROM "
                                  "sched_delay WHERE comm = 'web' AND ts >= {} AND ts < {}",
                                  h.bins.back().lo, burst_a - 10 * minute, burst_a + 10 * minute)));
  CHECK(top >= 5 * 12 * 2); // the burst: 5 samples per thread and interval for 2 minutes
}

TEST_CASE("rsched-sql heatmap, plot and report from the command line", "[pictures]") {
  setenv("TZ", "UTC", 1); // the binary's local zone, for the times it prints
  temp_dir out;
  const std::string &db = history();
  const std::string from = epoch(t0 + 60 * minute);
  const std::string to = epoch(t0 + 120 * minute);
  SECTION("heatmap -o writes a well-formed SVG and says so on stderr") {
    const std::string f = out.file("h.svg");
    const auto r = exec({binary, db, "heatmap", "--from", from, "--to", to, "-o", f});
    INFO(r.err);
    REQUIRE(r.status == 0);
    CHECK(r.out.empty());
    CHECK(r.err.find("heatmap (") != std::string::npos);
    CHECK(parse_check(f, false) == "ok 1\n");
  }
  SECTION("without -o and without a terminal: the SVG on stdout") {
    const auto r = exec({binary, db, "heatmap", "--view", "timeslice", "--by", "cgroup", "--from",
                         from, "--to", to});
    REQUIRE(r.status == 0);
    CHECK(r.out.rfind("<svg ", 0) == 0);
    CHECK(occurrences(r.out, "class=\"heatmap\"") == 4);
  }
  SECTION("plot: a series per column, durations with units, the annotation as a band") {
    const std::string f = out.file("p.svg");
    const auto r = exec({binary, db, "plot", "-c",
                         fmt::format("SELECT bucket(ts, '1m') AS t, hist_percentile(hist, 50) AS "
                                     "p50_ns, hist_percentile(hist, 99) AS p99_ns FROM sched_delay "
                                     "WHERE ts >= t('{}') AND ts < t('{}') GROUP BY 1",
                                     from, to),
                         "--log", "-o", f});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string svg = read_file(f);
    CHECK(parse_check(f, false) == "ok 1\n");
    CHECK(occurrences(svg, "class=\"series\"") == 2);
    CHECK(occurrences(svg, "<circle ") == 2 * 55); // 60 minutes, 5 of them not recorded
    CHECK(svg.find(" ms</text>") != std::string::npos);
    CHECK(svg.find(fmt::format(R"(data-start="{}" data-end="{}")", mark_a, mark_b)) !=
          std::string::npos);
  }
  SECTION("report: one self-contained HTML page") {
    const std::string f = out.file("r.html");
    const auto r = exec({binary, db, "report", "--from", from, "--to", to, "-o", f});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string html = read_file(f);
    const std::string parsed = parse_check(f, true);
    INFO(parsed);
    CHECK(parsed.rfind("ok ", 0) == 0);
    CHECK(std::stoi(parsed.substr(3)) >= 5); // timeline, heatmap, comms, cgroups, CPUs
    CHECK(html.find("<script") == std::string::npos);
    CHECK(html.find("src=") == std::string::npos);
    CHECK(html.find("url(http") == std::string::npos);
    CHECK(occurrences(html, "http") == occurrences(html, "http://www.w3.org/2000/svg"));
    CHECK(html.find('\x1b') == std::string::npos);
    // the burst is the worst spike, and it is web's
    INFO(html.substr(std::min(html.size(), html.find("<h2>Spikes")), 1500));
    CHECK(html.find("<td>#1</td><td>2026-11-20 14:40:00+00:00</td><td class=\"num\">120 s</td>"
                    "<td>web</td>") != std::string::npos);
    CHECK(html.find(mark_text) == std::string::npos); // only escaped
    CHECK(html.find("deploy &lt;v2&gt; &amp; &quot;rollback&quot;") != std::string::npos);
  }
}

// Issue 30: every file rsched-sql writes goes through rsched::safe_file. A link planted at the
// output name or at the old predictable temporary (FILE.tmp) is replaced, never written through,
// and what copies the history is created 0640 (no wider than the database), not 0644.
TEST_CASE("rsched-sql's output files never write through a planted link, and are 0640",
          "[pictures][files]") {
  setenv("TZ", "UTC", 1);
  const mode_t old_umask = ::umask(022);
  temp_dir out;
  temp_dir elsewhere;
  const std::string victim = elsewhere.file("precious");
  const std::string victim_tmp = elsewhere.file("precious.tmp");
  const std::string from = epoch(t0 + 60 * minute);
  const std::string to = epoch(t0 + 120 * minute);
  struct cmd {
    std::string name;
    std::vector<std::string> args; // FILE stands for the output name
  };
  const std::vector<cmd> cmds = {
      {"export openmetrics", {"export", "openmetrics", "--from", from, "--to", to, "-o", "FILE"}},
      {"export perfetto", {"export", "perfetto", "--from", from, "--to", to, "-o", "FILE"}},
      {"report", {"report", "--from", from, "--to", to, "-o", "FILE"}},
      {"heatmap", {"heatmap", "--from", from, "--to", to, "-o", "FILE"}},
      {"plot", {"plot", "-c", "SELECT ts, count FROM sched_delay LIMIT 5", "-o", "FILE"}},
      {"-o", {"-o", "FILE", "-c", "SELECT count(*) FROM intervals"}},
      {".output", {"-c", ".output FILE", "-c", "SELECT count(*) FROM intervals"}},
      {".once", {"-c", ".once FILE", "-c", "SELECT count(*) FROM intervals"}},
  };
  for (const auto &c : cmds) {
    INFO(c.name);
    const std::string file = out.file("out-" + std::to_string(&c - cmds.data()));
    {
      std::ofstream v(victim, std::ios::trunc);
      v << "precious\n";
      std::ofstream t(victim_tmp, std::ios::trunc);
      t << "precious tmp\n";
    }
    REQUIRE(::chmod(victim.c_str(), 0600) == 0);
    REQUIRE(::symlink(victim.c_str(), file.c_str()) == 0);
    REQUIRE(::symlink(victim_tmp.c_str(), (file + ".tmp").c_str()) == 0);
    std::vector<std::string> argv = {binary, history()};
    for (const auto &a : c.args) {
      std::string arg = a;
      if (const auto at = arg.find("FILE"); at != std::string::npos) {
        arg.replace(at, 4, file);
      }
      argv.push_back(arg);
    }
    const auto r = exec(argv);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK(read_file(victim) == "precious\n");
    CHECK(read_file(victim_tmp) == "precious tmp\n");
    struct stat st {};
    REQUIRE(::lstat(file.c_str(), &st) == 0);
    CHECK(S_ISREG(st.st_mode));
    CHECK((st.st_mode & 07777) == 0640);
    CHECK(st.st_size > 0);
    ::unlink((file + ".tmp").c_str());
  }
  // -o /dev/stdout with stdout redirected to a file (as run_program does): written through the
  // descriptor, and the system's /dev/stdout link is left alone.
  for (const auto &args : std::vector<std::vector<std::string>>{
           {"-o", "/dev/stdout", "--csv", "-c", "SELECT 42 AS answer"},
           {"export", "openmetrics", "--from", from, "--to", to, "-o", "/dev/stdout"}}) {
    std::vector<std::string> argv = {binary, history()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = exec(argv);
    INFO(r.err);
    CHECK(r.status == 0);
    CHECK_FALSE(r.out.empty());
    struct stat st {};
    REQUIRE(::lstat("/dev/stdout", &st) == 0);
    CHECK(S_ISLNK(st.st_mode));
  }
  ::umask(old_umask);
}

namespace {

// A copy of the history with `sql` run on it (annotations added), in `dir`.
std::string history_with(temp_dir &dir, const std::string &name, const std::string &sql) {
  const std::string path = dir.file(name);
  for (const char *suffix : {"", "-wal"}) {
    if (std::filesystem::exists(history() + suffix)) {
      std::filesystem::copy_file(history() + suffix, path + suffix);
    }
  }
  auto w = reader::open(path, false);
  REQUIRE(w.ok());
  const auto r = w->exec(sql, {});
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return path;
}

} // namespace

TEST_CASE("the report bounds what it copies of annotations: a 20 MB text, 100,000 of them",
          "[pictures]") {
  // Once one 20 MB annotation made a 276 MB report (the text in every chart panel) and a
  // million imported ones a 4.2 GB report in 133 s. Whatever the database holds, the report has
  // at most 200 annotations (rsched::sql_shell::max_marks), each text read up to 4096
  // characters (shown 200 in the table and in the pictures' tooltips, 40 as a label): here
  // they add less than 1 MiB to the same report without them (about 4 MB: 180 columns, three
  // heatmaps of four panels).
  setenv("TZ", "UTC", 1);
  temp_dir dir;
  const std::string from = epoch(t0 + 60 * minute);
  const std::string to = epoch(t0 + 120 * minute);
  const std::string page = dir.file("r.html");
  const auto plain = exec({binary, history(), "report", "--from", from, "--to", to, "-o", page});
  REQUIRE(plain.status == 0);
  const std::size_t bound = read_file(page).size() + (1U << 20);
  SECTION("one 20 MB annotation: cut, escaped, in the document a few times, never whole") {
    // 20 MB: a hostile start, then 'A's, then a tail that must never reach the report.
    const std::string db = history_with(
        dir, "big.db",
        fmt::format(
            "INSERT INTO annotations(start_ns, end_ns, source, text, created_ns) "
            "VALUES({}, {}, 'import:big.csv', '<script>x</script>' || printf('%.*c', 20000000, "
            "'A') || 'TAIL-NEVER-SHOWN', 0)",
            t0 + 80 * minute, t0 + 85 * minute));
    const auto r = exec({binary, db, "report", "--from", from, "--to", to, "-o", page});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string html = read_file(page);
    CHECK(html.size() < bound);
    CHECK(html.find("TAIL-NEVER-SHOWN") == std::string::npos);
    CHECK(html.find("<script") == std::string::npos); // hostile text is data
    const std::string escaped = "&lt;script&gt;x&lt;/script&gt;";
    // Its start: in the table (200 characters) and the cell's tooltip (4096 and the cut note);
    // its section's heading (200); the tooltip of its band in the timeline, the heatmap and the
    // first panel of the three small multiples, and the band's label where it fits (the
    // timeline's may give way to the spikes' labels).
    CHECK(occurrences(html, escaped) >= 12);
    CHECK(occurrences(html, escaped) <= 13);
    CHECK(html.find("<h2>Annotation 2: " + escaped) != std::string::npos);
    CHECK(html.find(std::string(4096 - 18, 'A') + "... [cut: the first 4096 characters]\"") !=
          std::string::npos);
    CHECK(html.find(std::string(4096 - 18 + 1, 'A')) == std::string::npos);
    CHECK(occurrences(html, "A... [cut: the first 4096 characters]") == 1);
    CHECK(occurrences(html, "&gt;" + std::string(200 - 18, 'A') + "...") ==
          7); // table, section heading, pictures
    CHECK(parse_check(page, true).rfind("ok ", 0) == 0);
    // What load_marks hands the pictures: the text cut in SQL, with its note.
    auto rd = reader::open(db, true);
    REQUIRE(rd.ok());
    auto m = rsched::sql_shell::load_marks(*rd, t0 + 60 * minute, t0 + 120 * minute);
    REQUIRE(m.ok());
    CHECK(m->total == 2);
    REQUIRE(m->marks.size() == 2);
    const auto &big = m->marks[0].start == t0 + 80 * minute ? m->marks[0] : m->marks[1];
    CHECK(big.text.size() == rsched::sql_shell::mark_text_chars +
                                 std::string(rsched::sql_shell::mark_cut_note).size());
    CHECK(big.text.rfind("<script>x</script>AAA", 0) == 0);
  }
  SECTION("100,000 annotations in the window: 200 listed, the rest counted") {
    const std::string db = history_with(
        dir, "many.db",
        fmt::format("WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < "
                    "99999) INSERT INTO annotations(start_ns, end_ns, source, text, created_ns) "
                    "SELECT {} + i * 36000000, NULL, 'import:bulk.csv', 'bulk <' || i || '>', 0 "
                    "FROM n",
                    t0 + 60 * minute));
    const auto r = exec({binary, db, "report", "--from", from, "--to", to, "-o", page});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const std::string html = read_file(page);
    CHECK(html.size() < bound);
    CHECK(parse_check(page, true).rfind("ok ", 0) == 0);
    // The annotation written by hand comes first, whatever was imported.
    CHECK(html.find("deploy &lt;v2&gt; &amp; &quot;rollback&quot;") != std::string::npos);
    const auto table = html.find("<h2>Annotations</h2>");
    REQUIRE(table != std::string::npos);
    const std::string rows = html.substr(table, html.find("</table>", table) - table);
    CHECK(occurrences(rows, "<tr><td>") == 200);
    CHECK(html.find("99801 more not shown: 100001 annotations overlap the window") !=
          std::string::npos);
    CHECK(occurrences(html, "99801 more annotations not drawn") == 5); // each picture says so
    // A plot over several hosts (--host) draws at most as many, hand-written ones first.
    const std::string svg = dir.file("p.svg");
    const auto p = exec({binary, "--host", "a=" + db, "--host", "b=" + history(), "plot", "-c",
                         fmt::format("SELECT bucket(ts, '1m') AS t, count(*) AS n FROM "
                                     "sched_delay WHERE ts >= t('{}') AND ts < t('{}') GROUP BY 1",
                                     from, to),
                         "-o", svg});
    INFO(p.err);
    REQUIRE(p.status == 0);
    const std::string plot = read_file(svg);
    CHECK(occurrences(plot, "class=\"mark\"") == 200);
    CHECK(occurrences(plot, "<title>deploy &lt;v2&gt;") == 2); // one per host
    CHECK(plot.find("more annotations not drawn</text>") != std::string::npos);
  }
}

TEST_CASE("bad picture arguments are one-line errors with exit 2", "[pictures]") {
  const std::string &db = history();
  // Exit 2: an argument (or its value) is wrong; 1: the SQL given failed.
  const std::vector<std::pair<int, std::vector<std::string>>> bad = {
      {2, {"heatmap", "--view", "no_such_view"}},
      {2, {"heatmap", "--view", "intervals"}}, // no histogram
      {2, {"heatmap", "--by", "tid"}},
      {2, {"heatmap", "--step", "0"}},
      {2, {"heatmap", "--step"}},
      // A duration has its unit and nothing around it (issue 51): these were 60 s, 10 s, 10 s.
      {2, {"heatmap", "--step", "60"}},
      {2, {"heatmap", "--step", " 10s"}},
      {2, {"heatmap", "--step", "10s\n"}},
      {2, {"heatmap", "--max", "\t5ms"}},
      {2, {"heatmap", "--max", "5ms\n"}},
      {2, {"heatmap", "--frobnicate", "1"}},
      {2, {"heatmap", "--from", "2026-11-20 12:00", "--to", "2026-11-20 11:00"}},
      {2, {"heatmap", "--from", "half past nine"}},
      {2, {"heatmap", "--top", "0"}},
      {2, {"heatmap", "--max", "soon"}},
      {2, {"heatmap", "--from", "2026-11-20", "--step", "1s"}}, // > 20,000 columns
      {1, {"heatmap", "--where", "comm = "}},
      {1, {"heatmap", "--where", "no_such_column = 1"}},
      {2, {"plot"}},
      {2, {"plot", "-c", "SELECT comm, 1 FROM sched_delay LIMIT 3"}},
      {2, {"plot", "-c", "SELECT 1"}},
      {1, {"plot", "-c", "SELECT FROM"}},
      {2, {"report", "--to", "yesterday at noon"}},
      {2, {"report", "--bogus"}},
  };
  for (const auto &[status, args] : bad) {
    std::vector<std::string> argv = {binary, db};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = exec(argv);
    INFO(fmt::format("{}", fmt::join(args, " ")) << " -> " << r.status << ": " << r.err);
    CHECK(r.status == status);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("rsched-sql: ", 0) == 0);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE(".heatmap and .plot in the shell draw text, escape-free off a terminal", "[pictures]") {
  auto db = open_history();
  std::ostringstream out;
  std::ostringstream err;
  rsched::sql_shell::shell sh{db, out, err, rsched::sql_shell::output_config{}};
  sh.run_command(fmt::format(".heatmap --from {} --to {} --where \"comm = 'web'\"",
                             epoch(burst_a - 30 * minute), epoch(burst_a + 30 * minute)));
  INFO(err.str());
  const std::string text = out.str();
  CHECK(err.str().empty());
  CHECK(text.find("sched_delay where comm = 'web'") != std::string::npos);
  CHECK(text.find('\x1b') == std::string::npos);
  CHECK(text.find("<svg") == std::string::npos);
  CHECK(text.find("(local, UTC+00:00)") != std::string::npos);
  out.str("");
  sh.run_command(".plot -c \"SELECT bucket(ts, '5m'), sum(count) AS samples FROM sched_delay "
                 "GROUP BY 1\"");
  CHECK(out.str().find("samples") != std::string::npos);
  CHECK(out.str().find('\x1b') == std::string::npos);
  out.str("");
  err.str("");
  sh.run_command(".heatmap --by nothing");
  CHECK(out.str().empty());
  CHECK(err.str().find("--by must be cpu, comm or cgroup") != std::string::npos);
}

TEST_CASE("the report renders in headless Chromium: pictures drawn, no console errors",
          "[browser]") {
  if (!rsched::test::tool_available("chromium", "browser test") ||
      !rsched::test::tool_available("python3", "browser test")) {
    return;
  }
  temp_dir out;
  const std::string page = out.file("report.html");
  const auto r = exec({binary, history(), "report", "--from", epoch(t0 + 60 * minute), "--to",
                       epoch(t0 + 120 * minute), "-o", page});
  REQUIRE(r.status == 0);
  const std::string shot = out.file("report.png");
  const auto c = exec({"python3", checker, "chromium", page, shot});
  INFO(c.out << c.err);
  REQUIRE(c.status == 0);
  // The checker's JSON, read with the regexes of its few keys.
  const std::string &j = c.out;
  CHECK(j.find("\"console\": []") != std::string::npos);
  CHECK(j.find("\"exceptions\": []") != std::string::npos);
  CHECK(j.find("\"log\": []") != std::string::npos);
  const std::regex svg_re(
      R"re(\{"x": ([0-9.]+), "y": ([0-9.]+), "w": ([0-9.]+), "h": ([0-9.]+), "cells": ([0-9]+), "lines": ([0-9]+), "marks": ([0-9]+), "gaps": ([0-9]+), "inked_px": ([0-9]+), "warm_px": ([0-9]+)\})re");
  std::size_t svgs = 0;
  std::size_t heatmaps = 0;
  for (auto it = std::sregex_iterator(j.begin(), j.end(), svg_re); it != std::sregex_iterator();
       ++it) {
    ++svgs;
    const double w = std::stod((*it)[3].str());
    const double h = std::stod((*it)[4].str());
    const long cells = std::stol((*it)[5].str());
    const long lines = std::stol((*it)[6].str());
    const long inked = std::stol((*it)[9].str());
    const long warm = std::stol((*it)[10].str());
    INFO("svg " << svgs << ": " << w << "x" << h << ", cells " << cells << ", lines " << lines
                << ", inked " << inked << ", warm " << warm);
    CHECK(w >= 600);
    CHECK(h >= 150);
    CHECK(inked > static_cast<long>(w * h * 0.05)); // drawn, not a blank box
    if (cells > 0) {
      ++heatmaps;
      CHECK(warm > cells * 4); // every cell coloured, on the heat ramp
    } else {
      CHECK(lines >= 2); // the p50/p99 timeline
    }
  }
  CHECK(svgs >= 5);
  CHECK(heatmaps >= 4);
  CHECK(j.find("\"title\": \"rsched report\"") != std::string::npos);
}

// ---- export openmetrics (export.hpp) ----------------------------------------------------------

namespace {

// One sample line of the export: name, labels as written, value, timestamp (s, ms precision).
struct om_sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
  std::int64_t ts_ms = 0;
};

// Parses the export strictly: comments are # HELP/# TYPE/# UNIT, the last line is # EOF, every
// other line a sample with a timestamp.
std::vector<om_sample> parse_openmetrics(const std::string &text) {
  static const std::regex sample_re(
      R"(^([a-z_]+)(?:\{([^}]*)\})? ([0-9.e+-]+|\+Inf) ([0-9]+)\.([0-9]{3})$)");
  static const std::regex label_re(R"re(([a-z_]+)="((?:[^"\\]|\\.)*)")re");
  std::vector<om_sample> out;
  std::istringstream in(text);
  std::string line;
  bool eof = false;
  while (std::getline(in, line)) {
    INFO(line);
    REQUIRE_FALSE(eof); // nothing after # EOF
    if (line == "# EOF") {
      eof = true;
      continue;
    }
    if (line.rfind("# ", 0) == 0) {
      CHECK((line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0 ||
             line.rfind("# UNIT ", 0) == 0));
      continue;
    }
    std::smatch m;
    REQUIRE(std::regex_match(line, m, sample_re));
    om_sample s;
    s.name = m[1];
    const std::string labels = m[2];
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), label_re);
         it != std::sregex_iterator(); ++it) {
      s.labels[(*it)[1]] = (*it)[2];
    }
    s.value = m[3] == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(m[3]);
    s.ts_ms = std::stoll(m[4]) * 1000 + std::stoll(m[5]);
    out.push_back(std::move(s));
  }
  CHECK(eof);
  return out;
}

double sql_real(reader &r, const std::string &sql) {
  double v = 0;
  rsched::query::result_sink sink;
  sink.on_row = [&](const std::vector<rsched::query::value> &row) {
    if (const auto *i = std::get_if<std::int64_t>(&row[0])) {
      v = static_cast<double>(*i);
    } else if (const auto *d = std::get_if<double>(&row[0])) {
      v = *d;
    }
  };
  REQUIRE(r.exec(sql, sink).ok());
  return v;
}

} // namespace

TEST_CASE("export openmetrics: exact cumulative totals per CPU and cgroup over the window",
          "[pictures][export]") {
  temp_dir out;
  const std::string file = out.file("x.om");
  const std::int64_t a = t0 + 60 * minute; // the window holds the hole [70, 75) min
  const std::int64_t b = t0 + 120 * minute;
  const auto r = exec({binary, history(), "export", "openmetrics", "--from", epoch(a), "--to",
                       epoch(b), "--top", "2", "-o", file});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("openmetrics export (") != std::string::npos);
  const auto samples = parse_openmetrics(read_file(file));
  auto db = open_history();
  const std::string window = fmt::format("ts >= {} AND ts < {}", a, b);
  const auto intervals = static_cast<std::size_t>(
      sql_real(db, fmt::format("SELECT count(*) FROM timeline WHERE start_ns >= {} AND "
                               "start_ns < {}",
                               a, b)));
  REQUIRE(intervals == 330); // 60 min of 10 s intervals, less the 5-minute hole

  // Per series: the last point of each suffix, and the points' timestamps.
  std::map<std::string, double> last;
  std::map<std::string, std::vector<std::int64_t>> times;
  for (const auto &s : samples) {
    std::string key = s.name;
    for (const auto &[k, v] : s.labels) {
      key += "," + k + "=" + v;
    }
    last[key] = s.value;
    if (s.name.ends_with("_count") || s.name.ends_with("_total")) {
      times[key].push_back(s.ts_ms);
    }
  }
  for (const auto &[key, ts] : times) {
    INFO(key);
    CHECK(ts.size() == intervals + 1); // the zero point, then one per interval
    CHECK(std::is_sorted(ts.begin(), ts.end()));
    CHECK(std::adjacent_find(ts.begin(), ts.end()) == ts.end());
    CHECK(ts.front() == a / 1'000'000);
  }
  for (int cpu : {0, 1}) {
    INFO(cpu);
    const std::string l = fmt::format(",cpu={}", cpu);
    const double n = sql_real(db, fmt::format("SELECT sum(hist_count(hist)) FROM cpu_sched_delay "
                                              "WHERE {} AND cpu = {}",
                                              window, cpu));
    const double sum = sql_real(db, fmt::format("SELECT sum(total_ns) FROM cpu_sched_delay "
                                                "WHERE {} AND cpu = {}",
                                                window, cpu));
    REQUIRE(n > 1000);
    CHECK(last.at("rsched_cpu_sched_delay_seconds_count" + l) == n);
    CHECK(last.at("rsched_cpu_sched_delay_seconds_bucket" + l + ",le=+Inf") == n);
    CHECK(last.at("rsched_cpu_sched_delay_seconds_sum" + l) == Approx(sum / 1e9).epsilon(1e-12));
    // Every finite bucket: the samples below its edge, from the histograms themselves.
    for (const char *le : {"0.00005", "0.001024", "0.016384"}) {
      const auto edge_ns = static_cast<std::int64_t>(std::stod(le) * 1e9 + 0.5);
      const double below = sql_real(
          db, fmt::format("SELECT sum(count) - coalesce(sum(hist_count_above(hist, {})), 0) FROM "
                          "cpu_sched_delay WHERE {} AND cpu = {}",
                          edge_ns, window, cpu));
      CHECK(last.at(fmt::format("rsched_cpu_sched_delay_seconds_bucket{},le={}", l, le)) ==
            Approx(below));
    }
  }
  // Cgroups: the two busiest by name, the rest as "other"; together every sample.
  std::vector<std::string> cgroups;
  double all = 0;
  for (const auto &[key, v] : last) {
    if (key.rfind("rsched_cgroup_sched_delay_seconds_count,", 0) == 0) {
      cgroups.push_back(key.substr(key.find("cgroup=") + 7));
      all += v;
    }
  }
  CHECK(cgroups.size() == 3);
  CHECK(std::find(cgroups.begin(), cgroups.end(), "other") != cgroups.end());
  CHECK(all == sql_real(db, "SELECT sum(hist_count(hist)) FROM sched_delay WHERE " + window));
  // Health: one interval per interval.
  CHECK(last.at("rsched_intervals_total") == static_cast<double>(intervals));
}

TEST_CASE("export: bad arguments are one line and exit 2", "[pictures][export]") {
  for (const std::vector<std::string> &args : {std::vector<std::string>{"export"},
                                               {"export", "chrome"},
                                               {"export", "--from", "x"},
                                               {"export", "openmetrics", "--top", "0"},
                                               {"export", "openmetrics", "--bogus", "1"},
                                               {"export", "openmetrics", "--from", "not a time"}}) {
    std::vector<std::string> argv = {binary, history()};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = exec(argv);
    INFO(r.err);
    CHECK(r.status == 2);
    CHECK(r.out.empty());
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  // A window with nothing recorded: an error, and no file left behind.
  temp_dir out;
  const auto r = exec({binary, history(), "export", "openmetrics", "--from", "2001-01-01", "--to",
                       "2001-01-02", "-o", out.file("x.om")});
  CHECK(r.status == 1);
  CHECK(r.err.find("no recorded interval") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out.file("x.om")));
  CHECK(std::filesystem::is_empty(out.str())); // no temporary left behind either
}

TEST_CASE("export openmetrics: promtool backfills it and the blocks hold the same totals",
          "[tools]") {
  if (!rsched::test::tool_available("promtool", "promtool backfill test")) {
    return;
  }
  temp_dir out;
  const std::string file = out.file("x.om");
  const auto r = exec({binary, history(), "export", "openmetrics", "--from", epoch(t0), "--to",
                       epoch(t_end), "-o", file});
  REQUIRE(r.status == 0);
  const std::string tsdb = out.file("tsdb");
  const auto c = exec({"promtool", "tsdb", "create-blocks-from", "openmetrics", file, tsdb});
  INFO(c.out << c.err);
  REQUIRE(c.status == 0);
  // dump reads the write-ahead log too; blocks made by a backfill come without one.
  std::filesystem::create_directories(tsdb + "/wal");
  const auto d = exec({"promtool", "tsdb", "dump",
                       "--match={__name__=\"rsched_cpu_sched_delay_seconds_count\"}", tsdb});
  REQUIRE(d.status == 0);
  // {__name__="rsched_cpu_sched_delay_seconds_count", cpu="0"} 1234 1795190400000
  std::map<std::string, std::pair<std::int64_t, double>> newest;
  std::istringstream in(d.out);
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    const auto close = line.rfind('}');
    if (close == std::string::npos) {
      continue;
    }
    std::istringstream rest(line.substr(close + 1));
    double v = 0;
    std::int64_t ts = 0;
    rest >> v >> ts;
    const std::string series = line.substr(0, close + 1);
    auto &n = newest[series];
    if (ts >= n.first) {
      n = {ts, v};
    }
  }
  INFO(d.out.substr(0, 2000));
  REQUIRE(lines > 2000); // 2 CPUs, a point per interval
  auto db = open_history();
  for (int cpu : {0, 1}) {
    const std::string key =
        fmt::format("{{__name__=\"rsched_cpu_sched_delay_seconds_count\", cpu=\"{}\"}}", cpu);
    REQUIRE(newest.count(key) == 1);
    CHECK(newest[key].second ==
          sql_real(db, fmt::format("SELECT sum(hist_count(hist)) FROM cpu_sched_delay WHERE "
                                   "cpu = {}",
                                   cpu)));
    CHECK(newest[key].first == t_end / 1'000'000);
  }
}

TEST_CASE("export perfetto: a JSON trace with delay tracks, annotations, spikes and gaps",
          "[pictures][export]") {
  temp_dir out;
  const std::string file = out.file("x.json");
  const std::int64_t a = t0 + 60 * minute;
  const std::int64_t b = t0 + 120 * minute;
  const auto r = exec(
      {binary, history(), "export", "perfetto", "--from", epoch(a), "--to", epoch(b), "-o", file});
  INFO(r.err);
  REQUIRE(r.status == 0);
  CHECK(r.err.find("perfetto trace (") != std::string::npos);
  const auto doc = nlohmann::json::parse(read_file(file)); // throws (fails) on invalid JSON
  REQUIRE(doc.contains("traceEvents"));
  std::map<int, std::string> processes;
  std::map<std::string, std::vector<nlohmann::json>> counters; // by track name
  std::map<int, std::vector<nlohmann::json>> slices;           // by pid
  for (const auto &e : doc["traceEvents"]) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name") {
      processes[e.at("pid").get<int>()] = e.at("args").at("name");
    } else if (ph == "C") {
      counters[e.at("name")].push_back(e);
    } else if (ph == "X") {
      slices[e.at("pid").get<int>()].push_back(e);
    }
  }
  REQUIRE(processes.size() == 5);
  auto db = open_history();
  const std::string window = fmt::format("ts >= {} AND ts < {}", a, b);
  const auto intervals = static_cast<std::size_t>(sql_real(
      db,
      fmt::format("SELECT count(*) FROM timeline WHERE start_ns >= {} AND start_ns < {}", a, b)));
  // Per CPU: a point per interval, at its start, with that interval's percentiles.
  for (int cpu : {0, 1}) {
    const auto &c = counters[fmt::format("cpu {}", cpu)];
    INFO(cpu);
    REQUIRE(c.size() == intervals);
    const double ts_us = c[7].at("ts");
    const auto ts = static_cast<std::int64_t>(std::llround(ts_us / 1e7)) * 10 * sec; // 10 s grid
    CHECK(ts == a + 7 * step);
    CHECK(c[7].at("args").at("p99_ms").get<double>() * 1e6 ==
          Approx(sql_real(db, fmt::format("SELECT hist_pct(hist, 99) FROM cpu_sched_delay WHERE "
                                          "cpu = {} AND ts = {}",
                                          cpu, ts))));
    CHECK(c[7].at("args").at("max_ms").get<double>() * 1e6 ==
          Approx(sql_real(db, fmt::format("SELECT hist_max(hist) FROM cpu_sched_delay WHERE "
                                          "cpu = {} AND ts = {}",
                                          cpu, ts))));
  }
  // The comms; web's burst is in its p99. The hostile one as every rsched JSON has text that is
  // not UTF-8 (rsched/base/text.hpp): U+FFFD for the byte, the exact bytes in "name_hex".
  CHECK(counters.count("web") == 1);
  const std::string evil_shown = "ev\"il,<b>&\x1b[2J\xef\xbf\xbd";
  REQUIRE(counters.count(evil_shown) == 1);
  for (const auto &e : counters[evil_shown]) {
    CHECK(e.at("name_hex") == rsched::text::to_hex(evil_comm));
  }
  CHECK_FALSE(counters["web"].front().contains("name_hex"));
  double web_peak = 0;
  for (const auto &e : counters["web"]) {
    web_peak = std::max(web_peak, e.at("args").at("p99_ms").get<double>());
  }
  CHECK(web_peak > 30.0);
  // The annotation, the hole and the spikes as slices.
  REQUIRE(slices[3].size() == 1);
  CHECK(slices[3][0].at("name") == mark_text);
  CHECK(slices[3][0].at("ts").get<double>() == Approx(static_cast<double>(mark_a) / 1000));
  CHECK(slices[3][0].at("dur").get<double>() ==
        Approx(static_cast<double>(mark_b - mark_a) / 1000));
  bool hole = false;
  for (const auto &e : slices[5]) {
    hole = hole || (e.at("ts").get<double>() == Approx(static_cast<double>(hole_a) / 1000) &&
                    e.at("dur").get<double>() == Approx(5.0 * 60 * 1e6));
  }
  CHECK(hole);
  CHECK(slices[4].size() ==
        static_cast<std::size_t>(sql_real(
            db, fmt::format("SELECT count(*) FROM spikes('sched_delay', '3x', {}, {})", a, b))));
  CHECK_FALSE(slices[4].empty());
}

TEST_CASE("the report reads its heatmaps on a second connection: the page it makes in turn",
          "[pictures]") {
  // build_report reads the heatmaps on reader::twin() beside its other parts; with parallel
  // reads off it reads them on its own connection first. The same page either way.
  rsched::sql_shell::report_args a;
  a.from = epoch(t0 + 60 * minute);
  a.to = epoch(t0 + 120 * minute);
  auto at_once = open_history();
  REQUIRE(at_once.parallel());
  auto page = rsched::sql_shell::build_report(at_once, a);
  REQUIRE(page.ok());
  auto in_turn = open_history();
  in_turn.set_parallel(false);
  auto again = rsched::sql_shell::build_report(in_turn, a);
  REQUIRE(again.ok());
  CHECK(*page == *again);
  CHECK(page->find("<svg") != std::string::npos);
}

TEST_CASE("reader::twin: the same file with the same settings, interrupted with its original",
          "[pictures]") {
  auto r = open_history();
  r.set_now(t0 + 2 * hour);
  r.set_zone(rsched::timefmt::zone::parse("Asia/Tokyo").value());
  const auto one = [](reader &db, const std::string &sql) {
    std::vector<std::vector<rsched::query::value>> rows;
    rsched::query::result_sink sink;
    sink.on_row = [&](const std::vector<rsched::query::value> &row) { rows.push_back(row); };
    REQUIRE(db.exec(sql, sink).ok());
    return rows;
  };
  const std::string sql = "SELECT t('2026-11-20 14:30'), ago('1h'), count(*) FROM intervals";
  auto twin = r.twin();
  REQUIRE(twin.ok());
  CHECK(one(*twin, sql) == one(r, sql));
  // Ctrl-C on the original (reader::interrupt) stops a statement running on its twin.
  std::atomic<bool> started{false};
  std::thread stop([&] {
    while (!started) {
      std::this_thread::yield();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    r.interrupt();
  });
  rsched::query::result_sink sink;
  sink.on_row = [&](const std::vector<rsched::query::value> &) { started = true; };
  const auto run = twin->exec("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                              "SELECT i FROM n",
                              sink);
  stop.join();
  REQUIRE_FALSE(run.ok());
  CHECK(run.err().msg.find("interrupt") != std::string::npos);
  auto memory = reader::open(":memory:", false);
  REQUIRE(memory.ok());
  CHECK_FALSE(memory->twin().ok());
}

TEST_CASE("plot says when it has nothing to draw; a log axis over values <= 0 ends at once",
          "[pictures]") {
  // Before: 'plot --log' over zeros looped in its axis ticks until memory ran out, and an
  // empty chart said nothing about why it was empty.
  temp_dir dir;
  const std::string f = dir.file("p.svg");
  const std::string db = history();
  struct one {
    std::string sql;
    bool log;
    std::string says;
  };
  for (const auto &c : std::vector<one>{
           {"SELECT start_ns, 0 FROM intervals LIMIT 20", true,
            "no value above 0 for the log axis"},
           {"SELECT start_ns, -3.5 FROM intervals LIMIT 20", true, "no value above 0"},
           {"SELECT start_ns, NULL FROM intervals LIMIT 20", false, "every value is NULL"},
           {"SELECT start_ns, 1 FROM intervals WHERE 0", false, "the query returned no rows"}}) {
    std::vector<std::string> argv = {binary, db, "plot", "-c", c.sql, "-o", f};
    if (c.log) {
      argv.emplace_back("--log");
    }
    const auto r = exec(argv);
    INFO(c.sql << "\n" << r.err);
    CHECK(r.status == 0);
    CHECK(r.err.find(c.says) != std::string::npos);
    CHECK(fs::file_size(f) < 100'000);
  }
}
