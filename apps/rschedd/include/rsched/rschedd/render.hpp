#pragma once
// rschedd's live display: upstream rsched's RschedStats::print_summary followed by
// CpuMetrics::print_summary, rendered to a string. Pure: the caller
// clears the terminal and prints.
//
// Sections, in upstream's order, each only when its group is selected:
//   latency    Scheduling Delays
//   waking     Waking Delay Statistics
//   slice      Time Slice Statistics
//   sleep      Sleep Duration Statistics
//   latency    Runqueue Depth Statistics
//   migration  Migration Statistics (+ Cross-CCX when num_dies > 1, + Cross-NUMA when
//              num_numa_nodes > 1)
//   schedstat  model.schedstat_table, verbatim, when present
//   latency    Per-CPU Scheduling Delays
//   sleep      Per-CPU Idle Duration
//   perf       CPU Performance Metrics (IPC; only with render_options::ipc and IPC rows)
//   perf       one "<event> (per second)" section per generic event, in -g order
//
// Modes: collapsed (default; one row per comm, PROCS and PIDs columns), grouped (-C; one row per
// thread, still bucketed and cut to the top 10) and detailed (-d; one row per thread, every row,
// per-CPU tables list each CPU). The title prefix is "Collapsed" or "Per-Process".
//
// Exact layout rules copied from upstream: column widths, COMMAND width = widest comm of the
// table (at least 7), 2-space indent, header cells "{:<w} " (the hist table keeps upstream's
// trailing space on the header line, not on the rows), latency groups by p90 ascending, rows by
// p90 descending, top 10 (top 20 for generic events) then "  ... and N more" or a blank line, PID
// lists "a,b,c" / "a,b,c,...(+N)", CPU lists "0-3,8,10-11", PREEMPT% printed "{:<12.1}%".
//
// Where it deliberately differs from upstream (percentiles, tie-breaking, escaping, reused thread
// ids): docs/DIFFERENCES.md, "Live display".
#include "rsched/abi/sched_abi.h"
#include "rsched/rschedd/filter.hpp"
#include "rsched/rschedd/model.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace rsched::rschedd {

enum class output_mode {
  collapsed, // default: one row per comm
  grouped,   // -C: one row per thread, bucketed, top 10
  detailed,  // -d: one row per thread, every row
};

struct render_options {
  output_mode mode = output_mode::collapsed;
  std::uint32_t groups = RSCHED_G_LATENCY; // RSCHED_G_* bits
  bool ipc = false;                        // perf=ipc selected
  int num_dies = 0;                        // topology, for the cross-CCX section
  int num_numa_nodes = 0;                  // topology, for the cross-NUMA section
};

// The pure formatting helpers of the tables (tested on their own).
namespace render_detail {
// Upstream's format_pid_list: sorted ids, "a,b,c" up to 3, else "a,b,c,...(+N)".
std::string pid_list(const std::set<std::uint32_t> &tids);
// Upstream's format_cpu_list: runs of consecutive CPUs collapsed, "4-15,126-141". Input sorted.
std::string cpu_ranges(const std::vector<std::uint32_t> &cpus);
// Upstream's format_rate (IPC cycles/s and generic event rates): 1.5K, 2.5M, 3.0G, 4.0T.
std::string format_rate(double v);
} // namespace render_detail

// CPU Performance Metrics (perf=ipc): this interval's cycles/s and IPC, grouped by usage.
// Empty unless the perf group and opts.ipc are on and IPC rows arrived (upstream prints the
// section only when data arrived). -l does not apply (upstream's CpuMetrics ignores it).
std::string render_ipc(const model &m, const render_options &o, const filter &f);

// One "<event> (per second)" section per generic perf event (perf group): per-second rates,
// sorted by p90 descending, top 20 (every row with -d). -l does not apply.
std::string render_events(const model &m, const render_options &o, const filter &f);

// The whole live display for one interval.
std::string render(const model &m, const render_options &o, const filter &f);

} // namespace rsched::rschedd
