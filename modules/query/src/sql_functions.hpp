#pragma once
// rsched's SQL functions (docs/SQL.md has the reference and an example of each):
//   the histogram functions of the stored format (store/hist_functions.hpp);
//   ipc(instructions, cycles), rate(value, dur_ns);
//   time: t(text), ago(text), dur(text), fmt_time(ns), bucket(ts, width),
//     annotation_margin([dur]);
//   table-valued (table_functions.cpp): hist_buckets, during, around, coverage, gaps, spikes,
//     compare.
#include "rsched/base/result.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/sqlite/functions.hpp"
#include "rsched/store/hist_functions.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

struct sqlite3;
struct sqlite3_context;
struct sqlite3_value;

namespace rsched::stats {
struct histogram;
}

namespace rsched::query::detail {

struct fn_context;

// The second connections of a connection (reader::twin) while they live, for
// reader::interrupt() to reach them: slots, not a list under a lock, since interrupt() runs in
// signal handlers.
struct twin_slots {
  std::array<std::atomic<sqlite3 *>, 8> db{};
};

// One host of a connection over several hosts (reader::open_hosts): its name and its own
// read-only connection, where the table functions run as on a single database (their SQL reads
// the rsched tables by their plain names, which on the combined connection are the union views).
struct host_source {
  std::string name;
  sqlite3 *db = nullptr;
  fn_context *ctx = nullptr; // that connection's own context (its tier-extent cache)
};

// Per-connection settings of the functions; owned by the reader, stable address.
struct fn_context {
  timefmt::zone zone = timefmt::zone::local();
  // The columns of the running table function that its statement reads (bit i: column i of
  // its definition; all set when not known): a body may leave an unread column NULL and skip
  // the work behind it (spikes' causes). Set by the virtual table before each run.
  std::uint64_t cols_used = ~std::uint64_t{0};
  [[nodiscard]] bool wants(std::size_t column) const {
    return column >= 64 || (cols_used >> column & 1U) != 0;
  }
  std::optional<std::int64_t> fixed_now; // tests and reproducible examples
  // The last window asked of during()/around() ([start, end) UTC ns), for the shell's coverage
  // note; taken (and cleared) by reader::take_window.
  mutable std::optional<std::pair<std::int64_t, std::int64_t>> last_window;
  // A statement gave a table function a window of its own (compare, spikes, blame, coverage,
  // gaps, during, around with explicit times), whatever spelling its times had; taken (and
  // cleared) by reader::take_window_named.
  mutable bool window_named = false;
  // The span of the windows the statement's table functions were given with both bounds (the
  // earliest start to the latest end), for the shell: an empty answer over a recorded window is
  // not "no recorded data". Taken (and cleared) by reader::take_named_window.
  mutable std::optional<std::pair<std::int64_t, std::int64_t>> named_window;
  void name_window(std::int64_t a, std::int64_t b) const {
    named_window = named_window ? std::pair{std::min(named_window->first, a),
                                            std::max(named_window->second, b)}
                                : std::pair{a, b};
  }
  // Per tier of the timeline, its longest interval and the start before which its rows show
  // (tvf_window.cpp, overlaps()): read once and kept while the database is unchanged
  // (data_version and total_changes of this connection as they were when read).
  struct tier_extent {
    std::int64_t longest = 0;
    std::optional<std::int64_t> shown_before; // none: always shown (tier 0)
  };
  mutable std::vector<tier_extent> tier_extents;
  mutable std::int64_t extents_version = -1;
  mutable std::int64_t extents_changes = -1;
  // The margin around each annotation's span in annotation_delay / annotation_summary, ns
  // (annotation_margin(dur) sets it for the connection).
  std::int64_t annotation_margin_ns = 0;
  // Whether compare() may read whole minutes and hours from the rollups (reader's tier
  // routing, vtab_tiered.hpp); true unless the reader turned it off.
  bool tier_routing = true;
  // Empty, or the hosts of a connection over several hosts (vtab.cpp runs the table functions
  // on each of them).
  std::vector<host_source> hosts;
  // Whether an answer may read independent parts on a second connection at once (reader::twin).
  bool parallel = true;
  // This connection's twins (reader::twin), interrupted with it.
  std::shared_ptr<twin_slots> twins = std::make_shared<twin_slots>();
  [[nodiscard]] std::int64_t now() const {
    return fixed_now ? *fixed_now : timefmt::realtime_now_ns();
  }
};

// The query engine's functions and table functions, on a connection where
// store::register_storage has run.
result<void> register_functions(sqlite3 *db, fn_context *ctx);
result<void> register_table_functions(sqlite3 *db, fn_context *ctx);

// A time argument: INTEGER/REAL = UTC ns as is, TEXT = the time grammar in the context's zone.
result<std::int64_t> time_arg(sqlite3_value *v, const fn_context &ctx, const char *what);
// Also used by the table functions: sqlite::duration_arg (a duration argument) and
// store::hist_arg / store::count_above (histogram blobs).
using sqlite::duration_arg;

} // namespace rsched::query::detail
