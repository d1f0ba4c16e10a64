// rschedd's live tables (render.hpp): upstream's layout rules, see the header.
#include "rsched/rschedd/render.hpp"

#include "rsched/abi/sched_abi.h"
#include "rsched/base/text.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/model.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include <fmt/format.h>
#include <range/v3/algorithm/max.hpp>
#include <range/v3/algorithm/stable_sort.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/chunk_by.hpp>
#include <range/v3/view/filter.hpp>
#include <range/v3/view/join.hpp>
#include <range/v3/view/take.hpp>
#include <range/v3/view/transform.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rsched::rschedd {

namespace render_detail {

bool has(const render_options &o, rsched_group g) {
  return (o.groups & static_cast<std::uint32_t>(g)) != 0;
}

const char *prefix(const render_options &o) {
  return o.mode == output_mode::collapsed ? "Collapsed" : "Per-Process";
}

// Left-aligned in `w` display columns (never truncated), like Rust's "{:<w}".
std::string pad(std::string_view s, std::size_t w) {
  std::string out(s);
  const std::size_t dw = text::display_width(s);
  if (dw < w) {
    out.append(w - dw, ' ');
  }
  return out;
}
std::string pad(std::uint64_t v, std::size_t w) {
  return pad(std::to_string(v), w);
}

std::string pid_list(const std::set<std::uint32_t> &tids) {
  std::string out = tids | ranges::views::take(3) |
                    ranges::views::transform([](std::uint32_t t) { return std::to_string(t); }) |
                    ranges::views::join(',') | ranges::to<std::string>();
  if (tids.size() > 3) {
    out += fmt::format(",...(+{})", tids.size() - 3);
  }
  return out;
}

std::string cpu_ranges(const std::vector<std::uint32_t> &cpus) {
  return cpus |
         ranges::views::chunk_by([](std::uint32_t a, std::uint32_t b) { return b == a + 1; }) |
         ranges::views::transform([](auto run) {
           const std::uint32_t first = *ranges::begin(run);
           const std::uint32_t last = ranges::max(run);
           return first == last ? std::to_string(first) : fmt::format("{}-{}", first, last);
         }) |
         ranges::views::join(',') | ranges::to<std::string>();
}

std::string format_rate(double v) {
  if (v >= 1e12) {
    return fmt::format("{:.1f}T", v / 1e12);
  }
  if (v >= 1e9) {
    return fmt::format("{:.1f}G", v / 1e9);
  }
  if (v >= 1e6) {
    return fmt::format("{:.1f}M", v / 1e6);
  }
  if (v >= 1e3) {
    return fmt::format("{:.1f}K", v / 1e3);
  }
  return fmt::format("{:.0f}", v);
}

// A percentile as displayed: integer microseconds for durations (ns / 1000, as upstream), the
// value itself for depth / count / log2 layouts. 0 for an empty histogram.
std::uint64_t shown(const stats::histogram &h, double p) {
  const std::uint64_t v = stats::percentile_or_zero(h, p);
  return h.kind == stats::layout::latency ? v / 1000 : v;
}

struct band {
  const char *desc;
  std::uint64_t upper; // exclusive
};
// LatencyGroup (by p90 in us).
constexpr band latency_bands[] = {
    {"Very Low (<10μs)", 10},
    {"Low (10-100μs)", 100},
    {"Medium (100μs-1ms)", 1000},
    {"High (1-10ms)", 10000},
    {"Very High (>10ms)", std::numeric_limits<std::uint64_t>::max()},
};
// IdleDurationGroup (by p90 in us).
constexpr band idle_bands[] = {
    {"Very Short (<100μs)", 100},
    {"Short (100μs-1ms)", 1000},
    {"Medium (1-10ms)", 10000},
    {"Long (10-100ms)", 100000},
    {"Very Long (>100ms)", std::numeric_limits<std::uint64_t>::max()},
};
std::size_t band_of(std::span<const band> bands, std::uint64_t v) {
  std::size_t i = 0;
  while (i + 1 < bands.size() && v >= bands[i].upper) {
    ++i;
  }
  return i;
}

// PerfGroup (by cycles per second), printed in descending order.
constexpr const char *perf_bands[] = {
    "Very Low (<1M cycles/sec)", "Low (1-100M cycles/sec)",     "Medium (100M-1G cycles/sec)",
    "High (1-10G cycles/sec)",   "Very High (>10G cycles/sec)",
};
std::size_t perf_band_of(double cycles_per_sec) {
  const double mcycles = cycles_per_sec / 1e6;
  if (mcycles < 1.0) {
    return 0;
  }
  if (mcycles < 100.0) {
    return 1;
  }
  if (mcycles < 1000.0) {
    return 2;
  }
  if (mcycles < 10000.0) {
    return 3;
  }
  return 4;
}

// One row of the per-thread sections: a comm (collapsed) or a thread (-C / -d). `s` holds the
// merged histograms; `tids` the distinct thread ids that contributed data.
struct entry {
  thread_stats s;
  std::set<std::uint32_t> tids;
  std::string shown_comm; // escaped
};

// A metric of the registry (the sections name their metric by id).
using hist_member = metrics::id;

const stats::histogram &hist_of(const thread_stats &s, metrics::id m) {
  return s.m[m].hist;
}

// upstream build_process_entries: filter per thread first (-p, global-comm, -c, --cgroup, -l),
// then keep the metrics of the selected groups that have samples, collapsed by comm or per
// thread. A thread without data in any selected metric does not appear.
std::vector<entry> build_entries(const model &m, const render_options &o, const filter &f) {
  const bool collapsed = o.mode == output_mode::collapsed;
  std::map<std::string, entry> by_comm;
  std::vector<entry> per_thread;
  for (const auto &[id, t] : m.threads) {
    if (!f.include(t) || !f.passes_min_latency(hist_of(t, metrics::id::sched_delay))) {
      continue;
    }
    entry fresh;
    entry *e = &fresh;
    if (collapsed) {
      auto it = by_comm.find(t.comm);
      if (it != by_comm.end()) {
        e = &it->second;
      }
    }
    bool any = false;
    constexpr auto defs = metrics::entries<metrics::scope::thread>();
    for (std::size_t i = 0; i < defs.size(); ++i) {
      if (!has(o, static_cast<rsched_group>(defs[i].group)) || t.m.at(i).hist.empty()) {
        continue;
      }
      any = true;
      (void)stats::merge_into(e->s.m.at(i).hist, t.m.at(i).hist);
    }
    if (!any) {
      continue;
    }
    e->tids.insert(t.tid);
    if (e == &fresh) {
      fresh.s.tid = t.tid;
      fresh.s.tgid = t.tgid;
      fresh.s.comm = t.comm;
      fresh.s.cgroup = t.cgroup;
      fresh.shown_comm = text::escape_for_terminal(t.comm);
      if (collapsed) {
        by_comm.emplace(t.comm, std::move(fresh));
      } else {
        per_thread.push_back(std::move(fresh));
      }
    }
  }
  if (!collapsed) {
    return per_thread;
  }
  std::vector<entry> out;
  out.reserve(by_comm.size());
  for (auto &kv : by_comm) {
    out.push_back(std::move(kv.second));
  }
  return out;
}

template <typename Key> struct ranked {
  const entry *e;
  Key key;
};

// Entries (in their stable base order) sorted by `key` descending, ties kept in base order.
template <typename Range, typename KeyFn> auto sorted_desc(Range &&rows, KeyFn key) {
  using key_t = std::invoke_result_t<KeyFn, const entry &>;
  auto v = rows | ranges::views::transform([&](const entry *e) {
             return ranked<key_t>{e, key(*e)};
           }) |
           ranges::to<std::vector>();
  ranges::stable_sort(v, std::greater<>{}, &ranked<key_t>::key);
  return v | ranges::views::transform([](const ranked<key_t> &r) { return r.e; }) |
         ranges::to<std::vector>();
}

std::vector<const entry *> pointers(const std::vector<entry> &es) {
  return es | ranges::views::transform([](const entry &e) { return &e; }) |
         ranges::to<std::vector>();
}

std::vector<const entry *> with_data(const std::vector<entry> &es, hist_member h) {
  return es | ranges::views::filter([h](const entry &e) { return !(hist_of(e.s, h)).empty(); }) |
         ranges::views::transform([](const entry &e) { return &e; }) | ranges::to<std::vector>();
}

template <typename Rows> std::size_t comm_width(const Rows &rows) {
  std::size_t w = 7;
  for (const auto *r : rows) {
    w = std::max(w, text::display_width(r->shown_comm));
  }
  return w;
}

void more_or_blank(std::string &out, std::size_t total, std::size_t shown_rows) {
  if (total > shown_rows) {
    out += fmt::format("  ... and {} more\n\n", total - shown_rows);
  } else {
    out += "\n";
  }
}

void more_only(std::string &out, std::size_t total, std::size_t shown_rows) {
  if (total > shown_rows) {
    out += fmt::format("  ... and {} more\n\n", total - shown_rows);
  }
}

template <typename T> std::vector<T> head(const std::vector<T> &v, std::size_t n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(std::min(n, v.size()))};
}

// print_histogram_table: p50/p90/p99/COUNT (+PROCS/PIDs collapsed).
void hist_table(std::string &out, const std::vector<const entry *> &rows, hist_member h,
                bool collapsed) {
  const std::size_t w = comm_width(rows);
  if (collapsed) {
    out += "  " + pad("COMMAND", w) + " " + pad("PROCS", 8) + " " + pad("p50", 10) + " " +
           pad("p90", 10) + " " + pad("p99", 10) + " " + pad("COUNT", 12) + " " + pad("PIDs", 20) +
           " \n";
  } else {
    out += "  " + pad("PID", 8) + " " + pad("COMMAND", w) + " " + pad("p50", 10) + " " +
           pad("p90", 10) + " " + pad("p99", 10) + " " + pad("COUNT", 12) + " \n";
  }
  for (const entry *e : rows) {
    const auto &hist = hist_of(e->s, h);
    const std::uint64_t n = hist.total();
    if (n == 0) {
      continue;
    }
    const std::string vals = pad(shown(hist, 50), 10) + " " + pad(shown(hist, 90), 10) + " " +
                             pad(shown(hist, 99), 10) + " " + pad(n, 12);
    if (collapsed) {
      out += "  " + pad(e->shown_comm, w) + " " + pad(e->tids.size(), 8) + " " + vals + " " +
             pad(pid_list(e->tids), 20) + "\n";
    } else {
      out += "  " + pad(e->s.tid, 8) + " " + pad(e->shown_comm, w) + " " + vals + "\n";
    }
  }
}

// print_metric_section: latency-grouped hybrid-histogram tables.
void metric_section(std::string &out, const std::vector<entry> &es, const render_options &o,
                    std::string_view title, std::string_view subtitle, hist_member h) {
  const bool collapsed = o.mode == output_mode::collapsed;
  out += fmt::format("=== {} {} {} ===\n\n", prefix(o), title, subtitle);
  const auto rows = with_data(es, h);
  if (rows.empty()) {
    std::string lower(title);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; });
    out += fmt::format("No {} data collected yet.\n\n", lower);
    return;
  }
  if (o.mode == output_mode::detailed) {
    hist_table(out, rows, h, collapsed);
    return;
  }
  std::vector<std::vector<const entry *>> groups(std::size(latency_bands));
  for (const entry *e : rows) {
    groups[band_of(latency_bands, shown(hist_of(e->s, h), 90))].push_back(e);
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) {
      continue;
    }
    out += fmt::format("{} ({} entries):\n", latency_bands[g].desc, groups[g].size());
    const auto sorted =
        sorted_desc(groups[g], [h](const entry &e) { return shown(hist_of(e.s, h), 90); });
    hist_table(out, head(sorted, 10), h, collapsed);
    more_or_blank(out, sorted.size(), std::min<std::size_t>(sorted.size(), 10));
  }
}

// Linear tables (runqueue depth, migrations): p50/p90/p99/COUNT, no PIDs.
void linear_table(std::string &out, const std::vector<const entry *> &rows, hist_member h,
                  bool collapsed) {
  const std::size_t w = comm_width(rows);
  if (collapsed) {
    out += "  " + pad("COMMAND", w) + " " + pad("PROCS", 8) + " ";
  } else {
    out += "  " + pad("PID", 8) + " " + pad("COMMAND", w) + " ";
  }
  out +=
      pad("p50", 10) + " " + pad("p90", 10) + " " + pad("p99", 10) + " " + pad("COUNT", 12) + "\n";
  for (const entry *e : rows) {
    const auto &hist = hist_of(e->s, h);
    const std::uint64_t n = hist.total();
    if (n == 0) {
      continue;
    }
    if (collapsed) {
      out += "  " + pad(e->shown_comm, w) + " " + pad(e->tids.size(), 8) + " ";
    } else {
      out += "  " + pad(e->s.tid, 8) + " " + pad(e->shown_comm, w) + " ";
    }
    out += pad(shown(hist, 50), 10) + " " + pad(shown(hist, 90), 10) + " " +
           pad(shown(hist, 99), 10) + " " + pad(n, 12) + "\n";
  }
}

struct linear_spec {
  std::string_view title;    // "Runqueue Depth Statistics"
  std::string_view subtitle; // "(nr_running at wakeup)"
  std::string_view lead;     // "Processes by runqueue depth at wakeup:"
  std::string_view empty;    // "No runqueue depth data collected yet."
  hist_member h;
};

void linear_section(std::string &out, const std::vector<entry> &es, const render_options &o,
                    const linear_spec &sp) {
  const bool collapsed = o.mode == output_mode::collapsed;
  out += fmt::format("=== {} {} {} ===\n\n", prefix(o), sp.title, sp.subtitle);
  const auto rows = with_data(es, sp.h);
  if (rows.empty()) {
    out += fmt::format("{}\n\n", sp.empty);
    return;
  }
  if (o.mode == output_mode::detailed) {
    linear_table(out, rows, sp.h, collapsed);
    return;
  }
  out += fmt::format("{}\n\n", sp.lead);
  const auto h = sp.h;
  const auto sorted = sorted_desc(rows, [h](const entry &e) { return shown(hist_of(e.s, h), 90); });
  linear_table(out, head(sorted, 10), h, collapsed);
  more_only(out, sorted.size(), std::min<std::size_t>(sorted.size(), 10));
}

// Upstream's calculate_preemption_rate.
double preemption_rate(const entry &e) {
  const std::uint64_t invol = hist_of(e.s, metrics::id::slice_involuntary).total();
  const std::uint64_t total = hist_of(e.s, metrics::id::slice_voluntary).total() + invol;
  return total > 0 && invol > 0 ? static_cast<double>(invol) / static_cast<double>(total) : 0.0;
}

void timeslice_table(std::string &out, const std::vector<const entry *> &rows, bool collapsed) {
  const std::size_t w = comm_width(rows);
  if (collapsed) {
    out += "  " + pad("COMMAND", w) + " " + pad("PROCS", 8) + " ";
  } else {
    out += "  " + pad("PID", 8) + " " + pad("COMMAND", w) + " ";
  }
  out += pad("INVOL_COUNT", 12) + " " + pad("VOLUNTARY(p50/p90)", 20) + " " +
         pad("PREEMPTED(p50/p90)", 20) + " " + pad("PREEMPT%", 12) + "\n";
  auto p50_90 = [](const stats::histogram &hist) {
    return hist.empty() ? std::string("-") : fmt::format("{}/{}", shown(hist, 50), shown(hist, 90));
  };
  for (const entry *e : rows) {
    const auto &vol_hist = hist_of(e->s, metrics::id::slice_voluntary);
    const auto &invol_hist = hist_of(e->s, metrics::id::slice_involuntary);
    const std::uint64_t vol = vol_hist.total();
    const std::uint64_t invol = invol_hist.total();
    const std::uint64_t total = vol + invol;
    const double pct =
        total > 0 ? static_cast<double>(invol) / static_cast<double>(total) * 100.0 : 0.0;
    if (collapsed) {
      out += "  " + pad(e->shown_comm, w) + " " + pad(e->tids.size(), 8) + " ";
    } else {
      out += "  " + pad(e->s.tid, 8) + " " + pad(e->shown_comm, w) + " ";
    }
    out += pad(invol, 12) + " " + pad(p50_90(vol_hist), 20) + " " + pad(p50_90(invol_hist), 20) +
           " " + fmt::format("{:<12.1f}%", pct) + "\n";
  }
}

// print_timeslice_stats: every entry (also those without slice data), no "no data" message.
void timeslice_section(std::string &out, const std::vector<entry> &es, const render_options &o) {
  const bool collapsed = o.mode == output_mode::collapsed;
  out += fmt::format("=== {} Time Slice Statistics (microseconds) ===\n\n", prefix(o));
  const auto rows = pointers(es);
  if (o.mode == output_mode::detailed) {
    timeslice_table(out, rows, collapsed);
    return;
  }
  out += "Time slice statistics grouped by preemption rate:\n\n";
  const auto sorted = sorted_desc(rows, preemption_rate);
  timeslice_table(out, head(sorted, 10), collapsed);
  more_only(out, sorted.size(), std::min<std::size_t>(sorted.size(), 10));
}

// print_cpu_metric_stats: a per-CPU metric of the registry, grouped by latency bands (delay-like
// metrics: -l hides CPUs) or duration bands (idle, busy).
void cpu_section(std::string &out, const model &m, const render_options &o, const filter &f,
                 const metrics::def &d) {
  const bool delay_like = d.shown == metrics::display::percentiles;
  const auto hist_of = [&d](const cpu_stats &c) -> const stats::histogram & {
    return c.m[d.metric].hist;
  };
  const auto cpus =
      m.cpus | ranges::views::filter([&](const auto &kv) {
        return delay_like ? f.cpu_delay_visible(hist_of(kv.second)) : !hist_of(kv.second).empty();
      }) |
      ranges::views::transform([](const auto &kv) { return &kv.second; }) |
      ranges::to<std::vector>();
  if (cpus.empty()) {
    out += fmt::format("\n=== {} {} ===\n{}\n\n", d.title, d.subtitle, d.empty);
    return;
  }
  out += fmt::format("\n=== {} {} ===\n\n", d.title, d.subtitle);
  if (o.mode == output_mode::detailed) {
    out += pad("CPU", 8) + " " + pad("p50", 10) + " " + pad("p90", 10) + " " + pad("p99", 10) +
           " " + pad("COUNT", 12) + "\n";
    for (const cpu_stats *c : cpus) { // m.cpus is ordered by CPU
      const auto &hist = hist_of(*c);
      out += pad(c->cpu, 8) + " " + pad(shown(hist, 50), 10) + " " + pad(shown(hist, 90), 10) +
             " " + pad(shown(hist, 99), 10) + " " + pad(hist.total(), 12) + "\n";
    }
    return;
  }
  const std::span<const band> bands =
      delay_like ? std::span<const band>(latency_bands) : std::span<const band>(idle_bands);
  std::vector<std::vector<const cpu_stats *>> groups(bands.size());
  for (const cpu_stats *c : cpus) {
    groups[band_of(bands, shown(hist_of(*c), 90))].push_back(c);
  }
  auto summary = [](const stats::histogram &hist) {
    return fmt::format("p50={:<6} p90={:<6} p99={:<6} count={}", shown(hist, 50), shown(hist, 90),
                       shown(hist, 99), hist.total());
  };
  stats::histogram global{d.layout, {}};
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (groups[g].empty()) {
      continue;
    }
    stats::histogram merged{d.layout, {}};
    std::vector<std::uint32_t> ids;
    for (const cpu_stats *c : groups[g]) {
      ids.push_back(c->cpu);
      (void)stats::merge_into(merged, hist_of(*c));
      (void)stats::merge_into(global, hist_of(*c));
    }
    out += fmt::format("{}: CPUs ({}) {}\n", bands[g].desc, ids.size(), cpu_ranges(ids));
    out += "  Group: " + summary(merged) + "\n\n";
  }
  out += "Global: " + summary(global) + "\n\n";
}

// IPC rows, collapsed by comm or per thread.
struct ipc_entry {
  std::string shown_comm;
  std::set<std::uint32_t> tids;
  std::uint32_t tid = 0;
  std::uint64_t uc = 0, kc = 0, ui = 0, ki = 0;
  [[nodiscard]] std::uint64_t cycles() const { return uc + kc; }
};

void ipc_table(std::string &out, const std::vector<const ipc_entry *> &rows, bool collapsed,
               double elapsed) {
  const std::size_t w = comm_width(rows);
  if (collapsed) {
    out += "  " + pad("COMMAND", w) + " " + pad("PROCS", 8) + " ";
  } else {
    out += "  " + pad("PID", 8) + " " + pad("COMMAND", w) + " ";
  }
  out += pad("USER CYC/s", 14) + " " + pad("KERN CYC/s", 14) + " " + pad("U-IPC", 8) + " " +
         pad("K-IPC", 8);
  out += collapsed ? " " + pad("PIDs", 15) + "\n" : "\n";
  auto ipc = [](std::uint64_t instr, std::uint64_t cyc) {
    return cyc > 0 ? static_cast<double>(instr) / static_cast<double>(cyc) : 0.0;
  };
  for (const ipc_entry *e : rows) {
    if (collapsed) {
      out += "  " + pad(e->shown_comm, w) + " " + pad(e->tids.size(), 8) + " ";
    } else {
      out += "  " + pad(e->tid, 8) + " " + pad(e->shown_comm, w) + " ";
    }
    out += pad(format_rate(static_cast<double>(e->uc) / elapsed), 14) + " " +
           pad(format_rate(static_cast<double>(e->kc) / elapsed), 14) + " " +
           fmt::format("{:<8.2f} {:<8.2f}", ipc(e->ui, e->uc), ipc(e->ki, e->kc));
    out += collapsed ? " " + pad(pid_list(e->tids), 15) + "\n" : "\n";
  }
}

// Generic perf-event rows, collapsed by comm or per thread.
struct ev_entry {
  std::string shown_comm;
  std::set<std::uint32_t> tids;
  std::uint32_t tid = 0;
  stats::histogram h{stats::layout::log2, {}};
};
struct ev_row {
  const ev_entry *e;
  std::uint64_t p90;
};

} // namespace render_detail

std::string render_ipc(const model &m, const render_options &o, const filter &f) {
  using namespace render_detail;
  std::string out;
  if (!has(o, RSCHED_G_PERF) || !o.ipc || m.ipc.empty() || !(m.ipc_elapsed_s > 0)) {
    return out;
  }
  const bool collapsed = o.mode == output_mode::collapsed;
  const double elapsed = m.ipc_elapsed_s;
  std::vector<ipc_entry> entries;
  if (collapsed) {
    std::map<std::string, ipc_entry> by_comm;
    for (const auto &r : m.ipc) {
      if (!f.include(r)) {
        continue;
      }
      auto &e = by_comm[r.comm];
      e.shown_comm = text::escape_for_terminal(r.comm);
      e.tids.insert(r.tid);
      e.uc += r.user_cycles;
      e.kc += r.kernel_cycles;
      e.ui += r.user_instructions;
      e.ki += r.kernel_instructions;
    }
    for (auto &kv : by_comm) {
      entries.push_back(std::move(kv.second));
    }
  } else {
    for (const auto &r : m.ipc) {
      if (!f.include(r) || (r.user_cycles == 0 && r.kernel_cycles == 0)) {
        continue;
      }
      entries.push_back({text::escape_for_terminal(r.comm),
                         {r.tid},
                         r.tid,
                         r.user_cycles,
                         r.kernel_cycles,
                         r.user_instructions,
                         r.kernel_instructions});
    }
    std::stable_sort(entries.begin(), entries.end(),
                     [](const ipc_entry &a, const ipc_entry &b) { return a.tid < b.tid; });
  }
  out += "\n=== CPU Performance Metrics ===\n";
  if (entries.empty()) {
    out += "No processes match the specified filters for CPU metrics.\n\n";
    return out;
  }
  std::uint64_t uc = 0, kc = 0, ui = 0, ki = 0;
  for (const auto &e : entries) {
    uc += e.uc;
    kc += e.kc;
    ui += e.ui;
    ki += e.ki;
  }
  auto ratio = [](std::uint64_t a, std::uint64_t b) {
    return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0.0;
  };
  out +=
      fmt::format("Global: User {} cycles/sec (IPC: {:.2f}), Kernel {} cycles/sec (IPC: {:.2f})\n",
                  format_rate(static_cast<double>(uc) / elapsed), ratio(ui, uc),
                  format_rate(static_cast<double>(kc) / elapsed), ratio(ki, kc));
  auto by_cycles = [](std::vector<const ipc_entry *> v) {
    ranges::stable_sort(v, std::greater<>{}, &ipc_entry::cycles);
    return v;
  };
  std::vector<const ipc_entry *> all;
  all.reserve(entries.size());
  for (const auto &e : entries) {
    all.push_back(&e);
  }
  if (o.mode == output_mode::detailed) {
    out += fmt::format("\nDetailed CPU Performance by Process ({} processes):\n\n", all.size());
    ipc_table(out, by_cycles(all), collapsed, elapsed);
    return out;
  }
  out += "\nCPU Performance by Usage Group:\n\n";
  std::vector<std::vector<const ipc_entry *>> groups(std::size(perf_bands));
  for (const ipc_entry *e : all) {
    groups[perf_band_of(static_cast<double>(e->cycles()) / elapsed)].push_back(e);
  }
  for (std::size_t g = groups.size(); g-- > 0;) { // descending
    if (groups[g].empty()) {
      continue;
    }
    out += fmt::format("{} ({} entries):\n", perf_bands[g], groups[g].size());
    const auto sorted = by_cycles(groups[g]);
    ipc_table(out, head(sorted, 10), collapsed, elapsed);
    more_or_blank(out, sorted.size(), std::min<std::size_t>(sorted.size(), 10));
  }
  return out;
}

std::string render_events(const model &m, const render_options &o, const filter &f) {
  using namespace render_detail;
  std::string out;
  if (!has(o, RSCHED_G_PERF)) {
    return out;
  }
  const bool collapsed = o.mode == output_mode::collapsed;
  for (const auto &ev : m.events) {
    out += fmt::format("\n=== {} (per second) ===\n", text::escape_for_terminal(ev.name));
    std::vector<ev_entry> entries;
    if (collapsed) {
      std::map<std::string, ev_entry> by_comm;
      for (const auto &t : ev.threads) {
        if (!f.include(t)) {
          continue;
        }
        auto &e = by_comm[t.comm];
        e.shown_comm = text::escape_for_terminal(t.comm);
        e.tids.insert(t.tid);
        (void)stats::merge_into(e.h, t.rate);
      }
      for (auto &kv : by_comm) {
        entries.push_back(std::move(kv.second));
      }
    } else {
      for (const auto &t : ev.threads) {
        if (!f.include(t) || t.rate.empty()) {
          continue;
        }
        entries.push_back({text::escape_for_terminal(t.comm), {t.tid}, t.tid, t.rate});
      }
      std::stable_sort(entries.begin(), entries.end(),
                       [](const ev_entry &a, const ev_entry &b) { return a.tid < b.tid; });
    }
    auto rows = entries | ranges::views::filter([](const ev_entry &e) { return !e.h.empty(); }) |
                ranges::views::transform([](const ev_entry &e) {
                  return ev_row{&e, shown(e.h, 90)};
                }) |
                ranges::to<std::vector>();
    if (rows.empty()) {
      out += "No data.\n\n";
      continue;
    }
    ranges::stable_sort(rows, std::greater<>{}, &ev_row::p90);
    const std::size_t n =
        o.mode == output_mode::detailed ? rows.size() : std::min<std::size_t>(rows.size(), 20);
    std::size_t w = 7;
    for (std::size_t i = 0; i < n; ++i) {
      w = std::max(w, text::display_width(rows[i].e->shown_comm));
    }
    if (collapsed) {
      out += "  " + pad("COMMAND", w) + " " + pad("PROCS", 8) + " ";
    } else {
      out += "  " + pad("PID", 8) + " " + pad("COMMAND", w) + " ";
    }
    out += pad("p50/s", 12) + " " + pad("p90/s", 12) + " " + pad("p99/s", 12) + " " +
           pad("SAMPLES", 10) + "\n";
    for (std::size_t i = 0; i < n; ++i) {
      const ev_entry &e = *rows[i].e;
      if (collapsed) {
        out += "  " + pad(e.shown_comm, w) + " " + pad(e.tids.size(), 8) + " ";
      } else {
        out += "  " + pad(e.tid, 8) + " " + pad(e.shown_comm, w) + " ";
      }
      auto rate = [&](double p) { return format_rate(static_cast<double>(shown(e.h, p))); };
      out += pad(rate(50), 12) + " " + pad(rate(90), 12) + " " + pad(rate(99), 12) + " " +
             pad(e.h.total(), 10) + "\n";
    }
    out += "\n";
    more_only(out, rows.size(), n);
  }
  return out;
}

std::string render(const model &m, const render_options &o, const filter &f) {
  using namespace render_detail;
  std::string out;
  const auto entries = build_entries(m, o, f);
  bool thread_sections = false;
  for (const auto &d : metrics::entries<metrics::scope::thread>()) {
    thread_sections = thread_sections || has(o, static_cast<rsched_group>(d.group));
  }
  if (entries.empty() && thread_sections) {
    out += "No processes match the specified filters.\n\n";
  }
  if (m.evicted_threads > 0) {
    out += fmt::format("({} threads not seen for the longest time have left these cumulative "
                       "tables, which are bounded)\n\n",
                       m.evicted_threads);
  }
  // The registry's sections in their order: thread metrics, schedstat, then CPU metrics.
  const auto in_order = [](auto defs) {
    std::vector<metrics::def> v;
    for (const auto &d : defs) {
      if (d.shown != metrics::display::none) {
        v.push_back(d);
      }
    }
    std::stable_sort(v.begin(), v.end(),
                     [](const auto &a, const auto &b) { return a.order < b.order; });
    return v;
  };
  for (const auto &d : in_order(metrics::entries<metrics::scope::thread>())) {
    if (!has(o, static_cast<rsched_group>(d.group)) ||
        (d.need == metrics::needs::dies && o.num_dies <= 1) ||
        (d.need == metrics::needs::numa_nodes && o.num_numa_nodes <= 1)) {
      continue;
    }
    switch (d.shown) {
    case metrics::display::percentiles:
    case metrics::display::durations:
      metric_section(out, entries, o, d.title, d.subtitle, d.metric);
      break;
    case metrics::display::timeslice:
      timeslice_section(out, entries, o);
      out += "\n";
      break;
    case metrics::display::linear:
      linear_section(out, entries, o, {d.title, d.subtitle, d.heading, d.empty, d.metric});
      break;
    case metrics::display::none:
      break;
    }
  }
  if (m.schedstat_table) {
    out += *m.schedstat_table;
  }
  for (const auto &d : in_order(metrics::entries<metrics::scope::cpu>())) {
    if (has(o, static_cast<rsched_group>(d.group))) {
      cpu_section(out, m, o, f, d);
    }
  }
  out += render_ipc(m, o, f);
  out += render_events(m, o, f);
  return out;
}

} // namespace rsched::rschedd
