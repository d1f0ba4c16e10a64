// The catalogue of rsched's table-valued functions (eponymous virtual tables): names, result
// columns, arguments, bodies (table_functions.hpp), registered through the adapter of vtab.hpp.
#include "table_functions.hpp"

#include <vector>

namespace rsched::store::detail {

namespace {

std::vector<tvf> &definitions() {
  static std::vector<tvf> defs = {
      {"hist_buckets", {"lo_ns", "hi_ns", "count"}, {"hist"}, 1, hist_buckets},
      {"during", {"ts"}, {"start_time", "end_time"}, 2, during_fn},
      {"around", {"ts"}, {"at_time", "half_width"}, 2, around_fn},
      {"gaps",
       {"start_ns", "end_ns", "duration_ns", "reason"},
       {"start_time", "end_time"},
       0,
       gaps_fn},
      {"coverage",
       {"start_ns", "end_ns", "covered_ns", "coverage_pct", "gaps"},
       {"start_time", "end_time"},
       0,
       coverage_fn},
      {"spikes",
       {"start_ns", "end_ns", "duration_ns", "peak_ns", "peak_ts", "top_comms", "threshold_ns",
        "victim", "cause"},
       {"metric", "threshold", "start_time", "end_time", "victim_pattern", "by", "min_samples"},
       2,
       spikes_fn},
      {"compare",
       {"key", "a_count", "a_p50_ns", "a_p99_ns", "b_count", "b_p50_ns", "b_p99_ns", "d_p99_ns",
        "ratio_p99", "excess"},
       {"a_start", "a_end", "b_start", "b_end", "by"},
       4,
       compare_fn},
      {"blame",
       {"by_pid", "by_comm", "by_cgroup", "wait_ns", "share_pct", "waits", "preempts", "cpu_ns",
        "cgroup_cpu_ns", "victim_wait_ns", "victim_throttled_ns", "victim_pressure_pct",
        "cpu_pressure_pct"},
       {"victim", "start_time", "end_time"},
       0,
       blame_fn},
  };
  return defs;
}

} // namespace

result<void> register_table_functions(sqlite3 *db, fn_context *ctx) {
  return register_vtabs(db, ctx, definitions());
}

} // namespace rsched::store::detail
