#pragma once
// rschedd's default live view on a terminal: one screen that fits it, the last few seconds (a
// sliding window, 5 s by default), per comm, worst scheduling delay first. Upstream's cumulative
// tables (render.hpp) hide a 10-second storm after a minute; this shows what is worst now.
//
// Pure: compact_window keeps bounded per-interval summaries (per comm, at most `max_comms` an
// interval, the rest counted as "other"; never per-thread data), render_compact turns them into
// at most `rows` lines of at most `cols` columns. Hostile comm names are escaped.
#include "rsched/abi/sched_abi.h"
#include "rsched/base/text.hpp"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/render.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/records.hpp"

#include <fmt/format.h>

#include <algorithm>
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

// What the recorder says about itself, shown on the first line.
struct compact_header {
  std::int64_t end_ns = 0; // UTC wall-clock ns at the end of the newest interval
  std::int64_t dur_ns = 0; // length of the newest interval
  std::string recording;   // "recording to PATH" / "not recording (--no-db)"
  std::optional<std::uint64_t> intervals_written; // since start; nullopt: not recording
  std::uint64_t write_failures = 0;               // intervals that could not be written
  std::uint64_t display_skipped = 0;              // intervals the display fell behind on
  bool stalled = false;                           // the newest interval was much longer than asked
};

// One comm's data in one interval (or merged over the window).
struct comm_summary {
  std::string comm;
  std::uint32_t threads = 0; // threads with data (per interval; the window shows the most)
  metrics::thread_set m;     // the registry's thread metrics (the columns show some of them)
  std::uint64_t migrations = 0;
  [[nodiscard]] const stats::histogram &delay() const { return m[metrics::id::sched_delay].hist; }
  // Involuntary switches: the samples of the involuntary slices.
  [[nodiscard]] std::uint64_t preemptions() const {
    return m[metrics::id::slice_involuntary].count;
  }

  void merge(const comm_summary &o) {
    threads = std::max(threads, o.threads);
    metrics::accumulate(m, o.m);
    migrations += o.migrations;
  }
};

using cpu_summary = metrics::cpu_set;

struct interval_summary {
  std::int64_t end_ns = 0;
  std::int64_t dur_ns = 0;
  std::vector<comm_summary> comms; // at most max_comms
  comm_summary other;              // every comm past max_comms, merged
  std::size_t other_comms = 0;
  std::uint64_t threads = 0; // threads with data that passed the filter
  std::map<std::uint32_t, cpu_summary> cpus;
};

class compact_window {
public:
  explicit compact_window(std::int64_t window_ns = 5'000'000'000, std::size_t max_comms = 256)
      : window_ns_(window_ns), max_comms_(std::max<std::size_t>(max_comms, 2)) {}

  // Summarizes one interval (threads the display filter includes), then drops the intervals
  // that ended before the window.
  void push(const store::interval_row &row, const filter &f);

  [[nodiscard]] const std::deque<interval_summary> &intervals() const { return intervals_; }
  [[nodiscard]] std::int64_t window_ns() const { return window_ns_; }
  [[nodiscard]] std::size_t max_comms() const { return max_comms_; }

private:
  std::int64_t window_ns_;
  std::size_t max_comms_;
  std::deque<interval_summary> intervals_;
};

// At most `rows` lines (joined with '\n', no trailing newline: the screen never scrolls), none
// wider than `cols` columns.
std::string render_compact(const compact_window &w, const compact_header &h,
                           const render_options &o, const filter &f, int rows, int cols);

} // namespace rsched::rschedd
