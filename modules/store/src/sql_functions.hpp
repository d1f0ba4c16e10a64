#pragma once
// rsched's SQL functions (docs/SCHEMA.md, "SQL functions"):
//   hist_percentile(hist, p)  aggregate and window function over histogram blobs: merges them
//                             bucket-wise and returns the p-th percentile (stats::percentile)
//                             as an INTEGER, NULL when there are no samples;
//   ipc(instructions, cycles) REAL instructions per cycle, NULL when cycles is 0 or NULL.
#include "rsched/base/result.hpp"

struct sqlite3;

namespace rsched::store::detail {

result<void> register_functions(sqlite3 *db);

} // namespace rsched::store::detail
