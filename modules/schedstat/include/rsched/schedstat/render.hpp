#pragma once
// Upstream rsched's live schedstat table (print_schedstat), as a pure function.
#include "rsched/schedstat/delta.hpp"

#include <string>

namespace rsched::schedstat {

// The table for one interval:
//
//   \n=== System-wide Schedstat Metrics (deltas) ===\n
//   domain_totals sorted by name, 3 columns filled column-major (rows = ceil(n / 3)), each cell
//   "{:<30} {:>9} ", "| " between the cells of a row, one row per line;
//   \n=== CPU Field Totals (deltas) ===\n          (only when there is at least one CPU)
//   cells "{:<17} {:>12} ", 3 per line separated by "| ";
//   \n                                              (a blank line closes the table)
//
// Differences from upstream, on purpose: the CPU cells are labelled by the kernel's real layout
// (yld_count, sched_count, sched_goidle, ttwu_count, ttwu_local, rq_cpu_time_ns, run_delay_ns,
// pcount) followed by avg_run_delay_ns = run_delay_ns / pcount, printed "-" when pcount is 0
// (upstream's "rq_run_delay usec" divides rq_cpu_time by run_delay and panics on 0). The legacy
// always-zero field is not printed (it carries no information). Upstream also writes a "| " after
// the first and second cell of a row even when the next column is empty; we write it only between
// cells (the same output whenever the field count is a multiple of 3, as 36 and 45 are).
std::string render(const deltas &d);

} // namespace rsched::schedstat
