#pragma once
// The SQL functions over stored histogram blobs (docs/SQL.md has the reference): the schema's own
// views call hist_percentile and the rollups hist_merge, so every connection to an rsched
// database registers them (store::register_storage):
//   aggregates/window: hist_percentile(hist, p), hist_merge(hist), hist_percentile_error(hist, p);
//   scalars on one blob: hist_pct(hist, p), hist_error(hist, p), hist_count(hist),
//     hist_count_above(hist, ns), hist_fraction_above(hist, ns), hist_mean(hist), hist_max(hist).
#include "rsched/base/result.hpp"

#include <cstdint>
#include <optional>

struct sqlite3;
struct sqlite3_value;

namespace rsched::stats {
struct histogram;
}

namespace rsched::store {

// The precision of the latency percentiles (and their error bounds) answered on this thread
// since the caller last reset it: `fine` counts answers at layout 5's buckets, `coarse` answers
// at any other layout's. hist_percentile, hist_percentile_error, hist_pct and hist_error count
// theirs, compare() each percentile it returns, and spikes() (peak_ns, layout 1's) one coarse.
// rsched-sql resets it before a statement and prints the statement's percentile columns in layout
// 5's buckets only when all_fine() (docs/SQL.md, "Percentiles"). Per thread: SQLite calls a
// function on the thread that steps its statement.
struct answer_precision {
  std::uint64_t fine = 0;
  std::uint64_t coarse = 0;
  [[nodiscard]] bool all_fine() const { return fine > 0 && coarse == 0; }
};
answer_precision &answered_precision();

// Registers the functions above on `db`.
result<void> register_hist_functions(sqlite3 *db);

// A histogram blob argument; nullopt for SQL NULL.
result<std::optional<stats::histogram>> hist_arg(sqlite3_value *v, const char *fn);
// Samples of `h` above `ns`: whole buckets with lo >= ns, plus the share (hi - ns + 1) / width
// of the bucket that contains ns; an open-ended bucket containing ns counts fully.
double count_above(const stats::histogram &h, std::uint64_t ns);

} // namespace rsched::store
