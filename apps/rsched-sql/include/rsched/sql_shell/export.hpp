#pragma once
// rsched-sql's `export openmetrics|perfetto` (perfetto: below). openmetrics: a window of the
// history as timestamped OpenMetrics 1.0 that `promtool tsdb create-blocks-from openmetrics`
// backfills into Prometheus (docs/FLEET.md). The families are the ones a live scrape of rschedd
// will carry, so backfilled and scraped series line up:
//   rsched_cpu_sched_delay_seconds{cpu}        histogram of scheduling delay per CPU
//   rsched_cgroup_sched_delay_seconds{cgroup}  the same per cgroup, the --top busiest by samples
//                                              in the window, the rest as cgroup="other"
//   rsched_intervals_total, rsched_recorded_seconds_total, rsched_collect_seconds_total,
//   rsched_write_seconds_total, rsched_drops_total   rschedd's own health
// Every series starts at 0 at the start of the window's first interval and has one point at the
// end of every recorded interval of the window (cumulative, so increase() over the window is the
// window's total). Histogram buckets: openmetrics::latency_edges_ns(), exact.
#include "rsched/base/result.hpp"
#include "rsched/query/reader.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace rsched::sql_shell {

// export openmetrics|perfetto [--from T] [--to T] [--where SQL] [--top N] [-o FILE]
struct export_args {
  std::string format;              // "openmetrics" or "perfetto"
  std::optional<std::string> from; // default: an hour before `to` (or the recording's start)
  std::optional<std::string> to;   // default: the end of the newest recorded interval
  std::string where;               // a condition on sched_delay's columns (the cgroup family)
  std::size_t top = 10;            // cgroups kept by name (openmetrics), comms (perfetto)
  std::optional<std::string> output;
};

result<export_args> parse_export_args(const std::vector<std::string> &args);

struct export_stats {
  std::size_t series = 0;
  std::size_t points = 0;
};

// Writes the export of [from, to) (UTC ns, interval start times) to `out`.
result<export_stats> write_openmetrics(query::reader &db, const export_args &a, std::int64_t from,
                                       std::int64_t to, std::ostream &out);

// export perfetto: the window as a Chrome JSON trace that ui.perfetto.dev opens. Five track
// groups ("processes"): per CPU and for the --top (10) worst comms (the highest p99 over the
// window among those with 20 samples or more), counter tracks of p50, p99 and max scheduling
// delay per interval (ms, held until the next interval); annotations, spikes
// (spikes('sched_delay', '3x')) and the stretches not recorded (gaps()) as slices. Names are
// written as the terminal shows them (valid UTF-8). `points` counts the trace's events.
result<export_stats> write_perfetto(query::reader &db, const export_args &a, std::int64_t from,
                                    std::int64_t to, std::ostream &out);

} // namespace rsched::sql_shell
