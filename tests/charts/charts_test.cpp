// rsched::charts without a database: display rows of every layout, exact accumulation, column
// widths, and what the SVG and terminal renderings hold.
#include "rsched/base/text.hpp"
#include "rsched/charts/charts.hpp"

#include <catch2/catch.hpp>

#include <regex>
#include <string>

using namespace rsched;
using namespace rsched::charts;

namespace {

constexpr std::int64_t sec = 1'000'000'000;
constexpr std::int64_t t0 = 1'795'183'200 * sec; // 2026-11-20 14:00 UTC

std::uint64_t sum_of(const std::string &svg, const std::string &attr) {
  const std::regex re(attr + "=\"([0-9]+)\"");
  std::uint64_t n = 0;
  for (std::sregex_iterator it(svg.begin(), svg.end(), re), end; it != end; ++it) {
    n += std::stoull((*it)[1]);
  }
  return n;
}

std::size_t count_of(const std::string &s, const std::string &what) {
  std::size_t n = 0;
  for (std::size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) {
    ++n;
  }
  return n;
}

} // namespace

TEST_CASE("log bins cover every slot once, in order, for every layout", "[charts]") {
  for (const auto l :
       {stats::layout::latency, stats::layout::depth, stats::layout::count, stats::layout::log2}) {
    const auto bins = log_bins(l);
    REQUIRE_FALSE(bins.empty());
    CHECK(bins.front().first == 0);
    CHECK(bins.back().last + 1 == stats::slot_count(l));
    CHECK(bins.back().open);
    for (std::size_t i = 1; i < bins.size(); ++i) {
      CHECK(bins[i].first == bins[i - 1].last + 1);
      CHECK(bins[i].lo == bins[i - 1].hi + 1);
      CHECK_FALSE(bins[i - 1].open);
    }
  }
  // Latency rows: [0, 10 us), [10, 20), [20, 40) ... [320, 512) us, then the log2 buckets.
  const auto lat = log_bins(stats::layout::latency);
  CHECK(lat[0].lo == 0);
  CHECK(lat[0].hi == 9'999);
  CHECK(lat[1].lo == 10'000);
  CHECK(lat[2].lo == 20'000);
  CHECK(lat[2].hi == 39'999);
  CHECK(lat[6].lo == 320'000);
  CHECK(lat[6].hi == 511'999);
  CHECK(lat[7].lo == 512'000);
  CHECK(lat[7].hi == 1'023'999);
  CHECK(value_label(stats::layout::latency, lat[7].lo) == "512 \xc2\xb5s");
  CHECK(value_label(stats::layout::latency, 1'024'000) == "1.02 ms");
  CHECK(value_label(stats::layout::depth, 7) == "7");
  // Clipping: from the first row at or above the value, one open row.
  const auto clipped = log_bins(stats::layout::latency, 5'000'000);
  CHECK(clipped.back().open);
  CHECK(clipped.back().lo >= 5'000'000);
  CHECK(clipped[clipped.size() - 2].lo < 5'000'000);
  CHECK(clipped.back().last + 1 == stats::slot_count(stats::layout::latency));
}

TEST_CASE("heatmap cells add up to the samples of the rows, each in its column", "[charts]") {
  auto h = make_heatmap(stats::layout::latency, t0 + 5 * sec, t0 + 65 * sec, 10 * sec);
  CHECK(h.col0 == t0);
  CHECK(h.columns() == 7); // [t0, t0 + 70 s): the window's start is not a column boundary
  stats::histogram a{stats::layout::latency, {}};
  a.add(5'000, 3);       // [0, 10 us)
  a.add(700'000, 2);     // [512, 1024) us
  a.add(40'000'000'000); // 40 s
  REQUIRE(add(h, t0 + 5 * sec, a).ok());
  REQUIRE(add(h, t0 + 64 * sec, a).ok());
  REQUIRE(add(h, t0 + 65 * sec, a).ok()); // outside the window: nothing
  REQUIRE(add(h, t0, a).ok());            // before it: nothing
  CHECK(h.total() == 12);
  CHECK(h.column_total(0) == 6);
  CHECK(h.column_total(6) == 6);
  CHECK(h.counts[0][0] == 3);
  CHECK(h.counts[0][7] == 2);
  stats::histogram d{stats::layout::depth, {}};
  d.add(3);
  CHECK_FALSE(add(h, t0 + 10 * sec, d).ok());
}

TEST_CASE("nice steps fit the columns and never go below the interval", "[charts]") {
  CHECK(nice_step(3600 * sec, 180) == 30 * sec);
  CHECK(nice_step(24 * 3600 * sec, 180) == 600 * sec);
  CHECK(nice_step(60 * sec, 180) == sec);
  CHECK(nice_step(60 * sec, 180, 10 * sec) == 10 * sec);
  CHECK(nice_step(400LL * 24 * 3600 * sec, 180) % (24 * 3600 * sec) == 0);
}

TEST_CASE("the heatmap SVG: one cell per non-empty bucket with its numbers, gaps, marks",
          "[charts]") {
  auto h = make_heatmap(stats::layout::latency, t0, t0 + 60 * sec, 10 * sec);
  h.title = "sched_delay where comm = 'a<b>&\"c\"' \x1b[31m";
  stats::histogram a{stats::layout::latency, {}};
  a.add(15'000, 4);
  a.add(2'000'000, 1);
  REQUIRE(add(h, t0, a).ok());
  REQUIRE(add(h, t0 + 50 * sec, a).ok());
  h.gaps = {{t0 + 20 * sec, t0 + 40 * sec, "not recording"}};
  h.marks = {{t0 + 10 * sec, t0 + 10 * sec, "deploy <v42>"}};
  svg_options o;
  o.zone = timefmt::zone::utc();
  const std::string svg = to_svg(h, o);
  CHECK(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0) == 0);
  CHECK(count_of(svg, "class=\"cell\"") == 4);
  CHECK(sum_of(svg, "data-count") == h.total());
  CHECK(svg.find("data-t0=\"" + std::to_string(t0 + 50 * sec) + "\"") != std::string::npos);
  CHECK(svg.find("data-lo=\"10000\" data-hi=\"19999\"") != std::string::npos);
  CHECK(svg.find("80.0% of the column") != std::string::npos);
  CHECK(svg.find("cumulative 100.0%") != std::string::npos);
  CHECK(count_of(svg, "class=\"gap\"") == 1);
  CHECK(count_of(svg, "class=\"mark\"") == 1);
  CHECK(svg.find("deploy &lt;v42&gt;") != std::string::npos);
  // Hostile text is data: escaped for XML, control bytes as \xNN.
  CHECK(svg.find("a&lt;b&gt;&amp;&quot;c&quot;") != std::string::npos);
  CHECK(svg.find('\x1b') == std::string::npos);
  CHECK(svg.find("(local, UTC+00:00)") != std::string::npos);
  CHECK(svg.find("<script") == std::string::npos);
  CHECK(svg.find("http://") == svg.find("http://www.w3.org/2000/svg")); // no other URL
  // Small multiples share the colour scale and stack their panels.
  const std::string many = to_svg(std::vector<heatmap>{h, h}, "two", o);
  CHECK(count_of(many, "class=\"heatmap\"") == 2);
  CHECK(sum_of(many, "data-count") == 2 * h.total());
  // An annotation's text is in the first panel only (outline, label, tooltip); the others
  // have its fill.
  CHECK(count_of(many, "class=\"mark\"") == 1);
  CHECK(count_of(many, "deploy &lt;v42&gt;") == 2); // label and tooltip
  CHECK(count_of(many, "fill=\"rgba(40,110,200,0.13)\"") == 2);
  // Bands that overlap on screen are one fill; a text is cut to 200 characters in its tooltip,
  // 40 in its label.
  auto crowded = h;
  crowded.marks.clear();
  for (int i = 0; i < 1000; ++i) {
    crowded.marks.push_back({t0 + 10 * sec + i, t0 + 10 * sec + i, std::string(5000, 'x')});
  }
  const std::string c = to_svg(crowded, o);
  CHECK(count_of(c, "fill=\"rgba(40,110,200,0.13)\"") == 1);
  CHECK(count_of(c, "class=\"mark\"") == 1000);
  CHECK(c.find(std::string(201, 'x')) == std::string::npos);
  CHECK(c.find(std::string(200, 'x') + "...") != std::string::npos);
  CHECK(count_of(c, "more annotations not drawn") == 0);
  CHECK(count_of(c, "class=\"mark-label\"") == 4); // one per row; the rest counted
  CHECK(count_of(c, "996 more labels too crowded to draw") == 1);
  // Two marks a moment apart: both labels drawn, the second in the row below.
  auto two = h;
  two.marks = {{t0 + 10 * sec, t0 + 10 * sec, "deploy v42"},
               {t0 + 11 * sec, t0 + 30 * sec, "checkout slow"}};
  const std::string t = to_svg(two, o);
  CHECK(count_of(t, "class=\"mark-label\"") == 2);
  CHECK(count_of(t, "too crowded") == 0);
  crowded.marks_not_drawn = 12;
  CHECK(count_of(to_svg(crowded, o), "12 more annotations not drawn") == 1);
}

TEST_CASE("the terminal heatmap fits the terminal, escape-free without colour", "[charts]") {
  auto h = make_heatmap(stats::layout::latency, t0, t0 + 3600 * sec, 10 * sec);
  stats::histogram a{stats::layout::latency, {}};
  a.add(15'000, 4);
  a.add(90'000'000, 1);
  for (int i = 0; i < 360; i += 7) {
    REQUIRE(add(h, t0 + i * 10 * sec, a).ok());
  }
  h.gaps = {{t0 + 100 * sec, t0 + 900 * sec, "gap"}};
  h.marks = {{t0 + 1800 * sec, t0 + 1860 * sec, "deploy"}};
  for (const bool color : {false, true}) {
    const std::string out = to_terminal(h, 20, 80, color, timefmt::zone::utc());
    std::size_t lines = 0;
    std::size_t start = 0;
    while (start < out.size()) {
      const std::size_t end = out.find('\n', start);
      const std::string line = out.substr(start, end - start);
      // Display width: escapes stripped, one column per code point.
      const std::string plain = std::regex_replace(line, std::regex("\x1b\\[[0-9;]*m"), "");
      CHECK(text::display_width(plain) <= 100); // the legend line may run past 80
      ++lines;
      start = end + 1;
    }
    CHECK(lines <= 20);
    CHECK((out.find('\x1b') != std::string::npos) == color);
    CHECK(out.find("^ 14:30 deploy") != std::string::npos);
  }
}

TEST_CASE("the series chart: a line per series, duration axis, no data", "[charts]") {
  series_chart c;
  c.title = "p99";
  c.names = {"p50_ns", "p99_ns"};
  c.durations = true;
  for (int i = 0; i < 10; ++i) {
    c.x.push_back(t0 + i * 10 * sec);
  }
  c.y = {std::vector<std::optional<double>>(10, 20'000.0),
         std::vector<std::optional<double>>(10, 3'000'000.0)};
  c.y[1][5] = std::nullopt; // a hole: two polylines
  svg_options o;
  o.zone = timefmt::zone::utc();
  const std::string svg = to_svg(c, o);
  CHECK(count_of(svg, "class=\"series\"") == 2);
  CHECK(count_of(svg, "<polyline") == 3);
  CHECK(svg.find(" ms</text>") != std::string::npos);
  c.log = true;
  CHECK(to_svg(c, o).find("10.0 ms") != std::string::npos);
  series_chart empty;
  empty.title = "nothing";
  CHECK(to_svg(empty, o).find("no data") != std::string::npos);
  const std::string t = to_terminal(c, 15, 60, false, timefmt::zone::utc());
  CHECK(t.find("p99_ns") != std::string::npos);
  CHECK(t.find('\x1b') == std::string::npos);
}

TEST_CASE("a series chart's axis ends: a log axis with nothing above 0, values past precision",
          "[charts]") {
  // Each returned at once before it was drawn: the log axis of a chart whose condition matched
  // nothing (or whose values are all <= 0) counted ticks from 0 up by tens until memory ran
  // out; linear ticks of 1e18 a few apart never moved.
  const auto tick_labels = [](const std::string &svg) {
    std::size_t n = 0;
    for (std::size_t at = svg.find("text-anchor=\"end\""); at != std::string::npos;
         at = svg.find("text-anchor=\"end\"", at + 1)) {
      ++n;
    }
    return n;
  };
  rsched::charts::series_chart c;
  c.title = "nothing";
  c.names = {"p99"};
  c.x = {1'000'000'000, 2'000'000'000, 3'000'000'000};
  c.log = true;
  SECTION("no value at all") {
    c.y = {{std::nullopt, std::nullopt, std::nullopt}};
  }
  SECTION("only values <= 0") {
    c.y = {{0.0, -5.0, 0.0}};
  }
  SECTION("linear, values of 1e18 a nanosecond apart") {
    c.log = false;
    c.y = {{-1e18, -1e18 + 256, -1e18}};
  }
  const std::string svg = rsched::charts::to_svg(c);
  CHECK(svg.rfind("</svg>") != std::string::npos);
  const std::size_t n = tick_labels(svg);
  CHECK(n >= 1);
  CHECK(n <= 64);
}
