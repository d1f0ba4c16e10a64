// The catalogue of rsched's table-valued functions (eponymous virtual tables): names, result
// columns, arguments, bodies (table_functions.hpp), registered through the adapter of vtab.hpp.
// Names follow the views (docs/SCHEMA.md, "Names"): a row that stands for a span of time starts
// with ts and dur; other instants end in _ts. gaps, coverage and spikes had start_ns, end_ns and
// duration_ns until schema 7: those still work as hidden aliases.
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
       {"ts", "dur", "end_ts", "reason"},
       {"start_time", "end_time"},
       0,
       gaps_fn,
       {{"start_ns", 0}, {"end_ns", 2}, {"duration_ns", 1}}},
      {"coverage",
       {"ts", "dur", "end_ts", "covered_ns", "coverage_pct", "gaps"},
       {"start_time", "end_time"},
       0,
       coverage_fn,
       {{"start_ns", 0}, {"end_ns", 2}}},
      {"spikes",
       {"ts", "dur", "end_ts", "peak_ns", "peak_ts", "top_comms", "threshold_ns", "victim",
        "cause"},
       {"metric", "threshold", "start_time", "end_time", "victim_pattern", "by", "min_samples"},
       2,
       spikes_fn,
       {{"start_ns", 0}, {"end_ns", 2}, {"duration_ns", 1}}},
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
