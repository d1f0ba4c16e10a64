#pragma once
// What rschedd accumulates for its live display (upstream RschedStats / CpuMetrics semantics):
//  - per-thread and per-CPU histograms are cumulative since start;
//  - IPC totals, generic-event rates and schedstat deltas are per display interval.
// Plain data, folded from each recorded interval's rows (fold_row), rendered by render.hpp.
#include "rsched/metrics/registry.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/store/records.hpp"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rsched::rschedd {

struct thread_id {
  std::uint32_t tid = 0;
  std::uint64_t start_time = 0; // with tid: unique within a boot
  friend auto operator<=>(const thread_id &, const thread_id &) = default;
};

struct thread_stats {
  std::uint32_t tid = 0;
  std::uint32_t tgid = 0;
  std::string comm;   // latest comm, exact bytes (escape before printing!)
  std::string cgroup; // cgroup v2 path relative to the mount, "" unknown
  // Every thread metric of the registry, cumulative since start (only the metrics of the run's
  // groups get samples; the per-second migration rates: one sample per second with a
  // migration, as upstream).
  metrics::thread_set m;
  std::uint64_t last_seen = 0; // the newest interval (fold_row's sequence number) with data
};

struct cpu_stats {
  std::uint32_t cpu = 0;
  metrics::cpu_set m; // every CPU metric of the registry, cumulative since start
};

// perf=ipc, per display interval.
struct ipc_row {
  std::uint32_t tid = 0;
  std::uint32_t tgid = 0;
  std::string comm;
  std::string cgroup;
  std::uint64_t user_cycles = 0;
  std::uint64_t kernel_cycles = 0;
  std::uint64_t user_instructions = 0;
  std::uint64_t kernel_instructions = 0;
};

// A generic perf event, per display interval: per thread, a log2 histogram of per-second counts
// (one sample per 1-s tick in which the thread's count was > 0).
struct event_rates {
  std::string name;
  struct per_thread {
    std::uint32_t tid = 0;
    std::uint32_t tgid = 0;
    std::string comm;
    std::string cgroup;
    stats::histogram rate{stats::layout::log2, {}};
  };
  std::vector<per_thread> threads;
};

struct model {
  std::map<thread_id, thread_stats> threads;  // cumulative, bounded (bound_threads)
  std::uint64_t evicted_threads = 0;          // left the tables to keep them bounded
  std::map<std::uint32_t, cpu_stats> cpus;    // cumulative
  std::vector<ipc_row> ipc;                   // this interval
  double ipc_elapsed_s = 0;                   // length of the IPC interval
  std::vector<event_rates> events;            // this interval, in -g order
  std::optional<std::string> schedstat_table; // rendered by the schedstat module, this interval
};

// Folds one recorded interval into the live model (cumulative histograms; per-interval IPC and
// events). The display works from the rows as written, so it needs nothing of the recorder's
// state (the cgroup resolver, the accumulator) and can run on its own thread. `seq` numbers the
// intervals (for bound_threads).
void fold_row(model &m, const store::interval_row &row, bool ipc,
              const std::vector<std::string> &event_names, std::uint64_t seq);

// Keeps the cumulative tables to at most `max_threads` threads whatever the thread churn: past
// it, the threads seen longest ago (exited ones first, in practice) leave the tables, down to
// 90 % of the bound so that this runs rarely. Counted in m.evicted_threads (shown).
void bound_threads(model &m, std::size_t max_threads);

} // namespace rsched::rschedd
