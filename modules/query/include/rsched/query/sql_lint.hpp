#pragma once
// A check SQLite cannot make: a per-blob histogram function (hist_max, hist_mean, hist_count,
// hist_count_above, hist_fraction_above, hist_pct, hist_error) applied to a bare column in a query
// that aggregates (GROUP BY, or an aggregate such as count() or hist_percentile() in its result,
// HAVING or ORDER BY). SQLite then evaluates it on one arbitrary row of each group, so
// `SELECT comm, hist_percentile(hist, 99), hist_max(hist) ... GROUP BY comm` would print a max
// below the p99. The reader refuses such a statement with this error, which says what to write
// instead (hist_max(hist_merge(hist)), or an aggregate over the per-row values).
//
// Pure text analysis of one statement (SQLite's tokens, parentheses and SELECT cores; no
// schema): subqueries, compound SELECTs and CTEs are checked each on their own. Uses that are
// per row stay allowed: in WHERE, GROUP BY and ON, inside an aggregate's or a window function's
// arguments, on an aggregate's result, on a column named in GROUP BY or on a result alias.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace rsched::query {

struct sql_lint_error {
  std::size_t offset = 0; // byte offset of the function's name in the statement
  std::string message;    // one line
};

std::optional<sql_lint_error> check_histogram_aggregation(std::string_view statement);

// Why a statement's answer may depend on how rows are cut in time, or nullopt when it does not:
// the data views may then answer it from rollup rows (docs/SQL.md, "Which tier answers").
// Conservative text analysis of the whole statement (subqueries included): it must add up
// (GROUP BY, or sum, total, hist_merge, hist_percentile, hist_percentile_error), use the data
// views' measure columns (count, total_ns, hist, wait_ns, ...) only as the whole first argument
// of one of those, name `ts` only as one side of a comparison (a window), never `dur`, and call
// no count, avg, min, max, group_concat, JSON aggregate or window function. The reason is a
// phrase ("it names dur, ...").
std::optional<std::string> tier_variant_reason(std::string_view statement);

// The same analysis, with what a routed scan needs to merge rows before the statement sees
// them: `ts_terms`, the comparisons on `ts` the statement makes (BETWEEN counts two). A scan
// that received as many ts constraints as that applies every one itself, so the statement
// never reads ts of a row.
struct tier_text {
  std::optional<std::string> why; // as tier_variant_reason
  int ts_terms = 0;
};
tier_text tier_text_of(std::string_view statement);

// Whether `name` (lower case) is one of the data views' measure columns (count, total_ns,
// hist, wait_ns, value, ...): what rollup rows add up.
bool is_measure_column(std::string_view name);

} // namespace rsched::query
