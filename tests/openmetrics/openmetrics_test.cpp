// The text formats: edges that are our bucket edges, exact cumulative counts, label escaping of
// hostile names, and the exact lines of a family in both formats.
#include "rsched/openmetrics/openmetrics.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <sstream>
#include <string>

namespace om = rsched::openmetrics;
using rsched::stats::histogram;
using rsched::stats::layout;

TEST_CASE("openmetrics: the le edges are bucket edges of the latency layout", "[openmetrics]") {
  const auto edges = om::latency_edges_ns();
  REQUIRE(edges.size() == 21);
  std::uint64_t prev = 0;
  for (const auto e : edges) {
    INFO(e);
    CHECK(e > prev);
    prev = e;
    // e is the lower bound of the slot holding it, and e - 1 is in the slot below.
    const auto s = rsched::stats::slot_of(layout::latency, e);
    CHECK(rsched::stats::bucket_bounds(layout::latency, s).lo == e);
    CHECK(rsched::stats::slot_of(layout::latency, e - 1) == s - 1);
  }
  CHECK(edges.front() == 10'000);
  CHECK(edges.back() == 16'777'216'000);
}

TEST_CASE("openmetrics: cumulative counts are exact at every edge", "[openmetrics]") {
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> values;
  histogram h{layout::latency, {}};
  for (int i = 0; i < 20000; ++i) {
    // log-uniform from 1 µs to ~70 s, plus the exact edges themselves
    const double x =
        std::exp(std::uniform_real_distribution<double>(std::log(1e3), std::log(7e10))(rng));
    values.push_back(static_cast<std::uint64_t>(x));
  }
  for (const auto e : om::latency_edges_ns()) {
    values.push_back(e);
    values.push_back(e - 1);
  }
  for (const auto v : values) {
    h.add(v);
  }
  const auto edges = om::latency_edges_ns();
  const auto c = om::cumulative_counts(h, edges);
  REQUIRE(c.size() == edges.size() + 1);
  for (std::size_t i = 0; i < edges.size(); ++i) {
    std::uint64_t below = 0;
    for (const auto v : values) {
      below += v < edges[i] ? 1U : 0U;
    }
    INFO(edges[i]);
    CHECK(c[i] == below);
  }
  CHECK(c.back() == values.size());
  const histogram empty{layout::latency, {}};
  for (const auto x : om::cumulative_counts(empty, edges)) {
    CHECK(x == 0);
  }
}

TEST_CASE("openmetrics: values, le, timestamps and label escaping", "[openmetrics]") {
  CHECK(om::format_value(3) == "3");
  CHECK(om::format_value(0.5) == "0.5");
  CHECK(om::format_value(1e-05) == "1e-05");
  CHECK(om::format_value(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(om::format_value(std::nan("")) == "NaN");
  CHECK(om::format_le_seconds(10'000) == "0.00001");
  CHECK(om::format_le_seconds(1'024'000) == "0.001024");
  CHECK(om::format_le_seconds(16'777'216'000) == "16.777216");
  CHECK(om::format_le_seconds(2'000'000'000) == "2.0");
  CHECK(om::format_timestamp(1'795'179'610'123'456'789) == "1795179610.123");
  CHECK(om::format_timestamp(0) == "0.000");
  CHECK(om::escape_label_value("web") == "web");
  CHECK(om::escape_label_value("a\"b") == "a\\\"b");
  CHECK(om::escape_label_value("a\\b") == "a\\\\\\\\b"); // \ is \\ (terminal), then escaped
  CHECK(om::escape_label_value("x\ny") == "x\\\\x0ay");
  CHECK(om::escape_label_value("\x1b[31m") == "\\\\x1b[31m");
  CHECK(om::escape_label_value("\xff") == "\\\\xff");
  CHECK(om::escape_label_value("caf\xc3\xa9") == "caf\xc3\xa9"); // valid UTF-8 stays
  // Distinct names stay distinct.
  CHECK(om::escape_label_value("\\x1b") != om::escape_label_value("\x1b"));
}

TEST_CASE("openmetrics: a histogram family in both formats", "[openmetrics]") {
  histogram h{layout::latency, {}};
  h.add(5'000);          // below 10 µs
  h.add(15'000);         // below 20 µs
  h.add(3'000'000);      // below 4.096 ms
  h.add(90'000'000'000); // above every edge
  const std::vector<std::uint64_t> edges = {10'000, 20'000, 4'096'000};
  const auto c = om::cumulative_counts(h, edges);
  for (const auto f : {om::format::openmetrics, om::format::prometheus}) {
    std::ostringstream out;
    om::writer w(out, f);
    w.begin("rsched_cpu_sched_delay_seconds", om::metric_type::histogram, "Delay.", "seconds");
    w.histogram({{"cpu", "1"}}, edges, c, 90.003020, 1'795'179'610'000'000'000);
    w.begin("rsched_intervals", om::metric_type::counter, "Intervals.");
    w.counter({}, 12, 1'795'179'610'000'000'000);
    w.finish();
    const bool om1 = f == om::format::openmetrics;
    const std::string ts = om1 ? " 1795179610.000\n" : " 1795179610000\n";
    std::string want = "# HELP rsched_cpu_sched_delay_seconds Delay.\n"
                       "# TYPE rsched_cpu_sched_delay_seconds histogram\n";
    if (om1) {
      want += "# UNIT rsched_cpu_sched_delay_seconds seconds\n";
    }
    want += "rsched_cpu_sched_delay_seconds_bucket{cpu=\"1\",le=\"0.00001\"} 1" + ts +
            "rsched_cpu_sched_delay_seconds_bucket{cpu=\"1\",le=\"0.00002\"} 2" + ts +
            "rsched_cpu_sched_delay_seconds_bucket{cpu=\"1\",le=\"0.004096\"} 3" + ts +
            "rsched_cpu_sched_delay_seconds_bucket{cpu=\"1\",le=\"+Inf\"} 4" + ts +
            "rsched_cpu_sched_delay_seconds_count{cpu=\"1\"} 4" + ts +
            "rsched_cpu_sched_delay_seconds_sum{cpu=\"1\"} 90.00302" + ts;
    const std::string fam = om1 ? "rsched_intervals" : "rsched_intervals_total";
    want += "# HELP " + fam + " Intervals.\n# TYPE " + fam + " counter\n";
    want += "rsched_intervals_total 12" + ts;
    if (om1) {
      want += "# EOF\n";
    }
    CHECK(out.str() == want);
  }
}
