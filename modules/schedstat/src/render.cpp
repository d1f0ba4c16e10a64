// Upstream's live schedstat table; the format and our differences are in render.hpp.
#include "rsched/schedstat/render.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

namespace rsched::schedstat {

std::string render(const deltas &d) {
  std::string out = "\n=== System-wide Schedstat Metrics (deltas) ===\n";
  auto sink = std::back_inserter(out);

  std::vector<field_value> metrics = d.domain_totals;
  std::sort(metrics.begin(), metrics.end(),
            [](const field_value &a, const field_value &b) { return a.name < b.name; });
  const std::size_t rows = (metrics.size() + 2) / 3;
  for (std::size_t row = 0; row < rows; ++row) {
    for (std::size_t col = 0; col < 3; ++col) {
      const std::size_t idx = col * rows + row;
      if (idx >= metrics.size()) {
        break; // column-major: once a column has no cell in this row, the next has none either
      }
      if (col > 0) {
        out += "| ";
      }
      fmt::format_to(sink, "{:<30} {:>9} ", metrics[idx].name, metrics[idx].value);
    }
    out += '\n';
  }

  if (!d.cpus.empty()) {
    out += "\n=== CPU Field Totals (deltas) ===\n";
    const cpu_fields &t = d.cpu_totals;
    const auto avg = d.totals.avg_run_delay_ns;
    const std::vector<std::pair<std::string_view, std::string>> cells{
        {"yld_count", fmt::format("{}", t.yld_count)},
        {"sched_count", fmt::format("{}", t.sched_count)},
        {"sched_goidle", fmt::format("{}", t.sched_goidle)},
        {"ttwu_count", fmt::format("{}", t.ttwu_count)},
        {"ttwu_local", fmt::format("{}", t.ttwu_local)},
        {"rq_cpu_time_ns", fmt::format("{}", t.rq_cpu_time_ns)},
        {"run_delay_ns", fmt::format("{}", t.run_delay_ns)},
        {"pcount", fmt::format("{}", t.pcount)},
        {"avg_run_delay_ns", avg ? fmt::format("{:.0f}", std::round(*avg)) : std::string("-")},
    };
    for (std::size_t i = 0; i < cells.size(); ++i) {
      fmt::format_to(sink, "{:<17} {:>12} ", cells[i].first, cells[i].second);
      if ((i + 1) % 3 == 0 || i + 1 == cells.size()) {
        out += '\n';
      } else {
        out += "| ";
      }
    }
  }
  out += '\n';
  return out;
}

} // namespace rsched::schedstat
