#include "tvf_window.hpp"

#include "rsched/base/timefmt.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <span>

namespace rsched::query::detail {

result<stats::histogram> col_hist(sqlite3_stmt *st, int i) {
  const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(st, i));
  const int n = sqlite3_column_bytes(st, i);
  auto h = stats::decode(std::span<const std::uint8_t>(p, static_cast<std::size_t>(n)));
  if (!h) {
    return h.err();
  }
  return *h;
}

// The intervals the data views draw from: schema 3 has rollup rows in `intervals`, and the
// `timeline` view keeps, for each moment, only the finest tier still kept there. A database of
// schema 1 or 2 (opened read-only, not upgraded) has raw intervals only.
std::string timeline(sqlite3 *db) {
  sqlite3_stmt *raw = nullptr;
  bool found = false;
  if (sqlite3_prepare_v2(db,
                         "SELECT 1 FROM sqlite_master WHERE type = 'view' AND name = "
                         "'timeline'",
                         -1, &raw, nullptr) == SQLITE_OK) {
    found = sqlite3_step(raw) == SQLITE_ROW;
  }
  sqlite3_finalize(raw);
  return found ? "timeline" : "intervals";
}

namespace {

std::int64_t query_one(sqlite3 *db, const char *sql) {
  sqlite3_stmt *raw = nullptr;
  std::int64_t v = 0;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) == SQLITE_OK &&
      sqlite3_step(raw) == SQLITE_ROW) {
    v = sqlite3_column_int64(raw, 0);
  }
  sqlite3_finalize(raw);
  return v;
}

using tier_extent = fn_context::tier_extent;

// The table function running on this thread (set by x_filter through table_function_scope):
// the connection's fn_context, where the tier extents are kept.
const fn_context *&running_ctx() {
  thread_local const fn_context *ctx = nullptr;
  return ctx;
}

std::vector<tier_extent> read_tier_extents(sqlite3 *db) {
  std::vector<tier_extent> out;
  const bool tiers = timeline(db) == "timeline";
  const char *sql = tiers ? "SELECT max(i.dur_ns), (SELECT min(x.cutoff_ns) FROM tiers AS x "
                            "WHERE x.tier < i.tier) FROM intervals AS i GROUP BY i.tier"
                          : "SELECT max(dur_ns), NULL FROM intervals";
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) == SQLITE_OK) {
    while (sqlite3_step(raw) == SQLITE_ROW) {
      tier_extent t;
      t.longest = sqlite3_column_int64(raw, 0);
      if (sqlite3_column_type(raw, 1) != SQLITE_NULL) {
        t.shown_before = sqlite3_column_int64(raw, 1);
      }
      out.push_back(t);
    }
  }
  sqlite3_finalize(raw);
  return out;
}

// Reading them reads every interval (15 ms for a year's history): inside a table function they
// are kept in its connection's fn_context until the database changes (data_version moves when
// another connection commits, total_changes when this one writes).
std::vector<tier_extent> tier_extents(sqlite3 *db) {
  const fn_context *ctx = running_ctx();
  if (ctx == nullptr) {
    return read_tier_extents(db);
  }
  const std::int64_t version = query_one(db, "PRAGMA data_version");
  const std::int64_t changes = sqlite3_total_changes64(db);
  if (ctx->extents_version != version || ctx->extents_changes != changes) {
    ctx->tier_extents = read_tier_extents(db);
    ctx->extents_version = version;
    ctx->extents_changes = changes;
  }
  return ctx->tier_extents;
}

} // namespace

table_function_scope::table_function_scope(const fn_context &ctx) : saved_(running_ctx()) {
  running_ctx() = &ctx;
}

table_function_scope::~table_function_scope() {
  running_ctx() = saved_;
}

std::int64_t longest_raw_interval(sqlite3 *db) {
  std::int64_t longest = 0;
  for (const auto &t : tier_extents(db)) {
    if (!t.shown_before) { // tier 0 (or the only tier of a schema 1 or 2 file)
      longest = std::max(longest, t.longest);
    }
  }
  return longest;
}

std::string overlaps(sqlite3 *db, const char *alias, std::int64_t a) {
  // The longest interval that can start before `a` and still be shown in the timeline there.
  std::int64_t longest = 0;
  for (const auto &t : tier_extents(db)) {
    const bool shown = !t.shown_before ||
                       a < std::numeric_limits<std::int64_t>::min() + t.longest ||
                       a - t.longest < *t.shown_before;
    if (shown) {
      longest = std::max(longest, t.longest);
    }
  }
  const std::string p = *alias != '\0' ? std::string(alias) + "." : std::string();
  return fmt::format("{0}start_ns < ?2 AND {0}start_ns + {0}dur_ns > ?1 AND {0}start_ns > ?1 - {1}",
                     p, longest);
}

// Intervals overlapping [a, b), by start time.
result<std::vector<interval_info>> intervals_in(sqlite3 *db, std::int64_t a, std::int64_t b) {
  const std::string sql =
      fmt::format("SELECT id, start_ns, dur_ns, boot_id, flags & 1, flags & 2 FROM {} "
                  "WHERE {} ORDER BY start_ns, id",
                  timeline(db), overlaps(db, "", a));
  auto st = sqlite::prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  std::vector<interval_info> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back({sqlite3_column_int64(st->get(), 0), sqlite3_column_int64(st->get(), 1),
                   sqlite3_column_int64(st->get(), 2), sqlite::column_text(st->get(), 3),
                   sqlite3_column_int64(st->get(), 4) != 0,
                   sqlite3_column_int64(st->get(), 5) != 0});
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}

result<std::pair<std::int64_t, std::int64_t>> window_args(sqlite3 *db, const fn_context &ctx,
                                                          const args_t &args, std::size_t ia,
                                                          std::size_t ib, const char *fn) {
  std::int64_t a = std::numeric_limits<std::int64_t>::min();
  std::int64_t b = std::numeric_limits<std::int64_t>::max();
  // NULL is "not given" (so that later arguments can be given without a window).
  const auto given = [&](std::size_t i) {
    return args[i] != nullptr && sqlite3_value_type(args[i]) != SQLITE_NULL;
  };
  if (!given(ia) || !given(ib)) {
    const std::string sql =
        fmt::format("SELECT min(start_ns), max(start_ns + dur_ns) FROM {}", timeline(db));
    auto st = sqlite::prepare_stmt(db, sql);
    if (!st) {
      return st.err();
    }
    if (sqlite3_step(st->get()) == SQLITE_ROW && sqlite3_column_type(st->get(), 0) != SQLITE_NULL) {
      a = sqlite3_column_int64(st->get(), 0);
      b = sqlite3_column_int64(st->get(), 1);
    } else {
      a = 0;
      b = 0;
    }
  }
  if (given(ia) || given(ib)) {
    ctx.window_named = true;
  }
  const std::string wa = std::string(fn) + ": start";
  const std::string wb = std::string(fn) + ": end";
  if (given(ia)) {
    auto r = time_arg(args[ia], ctx, wa.c_str());
    if (!r) {
      return r.err();
    }
    a = *r;
  }
  if (given(ib)) {
    auto r = time_arg(args[ib], ctx, wb.c_str());
    if (!r) {
      return r.err();
    }
    b = *r;
  }
  if (b < a) {
    return make_error(std::string(fn) + ": the window ends before it starts");
  }
  if (!timefmt::detail::checked_sub(b, a)) { // its length must fit in 64 bits too
    return make_error(std::string(fn) + ": the window is longer than 64-bit ns hold (292 years)");
  }
  if (given(ia) && given(ib)) {
    ctx.name_window(a, b);
  }
  return std::pair{a, b};
}

} // namespace rsched::query::detail
