#pragma once
// The virtual tables behind `thread_wakeup` and `thread_blocked` (schema v18): module
// `rsched_packed_rows(<row table>, <pack table>, thread_id, <column>...)`, a read-only table
// over a b-tree table of the same columns (the rollup tiers, and raw rows written before v18)
// and a pack table (the raw tier, one blob per interval: rsched/store/row_pack.hpp), with
// interval_id first. As thread_blame's module (vtab_blame.hpp): equality and ranges on
// interval_id and equality on thread_id reach the tables' primary keys, a view's `CROSS JOIN
// thread_wakeup AS w ON w.interval_id = i.id` reads one pack per interval, and writes go to the
// two tables (the writer, maintenance), never through the module.
#include "rsched/base/result.hpp"

struct sqlite3;

namespace rsched::store::detail {

// Registers the module on `db`. Must precede any statement that reads a table made with it
// or a view over one, and the CREATE VIRTUAL TABLEs of schema v18.
result<void> register_packed_rows_module(sqlite3 *db);

} // namespace rsched::store::detail
