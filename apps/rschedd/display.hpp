#pragma once
// The live "Scheduling Delays" table, upstream's collapsed layout (rsched-upstream.md §8):
// cumulative since start, collapsed by comm, bucketed into latency groups by p90, top 10 rows per
// group sorted by p90 descending, values in integer microseconds. Pure: renders to a string.
#include "rsched/base/text.hpp"
#include "rsched/stats/percentile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace rsched::display {

struct comm_entry {
  stats::histogram hist{stats::layout::latency, {}};
  std::set<std::uint32_t> tids;
};

// Cumulative per-comm scheduling delay since start (upstream's RschedStats, collapsed).
class delay_table {
public:
  void add(const std::string &comm, std::uint32_t tid, const stats::histogram &h) {
    auto &e = entries_[comm];
    (void)stats::merge_into(e.hist, h);
    e.tids.insert(tid);
  }
  [[nodiscard]] const std::map<std::string, comm_entry> &entries() const { return entries_; }

private:
  std::map<std::string, comm_entry> entries_;
};

// "a,b,c" for up to 3 ids, "a,b,c,...(+N)" beyond.
inline std::string pid_list(const std::set<std::uint32_t> &tids) {
  std::string out;
  std::size_t i = 0;
  for (auto t : tids) {
    if (i == 3) {
      out += fmt::format(",...(+{})", tids.size() - 3);
      break;
    }
    out += (i == 0 ? "" : ",") + std::to_string(t);
    ++i;
  }
  return out;
}

struct latency_group {
  const char *desc;
  std::uint64_t upper_us; // exclusive
};
inline constexpr latency_group latency_groups[] = {
    {"Very Low (<10μs)", 10}, {"Low (10-100μs)", 100},           {"Medium (100μs-1ms)", 1000},
    {"High (1-10ms)", 10000}, {"Very High (>10ms)", UINT64_MAX},
};

inline std::string render_delay_table(const delay_table &t) {
  struct row {
    std::string comm; // escaped
    std::size_t procs;
    std::uint64_t p50, p90, p99, count;
    std::string pids;
  };
  std::vector<row> rows;
  for (const auto &[comm, e] : t.entries()) {
    const std::uint64_t n = e.hist.total();
    if (n == 0) {
      continue;
    }
    rows.push_back({text::escape_for_terminal(comm), e.tids.size(),
                    stats::percentile_or_zero(e.hist, 50) / 1000,
                    stats::percentile_or_zero(e.hist, 90) / 1000,
                    stats::percentile_or_zero(e.hist, 99) / 1000, n, pid_list(e.tids)});
  }
  std::string out = "=== Collapsed Scheduling Delays (microseconds) ===\n\n";
  if (rows.empty()) {
    out += "No scheduling delays data collected yet.\n";
    return out;
  }
  std::size_t w = 7;
  for (const auto &r : rows) {
    w = std::max(w, text::display_width(r.comm));
  }
  auto pad = [](const std::string &s, std::size_t width) {
    const std::size_t dw = text::display_width(s);
    return s + std::string(dw < width ? width - dw : 0, ' ') + " ";
  };
  std::uint64_t lower = 0;
  for (const auto &g : latency_groups) {
    std::vector<const row *> in;
    for (const auto &r : rows) {
      if (r.p90 >= lower && r.p90 < g.upper_us) {
        in.push_back(&r);
      }
    }
    lower = g.upper_us;
    if (in.empty()) {
      continue;
    }
    std::stable_sort(in.begin(), in.end(),
                     [](const row *a, const row *b) { return a->p90 > b->p90; });
    out += fmt::format("{} ({} entries):\n", g.desc, in.size());
    out += "  " + pad("COMMAND", w) + pad("PROCS", 8) + pad("p50", 10) + pad("p90", 10) +
           pad("p99", 10) + pad("COUNT", 12) + pad("PIDs", 20) + "\n";
    const std::size_t shown = std::min<std::size_t>(in.size(), 10);
    for (std::size_t i = 0; i < shown; ++i) {
      const row &r = *in[i];
      out += "  " + pad(r.comm, w) + pad(std::to_string(r.procs), 8) +
             pad(std::to_string(r.p50), 10) + pad(std::to_string(r.p90), 10) +
             pad(std::to_string(r.p99), 10) + pad(std::to_string(r.count), 12) + pad(r.pids, 20) +
             "\n";
    }
    if (in.size() > shown) {
      out += fmt::format("  ... and {} more\n", in.size() - shown);
    } else {
      out += "\n";
    }
  }
  return out;
}

} // namespace rsched::display
