// The compact live view (compact.hpp).
#include "rsched/rschedd/compact.hpp"

#include "rsched/abi/sched_abi.h"
#include "rsched/base/text.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/render.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/records.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace rsched::rschedd {

void compact_window::push(const store::interval_row &row, const filter &f) {
  interval_summary s;
  s.end_ns = row.start_ns + row.dur_ns;
  s.dur_ns = row.dur_ns;
  std::unordered_map<std::string_view, comm_summary> by_comm;
  for (const auto &t : row.threads) {
    if (!f.include(t.tid, t.comm, t.cgroup)) {
      continue;
    }
    ++s.threads;
    comm_summary &c = by_comm[t.comm];
    c.comm = t.comm;
    ++c.threads;
    metrics::accumulate(c.m, t.m, false); // the live view reads no fine tail
    c.migrations += t.migrations;
  }
  std::vector<comm_summary> all;
  all.reserve(by_comm.size());
  for (auto &[name, c] : by_comm) {
    all.push_back(std::move(c));
  }
  if (all.size() > max_comms_) {
    // Keep the worst by p99 delay and the busiest by samples, half the budget each.
    const std::size_t half = max_comms_ / 2;
    auto p99 = [](const comm_summary &c) { return stats::percentile_or_zero(c.delay(), 99); };
    std::partial_sort(
        all.begin(), all.begin() + static_cast<std::ptrdiff_t>(half), all.end(),
        [&](const comm_summary &a, const comm_summary &b) { return p99(a) > p99(b); });
    std::partial_sort(all.begin() + static_cast<std::ptrdiff_t>(half),
                      all.begin() + static_cast<std::ptrdiff_t>(max_comms_), all.end(),
                      [](const comm_summary &a, const comm_summary &b) {
                        return a.delay().total() > b.delay().total();
                      });
    for (std::size_t i = max_comms_; i < all.size(); ++i) {
      s.other.merge(all[i]);
    }
    s.other_comms = all.size() - max_comms_;
    all.resize(max_comms_);
  }
  s.comms = std::move(all);
  for (const auto &c : row.cpus) {
    metrics::accumulate(s.cpus[c.cpu], c.m);
  }
  intervals_.push_back(std::move(s));
  const std::int64_t newest = intervals_.back().end_ns;
  while (!intervals_.empty() && intervals_.front().end_ns <= newest - window_ns_) {
    intervals_.pop_front();
  }
}

namespace {

// A duration for a narrow column: 850ns, 12us, 4.5ms, 1.2s (ASCII, at most 6 characters).
std::string dur(std::uint64_t ns) {
  if (ns < 1000) {
    return fmt::format("{}ns", ns);
  }
  if (ns < 1'000'000) {
    return fmt::format("{}us", ns / 1000);
  }
  if (ns < 10'000'000) {
    return fmt::format("{:.1f}ms", static_cast<double>(ns) / 1e6);
  }
  if (ns < 1'000'000'000) {
    return fmt::format("{}ms", ns / 1'000'000);
  }
  return fmt::format("{:.1f}s", static_cast<double>(ns) / 1e9);
}

std::string count(std::uint64_t n) {
  if (n < 100'000) {
    return std::to_string(n);
  }
  if (n < 100'000'000) {
    return fmt::format("{}k", n / 1000);
  }
  return fmt::format("{}M", n / 1'000'000);
}

std::string rate(double per_s) {
  if (per_s <= 0) {
    return "-";
  }
  if (per_s < 10) {
    return fmt::format("{:.1f}", per_s);
  }
  return count(static_cast<std::uint64_t>(std::llround(per_s)));
}

// A percentile of `h` as a duration, "-" without samples.
std::string pct(const stats::histogram &h, double p) {
  return h.empty() ? std::string("-") : dur(stats::percentile_or_zero(h, p));
}

// The upper end of the highest bucket with samples (the histogram's resolution of "max").
std::uint64_t max_of(const stats::histogram &h) {
  for (std::size_t i = stats::max_slots; i-- > 0;) {
    if (h.slots[i] != 0) {
      const auto b = stats::bucket_bounds(h.kind, i);
      return b.open_ended() ? b.lo : b.hi + 1;
    }
  }
  return 0;
}

// Cuts an escaped line to `cols` columns (one per code point, as text::display_width counts).
std::string fit(std::string line, int cols) {
  const auto max = static_cast<std::size_t>(std::max(cols, 1));
  std::size_t w = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if ((static_cast<unsigned char>(line[i]) & 0xC0) != 0x80) {
      if (w == max) {
        line.resize(i);
        break;
      }
      ++w;
    }
  }
  return line;
}

std::string clock_of(std::int64_t ns) {
  const auto secs = static_cast<std::time_t>(ns / 1'000'000'000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
  return buf;
}

} // namespace

std::string render_compact(const compact_window &w, const compact_header &h,
                           const render_options &o, const filter &f, int rows, int cols) {
  std::vector<std::string> lines;
  const auto &ivs = w.intervals();
  // Header: time, window, recording state, warnings.
  std::string head = fmt::format("rschedd {}", clock_of(h.end_ns));
  std::int64_t span_ns = 0;
  for (const auto &iv : ivs) {
    span_ns += iv.dur_ns;
  }
  head += fmt::format("  last {:.1f} s  {}", static_cast<double>(span_ns) / 1e9,
                      text::escape_for_terminal(h.recording));
  if (h.intervals_written) {
    head += fmt::format("  {} intervals written", *h.intervals_written);
  }
  if (h.stalled) {
    head += fmt::format("  !! recorder fell behind: last interval {:.1f} s",
                        static_cast<double>(h.dur_ns) / 1e9);
  }
  if (h.write_failures > 0) {
    head += fmt::format("  !! {} intervals not written", h.write_failures);
  }
  if (h.display_skipped > 0) {
    head += fmt::format("  (display skipped {})", h.display_skipped);
  }
  lines.push_back(head);

  // Merge the window per comm.
  std::map<std::string, comm_summary> merged;
  comm_summary other;
  std::size_t other_comms = 0;
  std::uint64_t max_threads = 0;
  std::map<std::uint32_t, cpu_summary> cpus;
  for (const auto &iv : ivs) {
    for (const auto &c : iv.comms) {
      auto [it, fresh] = merged.try_emplace(c.comm);
      if (fresh) {
        it->second.comm = c.comm;
      }
      it->second.merge(c);
    }
    other.merge(iv.other);
    other_comms = std::max(other_comms, iv.other_comms);
    max_threads = std::max(max_threads, iv.threads);
    for (const auto &[cpu, cs] : iv.cpus) {
      metrics::accumulate(cpus[cpu], cs);
    }
  }
  const auto has = [&](std::uint32_t g) { return (o.groups & g) != 0; };
  const bool latency = has(RSCHED_G_LATENCY);
  const bool slice = has(RSCHED_G_SLICE);
  const bool sleep = has(RSCHED_G_SLEEP);
  const bool waking = has(RSCHED_G_WAKING);
  const bool migration = has(RSCHED_G_MIGRATION);
  const double secs = std::max(static_cast<double>(span_ns) / 1e9, 1e-3);
  std::uint64_t samples = 0;
  for (const auto &[name, c] : merged) {
    samples += c.delay().total();
  }
  samples += other.delay().total();
  lines.push_back(fmt::format("{} threads  {} comms  {} scheduling delays ({}/s)  {} CPUs  "
                              "(sorted by delay p99; -: no samples)",
                              max_threads, merged.size() + other_comms, count(samples),
                              rate(static_cast<double>(samples) / secs), cpus.size()));
  if (ivs.empty()) {
    lines.push_back("waiting for the first interval...");
  }

  // Rows: worst p99 delay first (then the busiest); -l hides comms whose p50 is below it.
  std::vector<const comm_summary *> order;
  const std::uint64_t min_ns = f.options().min_latency_us * 1000;
  for (const auto &[name, c] : merged) {
    if (latency && min_ns > 0 && stats::percentile_or_zero(c.delay(), 50) < min_ns) {
      continue;
    }
    order.push_back(&c);
  }
  std::sort(order.begin(), order.end(), [](const comm_summary *a, const comm_summary *b) {
    const auto pa = stats::percentile_or_zero(a->delay(), 99);
    const auto pb = stats::percentile_or_zero(b->delay(), 99);
    if (pa != pb) {
      return pa > pb;
    }
    if (a->delay().total() != b->delay().total()) {
      return a->delay().total() > b->delay().total();
    }
    return a->comm < b->comm;
  });

  // The per-CPU line(s) come last if there is room: reserve them now.
  std::string cpu_line;
  if (latency && !cpus.empty()) {
    cpu_line = "CPU delay p99:";
    for (const auto &[cpu, cs] : cpus) {
      cpu_line += fmt::format(" {}:{}", cpu, pct(cs[metrics::id::cpu_sched_delay].hist, 99));
    }
  }
  std::string idle_line;
  if (sleep && !cpus.empty()) {
    idle_line = "CPU idle p50:";
    for (const auto &[cpu, cs] : cpus) {
      idle_line += fmt::format(" {}:{}", cpu, pct(cs[metrics::id::cpu_idle].hist, 50));
    }
  }

  // What the short column names mean, the last line: the abbreviations a person cannot guess.
  std::string legend;
  const auto explain = [&](std::string_view what) {
    legend += legend.empty() ? "" : "; ";
    legend += what;
  };
  if (latency) {
    explain("RQ99: run-queue depth at wakeup, p99");
  }
  if (sleep) {
    explain("SLP99: sleep duration, p99");
  }
  if (waking) {
    explain("WAK99: waking delay, p99");
  }

  std::string th = fmt::format("{:<16} {:>4} {:>7}", "COMM", "THR", "DELAYS");
  if (latency) {
    th += fmt::format(" {:>6} {:>6} {:>6} {:>6} {:>4}", "p50", "p90", "p99", "MAX", "RQ99");
  }
  if (slice) {
    th += fmt::format(" {:>9}", "PREEMPT/s");
  }
  if (migration) {
    th += fmt::format(" {:>6}", "MIG/s");
  }
  if (sleep) {
    th += fmt::format(" {:>6}", "SLP99");
  }
  if (waking) {
    th += fmt::format(" {:>6}", "WAK99");
  }
  auto row_of = [&](const comm_summary &c, const std::string &name) {
    std::string comm = text::escape_for_terminal(name);
    if (text::display_width(comm) > 16) {
      comm = fit(comm, 15) + "~";
    }
    std::string r = comm;
    for (std::size_t pad = text::display_width(comm); pad < 16; ++pad) {
      r += ' ';
    }
    r += fmt::format(" {:>4} {:>7}", c.threads, count(c.delay().total()));
    if (latency) {
      r += fmt::format(
          " {:>6} {:>6} {:>6} {:>6} {:>4}", pct(c.delay(), 50), pct(c.delay(), 90),
          pct(c.delay(), 99), c.delay().empty() ? "-" : dur(max_of(c.delay())),
          c.m[metrics::id::runq_depth].hist.empty()
              ? "-"
              : std::to_string(stats::percentile_or_zero(c.m[metrics::id::runq_depth].hist, 99)));
    }
    if (slice) {
      r += fmt::format(" {:>9}", rate(static_cast<double>(c.preemptions()) / secs));
    }
    if (migration) {
      r += fmt::format(" {:>6}", rate(static_cast<double>(c.migrations) / secs));
    }
    if (sleep) {
      r += fmt::format(" {:>6}", pct(c.m[metrics::id::sleep].hist, 99));
    }
    if (waking) {
      r += fmt::format(" {:>6}", pct(c.m[metrics::id::waking_delay].hist, 99));
    }
    return r;
  };

  const auto max_rows = static_cast<std::size_t>(std::max(rows, 1));
  const std::size_t tail =
      (cpu_line.empty() ? 0U : 1U) + (idle_line.empty() ? 0U : 1U) + (legend.empty() ? 0U : 1U);
  if (!ivs.empty()) {
    lines.push_back("");
    lines.push_back(th);
    if (order.empty()) {
      lines.push_back("No processes match the specified filters.");
    }
    // Table rows that fit, keeping one line for "(+N more)" when needed and the CPU lines.
    const std::size_t used = lines.size();
    const std::size_t room = max_rows > used + tail ? max_rows - used - tail : 0;
    const bool has_other = other_comms > 0 && !other.delay().empty();
    const std::size_t wanted = order.size() + (has_other ? 1 : 0);
    std::size_t fit_rows = wanted <= room ? order.size() : (room > 0 ? room - 1 : 0);
    fit_rows = std::min(fit_rows, order.size());
    for (std::size_t i = 0; i < fit_rows; ++i) {
      lines.push_back(row_of(*order[i], order[i]->comm));
    }
    if (wanted <= room && has_other) {
      lines.push_back(row_of(other, fmt::format("({} others)", other_comms)));
    } else if (fit_rows < order.size() && room > 0) {
      lines.push_back(fmt::format("(+{} more)", order.size() - fit_rows));
    }
    if (!cpu_line.empty()) {
      lines.push_back(cpu_line);
    }
    if (!idle_line.empty()) {
      lines.push_back(idle_line);
    }
    if (!legend.empty()) {
      lines.push_back(legend);
    }
  }
  std::string out;
  for (std::size_t i = 0; i < lines.size() && i < max_rows; ++i) {
    if (i > 0) {
      out += '\n';
    }
    out += fit(lines[i], cols);
  }
  return out;
}

} // namespace rsched::rschedd
