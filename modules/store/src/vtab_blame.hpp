#pragma once
// The virtual table behind `thread_blame` (schema v13): module `rsched_thread_blame`, a
// read-only table over `thread_blame_row` (one b-tree row per thread and culprit: the rollup
// tiers, and raw rows written before v13) and `thread_blame_pack` (the raw tier, one blob per
// interval: rsched/store/blame_pack.hpp), with the columns thread_blame always had. Equality and
// ranges on interval_id and equality on thread_id reach the tables' primary keys; the views'
// `CROSS JOIN thread_blame AS b ON b.interval_id = i.id` reads one pack per interval. Writes go
// to the two tables (the writer, maintenance), never through the module.
#include "rsched/base/result.hpp"

struct sqlite3;

namespace rsched::store::detail {

// Registers the module on `db`. Must precede any statement that reads thread_blame or a view
// over it, and the CREATE VIRTUAL TABLE of schema v13.
result<void> register_blame_module(sqlite3 *db);

} // namespace rsched::store::detail
