#pragma once
// What the table functions share: the intervals of a time window (from the `timeline` view when
// the database has rollup tiers, else from `intervals`), the optional window arguments, and
// histogram columns.
#include "rsched/stats/histogram.hpp"

#include "vtab.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct sqlite3_stmt;

namespace rsched::query::detail {

struct interval_info {
  std::int64_t id = 0;
  std::int64_t start = 0;
  std::int64_t dur = 0;
  std::string boot;
  bool final_iv = false;
  bool stalled = false; // the recorder fell behind: one long interval (intervals.flags bit 1)
  // Which boot, as a number: spikes() numbers the boots of its scan (1, 2, ...) so that its
  // per-series check "the same boot as the series' last interval" compares two integers, not
  // two boot-id texts, 17 M times a day; 0 where not numbered (compare `boot`).
  std::uint32_t boot_no = 0;
  [[nodiscard]] std::int64_t end() const { return start + dur; }
};

// How many per-series feeds spikes() gathers before handing them to its feeder thread
// (tvf_latency.cpp, scan_summaries). Tests set it small so that a scan crosses many hand-offs.
inline std::size_t spike_feed_batch = std::size_t{1} << 19;

// A histogram blob column.
result<stats::histogram> col_hist(sqlite3_stmt *st, int i);

// "timeline" or, for a database of schema 1 or 2, "intervals".
std::string timeline(sqlite3 *db);

// Marks the table function running on this thread, for the lifetime of the object (x_filter):
// overlaps() keeps what it reads in that function's fn_context.
class table_function_scope {
public:
  explicit table_function_scope(const fn_context &ctx);
  ~table_function_scope();
  table_function_scope(const table_function_scope &) = delete;
  table_function_scope &operator=(const table_function_scope &) = delete;

private:
  const fn_context *saved_;
};

// The condition "interval `alias` overlaps [?1, ?2)" for a WHERE clause, for ?1 bound to `a`.
// It bounds start_ns from both sides (an interval overlapping [a, b) starts after a minus the
// longest interval the timeline can show there), so that SQLite reads a range of the start_ns
// index, not every interval before b.
std::string overlaps(sqlite3 *db, const char *alias, std::int64_t a);

// The longest raw (tier 0) interval, 0 when there is none; from the same cached read as
// overlaps().
std::int64_t longest_raw_interval(sqlite3 *db);

// Intervals overlapping [a, b), by start time.
result<std::vector<interval_info>> intervals_in(sqlite3 *db, std::int64_t a, std::int64_t b);

// [a, b) of the optional window arguments at `ia`, `ib`; defaults: the whole history.
result<std::pair<std::int64_t, std::int64_t>> window_args(sqlite3 *db, const fn_context &ctx,
                                                          const args_t &args, std::size_t ia,
                                                          std::size_t ib, const char *fn);

} // namespace rsched::query::detail
