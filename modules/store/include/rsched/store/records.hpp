#pragma once
// Plain records the daemon hands to the store, one interval at a time.
#include "rsched/abi/sched_abi.h"
#include "rsched/stats/histogram.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace rsched::store {

inline constexpr int schema_version = 1;
inline constexpr const char *default_db_path = "/var/lib/rsched/rsched.db";

// Metric ids used in thread_hist.metric / cpu_hist.metric (table `metric` names them).
enum class metric : int {
  sched_delay = 1, // ns, latency layout
  runq_depth = 2,  // nr_running at wakeup, depth layout
};

// One thread's data for one interval (deltas, not cumulative values).
struct thread_row {
  std::uint32_t tid = 0;           // kernel task->pid
  std::uint32_t pid = 0;           // thread group id (task->tgid)
  std::uint64_t start_time_ns = 0; // task->start_time (ns since boot); identity with tid + boot
  std::string comm;                // exact kernel bytes, may be hostile
  std::string cgroup; // cgroup v2 path relative to the mount ("/system.slice/x"), "" unknown
  std::uint64_t delay_count = 0;
  std::uint64_t delay_total_ns = 0;
  stats::histogram delay_hist{stats::layout::latency, {}};
  std::uint64_t depth_count = 0;
  std::uint64_t depth_total = 0; // sum of nr_running samples
  stats::histogram depth_hist{stats::layout::depth, {}};
};

struct cpu_row {
  std::uint32_t cpu = 0;
  std::uint64_t delay_count = 0;
  std::uint64_t delay_total_ns = 0;
  stats::histogram delay_hist{stats::layout::latency, {}};
};

struct interval_row {
  std::int64_t start_ns = 0;   // UTC wall clock (CLOCK_REALTIME) ns at the start of the interval
  std::int64_t dur_ns = 0;     // length (CLOCK_MONOTONIC) ns
  std::string boot_id;         // /proc/sys/kernel/random/boot_id
  bool final_interval = false; // the last (possibly partial) interval of a run
  std::array<std::uint64_t, RSCHED_DROP_COUNT> drops{}; // delta of the BPF drop counters
  std::vector<thread_row> threads;                      // only threads with data in the interval
  std::vector<cpu_row> cpus;                            // only CPUs with data in the interval
};

} // namespace rsched::store
