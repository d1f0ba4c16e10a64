#include "vtab_hist.hpp"

#include "rsched/sqlite/module.hpp"
#include "rsched/sqlite/quote.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/hist_pack.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <sqlite3.h>
#include <string>
#include <utility>
#include <vector>

namespace rsched::store::detail {

namespace {

enum column : int { c_interval, c_metric, c_thread, c_count, c_total, c_hist };

// idxNum bits: which constraints xFilter receives, in this order.
enum : int {
  iv_eq = 1,
  iv_ge = 2,
  iv_gt = 4,
  iv_le = 8,
  iv_lt = 16,
  metric_eq = 32,
  thread_eq = 64,
};
constexpr std::array<int, 7> bits = {iv_eq, iv_ge, iv_gt, iv_le, iv_lt, metric_eq, thread_eq};

// A pack read and decoded: `entries` point into `blob`.
struct decoded_pack {
  std::int64_t interval = 0;
  std::int64_t metric = 0;
  std::vector<std::uint8_t> blob;
  std::vector<pack_entry> entries;
};

// A cursor's two statements for one constraint shape (where_of).
struct statements {
  int shape = -1;
  sqlite::stmt_ptr rows;  // thread_hist_row
  sqlite::stmt_ptr packs; // thread_hist_pack
};

// SQLite opens a cursor for every run of a statement: a lookup of one thread of one interval
// run once per (interval, thread), as explain() and blame() seek their victims, would prepare
// two statements and decode the interval's pack every time. The table keeps both across
// cursors: statements no cursor uses, by shape, and the pack decoded last.
struct table : sqlite3_vtab {
  sqlite3 *db = nullptr;
  std::string schema; // the database the table is in: "main", or a host's name
  std::vector<statements> idle;
  std::shared_ptr<const decoded_pack> last;
  table() = default;
  table(const table &) = delete;
  table &operator=(const table &) = delete;
  table(table &&) = delete;
  table &operator=(table &&) = delete;
};

// Bounds from the constraints; a value that is not an integer narrows nothing (SQLite checks
// every constraint again: none is omitted).
struct bounds {
  std::int64_t iv_lo = std::numeric_limits<std::int64_t>::min();
  std::int64_t iv_hi = std::numeric_limits<std::int64_t>::max();
  bool metric = false;
  std::int64_t metric_v = 0;
  bool thread = false;
  std::int64_t thread_v = 0;
  bool empty = false;
};

struct cursor : sqlite3_vtab_cursor {
  statements st;          // taken from the table's idle ones or prepared; given back on close
  bool rows_left = false; // st.rows may have more
  bool in_rows = false;   // rows is positioned on a row
  bool eof = true;
  bounds b;
  std::int64_t rowid = 0;
  // The pack the entries are from. The table's `last` is kept across xFilter calls and
  // cursors, so one thread of one interval and metric after another (the views' LEFT JOIN of
  // a second metric by thread, or a lookup per victim) decodes the pack once and
  // binary-searches it.
  std::shared_ptr<const decoded_pack> pk;
  bool lookup = false;  // this filter is one thread of one interval and metric
  bool in_pack = false; // the entries of `pack` in [pos, end) are this filter's
  std::size_t pos = 0;  // the next entry of `pack`
  std::size_t end = 0;
  const pack_entry *entry = nullptr; // the current entry
  [[nodiscard]] bool holds(std::int64_t iv, std::int64_t metric) const {
    return pk && pk->interval == iv && pk->metric == metric;
  }
};

int x_connect(sqlite3 *db, void * /*aux*/, int argc, const char *const *argv, table **out,
              std::string &err) {
  if (argc < 3) {
    err = "rsched_thread_hist: no schema name";
    return SQLITE_ERROR;
  }
  const int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(interval_id INTEGER, metric INTEGER, "
                                          "thread_id INTEGER, count INTEGER, total INTEGER, "
                                          "hist BLOB)");
  if (rc != SQLITE_OK) {
    return rc;
  }
  auto *t = new (std::nothrow) table();
  if (t == nullptr) {
    return SQLITE_NOMEM;
  }
  t->db = db;
  t->schema = argv[1];
  sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
  *out = t;
  return SQLITE_OK;
}

int x_best_index(table & /*t*/, sqlite3_index_info &index_info) {
  sqlite3_index_info *info = &index_info;
  std::array<int, 7> at{};
  at.fill(-1);
  for (int i = 0; i < info->nConstraint; ++i) {
    const auto &c = info->aConstraint[i];
    if (c.usable == 0) {
      continue;
    }
    int bit = 0;
    if (c.iColumn == c_interval) {
      switch (c.op) {
      case SQLITE_INDEX_CONSTRAINT_EQ:
        bit = 0;
        break;
      case SQLITE_INDEX_CONSTRAINT_GE:
        bit = 1;
        break;
      case SQLITE_INDEX_CONSTRAINT_GT:
        bit = 2;
        break;
      case SQLITE_INDEX_CONSTRAINT_LE:
        bit = 3;
        break;
      case SQLITE_INDEX_CONSTRAINT_LT:
        bit = 4;
        break;
      default:
        continue;
      }
    } else if (c.iColumn == c_metric && c.op == SQLITE_INDEX_CONSTRAINT_EQ) {
      bit = 5;
    } else if (c.iColumn == c_thread && c.op == SQLITE_INDEX_CONSTRAINT_EQ) {
      bit = 6;
    } else {
      continue;
    }
    if (at[static_cast<std::size_t>(bit)] < 0) {
      at[static_cast<std::size_t>(bit)] = i;
    }
  }
  int idx = 0;
  int argv = 0;
  for (std::size_t k = 0; k < bits.size(); ++k) {
    if (at[k] >= 0) {
      idx |= bits[k];
      info->aConstraintUsage[at[k]].argvIndex = ++argv;
      info->aConstraintUsage[at[k]].omit = 0;
    }
  }
  info->idxNum = idx;
  // What EXPLAIN QUERY PLAN shows after the index number.
  std::string what;
  for (const auto &[bit, text] :
       {std::pair{iv_eq, "interval_id="}, std::pair{iv_ge, "interval_id>="},
        std::pair{iv_gt, "interval_id>"}, std::pair{iv_le, "interval_id<="},
        std::pair{iv_lt, "interval_id<"}, std::pair{metric_eq, "metric="},
        std::pair{thread_eq, "thread_id="}}) {
    if ((idx & bit) != 0) {
      what += what.empty() ? text : std::string(" AND ") + text;
    }
  }
  info->idxStr = sqlite3_mprintf("%s", what.empty() ? "all" : what.c_str());
  info->needToFreeIdxStr = 1;
  // The cost is the entries read: a pack is read whole whatever thread is asked for, except
  // for one thread of one interval and metric, found in the pack decoded for the previous
  // thread of the same interval.
  double cost = 1e9;
  double rows = 1e7;
  if ((idx & iv_eq) != 0) {
    rows = (idx & metric_eq) != 0 ? 1000 : 10000;
    cost = rows;
  } else if ((idx & (iv_ge | iv_gt)) != 0 && (idx & (iv_le | iv_lt)) != 0) {
    cost = 1e6;
    rows = 1e6;
  } else if ((idx & (iv_ge | iv_gt | iv_le | iv_lt)) != 0) {
    cost = 1e8;
    rows = 1e7;
  }
  if ((idx & thread_eq) != 0) {
    if ((idx & iv_eq) != 0 && (idx & metric_eq) != 0) {
      cost = 50; // a binary search in the pack decoded once per interval (cursor::pack)
      rows = 1;
    } else {
      rows /= 1000;
    }
  }
  info->estimatedCost = cost;
  info->estimatedRows = static_cast<sqlite3_int64>(rows);
  return SQLITE_OK;
}

// Gives the cursor's statements back to the table (a few shapes are kept; the rest finalized).
void give_back(table *t, cursor *c) {
  if (c->st.rows == nullptr && c->st.packs == nullptr) {
    return;
  }
  if (t->idle.size() < 8) {
    sqlite3_reset(c->st.rows.get());
    sqlite3_reset(c->st.packs.get());
    t->idle.push_back(std::move(c->st));
  }
  c->st = statements{}; // finalizes what the table did not keep
}

void x_close(table &t, cursor *c) {
  give_back(&t, c);
  delete c;
}

// The WHERE clause of a shape: the interval as one value or a range, the metric if given.
// ?1 ?2 interval bounds (or ?1 the interval), ?3 metric, ?4 thread.
std::string where_of(int shape, bool thread_column) {
  std::string w = (shape & iv_eq) != 0 ? "interval_id = ?1" : "interval_id BETWEEN ?1 AND ?2";
  if ((shape & metric_eq) != 0) {
    w += " AND metric = ?3";
  }
  if (thread_column && (shape & thread_eq) != 0) {
    w += " AND thread_id = ?4";
  }
  return w;
}

int prepare(table *t, const std::string &sql, sqlite::stmt_ptr &st) {
  sqlite3_stmt *raw = nullptr;
  const int rc = sqlite3_prepare_v3(t->db, sql.c_str(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
  st.reset(raw);
  if (rc != SQLITE_OK) {
    return sqlite::vtab_error(t, fmt::format("thread_hist: {}", sqlite3_errmsg(t->db)));
  }
  return SQLITE_OK;
}

bool as_int(sqlite3_value *v, std::int64_t &out) {
  if (sqlite3_value_type(v) != SQLITE_INTEGER) {
    return false;
  }
  out = sqlite3_value_int64(v);
  return true;
}

// Decodes the packs statement's current row into the cursor's pack (unless it is the one
// decoded last, by this cursor or another).
int load_pack(cursor *c) {
  auto *t = static_cast<table *>(c->pVtab);
  const std::int64_t iv = sqlite3_column_int64(c->st.packs.get(), 0);
  const std::int64_t metric = sqlite3_column_int64(c->st.packs.get(), 1);
  const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(c->st.packs.get(), 2));
  const std::span<const std::uint8_t> blob(
      p, static_cast<std::size_t>(sqlite3_column_bytes(c->st.packs.get(), 2)));
  // The same pack, unless it was written again since it was decoded (maintenance takes a
  // damaged entry out of its pack: damage.hpp).
  const auto same = [&](const std::shared_ptr<const decoded_pack> &k) {
    return k && k->interval == iv && k->metric == metric &&
           std::equal(blob.begin(), blob.end(), k->blob.begin(), k->blob.end());
  };
  if (same(c->pk)) {
    return SQLITE_OK;
  }
  if (same(t->last)) {
    c->pk = t->last;
    return SQLITE_OK;
  }
  c->pk.reset();
  auto d = std::make_shared<decoded_pack>();
  d->blob.assign(blob.begin(), blob.end());
  auto entries = unpack(std::span<const std::uint8_t>(d->blob));
  if (!entries) {
    return sqlite::vtab_error(t, fmt::format("thread_hist_pack interval {} metric {}: {}", iv,
                                             metric, entries.err().msg));
  }
  d->entries = std::move(*entries);
  d->interval = iv;
  d->metric = metric;
  c->pk = d;
  t->last = std::move(d);
  return SQLITE_OK;
}

// Moves to the next row: of thread_hist_row first, then the packs' entries; eof after the last.
int advance(cursor *c) {
  auto *t = static_cast<table *>(c->pVtab);
  if (c->rows_left) {
    const int rc = sqlite3_step(c->st.rows.get());
    if (rc == SQLITE_ROW) {
      c->in_rows = true;
      return SQLITE_OK;
    }
    c->in_rows = false;
    c->rows_left = false;
    if (rc != SQLITE_DONE) {
      return sqlite::vtab_error(t, fmt::format("thread_hist: {}", sqlite3_errmsg(t->db)));
    }
  }
  for (;;) {
    if (c->in_pack) {
      while (c->pos < c->end) {
        const pack_entry &e = c->pk->entries[c->pos++];
        if (!c->b.thread || e.thread_id == c->b.thread_v) {
          c->entry = &e;
          return SQLITE_OK;
        }
      }
      c->in_pack = false;
    }
    if (c->lookup) { // the filter's one entry (find_in_pack) is done, or there was none
      c->eof = true;
      return SQLITE_OK;
    }
    const int rc = sqlite3_step(c->st.packs.get());
    if (rc == SQLITE_DONE) {
      c->eof = true;
      return SQLITE_OK;
    }
    if (rc != SQLITE_ROW) {
      return sqlite::vtab_error(t, fmt::format("thread_hist: {}", sqlite3_errmsg(t->db)));
    }
    if (int r = load_pack(c); r != SQLITE_OK) {
      return r;
    }
    c->pos = 0;
    c->end = c->pk->entries.size();
    c->in_pack = true;
  }
}

// Positions a one-thread filter (b.thread_v of b.iv_lo, b.metric_v) on its entry of the pack:
// the pack decoded last when it is that one, else the one the packs statement finds.
int find_in_pack(cursor *c) {
  auto *t = static_cast<table *>(c->pVtab);
  const std::int64_t iv = c->b.iv_lo;
  const std::int64_t metric = c->b.metric_v;
  if (!c->holds(iv, metric)) {
    if (t->last && t->last->interval == iv && t->last->metric == metric) {
      c->pk = t->last;
    } else {
      const int rc = sqlite3_step(c->st.packs.get());
      if (rc == SQLITE_DONE) {
        c->pk.reset();
        return SQLITE_OK; // no pack: only thread_hist_row may have the row
      }
      if (rc != SQLITE_ROW) {
        return sqlite::vtab_error(t, fmt::format("thread_hist: {}", sqlite3_errmsg(t->db)));
      }
      if (int r = load_pack(c); r != SQLITE_OK) {
        return r;
      }
    }
  }
  const auto &entries = c->pk->entries;
  const auto it =
      std::lower_bound(entries.begin(), entries.end(), c->b.thread_v,
                       [](const pack_entry &e, std::int64_t id) { return e.thread_id < id; });
  c->in_pack = it != entries.end() && it->thread_id == c->b.thread_v;
  c->pos = static_cast<std::size_t>(it - entries.begin());
  c->end = c->pos + 1;
  return SQLITE_OK;
}

int x_filter(cursor &cur, int idx, const char * /*idx_str*/, int argc, sqlite3_value **argv) {
  auto *c = &cur;
  auto *t = static_cast<table *>(c->pVtab);
  bounds b;
  int a = 0;
  for (const int bit : bits) {
    if ((idx & bit) == 0) {
      continue;
    }
    if (a >= argc) {
      return sqlite::vtab_error(t, "thread_hist: constraint values missing");
    }
    sqlite3_value *v = argv[a++];
    std::int64_t x = 0;
    if (sqlite3_value_type(v) == SQLITE_NULL) {
      b.empty = true; // a comparison with NULL is never true
      continue;
    }
    if (!as_int(v, x)) {
      continue; // not an integer: SQLite's own check of the constraint decides
    }
    switch (bit) {
    case iv_eq:
      b.iv_lo = std::max(b.iv_lo, x);
      b.iv_hi = std::min(b.iv_hi, x);
      break;
    case iv_ge:
      b.iv_lo = std::max(b.iv_lo, x);
      break;
    case iv_gt:
      if (x == std::numeric_limits<std::int64_t>::max()) {
        b.empty = true;
      } else {
        b.iv_lo = std::max(b.iv_lo, x + 1);
      }
      break;
    case iv_le:
      b.iv_hi = std::min(b.iv_hi, x);
      break;
    case iv_lt:
      if (x == std::numeric_limits<std::int64_t>::min()) {
        b.empty = true;
      } else {
        b.iv_hi = std::min(b.iv_hi, x - 1);
      }
      break;
    case metric_eq:
      b.metric = true;
      b.metric_v = x;
      break;
    case thread_eq:
      b.thread = true;
      b.thread_v = x;
      break;
    default:
      break;
    }
  }
  // The statements' shape: one interval or a range; with the metric and thread if known.
  const int shape =
      (b.iv_lo == b.iv_hi ? iv_eq : 0) | (b.metric ? metric_eq : 0) | (b.thread ? thread_eq : 0);
  if (shape != c->st.shape) {
    give_back(t, c);
    const auto it = std::find_if(t->idle.begin(), t->idle.end(),
                                 [&](const statements &x) { return x.shape == shape; });
    if (it != t->idle.end()) {
      c->st = std::move(*it);
      t->idle.erase(it);
    } else {
      const std::string s = sqlite::sql_ident(t->schema);
      statements fresh;
      fresh.shape = shape;
      int rc = prepare(t,
                       fmt::format("SELECT interval_id, metric, thread_id, count, total, hist "
                                   "FROM {}.thread_hist_row WHERE {}",
                                   s, where_of(shape, true)),
                       fresh.rows);
      if (rc == SQLITE_OK) {
        rc = prepare(t,
                     fmt::format("SELECT interval_id, metric, data FROM {}.thread_hist_pack "
                                 "WHERE {}",
                                 s, where_of(shape, false)),
                     fresh.packs);
      }
      if (rc != SQLITE_OK) {
        return rc;
      }
      c->st = std::move(fresh);
    }
  }
  for (sqlite3_stmt *st : {c->st.rows.get(), c->st.packs.get()}) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, b.iv_lo);
    if ((shape & iv_eq) == 0) {
      sqlite3_bind_int64(st, 2, b.iv_hi);
    }
    if (b.metric) {
      sqlite3_bind_int64(st, 3, b.metric_v);
    }
  }
  if (b.thread) {
    sqlite3_bind_int64(c->st.rows.get(), 4, b.thread_v);
  }
  c->b = b;
  c->rowid = 0;
  c->eof = b.empty || b.iv_lo > b.iv_hi;
  c->in_rows = false;
  c->in_pack = false;
  c->rows_left = !c->eof;
  c->lookup = (shape & (iv_eq | metric_eq | thread_eq)) == (iv_eq | metric_eq | thread_eq);
  if (c->eof) {
    return SQLITE_OK;
  }
  if (c->lookup) {
    if (int rc = find_in_pack(c); rc != SQLITE_OK) {
      return rc;
    }
  }
  return advance(c);
}

int x_next(cursor &cur) {
  auto *c = &cur;
  ++c->rowid;
  return advance(c);
}

bool x_eof(const cursor &c) {
  return c.eof;
}

int x_column(cursor &cur, sqlite3_context *ctx, int col) {
  auto *c = &cur;
  if (c->in_rows) {
    sqlite3_result_value(ctx, sqlite3_column_value(c->st.rows.get(), col));
    return SQLITE_OK;
  }
  switch (col) {
  case c_interval:
    sqlite3_result_int64(ctx, c->pk->interval);
    break;
  case c_metric:
    sqlite3_result_int64(ctx, c->pk->metric);
    break;
  case c_thread:
    sqlite3_result_int64(ctx, c->entry->thread_id);
    break;
  case c_count:
    sqlite3_result_int64(ctx, c->entry->count);
    break;
  case c_total:
    sqlite3_result_int64(ctx, c->entry->total);
    break;
  case c_hist:
    sqlite3_result_blob(ctx, c->entry->hist.data(), static_cast<int>(c->entry->hist.size()),
                        SQLITE_TRANSIENT);
    break;
  default:
    sqlite3_result_null(ctx);
  }
  return SQLITE_OK;
}

sqlite3_int64 x_rowid(const cursor &c) {
  return c.rowid;
}

// The module: sqlite::module makes the sqlite3_module of it (rsched/sqlite/module.hpp).
struct hist_vtab {
  using table = struct table;
  using cursor = struct cursor;
  static constexpr auto connect = x_connect;
  static constexpr auto best_index = x_best_index;
  static constexpr auto close = x_close;
  static constexpr auto filter = x_filter;
  static constexpr auto next = x_next;
  static constexpr auto eof = x_eof;
  static constexpr auto column = x_column;
  static constexpr auto rowid = x_rowid;
};

} // namespace

result<void> register_hist_module(sqlite3 *db) {
  return sqlite::create_module<hist_vtab>(db, "rsched_thread_hist");
}

} // namespace rsched::store::detail
