#pragma once
// rsched's table-valued functions (docs/SQL.md), bodies for the virtual-table adapter (vtab.hpp):
//   tvf_latency.cpp: hist_buckets(hist), spikes(metric, threshold, [start, end]),
//     compare(a_start, a_end, b_start, b_end, [by]);
//   tvf_coverage.cpp: during(start, end), around(at, half_width), gaps([start, end]),
//     coverage([start, end]);
//   tvf_blame.cpp: blame(victim, [start, end]), inversions([start, end, min_wait]);
//   tvf_explain.cpp: explain(annotation_id), explain(start, end, [victims]);
//   tvf_why.cpp: why(victim, [start, end]).
// tvf_window.hpp has what they share (the intervals of a window); table_functions.cpp the
// catalogue (names, columns, arguments) and its registration.
#include "vtab.hpp"

namespace rsched::query::detail {

result<rows> hist_buckets(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> during_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> around_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> gaps_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> coverage_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> spikes_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> compare_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> blame_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> inversions_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> explain_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);
result<rows> why_fn(sqlite3 *db, const fn_context &ctx, const args_t &args);

} // namespace rsched::query::detail
