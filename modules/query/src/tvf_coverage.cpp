// during, around, gaps, coverage: which intervals a time window holds and what it misses.
#include "rsched/sqlite/statement.hpp"

#include "table_functions.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <sqlite3.h>
#include <string>
#include <vector>

namespace rsched::query::detail {

// ---- during / around (BETWEEN is an SQL keyword: the window function is `during`)
// ----------------------------------------------------------------------

namespace {

result<rows> interval_ts(sqlite3 *db, std::int64_t a, std::int64_t b) {
  auto ivs = intervals_in(db, a, b);
  if (!ivs) {
    return ivs.err();
  }
  rows out;
  for (const auto &iv : *ivs) {
    out.push_back({iv.start});
  }
  return out;
}

} // namespace

result<rows> during_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto w = window_args(db, ctx, args, 0, 1, "during");
  if (!w) {
    return w.err();
  }
  ctx.last_window = std::make_pair(w->first, w->second);
  return interval_ts(db, w->first, w->second);
}

result<rows> around_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto t = time_arg(args[0], ctx, "around: time");
  if (!t) {
    return t.err();
  }
  auto d = duration_arg(args[1], "around: duration");
  if (!d) {
    return d.err();
  }
  if (*d < 0) {
    return make_error("around: the duration must not be negative");
  }
  const auto a = timefmt::detail::checked_sub(*t, *d);
  const auto b = timefmt::detail::checked_add(*t, *d);
  if (!a || !b || !timefmt::detail::checked_sub(*b, *a)) {
    return make_error(std::string("around: the window is ") + timefmt::out_of_range);
  }
  ctx.last_window = std::make_pair(*a, *b);
  ctx.window_named = true;
  return interval_ts(db, *a, *b);
}

// ---- gaps / coverage -----------------------------------------------------------------------

namespace {

struct gap {
  std::int64_t start;
  std::int64_t end;
  std::string reason;
};

// Why rschedd lost [a, b) when it was because writes failed: the text of the annotation it adds
// once writing works again (store::writer::note_write_failure), e.g. "write failed: ... database
// or disk is full (5 intervals lost)". nullopt when none overlaps.
std::optional<std::string> write_failure_in(sqlite3 *db, std::int64_t a, std::int64_t b) {
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT text FROM annotations WHERE source = 'rschedd' AND tags = "
                         "'write-failed' AND start_ns < ?2 AND coalesce(end_ns, start_ns) > ?1 "
                         "ORDER BY start_ns LIMIT 1",
                         -1, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return std::nullopt;
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt *)> st(raw, sqlite3_finalize);
  sqlite3_bind_int64(raw, 1, a);
  sqlite3_bind_int64(raw, 2, b);
  if (sqlite3_step(raw) != SQLITE_ROW) {
    return std::nullopt;
  }
  const auto *text = sqlite3_column_text(raw, 0);
  const int n = sqlite3_column_bytes(raw, 0);
  return std::string(reinterpret_cast<const char *>(text), static_cast<std::size_t>(n));
}

struct clock_step {
  std::int64_t at;
  std::int64_t step;
  std::string boot;
};

// The wall clock's steps rschedd saw in [a, b) (schema 21; none in an older file).
std::vector<clock_step> clock_steps_in(sqlite3 *db, std::int64_t a, std::int64_t b) {
  std::vector<clock_step> out;
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db,
                         "SELECT at_ns, step_ns, boot_id FROM clock_steps WHERE at_ns >= ?1 AND "
                         "at_ns < ?2 ORDER BY at_ns",
                         -1, &raw, nullptr) != SQLITE_OK) {
    sqlite3_finalize(raw);
    return out;
  }
  std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt *)> st(raw, sqlite3_finalize);
  sqlite3_bind_int64(raw, 1, a);
  sqlite3_bind_int64(raw, 2, b);
  while (sqlite3_step(raw) == SQLITE_ROW) {
    const auto *text = sqlite3_column_text(raw, 2);
    out.push_back({sqlite3_column_int64(raw, 0), sqlite3_column_int64(raw, 1),
                   text != nullptr ? reinterpret_cast<const char *>(text) : ""});
  }
  return out;
}

std::string step_text(std::int64_t step) {
  return fmt::format("the wall clock stepped {} by {:.3f} s", step > 0 ? "forward" : "back",
                     static_cast<double>(step > 0 ? step : -step) / 1e9);
}

// The step that explains the hole after interval `p`: a forward one of p's boot that rschedd saw
// at the end of the interval it wrote after p (rschedd reads the clock's mapping as each
// interval ends: `at` is on the new clock, `at - step` the same moment on p's), or nullptr.
const clock_step *step_after(const std::vector<clock_step> &steps, const interval_info &p) {
  const std::int64_t slack = 3 * p.dur + 1'000'000'000; // the next interval, even a stalled one
  for (const auto &c : steps) {
    const std::int64_t seen = c.at - c.step;
    if (c.step > 0 && c.boot == p.boot && seen >= p.end() - 1'000'000 && seen <= p.end() + slack) {
      return &c;
    }
  }
  return nullptr;
}

// Stretches of [a, b) that two or more intervals claim (the wall clock stepped back under a
// running rschedd or between two runs, or two recorders wrote one file): each listed once, so
// that doubled samples are never invisible. Intervals come in start order.
void add_overlaps(const std::vector<interval_info> &ivs, std::int64_t a, std::int64_t b,
                  std::vector<gap> &out) {
  std::int64_t reach = std::numeric_limits<std::int64_t>::min(); // the furthest end so far
  std::int64_t from = 0, to = 0;                                 // the stretch being gathered
  bool open = false;
  const auto flush = [&] {
    if (open && to > from) {
      out.push_back(
          {from, to, "intervals overlap: the clock stepped back or two recorders wrote this file"});
    }
    open = false;
  };
  for (const auto &iv : ivs) {
    if (iv.start < reach) {
      const std::int64_t s = std::max(iv.start, a);
      const std::int64_t e = std::min(std::min(iv.end(), reach), b);
      if (open && s <= to) {
        to = std::max(to, e);
      } else {
        flush();
        from = s;
        to = e;
        open = true;
      }
    } else if (open && iv.start > to) {
      flush(); // touching stretches (two runs' intervals interleaved by start) are one
    }
    reach = std::max(reach, iv.end());
  }
  flush();
}

// Intervals overlapping [a, b) whose rows maintenance set aside because their blobs no longer
// decode (schema 21, table damaged_rows; each interval's place in time is kept there, so they
// are listed after retention deleted the interval too): what those rows held is in no tier.
// One gap per interval, in start order. Nothing on a file older than schema 21.
result<void> add_damage(sqlite3 *db, std::int64_t a, std::int64_t b, std::vector<gap> &out) {
  auto has = sqlite::prepare_stmt(
      db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'damaged_rows'");
  if (!has) {
    return has.err();
  }
  if (sqlite3_step(has->get()) != SQLITE_ROW) {
    return {};
  }
  auto st = sqlite::prepare_stmt(
      db, "SELECT start_ns, start_ns + dur_ns, count(*), group_concat(DISTINCT source) FROM "
          "damaged_rows WHERE start_ns < ?2 AND start_ns + dur_ns > ?1 GROUP BY start_ns, "
          "dur_ns, tier, boot_id ORDER BY start_ns, dur_ns");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    const std::int64_t n = sqlite3_column_int64(st->get(), 2);
    out.push_back({std::max<std::int64_t>(sqlite3_column_int64(st->get(), 0), a),
                   std::min<std::int64_t>(sqlite3_column_int64(st->get(), 1), b),
                   fmt::format("{} damaged row{} set aside ({}): in no tier, see damaged_rows", n,
                               n == 1 ? "" : "s", sqlite::column_text(st->get(), 3))});
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
}

// Uncovered stretches of [a, b) (docs/SQL.md, "Coverage and gaps").
result<std::vector<gap>> find_gaps(sqlite3 *db, std::int64_t a, std::int64_t b,
                                   std::int64_t *covered) {
  auto ivs = intervals_in(db, a, b);
  if (!ivs) {
    return ivs.err();
  }
  std::vector<gap> out;
  std::int64_t cov = 0;
  std::int64_t cov_end = a; // covered up to here (union of intervals)
  for (const auto &iv : *ivs) {
    const std::int64_t s = std::max(iv.start, cov_end);
    const std::int64_t e = std::min(iv.end(), b);
    if (e > s) {
      cov += e - s;
      cov_end = e;
    }
  }
  if (covered != nullptr) {
    *covered = cov;
  }
  if (ivs->empty()) {
    if (b > a) {
      out.push_back({a, b, "no data"});
    }
    return out;
  }
  const auto &first = ivs->front();
  if (first.start - a > first.dur / 2) {
    out.push_back({a, first.start, "before the first interval"});
  }
  // A stalled interval holds whole data (covered) but no time resolution: the recorder was stopped
  // or starved and its missed ticks were coalesced into it. Listed so that the stall is seen.
  for (const auto &iv : *ivs) {
    if (iv.stalled) {
      out.push_back({std::max(iv.start, a), std::min(iv.end(), b), "recorder stalled"});
    }
  }
  add_overlaps(*ivs, a, b, out);
  // Each step of the wall clock, as a moment (the intervals after it follow the new clock).
  // (from a second before the window: a step seen at the end of the interval after one that
  // ends at its start explains the hole after that one)
  const std::int64_t from =
      a > std::numeric_limits<std::int64_t>::min() + 1'000'000'000 ? a - 1'000'000'000 : a;
  const auto steps = clock_steps_in(db, from, std::numeric_limits<std::int64_t>::max());
  for (const auto &c : steps) {
    if (c.at >= a && c.at < b) {
      out.push_back({c.at, c.at, step_text(c.step)});
    }
  }
  if (auto d = add_damage(db, a, b, out); !d) {
    return d.err();
  }
  for (std::size_t i = 1; i < ivs->size(); ++i) {
    const auto &p = (*ivs)[i - 1];
    const auto &n = (*ivs)[i];
    const std::int64_t hole = n.start - p.end();
    const char *reason = nullptr;
    if (p.boot != n.boot) {
      reason = "reboot";
    } else if (p.final_iv) {
      reason = "rschedd restarted";
    } else if (hole > p.dur / 2) {
      reason = "not recording";
    }
    if (reason != nullptr && hole > 0) {
      std::string why = reason;
      if (p.boot == n.boot && !p.final_iv) {
        // The recorder ran on but its writes failed (a full or failing disk), or the wall clock
        // jumped ahead under it: say so.
        if (auto f = write_failure_in(db, p.end(), n.start)) {
          why = std::move(*f);
        } else if (const auto *c = step_after(steps, p)) {
          why = step_text(c->step) + ": no time was lost";
        }
      }
      out.push_back({std::max(p.end(), a), std::min(n.start, b), std::move(why)});
    }
  }
  const auto &last = ivs->back();
  if (b - last.end() > last.dur / 2) {
    out.push_back({last.end(), b, "after the last interval"});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const gap &x, const gap &y) { return x.start < y.start; });
  return out;
}

} // namespace

result<rows> gaps_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto w = window_args(db, ctx, args, 0, 1, "gaps");
  if (!w) {
    return w.err();
  }
  auto g = find_gaps(db, w->first, w->second, nullptr);
  if (!g) {
    return g.err();
  }
  rows out;
  for (const auto &x : *g) {
    out.push_back({x.start, x.end - x.start, x.end, x.reason});
  }
  return out;
}

result<rows> coverage_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto w = window_args(db, ctx, args, 0, 1, "coverage");
  if (!w) {
    return w.err();
  }
  std::int64_t covered = 0;
  auto g = find_gaps(db, w->first, w->second, &covered);
  if (!g) {
    return g.err();
  }
  const std::int64_t len = w->second - w->first;
  const value pct =
      len > 0 ? value{100.0 * static_cast<double>(covered) / static_cast<double>(len)} : value{};
  return rows{{w->first, len, w->second, covered, pct, static_cast<std::int64_t>(g->size())}};
}

} // namespace rsched::query::detail
