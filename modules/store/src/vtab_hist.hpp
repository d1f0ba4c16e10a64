#pragma once
// The virtual table behind `thread_hist` (schema v8): module `rsched_thread_hist`, a read-only
// table over `thread_hist_row` (one b-tree row per thread: the rollup tiers, and raw rows written
// before v8) and `thread_hist_pack` (the raw tier, one blob per interval and metric:
// rsched/store/hist_pack.hpp), with the columns thread_hist always had. Equality and ranges on
// interval_id and equality on metric and thread_id reach the tables' primary keys; the views'
// `CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND h.metric = N` reads one pack per
// interval. Writes go to the two tables (the writer, maintenance), never through the module.
#include "rsched/base/result.hpp"

struct sqlite3;

namespace rsched::store::detail {

// Registers the module on `db`. Must precede any statement that reads thread_hist or a view
// over it, and the CREATE VIRTUAL TABLE of schema v8.
result<void> register_hist_module(sqlite3 *db);

} // namespace rsched::store::detail
