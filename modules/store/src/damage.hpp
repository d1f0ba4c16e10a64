#pragma once
// Damage contained (issue 51, docs/SCHEMA.md "damaged_rows"): the rows of a rollup bucket's
// sources whose blobs no longer decode (bit rot SQLite's own checks cannot see) are moved into
// damaged_rows, so that the bucket is built from everything that decodes and the same row never
// fails a maintenance pass again. Private to the store module; maintenance calls it when a
// bucket's merge fails.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <string>

struct sqlite3;

namespace rsched::store::detail {

// What one search set aside.
struct damage_found {
  std::int64_t rows = 0; // rows (or pack entries) moved into damaged_rows
  std::string first;     // the first one: "<table> of interval <id>: <error>"
};

// Checks every blob the rollups decode in the intervals of tier `tier` that start in [a, b)
// (thread_hist_pack and each of its entries' histograms, thread_hist_row, cpu_hist,
// thread_perf_event.rate_hist, thread_blame_pack, thread_wakeup_pack, thread_blocked_pack) and
// moves each row that does not decode into damaged_rows, stamped `now_ns`; a pack whose
// entries decode but one's histogram does not loses only that entry (the pack is written again
// without it). Runs inside the caller's transaction.
result<damage_found> set_aside_damage(sqlite3 *db, int tier, std::int64_t a, std::int64_t b,
                                      std::int64_t now_ns);

} // namespace rsched::store::detail
