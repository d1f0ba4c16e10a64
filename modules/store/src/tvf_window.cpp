#include "tvf_window.hpp"

#include "rsched/base/timefmt.hpp"
#include "rsched/stats/encoding.hpp"

#include "sqlite_util.hpp"

#include <fmt/format.h>

#include <limits>
#include <span>

namespace rsched::store::detail {

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

// Intervals overlapping [a, b), by start time.
result<std::vector<interval_info>> intervals_in(sqlite3 *db, std::int64_t a, std::int64_t b) {
  const std::string sql =
      fmt::format("SELECT id, start_ns, dur_ns, boot_id, flags & 1, flags & 2 FROM {} "
                  "WHERE start_ns < ?2 AND start_ns + dur_ns > ?1 "
                  "ORDER BY start_ns, id",
                  timeline(db));
  auto st = prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  std::vector<interval_info> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back({sqlite3_column_int64(st->get(), 0), sqlite3_column_int64(st->get(), 1),
                   sqlite3_column_int64(st->get(), 2), column_text(st->get(), 3),
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
    auto st = prepare_stmt(db, sql);
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
  return std::pair{a, b};
}

} // namespace rsched::store::detail
