// The live table: headers, alphabetical column-major domain cells in 3 columns, the CPU cells
// with the kernel's labels, and no division by zero.
#include "rsched/schedstat/render.hpp"

#include "fixture.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace rsched::schedstat;

namespace {

// Padding written out by hand (not with fmt) so the test checks the widths independently.
std::string pad_right(std::string s, std::size_t w) {
  if (s.size() < w) {
    s += std::string(w - s.size(), ' ');
  }
  return s;
}
std::string pad_left(const std::string &s, std::size_t w) {
  return s.size() < w ? std::string(w - s.size(), ' ') + s : s;
}
std::string domain_cell(const std::string &name, const std::string &value) {
  return pad_right(name, 30) + " " + pad_left(value, 9) + " ";
}
std::string cpu_cell(const std::string &name, const std::string &value) {
  return pad_right(name, 17) + " " + pad_left(value, 12) + " ";
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    REQUIRE(end != std::string::npos); // every line is terminated
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

const std::string domain_header = "\n=== System-wide Schedstat Metrics (deltas) ===\n";

} // namespace

TEST_CASE("empty deltas: the header and a blank line", "[schedstat]") {
  CHECK(render(deltas{}) == domain_header + "\n");
}

TEST_CASE("domain cells are sorted and filled column-major", "[schedstat]") {
  deltas d;
  d.domain_totals = {{"zeta", 4}, {"alpha", 1}, {"mid", 3}, {"beta", 22}};
  // rows = ceil(4 / 3) = 2: column 0 holds alpha, beta; column 1 holds mid, zeta
  CHECK(render(d) == domain_header + domain_cell("alpha", "1") + "| " + domain_cell("mid", "3") +
                         "\n" + domain_cell("beta", "22") + "| " + domain_cell("zeta", "4") +
                         "\n\n");

  d.domain_totals = {{"g", 7}, {"f", 6}, {"e", 5}, {"d", 4}, {"c", 3}, {"b", 2}, {"a", 1}};
  // rows = 3: a b c | d e f | g
  CHECK(render(d) == domain_header + domain_cell("a", "1") + "| " + domain_cell("d", "4") + "| " +
                         domain_cell("g", "7") + "\n" + domain_cell("b", "2") + "| " +
                         domain_cell("e", "5") + "\n" + domain_cell("c", "3") + "| " +
                         domain_cell("f", "6") + "\n\n");
}

TEST_CASE("v17 fixtures render as upstream's table with correct CPU labels", "[schedstat]") {
  const auto a = fixture_snapshot("schedstat_v17.txt");
  const auto b = fixture_snapshot("schedstat_v17_later.txt");
  const auto d = delta(a, b);
  REQUIRE(d.ok());
  const std::string out = render(d.value());
  CHECK(out.starts_with(domain_header));
  CHECK(out.ends_with("\n\n"));

  const auto lines = lines_of(out);
  REQUIRE(lines.size() == 23);
  CHECK(lines[0].empty());
  CHECK(lines[1] == "=== System-wide Schedstat Metrics (deltas) ===");
  // 45 fields: 15 rows of 3 cells; column-major, so row 0 is sorted[0], sorted[15], sorted[30]
  for (std::size_t row = 2; row < 17; ++row) {
    CHECK(lines[row].size() == 3 * 41 + 2 * 2);
    CHECK(lines[row].substr(41, 2) == "| ");
    CHECK(lines[row].substr(84, 2) == "| ");
  }
  CHECK(lines[2] == domain_cell("alb_count", "2007") + "| " +
                        domain_cell("lb_hot_gained_idle", "2205") + "| " +
                        domain_cell("lb_nobusyg_idle", "2537"));
  CHECK(lines[3].starts_with("alb_failed ")); // row-major would have put it next to alb_count
  CHECK(lines[7] == domain_cell("lb_balanced_not_idle", "2190") + "| " +
                        domain_cell("lb_imbalance_load_not_idle", "1707") + "| " +
                        domain_cell("lb_nobusyq_not_idle", "2703"));
  CHECK(lines[16] == domain_cell("lb_gained_not_idle", "2454") + "| " +
                         domain_cell("lb_imbalance_util_not_idle", "1432") + "| " +
                         domain_cell("ttwu_wake_remote", "2161"));
  CHECK(lines[17].empty());
  CHECK(lines[18] == "=== CPU Field Totals (deltas) ===");
  CHECK(lines[19] == cpu_cell("yld_count", "43") + "| " + cpu_cell("sched_count", "195226") + "| " +
                         cpu_cell("sched_goidle", "78089"));
  CHECK(lines[20] == cpu_cell("ttwu_count", "108899") + "| " + cpu_cell("ttwu_local", "13402") +
                         "| " + cpu_cell("rq_cpu_time_ns", "3744470096"));
  // 233962018 / 130191 = 1797.07
  CHECK(lines[21] == cpu_cell("run_delay_ns", "233962018") + "| " + cpu_cell("pcount", "130191") +
                         "| " + cpu_cell("avg_run_delay_ns", "1797"));
  CHECK(lines[22].empty());
  CHECK(out.find("legacy") == std::string::npos);
}

TEST_CASE("a zero pcount prints '-' instead of dividing", "[schedstat]") {
  deltas d;
  d.cpus.push_back(cpu_delta{});
  d.cpu_totals.run_delay_ns = 12345;
  d.totals = derive(d.cpu_totals);
  const std::string out = render(d);
  const auto lines = lines_of(out);
  REQUIRE(lines.size() == 8);
  CHECK(lines[3] == "=== CPU Field Totals (deltas) ===");
  CHECK(lines[6] == cpu_cell("run_delay_ns", "12345") + "| " + cpu_cell("pcount", "0") + "| " +
                        cpu_cell("avg_run_delay_ns", "-"));
  CHECK(lines[7].empty());
}
