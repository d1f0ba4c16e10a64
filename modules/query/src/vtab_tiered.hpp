#pragma once
// The data views answered from the coarsest exact tier (schema v10, issue 19). A reader shadows
// each data view V of the file (one with V_1m and V_1h) by a TEMP virtual table of the same
// name, module `rsched_tiered`, with V's columns. A scan that uses no per-thread column (tid,
// pid, the culprit's pid, CPU and priorities) in a statement whose answer does not depend on
// how rows are cut in time (sql_lint.hpp, tier_invariant) reads every whole hour of its ts
// window that the 1-hour tier holds exactly from V_1h, every other whole minute that the
// 1-minute tier holds exactly from V_1m, and the rest (the ragged edges, minutes not rolled up
// yet, minutes with a raw interval written after their rollup) from V itself, the finest tier
// kept at each moment. Every other scan reads V as it is. `main.V` always names the file's view.
//
// A rollup bucket is exact when it holds every raw interval of its moments: it was built
// (tiers.built_ns past its end), is kept (at or after the tier's cutoff_ns), and no raw
// interval of its moments waits for its late rollup (intervals.flags bit 2 on a raw row, found
// through the partial index intervals_late; on a 1-minute row not yet in its hour, schema 21,
// through intervals_late_1m). Sums, histogram merges and so percentiles are then the
// same from either side; the test is tests/store/rollup_test.cpp ("the main views answer whole
// minutes and hours from the rollups", randomized windows).
#include "rsched/base/result.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/query/tier_plan.hpp"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct sqlite3;

namespace rsched::query::detail {

using query::hour_ns;
using query::minute_ns;
using query::plan_tiers;
using query::tier_bounds;
using query::tier_segment;
// Per connection: whether routing is on, whether the running statement allows it, and what the
// scans read. Owned by the reader; the module's tables point to it.
using query::tier_read;

struct tier_router {
  bool enabled = true;
  bool statement_ok = true;     // set by reader::exec for each statement (tier_invariant)
  std::string statement_why;    // why not, when it does not
  int ts_terms = -1;            // its comparisons on ts (sql_lint: tier_text)
  std::vector<tier_read> reads; // appended by every scan, taken by the shell
  // Called once per scan that has read `warn_rows` raw rows, with a one-line remark.
  std::function<void(const std::string &)> warn;
  std::int64_t warn_rows = 2'000'000;
};

// The plan of a ts window [lo, hi) on `db` (clamped to its intervals): plan_tiers with the
// tiers' state and the late minutes read from the database; nullopt before schema 10 (late
// raw intervals unmarked) or without tiers.
result<std::optional<std::vector<tier_segment>>> plan_window(sqlite3 *db, std::int64_t lo,
                                                             std::int64_t hi);

// Registers module rsched_tiered on `db`, its tables reporting to `router` (which outlives the
// connection's statements).
result<void> register_tiered_module(sqlite3 *db, tier_router *router);

// Creates temp.V over every data view V of the main database that has V_1m and V_1h, when the
// database is of schema 10 (the late marks exist). Returns the views shadowed.
result<std::vector<std::string>> shadow_tiered_views(sqlite3 *db);

} // namespace rsched::query::detail
