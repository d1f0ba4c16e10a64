// Table-valued functions (eponymous virtual tables): hist_buckets, during, around, coverage,
// gaps, spikes, compare. Each one computes all its rows in xFilter (they are small: one row per
// bucket, interval, gap, spike or key) and hands them out from memory.
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/reader.hpp"

#include "sql_functions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sqlite3.h>
#include <string>
#include <utility>
#include <vector>

namespace rsched::store::detail {

namespace {

using row = std::vector<value>;
using rows = std::vector<row>;
// Arguments as given (nullptr = not given).
using args_t = std::vector<sqlite3_value *>;
using body_t = std::function<result<rows>(sqlite3 *, const fn_context &, const args_t &)>;

struct tvf {
  const char *name;
  std::vector<const char *> columns;
  std::vector<const char *> args; // hidden argument columns
  std::size_t required;
  body_t body;
  fn_context *ctx = nullptr;
};

struct vtab : sqlite3_vtab {
  const tvf *def = nullptr;
  sqlite3 *db = nullptr;
};

struct cursor : sqlite3_vtab_cursor {
  rows data;
  std::size_t pos = 0;
};

struct conn_defs;
const tvf *find_def(const conn_defs *defs, const char *name);

int x_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
              char ** /*err*/) {
  // argv[0] is the module name: one module object per function, all sharing `aux`.
  const tvf *def = argc > 0 ? find_def(static_cast<const conn_defs *>(aux), argv[0]) : nullptr;
  if (def == nullptr) {
    return SQLITE_ERROR;
  }
  std::string ddl = "CREATE TABLE x(";
  bool first = true;
  for (const char *c : def->columns) {
    ddl += fmt::format("{}{}", first ? "" : ", ", c);
    first = false;
  }
  for (const char *a : def->args) {
    ddl += fmt::format(", {} HIDDEN", a);
  }
  ddl += ")";
  const int rc = sqlite3_declare_vtab(db, ddl.c_str());
  if (rc != SQLITE_OK) {
    return rc;
  }
  auto *v = new (std::nothrow) vtab();
  if (v == nullptr) {
    return SQLITE_NOMEM;
  }
  v->def = def;
  v->db = db;
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *out = v;
  return SQLITE_OK;
}

int x_disconnect(sqlite3_vtab *v) {
  delete static_cast<vtab *>(v);
  return SQLITE_OK;
}

int x_best_index(sqlite3_vtab *base, sqlite3_index_info *info) {
  const auto *v = static_cast<vtab *>(base);
  const auto ncol = static_cast<int>(v->def->columns.size());
  const auto nargs = static_cast<int>(v->def->args.size());
  std::vector<int> cons(static_cast<std::size_t>(nargs), -1);
  for (int i = 0; i < info->nConstraint; ++i) {
    const auto &c = info->aConstraint[i];
    if (c.iColumn < ncol) {
      continue;
    }
    const int a = c.iColumn - ncol;
    if (c.op != SQLITE_INDEX_CONSTRAINT_EQ) {
      continue;
    }
    if (c.usable == 0) {
      // An argument bound to a column of a table not yet available: ask for another order.
      return SQLITE_CONSTRAINT;
    }
    cons[static_cast<std::size_t>(a)] = i;
  }
  int next = 1;
  int mask = 0;
  for (int a = 0; a < nargs; ++a) {
    const int i = cons[static_cast<std::size_t>(a)];
    if (i < 0) {
      continue;
    }
    info->aConstraintUsage[i].argvIndex = next++;
    info->aConstraintUsage[i].omit = 1;
    mask |= 1 << a;
  }
  info->idxNum = mask;
  const int need = (1 << v->def->required) - 1;
  // Missing required arguments: allowed (xFilter reports them) but made the worst plan.
  info->estimatedCost = (mask & need) == need ? 10.0 : 1e12;
  info->estimatedRows = 100;
  return SQLITE_OK;
}

int x_open(sqlite3_vtab * /*v*/, sqlite3_vtab_cursor **out) {
  auto *c = new (std::nothrow) cursor();
  if (c == nullptr) {
    return SQLITE_NOMEM;
  }
  *out = c;
  return SQLITE_OK;
}

int x_close(sqlite3_vtab_cursor *c) {
  delete static_cast<cursor *>(c);
  return SQLITE_OK;
}

int x_filter(sqlite3_vtab_cursor *base, int mask, const char * /*idx*/, int argc,
             sqlite3_value **argv) {
  auto *c = static_cast<cursor *>(base);
  auto *v = static_cast<vtab *>(base->pVtab);
  const tvf &def = *v->def;
  args_t args(def.args.size(), nullptr);
  int k = 0;
  for (std::size_t a = 0; a < def.args.size() && k < argc; ++a) {
    if ((mask & (1 << a)) != 0) {
      args[a] = argv[k++];
    }
  }
  auto set_error = [&](const std::string &msg) {
    sqlite3_free(v->zErrMsg);
    v->zErrMsg = sqlite3_mprintf("%s", msg.c_str());
    return SQLITE_ERROR;
  };
  for (std::size_t a = 0; a < def.required; ++a) {
    if (args[a] == nullptr) {
      std::string sig;
      for (std::size_t i = 0; i < def.args.size(); ++i) {
        sig += fmt::format("{}{}{}{}", i == 0 ? "" : ", ", i == def.required ? "[" : "",
                           def.args[i], i + 1 == def.args.size() && i >= def.required ? "]" : "");
      }
      return set_error(fmt::format("{}: missing argument {} (usage: {}({}))", def.name, def.args[a],
                                   def.name, sig));
    }
  }
  c->data.clear();
  c->pos = 0;
  try {
    auto r = def.body(v->db, *def.ctx, args);
    if (!r) {
      return set_error(r.err().msg);
    }
    c->data = std::move(*r);
  } catch (const std::exception &e) {
    return set_error(fmt::format("{}: {}", def.name, e.what()));
  }
  return SQLITE_OK;
}

int x_next(sqlite3_vtab_cursor *base) {
  ++static_cast<cursor *>(base)->pos;
  return SQLITE_OK;
}

int x_eof(sqlite3_vtab_cursor *base) {
  const auto *c = static_cast<cursor *>(base);
  return c->pos >= c->data.size() ? 1 : 0;
}

int x_column(sqlite3_vtab_cursor *base, sqlite3_context *ctx, int col) {
  const auto *c = static_cast<cursor *>(base);
  const row &r = c->data[c->pos];
  if (col < 0 || static_cast<std::size_t>(col) >= r.size()) {
    sqlite3_result_null(ctx);
    return SQLITE_OK;
  }
  const value &val = r[static_cast<std::size_t>(col)];
  if (const auto *i = std::get_if<std::int64_t>(&val)) {
    sqlite3_result_int64(ctx, *i);
  } else if (const auto *d = std::get_if<double>(&val)) {
    sqlite3_result_double(ctx, *d);
  } else if (const auto *s = std::get_if<std::string>(&val)) {
    sqlite3_result_text64(ctx, s->data(), s->size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  } else if (const auto *b = std::get_if<std::vector<std::uint8_t>>(&val)) {
    sqlite3_result_blob64(ctx, b->data(), b->size(), SQLITE_TRANSIENT);
  } else {
    sqlite3_result_null(ctx);
  }
  return SQLITE_OK;
}

int x_rowid(sqlite3_vtab_cursor *base, sqlite3_int64 *out) {
  *out = static_cast<sqlite3_int64>(static_cast<cursor *>(base)->pos);
  return SQLITE_OK;
}

sqlite3_module make_module() {
  sqlite3_module m{};
  m.iVersion = 0;
  m.xCreate = nullptr; // eponymous only
  m.xConnect = x_connect;
  m.xBestIndex = x_best_index;
  m.xDisconnect = x_disconnect;
  m.xDestroy = x_disconnect;
  m.xOpen = x_open;
  m.xClose = x_close;
  m.xFilter = x_filter;
  m.xNext = x_next;
  m.xEof = x_eof;
  m.xColumn = x_column;
  m.xRowid = x_rowid;
  return m;
}

const sqlite3_module tvf_module = make_module();

// ---- statements ----------------------------------------------------------------------------

struct stmt_deleter {
  void operator()(sqlite3_stmt *s) const { sqlite3_finalize(s); }
};
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_deleter>;

result<stmt_ptr> prepare(sqlite3 *db, const std::string &sql) {
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
    return make_error(sqlite3_errmsg(db));
  }
  return stmt_ptr(raw);
}

std::string col_text(sqlite3_stmt *st, int i) {
  const unsigned char *p = sqlite3_column_text(st, i);
  const int n = sqlite3_column_bytes(st, i);
  return p == nullptr ? std::string()
                      : std::string(reinterpret_cast<const char *>(p), static_cast<std::size_t>(n));
}

result<stats::histogram> col_hist(sqlite3_stmt *st, int i) {
  const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(st, i));
  const int n = sqlite3_column_bytes(st, i);
  auto h = stats::decode(std::span<const std::uint8_t>(p, static_cast<std::size_t>(n)));
  if (!h) {
    return h.err();
  }
  return *h;
}

struct interval_info {
  std::int64_t id = 0;
  std::int64_t start = 0;
  std::int64_t dur = 0;
  std::string boot;
  bool final_iv = false;
  bool stalled = false; // the recorder fell behind: one long interval (intervals.flags bit 1)
  [[nodiscard]] std::int64_t end() const { return start + dur; }
};

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
  auto st = prepare(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  std::vector<interval_info> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back({sqlite3_column_int64(st->get(), 0), sqlite3_column_int64(st->get(), 1),
                   sqlite3_column_int64(st->get(), 2), col_text(st->get(), 3),
                   sqlite3_column_int64(st->get(), 4) != 0,
                   sqlite3_column_int64(st->get(), 5) != 0});
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}

// [a, b) of the optional window arguments at `ia`, `ib`; defaults: the whole history.
result<std::pair<std::int64_t, std::int64_t>> window_args(sqlite3 *db, const fn_context &ctx,
                                                          const args_t &args, std::size_t ia,
                                                          std::size_t ib, const char *fn) {
  std::int64_t a = std::numeric_limits<std::int64_t>::min();
  std::int64_t b = std::numeric_limits<std::int64_t>::max();
  if (args[ia] == nullptr || args[ib] == nullptr) {
    const std::string sql =
        fmt::format("SELECT min(start_ns), max(start_ns + dur_ns) FROM {}", timeline(db));
    auto st = prepare(db, sql);
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
  if (args[ia] != nullptr) {
    auto r = time_arg(args[ia], ctx, wa.c_str());
    if (!r) {
      return r.err();
    }
    a = *r;
  }
  if (args[ib] != nullptr) {
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

// ---- hist_buckets --------------------------------------------------------------------------

result<rows> hist_buckets(sqlite3 * /*db*/, const fn_context & /*ctx*/, const args_t &args) {
  auto h = hist_arg(args[0], "hist_buckets");
  if (!h) {
    return h.err();
  }
  rows out;
  if (!*h) {
    return out;
  }
  const auto &hist = **h;
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  auto clamp = [](std::uint64_t v) { return static_cast<std::int64_t>(v > max ? max : v); };
  for (std::size_t s = 0; s < stats::slot_count(hist.kind); ++s) {
    if (hist.slots[s] == 0) {
      continue;
    }
    const stats::bucket b = stats::bucket_bounds(hist.kind, s);
    out.push_back(
        {clamp(b.lo), b.open_ended() ? value{} : value{clamp(b.hi)}, clamp(hist.slots[s])});
  }
  return out;
}

// ---- during / around (BETWEEN is an SQL keyword: the window function is `during`)
// ----------------------------------------------------------------------

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
  return interval_ts(db, *a, *b);
}

// ---- gaps / coverage -----------------------------------------------------------------------

struct gap {
  std::int64_t start;
  std::int64_t end;
  const char *reason;
};

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
      out.push_back({std::max(p.end(), a), std::min(n.start, b), reason});
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
    out.push_back({x.start, x.end, x.end - x.start, std::string(x.reason)});
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
  return rows{{w->first, w->second, covered, pct, static_cast<std::int64_t>(g->size())}};
}

// ---- spikes --------------------------------------------------------------------------------

struct metric_source {
  bool cpu = false; // cpu_hist (key: CPU) instead of thread_hist (key: comm)
  std::int64_t id = 1;
};

result<metric_source> metric_of(sqlite3 *db, sqlite3_value *v, const char *fn) {
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  const std::string name = p != nullptr ? p : "";
  if (name == "cpu_sched_delay") {
    return metric_source{true, 1};
  }
  if (name == "cpu_idle") {
    return metric_source{true, 8};
  }
  auto st = prepare(db, "SELECT id FROM metric WHERE name = ?1 AND name <> 'cpu_idle'");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_text(st->get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st->get()) != SQLITE_ROW) {
    return make_error(fmt::format("{}: unknown metric '{}' (sched_delay, cpu_sched_delay, "
                                  "waking_delay, sleep, slice_voluntary, ...)",
                                  fn, name));
  }
  return metric_source{false, sqlite3_column_int64(st->get(), 0)};
}

// Per interval: merged histogram of the metric and per key (comm or CPU) histograms.
struct iv_data {
  interval_info iv;
  stats::histogram merged;
  std::vector<std::pair<value, stats::histogram>> by_key;
};

// Histogram rows of `m` in intervals overlapping [a, b), grouped by interval. `key` picks the
// grouping column for thread metrics: "comm", "cgroup" (cpu metrics always group by CPU).
result<std::vector<iv_data>> load(sqlite3 *db, metric_source m, std::int64_t a, std::int64_t b,
                                  const std::string &key) {
  const std::string src = timeline(db);
  const std::string sql =
      m.cpu ? fmt::format("SELECT i.id, i.start_ns, i.dur_ns, i.boot_id, i.flags & 1, c.cpu, "
                          "c.hist FROM {} AS i CROSS JOIN cpu_hist AS c ON c.interval_id = i.id "
                          "AND c.metric = ?3 WHERE i.start_ns < ?2 AND i.start_ns + i.dur_ns > ?1 "
                          "ORDER BY i.start_ns, i.id",
                          src)
            : fmt::format("SELECT i.id, i.start_ns, i.dur_ns, i.boot_id, i.flags & 1, t.{}, "
                          "h.hist FROM {} AS i CROSS JOIN thread_hist AS h "
                          "ON h.interval_id = i.id AND h.metric = ?3 "
                          "JOIN thread AS t ON t.id = h.thread_id "
                          "WHERE i.start_ns < ?2 AND i.start_ns + i.dur_ns > ?1 "
                          "ORDER BY i.start_ns, i.id",
                          key, src);
  auto st = prepare(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  sqlite3_bind_int64(st->get(), 3, m.id);
  std::vector<iv_data> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt *s = st->get();
    const std::int64_t id = sqlite3_column_int64(s, 0);
    auto h = col_hist(s, 6);
    if (!h) {
      return make_error("stored histogram: " + h.err().msg);
    }
    if (out.empty() || out.back().iv.id != id) {
      iv_data d;
      d.iv = {id, sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2), col_text(s, 3),
              sqlite3_column_int64(s, 4) != 0};
      d.merged = stats::histogram{h->kind, {}};
      out.push_back(std::move(d));
    }
    auto &d = out.back();
    if (auto r = stats::merge_into(d.merged, *h); !r) {
      return r.err();
    }
    value k = m.cpu ? value{std::int64_t{sqlite3_column_int64(s, 5)}} : value{col_text(s, 5)};
    d.by_key.emplace_back(std::move(k), *h);
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}

std::string key_text(const value &k) {
  if (const auto *i = std::get_if<std::int64_t>(&k)) {
    return fmt::format("cpu {}", *i);
  }
  return std::get<std::string>(k);
}

constexpr std::size_t baseline_intervals = 60;
constexpr double spike_p = 99.0;

result<rows> spikes_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto m = metric_of(db, args[0], "spikes");
  if (!m) {
    return m.err();
  }
  // Threshold: a number (ns), a duration text ('5ms') or a multiple of the baseline ('3x').
  std::optional<double> multiple;
  std::int64_t absolute = 0;
  if (sqlite3_value_type(args[1]) == SQLITE_TEXT) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(args[1]));
    std::string t = p != nullptr ? p : "";
    while (!t.empty() && t.back() == ' ') {
      t.pop_back();
    }
    if (!t.empty() && (t.back() == 'x' || t.back() == 'X')) {
      char *end = nullptr;
      const std::string num = t.substr(0, t.size() - 1);
      const double f = std::strtod(num.c_str(), &end);
      if (num.empty() || end != num.c_str() + num.size() || !std::isfinite(f) || f <= 0) {
        return make_error(fmt::format("spikes: invalid threshold '{}' (a multiple like '3x', "
                                      "ns, or a duration like '5ms')",
                                      t));
      }
      multiple = f;
    } else {
      auto d = duration_arg(args[1], "spikes: threshold");
      if (!d) {
        return d.err();
      }
      absolute = *d;
    }
  } else {
    auto d = duration_arg(args[1], "spikes: threshold");
    if (!d) {
      return d.err();
    }
    absolute = *d;
  }
  auto w = window_args(db, ctx, args, 2, 3, "spikes");
  if (!w) {
    return w.err();
  }
  // Look back far enough for the baseline of the first intervals in the window.
  std::int64_t lookback = 0;
  if (multiple) {
    auto st = prepare(db, "SELECT coalesce(max(dur_ns), 0) FROM intervals" +
                              std::string(timeline(db) == "timeline" ? " WHERE tier = 0" : ""));
    if (!st) {
      return st.err();
    }
    if (sqlite3_step(st->get()) == SQLITE_ROW) {
      lookback = sqlite3_column_int64(st->get(), 0) * std::int64_t{baseline_intervals + 1};
    }
  }
  const std::int64_t from = w->first > std::numeric_limits<std::int64_t>::min() + lookback
                                ? w->first - lookback
                                : w->first;
  auto data = load(db, *m, from, w->second, "comm");
  if (!data) {
    return data.err();
  }
  struct point {
    std::size_t index;
    std::uint64_t p99;
    std::uint64_t threshold;
  };
  std::vector<std::uint64_t> history; // p99 of previous intervals
  std::vector<point> over;
  for (std::size_t i = 0; i < data->size(); ++i) {
    const auto &d = (*data)[i];
    const auto pr = stats::percentile(d.merged, spike_p);
    if (!pr) {
      continue;
    }
    std::optional<std::uint64_t> thr;
    if (multiple) {
      if (!history.empty()) {
        const std::size_t n = std::min(history.size(), baseline_intervals);
        std::vector<std::uint64_t> last(history.end() - static_cast<std::ptrdiff_t>(n),
                                        history.end());
        std::nth_element(last.begin(), last.begin() + static_cast<std::ptrdiff_t>(n / 2),
                         last.end());
        const auto median = static_cast<double>(last[n / 2]);
        thr = static_cast<std::uint64_t>(median * *multiple);
      }
    } else {
      thr = absolute < 0 ? 0 : static_cast<std::uint64_t>(absolute);
    }
    history.push_back(pr->value);
    if (d.iv.start + d.iv.dur <= w->first || !thr) {
      continue;
    }
    if (pr->value > *thr) {
      over.push_back({i, pr->value, *thr});
    }
  }
  rows out;
  std::size_t k = 0;
  while (k < over.size()) {
    // A run: consecutive intervals (by index, same boot, no gap) above the threshold.
    std::size_t e = k;
    while (e + 1 < over.size() && over[e + 1].index == over[e].index + 1) {
      const auto &p = (*data)[over[e].index].iv;
      const auto &n = (*data)[over[e + 1].index].iv;
      if (p.boot != n.boot || n.start - p.end() > p.dur / 2) {
        break;
      }
      ++e;
    }
    const auto &first = (*data)[over[k].index].iv;
    const auto &last = (*data)[over[e].index].iv;
    std::size_t peak = k;
    std::map<value, double> contrib;
    for (std::size_t j = k; j <= e; ++j) {
      if (over[j].p99 > over[peak].p99) {
        peak = j;
      }
      for (const auto &[key, h] : (*data)[over[j].index].by_key) {
        contrib[key] += count_above(h, over[j].threshold);
      }
    }
    std::vector<std::pair<value, double>> ranked(contrib.begin(), contrib.end());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto &x, const auto &y) { return x.second > y.second; });
    std::string top;
    std::size_t shown = 0;
    for (const auto &[key, n] : ranked) {
      const auto count = static_cast<long long>(std::llround(n));
      if (shown == 3 || count <= 0) {
        break;
      }
      top += fmt::format("{}{} ({})", shown == 0 ? "" : ", ", key_text(key), count);
      ++shown;
    }
    out.push_back({first.start, last.end(), last.end() - first.start,
                   static_cast<std::int64_t>(over[peak].p99), (*data)[over[peak].index].iv.start,
                   top, static_cast<std::int64_t>(over[peak].threshold)});
    k = e + 1;
  }
  return out;
}

// ---- compare -------------------------------------------------------------------------------

result<rows> compare_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto wa = window_args(db, ctx, args, 0, 1, "compare");
  if (!wa) {
    return wa.err();
  }
  auto wb = window_args(db, ctx, args, 2, 3, "compare");
  if (!wb) {
    return wb.err();
  }
  std::string by = "comm";
  if (args[4] != nullptr) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(args[4]));
    by = p != nullptr ? p : "";
  }
  metric_source m{false, 1};
  if (by == "cpu") {
    m.cpu = true;
  } else if (by != "comm" && by != "cgroup") {
    return make_error(fmt::format("compare: cannot group by '{}' (comm, cgroup or cpu)", by));
  }
  struct side {
    stats::histogram a{stats::layout::latency, {}};
    stats::histogram b{stats::layout::latency, {}};
  };
  std::map<value, side> keys;
  for (int which = 0; which < 2; ++which) {
    const auto &w = which == 0 ? *wa : *wb;
    auto data = load(db, m, w.first, w.second, m.cpu ? "comm" : by);
    if (!data) {
      return data.err();
    }
    for (const auto &d : *data) {
      for (const auto &[key, h] : d.by_key) {
        auto &s = keys[key];
        if (auto r = stats::merge_into(which == 0 ? s.a : s.b, h); !r) {
          return r.err();
        }
      }
    }
  }
  auto pct = [](const stats::histogram &h, double p) -> value {
    const auto r = stats::percentile(h, p);
    return r ? value{static_cast<std::int64_t>(r->value)} : value{};
  };
  struct out_row {
    row r;
    double excess;
    std::int64_t d;
  };
  std::vector<out_row> tmp;
  for (const auto &[key, s] : keys) {
    const auto a99 = stats::percentile(s.a, 99);
    const auto b99 = stats::percentile(s.b, 99);
    const auto av = a99 ? static_cast<std::int64_t>(a99->value) : 0;
    const auto bv = b99 ? static_cast<std::int64_t>(b99->value) : 0;
    const std::int64_t d = bv - av;
    const value ratio =
        a99 && b99 && av > 0 ? value{static_cast<double>(bv) / static_cast<double>(av)} : value{};
    // Excess: B's samples in buckets entirely above A's p99 (all of B when A had none), minus
    // the 1 % expected above a p99 when nothing changed. It ranks by how much delay changed,
    // so a key with one unlucky sample does not outrank one whose every sample got worse.
    double above = 0;
    for (std::size_t slot = 0; slot < stats::slot_count(s.b.kind); ++slot) {
      if (s.b.slots[slot] != 0 &&
          (!a99 || stats::bucket_bounds(s.b.kind, slot).lo > a99->bounds.hi)) {
        above += static_cast<double>(s.b.slots[slot]);
      }
    }
    const double excess = std::max(0.0, above - 0.01 * static_cast<double>(s.b.total()));
    tmp.push_back(
        {{key, static_cast<std::int64_t>(s.a.total()), pct(s.a, 50), pct(s.a, 99),
          static_cast<std::int64_t>(s.b.total()), pct(s.b, 50), pct(s.b, 99), d, ratio, excess},
         excess,
         d});
  }
  std::stable_sort(tmp.begin(), tmp.end(), [](const out_row &x, const out_row &y) {
    return x.excess != y.excess ? x.excess > y.excess : x.d > y.d;
  });
  rows out;
  for (auto &t : tmp) {
    out.push_back(std::move(t.r));
  }
  return out;
}

std::vector<tvf> &definitions() {
  static std::vector<tvf> defs = {
      {"hist_buckets", {"lo_ns", "hi_ns", "count"}, {"hist"}, 1, hist_buckets},
      {"during", {"ts"}, {"start_time", "end_time"}, 2, during_fn},
      {"around", {"ts"}, {"at_time", "half_width"}, 2, around_fn},
      {"gaps",
       {"start_ns", "end_ns", "duration_ns", "reason"},
       {"start_time", "end_time"},
       0,
       gaps_fn},
      {"coverage",
       {"start_ns", "end_ns", "covered_ns", "coverage_pct", "gaps"},
       {"start_time", "end_time"},
       0,
       coverage_fn},
      {"spikes",
       {"start_ns", "end_ns", "duration_ns", "peak_ns", "peak_ts", "top_comms", "threshold_ns"},
       {"metric", "threshold", "start_time", "end_time"},
       2,
       spikes_fn},
      {"compare",
       {"key", "a_count", "a_p50_ns", "a_p99_ns", "b_count", "b_p50_ns", "b_p99_ns", "d_p99_ns",
        "ratio_p99", "excess"},
       {"a_start", "a_end", "b_start", "b_end", "by"},
       4,
       compare_fn},
  };
  return defs;
}

// One copy of the definitions per connection, carrying that connection's context.
struct conn_defs {
  std::vector<tvf> defs;
};

const tvf *find_def(const conn_defs *defs, const char *name) {
  for (const auto &d : defs->defs) {
    if (sqlite3_stricmp(d.name, name) == 0) {
      return &d;
    }
  }
  return nullptr;
}
} // namespace

result<void> register_table_functions(sqlite3 *db, fn_context *ctx) {
  auto *owned = new conn_defs{definitions()};
  for (auto &d : owned->defs) {
    d.ctx = ctx;
  }
  // The definitions live as long as the connection: the first module's destructor, which
  // SQLite calls when the connection closes (or on failure here), frees them.
  bool first = true;
  for (auto &d : owned->defs) {
    const int rc = sqlite3_create_module_v2(
        db, d.name, &tvf_module, owned,
        first ? +[](void *p) { delete static_cast<conn_defs *>(p); } : nullptr);
    first = false;
    if (rc != SQLITE_OK) {
      return make_error(fmt::format("registering {}: {}", d.name, sqlite3_errmsg(db)));
    }
  }
  return {};
}

} // namespace rsched::store::detail
