#include "vtab_tiered.hpp"

#include "rsched/query/sql_lint.hpp"
#include "rsched/sqlite/module.hpp"
#include "rsched/sqlite/quote.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/schema.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <sqlite3.h>
#include <string_view>
#include <utility>

namespace rsched::query {

namespace {

std::int64_t floor_to(std::int64_t v, std::int64_t w) {
  const std::int64_t q = v / w * w;
  return q > v ? q - w : q;
}

} // namespace

std::vector<tier_segment> plan_tiers(std::int64_t lo, std::int64_t hi, const tier_bounds &t,
                                     const std::vector<std::int64_t> &late) {
  std::vector<tier_segment> out;
  const auto push = [&out](int tier, std::int64_t a, std::int64_t b) {
    if (a >= b) {
      return;
    }
    if (!out.empty() && out.back().tier == tier && out.back().to == a) {
      out.back().to = b;
    } else {
      out.push_back({tier, a, b});
    }
  };
  // Whether a raw interval of [a, b) was written late (a minute of `late` starts in it).
  const auto any_late = [&late](std::int64_t a, std::int64_t b) {
    const auto it = std::lower_bound(late.begin(), late.end(), a);
    return it != late.end() && *it < b;
  };
  // Whole within the window, built, kept, and holding every raw interval of its moments.
  const auto exact = [&](int tier, std::int64_t start, std::int64_t w) {
    return start >= lo && hi - w >= start && start <= t.built[static_cast<std::size_t>(tier)] - w &&
           start >= t.cutoff[static_cast<std::size_t>(tier)] && !any_late(start, start + w);
  };
  std::int64_t at = lo;
  while (at < hi) {
    const std::int64_t hour = floor_to(at, hour_ns);
    if (at == hour && exact(2, hour, hour_ns)) {
      push(2, hour, hour + hour_ns);
      at = hour + hour_ns;
      continue;
    }
    // Past the 1-minute tier's built end nothing more can come from a rollup.
    if (at >= t.built[1]) {
      push(0, at, hi);
      break;
    }
    const std::int64_t block_end = hi - hour_ns < hour ? hi : hour + hour_ns;
    while (at < block_end) {
      const std::int64_t minute = floor_to(at, minute_ns);
      if (at == minute && exact(1, minute, minute_ns)) {
        push(1, minute, minute + minute_ns);
        at = minute + minute_ns;
      } else {
        const std::int64_t e = std::min(block_end, minute + minute_ns);
        push(0, at, e);
        at = e;
      }
    }
  }
  return out;
}

} // namespace rsched::query

namespace rsched::query::detail {

namespace {

// The columns whose values rollup rows do not keep (NULL there): a scan naming one reads V.
constexpr std::array<std::string_view, 8> per_thread_columns = {
    "tid", "pid", "by_pid", "by_cpu", "by_policy", "by_prio", "policy", "prio"};

bool same_nocase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           const auto l = [](char c) {
             return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c;
           };
           return l(x) == l(y);
         });
}

struct table : sqlite3_vtab {
  sqlite3 *db = nullptr;
  tier_router *router = nullptr;
  std::string view;
  std::vector<std::string> columns;
  int ts = -1; // the ts column
  // Per column, how a scan that merges rows before the statement sees them treats it: a key
  // (grouped by), a measure (sum, or hist_merge for a blob), or neither (ts, dur: never read).
  enum class role : std::uint8_t { key, sum, merge, none };
  std::vector<role> roles;
  std::uint64_t per_thread = 0; // bits of per_thread_columns
  // Prepared part statements by SQL text, reused by later scans (a join or `ts IN (...)` runs
  // one scan per outer row); one in use by another cursor is not shared.
  std::map<std::string, sqlite3_stmt *> cache;
  table() = default;
  table(const table &) = delete;
  table &operator=(const table &) = delete;
  ~table() {
    for (auto &[sql, st] : cache) {
      sqlite3_finalize(st);
    }
  }
};

// One constraint handed to xFilter: column and operator, in argv order.
struct pushed {
  int column = 0;
  unsigned char op = 0;
};

const char *op_text(unsigned char op) {
  switch (op) {
  case SQLITE_INDEX_CONSTRAINT_EQ:
    return "=";
  case SQLITE_INDEX_CONSTRAINT_GT:
    return ">";
  case SQLITE_INDEX_CONSTRAINT_LE:
    return "<=";
  case SQLITE_INDEX_CONSTRAINT_LT:
    return "<";
  case SQLITE_INDEX_CONSTRAINT_GE:
    return ">=";
  default:
    return nullptr;
  }
}

// idxStr: "rollups" or "finest", the used columns' mask in hex, then each constraint as
// column index and operator ("rollups 1ff 0>= 0<"). What EXPLAIN QUERY PLAN shows, too.
std::string encode(bool route, std::uint64_t used, const std::vector<pushed> &cs) {
  std::string s = fmt::format("{} {:x}", route ? "rollups" : "finest", used);
  for (const auto &c : cs) {
    s += fmt::format(" {}{}", c.column, op_text(c.op));
  }
  return s;
}

struct plan_text {
  bool route = false;
  std::uint64_t used = 0;
  std::vector<pushed> cs;
};

std::optional<plan_text> decode(const char *idx) {
  if (idx == nullptr) {
    return std::nullopt;
  }
  const std::string_view s(idx);
  plan_text p;
  std::size_t at = 0;
  const auto word = [&]() {
    while (at < s.size() && s[at] == ' ') {
      ++at;
    }
    const std::size_t b = at;
    while (at < s.size() && s[at] != ' ') {
      ++at;
    }
    return s.substr(b, at - b);
  };
  const auto mode = word();
  p.route = mode == "rollups";
  const auto mask = word();
  p.used = std::stoull(std::string(mask), nullptr, 16);
  for (auto w = word(); !w.empty(); w = word()) {
    std::size_t k = 0;
    while (k < w.size() && w[k] >= '0' && w[k] <= '9') {
      ++k;
    }
    pushed c;
    c.column = std::stoi(std::string(w.substr(0, k)));
    const auto op = w.substr(k);
    c.op = op == "="    ? SQLITE_INDEX_CONSTRAINT_EQ
           : op == ">"  ? SQLITE_INDEX_CONSTRAINT_GT
           : op == "<=" ? SQLITE_INDEX_CONSTRAINT_LE
           : op == "<"  ? SQLITE_INDEX_CONSTRAINT_LT
                        : SQLITE_INDEX_CONSTRAINT_GE;
    p.cs.push_back(c);
  }
  return p;
}

struct part {
  int tier = 0;
  std::int64_t from = 0;
  std::int64_t to = 0;
  bool bounded = true; // binds ?1, ?2 (ts window); false: the whole view (no routing)
};

struct cursor : sqlite3_vtab_cursor {
  std::vector<part> parts;
  std::vector<sqlite3_value *> args; // the constraints' values (copies)
  std::vector<pushed> cs;
  std::uint64_t used = 0;
  bool merge = false; // each part's rows merged per key (sums and hist_merge) before they leave
  std::size_t at = 0; // the part `st` reads
  sqlite3_stmt *st = nullptr;
  bool cached = false; // `st` belongs to the table's cache: reset, not finalized
  bool eof = true;
  std::int64_t rowid = 0;
  std::int64_t rows = 0;     // rows of the current part
  std::int64_t raw_rows = 0; // rows of view parts, for the warning
  bool warned = false;
  std::string why; // no routing: why
  void clear_args() {
    for (auto *v : args) {
      sqlite3_value_free(v);
    }
    args.clear();
  }
};

int set_error(sqlite3_vtab *vt, const std::string &msg) {
  sqlite3_free(vt->zErrMsg);
  vt->zErrMsg = sqlite3_mprintf("%s", msg.c_str());
  return SQLITE_ERROR;
}

// The columns of main.<view>, in order, with their declared types.
result<std::vector<std::pair<std::string, std::string>>> view_columns(sqlite3 *db,
                                                                      const std::string &view) {
  auto st = sqlite::prepare_stmt(db, "SELECT name, type FROM pragma_table_info(?1, 'main')");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_text(st->get(), 1, view.data(), static_cast<int>(view.size()), SQLITE_TRANSIENT);
  std::vector<std::pair<std::string, std::string>> out;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.emplace_back(sqlite::column_text(st->get(), 0), sqlite::column_text(st->get(), 1));
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}

int x_create(sqlite3 *db, void *aux, int argc, const char *const *argv, table **out,
             std::string &err) {
  if (argc < 4) {
    err = "rsched_tiered: no view named";
    return SQLITE_ERROR;
  }
  std::string view = argv[3];
  if (view.size() >= 2 && view.front() == '\'' && view.back() == '\'') {
    std::string plain;
    for (std::size_t i = 1; i + 1 < view.size(); ++i) {
      plain += view[i];
      if (view[i] == '\'' && view[i + 1] == '\'') {
        ++i; // a doubled quote
      }
    }
    view = plain;
  }
  auto cols = view_columns(db, view);
  if (!cols || cols->empty()) {
    err = "rsched_tiered: no view main." + view;
    return SQLITE_ERROR;
  }
  std::string decl = "CREATE TABLE x(";
  // The view's declared types (INTEGER, TEXT, BLOB, or none): the same column affinities.
  for (std::size_t i = 0; i < cols->size(); ++i) {
    const auto &type = (*cols)[i].second;
    const bool plain = std::all_of(type.begin(), type.end(), [](char ch) {
      return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
    });
    decl += (i == 0 ? "" : ", ") + sqlite::sql_ident((*cols)[i].first) +
            (plain && !type.empty() ? " " + type : std::string());
  }
  decl += ")";
  if (const int rc = sqlite3_declare_vtab(db, decl.c_str()); rc != SQLITE_OK) {
    return rc;
  }
  auto *t = new (std::nothrow) table();
  if (t == nullptr) {
    return SQLITE_NOMEM;
  }
  t->db = db;
  t->router = static_cast<tier_router *>(aux);
  t->view = view;
  for (auto &[name, type] : *cols) {
    std::string lower = name;
    for (char &ch : lower) {
      ch = ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch + 32) : ch;
    }
    const bool blob = same_nocase(type, "BLOB");
    t->roles.push_back(lower == "ts" || lower == "dur" ? table::role::none
                       : is_measure_column(lower) ? (blob ? table::role::merge : table::role::sum)
                                                  : table::role::key);
    t->columns.push_back(std::move(name));
  }
  for (std::size_t i = 0; i < t->columns.size() && i < 63; ++i) {
    if (same_nocase(t->columns[i], "ts")) {
      t->ts = static_cast<int>(i);
    }
    for (const auto c : per_thread_columns) {
      if (same_nocase(t->columns[i], c)) {
        t->per_thread |= std::uint64_t{1} << i;
      }
    }
  }
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *out = t;
  return SQLITE_OK;
}

int x_best_index(table &vt, sqlite3_index_info &index_info) {
  const auto *t = &vt;
  sqlite3_index_info *info = &index_info;
  std::vector<pushed> cs;
  bool lo = false;
  bool hi = false;
  bool eq = false;
  for (int i = 0; i < info->nConstraint; ++i) {
    const auto &c = info->aConstraint[i];
    if (c.usable == 0 || c.iColumn < 0 || op_text(c.op) == nullptr) {
      continue;
    }
    cs.push_back({c.iColumn, c.op});
    info->aConstraintUsage[i].argvIndex = static_cast<int>(cs.size());
    // Every scan applies every constraint in its own query of the view (main.V or a tier's),
    // with the view's column affinities: SQLite need not check them again, and the answer is
    // the view's whatever the operand's type.
    info->aConstraintUsage[i].omit = 1;
    if (c.iColumn == t->ts) {
      eq = eq || c.op == SQLITE_INDEX_CONSTRAINT_EQ;
      lo = lo || c.op == SQLITE_INDEX_CONSTRAINT_GT || c.op == SQLITE_INDEX_CONSTRAINT_GE;
      hi = hi || c.op == SQLITE_INDEX_CONSTRAINT_LT || c.op == SQLITE_INDEX_CONSTRAINT_LE;
    }
  }
  const std::uint64_t used = info->colUsed;
  // A column past the 63rd sets bit 63: none of the views has that many.
  const bool route = (used & t->per_thread) == 0;
  info->idxNum = route ? 1 : 0;
  info->idxStr = sqlite3_mprintf("%s", encode(route, used, cs).c_str());
  info->needToFreeIdxStr = 1;
  // Fewer rows the narrower the ts window: SQLite prefers plans that give the scan a window.
  double rows = 1e8;
  if (eq) {
    rows = 1e3;
  } else if (lo && hi) {
    rows = 1e5;
  } else if (lo || hi) {
    rows = 1e7;
  }
  info->estimatedRows = static_cast<sqlite3_int64>(rows);
  info->estimatedCost = rows;
  return SQLITE_OK;
}

// Gives back the cursor's statement: to the table's cache, or finalized.
void release(cursor *c) {
  if (c->st != nullptr) {
    if (c->cached) {
      sqlite3_reset(c->st);
      sqlite3_clear_bindings(c->st);
    } else {
      sqlite3_finalize(c->st);
    }
  }
  c->st = nullptr;
  c->cached = false;
}

// Records what the current part read (merged with the scan's previous record of its tier).
void log_part(table *t, cursor *c) {
  if (c->at >= c->parts.size() || t->router == nullptr) {
    return;
  }
  const part &p = c->parts[c->at];
  auto &reads = t->router->reads;
  if (!reads.empty() && reads.back().view == t->view && reads.back().tier == p.tier &&
      reads.back().why == c->why) {
    reads.back().to = p.to;
    reads.back().rows += c->rows;
  } else {
    reads.push_back({t->view, p.tier, p.from, p.to, c->rows, c->why});
  }
  c->rows = 0;
}

void x_close(table &vt, cursor *c) {
  if (c->st != nullptr) {
    log_part(&vt, c);
  }
  release(c);
  c->clear_args();
  delete c;
}

// Prepares and binds the statement of part `c->at`.
int open_part(table *t, cursor *c) {
  release(c);
  const part &p = c->parts[c->at];
  const char *suffix = p.tier == 2 ? "_1h" : p.tier == 1 ? "_1m" : "";
  std::string sql = "SELECT ";
  std::string keys;
  for (std::size_t i = 0; i < t->columns.size(); ++i) {
    const bool used = i >= 63 ? (c->used >> 63 & 1U) != 0 : (c->used >> i & 1U) != 0;
    const std::string col = sqlite::sql_ident(t->columns[i]);
    std::string expr = used ? col : std::string("NULL");
    if (used && c->merge) {
      switch (t->roles[i]) {
      case table::role::key:
        keys += (keys.empty() ? "" : ", ") + col;
        break;
      case table::role::sum:
        expr = "sum(" + col + ")";
        break;
      case table::role::merge:
        expr = "hist_merge(" + col + ")";
        break;
      case table::role::none:
        expr = "NULL"; // applied inside; the statement never reads it (x_filter)
        break;
      }
    }
    sql += (i == 0 ? "" : ", ") + expr;
  }
  sql += " FROM main." + sqlite::sql_ident(t->view + suffix) + " WHERE 1";
  int n = 0;
  if (p.bounded) {
    sql += fmt::format(" AND {0} >= ?1 AND {0} < ?2",
                       sqlite::sql_ident(t->columns[static_cast<std::size_t>(t->ts)]));
    n = 2;
  }
  // A constraint on ts or tid may use an index; any other is a filter only, written +(...) so
  // that the planner cannot drive the view's join from an automatic index on an identity table:
  // `comm = ?` made it look up every thread ever named so in every interval of the window (in
  // each interval's pack), ten times the cost of reading the window, and growing with the
  // history's threads. The comparison inside keeps the column's affinity.
  for (std::size_t k = 0; k < c->cs.size(); ++k) {
    const auto col = static_cast<std::size_t>(c->cs[k].column);
    const bool seek = c->cs[k].column == t->ts || same_nocase(t->columns[col], "tid");
    sql += fmt::format(fmt::runtime(seek ? " AND {} {} ?{}" : " AND +({} {} ?{})"),
                       sqlite::sql_ident(t->columns[col]), op_text(c->cs[k].op),
                       n + static_cast<int>(k) + 1);
  }
  if (c->merge) {
    sql += (keys.empty() ? "" : " GROUP BY " + keys) + " HAVING count(*) > 0";
  }
  if (auto it = t->cache.find(sql); it != t->cache.end() && sqlite3_stmt_busy(it->second) == 0) {
    c->st = it->second;
    c->cached = true;
  } else {
    if (sqlite3_prepare_v3(t->db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &c->st, nullptr) !=
        SQLITE_OK) {
      return set_error(t, fmt::format("{}: {}", t->view, sqlite3_errmsg(t->db)));
    }
    if (it == t->cache.end() && t->cache.size() < 64) {
      t->cache.emplace(sql, c->st);
      c->cached = true;
    }
  }
  if (p.bounded) {
    sqlite3_bind_int64(c->st, 1, p.from);
    sqlite3_bind_int64(c->st, 2, p.to);
  }
  for (std::size_t k = 0; k < c->args.size(); ++k) {
    sqlite3_bind_value(c->st, n + static_cast<int>(k) + 1, c->args[k]);
  }
  return SQLITE_OK;
}

// Steps to the next row, across parts. Sets eof after the last.
int advance(table *t, cursor *c) {
  while (c->at < c->parts.size()) {
    if (c->st == nullptr) {
      if (const int rc = open_part(t, c); rc != SQLITE_OK) {
        return rc;
      }
    }
    const int rc = sqlite3_step(c->st);
    if (rc == SQLITE_ROW) {
      ++c->rows;
      ++c->rowid;
      if (c->parts[c->at].tier == 0 && t->router != nullptr &&
          ++c->raw_rows == t->router->warn_rows && !c->warned && t->router->warn) {
        c->warned = true;
        // Why, and the faster formulation.
        const std::string hint =
            c->why.empty() ? std::string(" (a window the rollups do not cover yet)")
            : !t->router->enabled
                ? fmt::format(" ({}; .tiers auto reads whole minutes and hours from the rollups)",
                              c->why)
                : fmt::format(" ({}; per comm, cgroup or CPU, sum()/hist_merge()/"
                              "hist_percentile() of the measures over a ts window read the "
                              "rollups: docs/SQL.md, \"Which tier answers\")",
                              c->why);
        t->router->warn(fmt::format("{}: {} rows read from the finest tier so far{}", t->view,
                                    c->raw_rows, hint));
      }
      c->eof = false;
      return SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
      return set_error(t, fmt::format("{}: {}", t->view, sqlite3_errmsg(t->db)));
    }
    log_part(t, c);
    release(c);
    ++c->at;
  }
  c->eof = true;
  return SQLITE_OK;
}

// The narrowest [lo, hi) that the ts constraints allow, when every one of them has an exact
// integer bound; nullopt when one cannot be turned into one (text, NULL, a fraction on `=`).
std::optional<std::pair<std::int64_t, std::int64_t>> window_of(const table *t, const cursor *c) {
  std::int64_t lo = std::numeric_limits<std::int64_t>::min();
  std::int64_t hi = std::numeric_limits<std::int64_t>::max();
  for (std::size_t k = 0; k < c->cs.size(); ++k) {
    if (c->cs[k].column != t->ts) {
      continue;
    }
    sqlite3_value *v = c->args[k];
    const int type = sqlite3_value_numeric_type(v);
    double d = 0;
    if (type == SQLITE_INTEGER) {
      d = static_cast<double>(sqlite3_value_int64(v));
    } else if (type == SQLITE_FLOAT) {
      d = sqlite3_value_double(v);
    } else {
      return std::nullopt;
    }
    if (!(d > -9.2e18 && d < 9.2e18)) {
      return std::nullopt;
    }
    const bool whole = type == SQLITE_INTEGER;
    const std::int64_t i = whole ? sqlite3_value_int64(v) : 0;
    const auto fl = whole ? i : static_cast<std::int64_t>(std::floor(d));
    const auto ce = whole ? i : static_cast<std::int64_t>(std::ceil(d));
    switch (c->cs[k].op) {
    case SQLITE_INDEX_CONSTRAINT_EQ:
      if (fl != ce) {
        return std::nullopt;
      }
      lo = std::max(lo, fl);
      hi = std::min(hi, fl + 1);
      break;
    case SQLITE_INDEX_CONSTRAINT_GE:
      lo = std::max(lo, ce);
      break;
    case SQLITE_INDEX_CONSTRAINT_GT:
      lo = std::max(lo, fl + 1);
      break;
    case SQLITE_INDEX_CONSTRAINT_LE:
      hi = std::min(hi, fl + 1);
      break;
    case SQLITE_INDEX_CONSTRAINT_LT:
      hi = std::min(hi, ce);
      break;
    default:
      break;
    }
  }
  return std::pair{lo, hi};
}

} // namespace

result<std::optional<std::vector<tier_segment>>> plan_window(sqlite3 *db, std::int64_t lo,
                                                             std::int64_t hi) {
  using out_t = std::optional<std::vector<tier_segment>>;
  auto marks =
      sqlite::query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = "
                            "'intervals_late'");
  if (!marks) {
    return marks.err();
  }
  if (*marks == 0) {
    return out_t(); // before schema 10: late raw intervals are not marked
  }
  // Two subqueries: SQLite reads one end of the index for a lone min() or max(), but scans the
  // whole index for both in one (15 ms at a year of history).
  auto ext = sqlite::prepare_stmt(db, "SELECT (SELECT min(start_ns) FROM intervals), (SELECT "
                                      "max(start_ns) FROM intervals)");
  if (!ext) {
    return ext.err();
  }
  if (sqlite3_step(ext->get()) != SQLITE_ROW) {
    return make_error(sqlite3_errmsg(db));
  }
  if (sqlite3_column_type(ext->get(), 0) == SQLITE_NULL) {
    return out_t(std::vector<tier_segment>{}); // no data at all
  }
  lo = std::max<std::int64_t>(lo, sqlite3_column_int64(ext->get(), 0));
  const std::int64_t last = sqlite3_column_int64(ext->get(), 1);
  hi = last < hi ? last + 1 : hi;
  if (lo >= hi) {
    return out_t(std::vector<tier_segment>{});
  }
  tier_bounds b;
  auto tiers =
      sqlite::prepare_stmt(db, "SELECT tier, built_ns, cutoff_ns FROM tiers WHERE tier < 3");
  if (!tiers) {
    return tiers.err();
  }
  int rc = 0;
  int seen = 0;
  while ((rc = sqlite3_step(tiers->get())) == SQLITE_ROW) {
    const auto k = static_cast<std::size_t>(sqlite3_column_int64(tiers->get(), 0));
    if (k < 3) {
      b.built[k] = sqlite3_column_int64(tiers->get(), 1);
      b.cutoff[k] = sqlite3_column_int64(tiers->get(), 2);
      ++seen;
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  if (seen < 3) {
    return out_t();
  }
  // The same terms as the partial indexes intervals_late and intervals_late_1m, which SQLite
  // then reads: the minutes of raw intervals written late, and the 1-minute rollups of such
  // intervals not yet in their hour (schema 21), whose hours are not exact either.
  auto late = sqlite::prepare_stmt(
      db, "SELECT start_ns - start_ns % 60000000000 FROM intervals WHERE tier = 0 AND "
          "flags & 4 <> 0 AND start_ns >= ?1 AND start_ns < ?2 UNION SELECT start_ns FROM "
          "intervals WHERE tier = 1 AND flags & 4 <> 0 AND start_ns >= ?1 AND start_ns < ?2 "
          "ORDER BY 1");
  if (!late) {
    return late.err();
  }
  // A late minute matters to the hour it is in: look from the hour before lo on.
  sqlite3_bind_int64(late->get(), 1, lo - hour_ns);
  sqlite3_bind_int64(late->get(), 2, hi);
  std::vector<std::int64_t> minutes;
  while ((rc = sqlite3_step(late->get())) == SQLITE_ROW) {
    minutes.push_back(sqlite3_column_int64(late->get(), 0));
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out_t(plan_tiers(lo, hi, b, minutes));
}

namespace {

// The parts of a routed scan over [lo, hi): nullopt when the database cannot say (no tiers).
result<std::optional<std::vector<part>>> route(sqlite3 *db, std::int64_t lo, std::int64_t hi) {
  auto segs = plan_window(db, lo, hi);
  if (!segs) {
    return segs.err();
  }
  if (!*segs) {
    return std::optional<std::vector<part>>();
  }
  std::vector<part> parts;
  for (const auto &x : **segs) {
    parts.push_back({x.tier, x.from, x.to, true});
  }
  return std::optional<std::vector<part>>(std::move(parts));
}

int x_filter(cursor &cur, int /*idx_num*/, const char *idx_str, int argc, sqlite3_value **argv) {
  auto *c = &cur;
  auto *t = static_cast<table *>(cur.pVtab);
  release(c);
  c->clear_args();
  c->parts.clear();
  c->at = 0;
  c->rows = 0;
  c->raw_rows = 0;
  c->warned = false;
  c->why.clear();
  c->merge = false;
  c->eof = true;
  std::optional<plan_text> p;
  try {
    p = decode(idx_str);
  } catch (const std::exception &) {
    p.reset();
  }
  if (!p || static_cast<int>(p->cs.size()) != argc) {
    return set_error(t, "rsched_tiered: bad plan");
  }
  c->cs = p->cs;
  c->used = p->used;
  for (int i = 0; i < argc; ++i) {
    sqlite3_value *v = sqlite3_value_dup(argv[i]);
    if (v == nullptr) {
      return SQLITE_NOMEM;
    }
    c->args.push_back(v);
  }
  const tier_router *r = t->router;
  if (!p->route) {
    c->why = "it names a per-thread column";
  } else if (r != nullptr && !r->enabled) {
    c->why = "routing is off (.tiers finest)";
  } else if (r != nullptr && !r->statement_ok) {
    c->why = r->statement_why;
  } else if (t->ts < 0) {
    c->why = "the view has no ts";
  }
  std::optional<std::pair<std::int64_t, std::int64_t>> w;
  if (c->why.empty()) {
    w = window_of(t, c);
    if (!w) {
      c->why = "its ts condition is not a number";
    }
  }
  if (c->why.empty() && w->first < w->second) {
    auto parts = route(t->db, w->first, w->second);
    if (!parts) {
      return set_error(t, fmt::format("{}: {}", t->view, parts.err().msg));
    }
    if (*parts) {
      c->parts = std::move(**parts);
    } else {
      c->why = "the database has no tiers";
    }
  }
  if (!c->why.empty()) {
    c->parts = {part{0, 0, 0, false}};
  } else if (r != nullptr) {
    // Rows may be merged per key before the statement sees them when it only adds measures up
    // (its text says so) and every comparison it makes on ts came here as a constraint, which
    // each part applies itself: the statement then never reads a row's ts or dur.
    int ts_constraints = 0;
    for (const auto &k : c->cs) {
      ts_constraints += k.column == t->ts ? 1 : 0;
    }
    bool plain = true;
    bool measures = false; // merging without one would only drop rows
    for (std::size_t i = 0; i < t->columns.size() && i < 63; ++i) {
      const bool used = (c->used >> i & 1U) != 0;
      plain = plain && !(used && t->roles[i] == table::role::none && static_cast<int>(i) != t->ts);
      measures = measures ||
                 (used && (t->roles[i] == table::role::sum || t->roles[i] == table::role::merge));
    }
    c->merge = plain && measures && r->ts_terms == ts_constraints;
  }
  return advance(t, c);
}

int x_next(cursor &c) {
  return advance(static_cast<table *>(c.pVtab), &c);
}

bool x_eof(const cursor &c) {
  return c.eof;
}

int x_column(cursor &cur, sqlite3_context *ctx, int i) {
  auto *c = &cur;
  if (c->st == nullptr || i < 0 || i >= sqlite3_column_count(c->st)) {
    sqlite3_result_null(ctx);
    return SQLITE_OK;
  }
  sqlite3_result_value(ctx, sqlite3_column_value(c->st, i));
  return SQLITE_OK;
}

sqlite3_int64 x_rowid(const cursor &c) {
  return c.rowid;
}

// The module: sqlite::module makes its sqlite3_module (rsched/sqlite/module.hpp).
struct tiered_vtab {
  using table = struct table;
  using cursor = struct cursor;
  static constexpr auto connect = x_create;
  static constexpr auto best_index = x_best_index;
  static constexpr auto close = x_close;
  static constexpr auto filter = x_filter;
  static constexpr auto next = x_next;
  static constexpr auto eof = x_eof;
  static constexpr auto column = x_column;
  static constexpr auto rowid = x_rowid;
};

} // namespace

result<void> register_tiered_module(sqlite3 *db, tier_router *router) {
  return sqlite::create_module<tiered_vtab>(db, "rsched_tiered", router);
}

result<std::vector<std::string>> shadow_tiered_views(sqlite3 *db) {
  std::vector<std::string> out;
  auto late =
      sqlite::query_int(db, "SELECT count(*) FROM main.sqlite_master WHERE type = 'index' AND "
                            "name = 'intervals_late'");
  if (!late) {
    return late.err();
  }
  if (*late == 0) {
    return out; // before schema 10: the views as they are
  }
  auto st =
      sqlite::prepare_stmt(db, "SELECT v.name FROM main.sqlite_master AS v WHERE v.type = 'view' "
                               "AND EXISTS (SELECT 1 FROM main.sqlite_master AS a WHERE a.type = "
                               "'view' AND a.name = v.name || '_1m') AND EXISTS (SELECT 1 FROM "
                               "main.sqlite_master AS b WHERE b.type = 'view' AND b.name = v.name "
                               "|| '_1h') ORDER BY v.name");
  if (!st) {
    return st.err();
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back(sqlite::column_text(st->get(), 0));
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  for (const auto &v : out) {
    const std::string sql = fmt::format("CREATE VIRTUAL TABLE temp.{} USING rsched_tiered({})",
                                        sqlite::sql_ident(v), sqlite::sql_literal(v));
    if (auto r = sqlite::exec(db, sql.c_str()); !r) {
      return make_error(fmt::format("routing {}: {}", v, r.err().msg));
    }
  }
  return out;
}

} // namespace rsched::query::detail
