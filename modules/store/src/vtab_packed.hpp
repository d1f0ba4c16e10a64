#pragma once
// The machinery of the virtual tables over a packed raw tier (thread_blame, v13; thread_wakeup
// and thread_blocked, v18): a read-only table over a b-tree table of rows (the rollup tiers, and
// raw rows written before the packing) and a table of packs (the raw tier, one blob per
// interval), with interval_id first and thread_id second. Equality and ranges on interval_id
// reach both tables' primary keys (a view's `CROSS JOIN <table> AS x ON x.interval_id = i.id`
// reads one pack per interval); equality on thread_id with one on interval_id binary-searches
// the pack decoded last (kept across cursors: SQLite opens one per run of a statement); other
// constraints are checked by SQLite on every row. Writes go to the two tables (the writer,
// maintenance), never through the module.
//
// A Codec says what a pack holds:
//   using entries = ...;  // one decoded pack's rows, in thread_id order
//   static int spec(int argc, const char *const *argv, packed_spec &out, std::string &err);
//   static result<void> unpack(std::span<const std::uint8_t>, std::size_t width, entries &);
//   static std::size_t size(const entries &, std::size_t width);
//   static std::int64_t thread(const entries &, std::size_t width, std::size_t i);
//   static void column(sqlite3_context *, const entries &, std::size_t width, std::size_t i,
//                      int col); // col >= 1 (0 is interval_id)
// packed_vtab<Codec> is then a module's implementation for sqlite::create_module.
#include "rsched/base/result.hpp"
#include "rsched/sqlite/module.hpp"
#include "rsched/sqlite/quote.hpp"
#include "rsched/sqlite/statement.hpp"

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

// What a codec's spec() takes from the module's arguments.
struct packed_spec {
  std::string declare;     // the CREATE TABLE for sqlite3_declare_vtab
  std::string row_table;   // the b-tree table of rows
  std::string pack_table;  // the table of packs (interval_id, rows, data)
  std::string row_columns; // the row table's columns, in the virtual table's order
  std::size_t width = 0;   // the codec's own (rsched_packed_rows: the columns after interval_id)
};

namespace packed_detail {

// idxNum bits: which constraints xFilter receives, in this order.
enum : int {
  iv_eq = 1,
  iv_ge = 2,
  iv_gt = 4,
  iv_le = 8,
  iv_lt = 16,
  thread_eq = 32,
};
constexpr std::array<int, 6> bits = {iv_eq, iv_ge, iv_gt, iv_le, iv_lt, thread_eq};

// A cursor's two statements for one constraint shape (where_of).
struct statements {
  int shape = -1;
  sqlite::stmt_ptr rows;  // <table>_row
  sqlite::stmt_ptr packs; // <table>_pack
};

// Bounds from the constraints; a value that is not an integer narrows nothing (SQLite checks
// every constraint again: none is omitted).
struct bounds {
  std::int64_t iv_lo = std::numeric_limits<std::int64_t>::min();
  std::int64_t iv_hi = std::numeric_limits<std::int64_t>::max();
  bool thread = false;
  std::int64_t thread_v = 0;
  bool empty = false;
};

} // namespace packed_detail

template <class Codec> struct packed_vtab {
  using statements = packed_detail::statements;
  using bounds = packed_detail::bounds;
  static constexpr int iv_eq = packed_detail::iv_eq;
  static constexpr int iv_ge = packed_detail::iv_ge;
  static constexpr int iv_gt = packed_detail::iv_gt;
  static constexpr int iv_le = packed_detail::iv_le;
  static constexpr int iv_lt = packed_detail::iv_lt;
  static constexpr int thread_eq = packed_detail::thread_eq;
  static constexpr auto bits = packed_detail::bits;
  static constexpr int c_interval = 0;
  static constexpr int c_thread = 1;

  // A pack read and decoded.
  struct decoded_pack {
    std::int64_t interval = 0;
    typename Codec::entries entries;
  };

  // As thread_hist's table (vtab_hist.cpp): statements no cursor uses, by shape, and the pack
  // decoded last, kept across cursors.
  struct table : sqlite3_vtab {
    sqlite3 *db = nullptr;
    std::string schema; // the database the table is in: "main", or a host's name
    std::string name;   // the virtual table's name (messages)
    std::string row_table;
    std::string pack_table;
    std::string row_columns;
    std::size_t width = 0;
    std::vector<statements> idle;
    std::shared_ptr<const decoded_pack> last;
    table() = default;
    table(const table &) = delete;
    table &operator=(const table &) = delete;
    table(table &&) = delete;
    table &operator=(table &&) = delete;
  };

  struct cursor : sqlite3_vtab_cursor {
    statements st;
    bool rows_left = false; // st.rows may have more
    bool in_rows = false;   // st.rows is positioned on a row
    bool eof = true;
    bounds b;
    std::int64_t rowid = 0;
    std::shared_ptr<const decoded_pack> pk;
    bool lookup = false;  // this filter is one thread of one interval
    bool in_pack = false; // the entries of `pk` in [pos, end) are this filter's
    std::size_t pos = 0;
    std::size_t end = 0;
    std::size_t entry = 0; // the entry of `pk` the cursor is on (when not in_rows)
    [[nodiscard]] bool holds(std::int64_t iv) const { return pk && pk->interval == iv; }
  };

  static int connect(sqlite3 *db, void * /*aux*/, int argc, const char *const *argv, table **out,
                     std::string &err) {
    if (argc < 3) {
      err = "packed table: no schema name";
      return SQLITE_ERROR;
    }
    packed_spec spec;
    if (const int rc = Codec::spec(argc, argv, spec, err); rc != SQLITE_OK) {
      return rc;
    }
    const int rc = sqlite3_declare_vtab(db, spec.declare.c_str());
    if (rc != SQLITE_OK) {
      return rc;
    }
    auto *t = new (std::nothrow) table();
    if (t == nullptr) {
      return SQLITE_NOMEM;
    }
    t->db = db;
    t->schema = argv[1];
    t->name = argv[2];
    t->row_table = std::move(spec.row_table);
    t->pack_table = std::move(spec.pack_table);
    t->row_columns = std::move(spec.row_columns);
    t->width = spec.width;
    sqlite3_vtab_config(db, SQLITE_VTAB_INNOCUOUS);
    *out = t;
    return SQLITE_OK;
  }

  static int best_index(table & /*t*/, sqlite3_index_info &index_info) {
    sqlite3_index_info *info = &index_info;
    std::array<int, bits.size()> at{};
    at.fill(-1);
    for (int i = 0; i < info->nConstraint; ++i) {
      const auto &c = info->aConstraint[i];
      if (c.usable == 0) {
        continue;
      }
      int bit = -1;
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
          break;
        }
      } else if (c.iColumn == c_thread && c.op == SQLITE_INDEX_CONSTRAINT_EQ) {
        bit = 5;
      }
      if (bit >= 0 && at[static_cast<std::size_t>(bit)] < 0) {
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
    std::string what;
    for (const auto &[bit, text] :
         {std::pair{iv_eq, "interval_id="}, std::pair{iv_ge, "interval_id>="},
          std::pair{iv_gt, "interval_id>"}, std::pair{iv_le, "interval_id<="},
          std::pair{iv_lt, "interval_id<"}, std::pair{thread_eq, "thread_id="}}) {
      if ((idx & bit) != 0) {
        what += what.empty() ? text : std::string(" AND ") + text;
      }
    }
    info->idxStr = sqlite3_mprintf("%s", what.empty() ? "all" : what.c_str());
    info->needToFreeIdxStr = 1;
    // The cost is the entries read: a pack is read whole whatever thread is asked for, except
    // for one thread of one interval, found in the pack decoded for the previous thread.
    double cost = 1e9;
    double rows = 1e7;
    if ((idx & iv_eq) != 0) {
      rows = 1000;
      cost = rows;
    } else if ((idx & (iv_ge | iv_gt)) != 0 && (idx & (iv_le | iv_lt)) != 0) {
      cost = 1e6;
      rows = 1e6;
    } else if ((idx & (iv_ge | iv_gt | iv_le | iv_lt)) != 0) {
      cost = 1e8;
      rows = 1e7;
    }
    if ((idx & thread_eq) != 0) {
      if ((idx & iv_eq) != 0) {
        cost = 50;
        rows = 4;
      } else {
        rows /= 100;
      }
    }
    info->estimatedCost = cost;
    info->estimatedRows = static_cast<sqlite3_int64>(rows);
    return SQLITE_OK;
  }

  static void give_back(table *t, cursor *c) {
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

  static void close(table &t, cursor *c) {
    give_back(&t, c);
    delete c;
  }

  // ?1 ?2 interval bounds (or ?1 the interval), ?3 thread.
  static std::string where_of(int shape, bool thread_column) {
    std::string w = (shape & iv_eq) != 0 ? "interval_id = ?1" : "interval_id BETWEEN ?1 AND ?2";
    if (thread_column && (shape & thread_eq) != 0) {
      w += " AND thread_id = ?3";
    }
    return w;
  }

  static int prepare(table *t, const std::string &sql, sqlite::stmt_ptr &st) {
    sqlite3_stmt *raw = nullptr;
    const int rc = sqlite3_prepare_v3(t->db, sql.c_str(), static_cast<int>(sql.size()),
                                      SQLITE_PREPARE_PERSISTENT, &raw, nullptr);
    st.reset(raw);
    if (rc != SQLITE_OK) {
      return sqlite::vtab_error(t, fmt::format("{}: {}", t->name, sqlite3_errmsg(t->db)));
    }
    return SQLITE_OK;
  }

  static bool as_int(sqlite3_value *v, std::int64_t &out) {
    if (sqlite3_value_type(v) != SQLITE_INTEGER) {
      return false;
    }
    out = sqlite3_value_int64(v);
    return true;
  }

  // Decodes the packs statement's current row into the cursor's pack (unless it is the one
  // decoded last, by this cursor or another).
  static int load_pack(cursor *c) {
    auto *t = static_cast<table *>(c->pVtab);
    const std::int64_t iv = sqlite3_column_int64(c->st.packs.get(), 0);
    if (c->holds(iv)) {
      return SQLITE_OK;
    }
    if (t->last && t->last->interval == iv) {
      c->pk = t->last;
      return SQLITE_OK;
    }
    c->pk.reset();
    auto d = std::make_shared<decoded_pack>();
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(c->st.packs.get(), 1));
    const auto n = static_cast<std::size_t>(sqlite3_column_bytes(c->st.packs.get(), 1));
    if (auto r = Codec::unpack(std::span<const std::uint8_t>(p, n), t->width, d->entries); !r) {
      return sqlite::vtab_error(t,
                                fmt::format("{} interval {}: {}", t->pack_table, iv, r.err().msg));
    }
    d->interval = iv;
    c->pk = d;
    t->last = std::move(d);
    return SQLITE_OK;
  }

  // Moves to the next row: of the row table first, then the packs' rows; eof after the last.
  static int advance(cursor *c) {
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
        return sqlite::vtab_error(t, fmt::format("{}: {}", t->name, sqlite3_errmsg(t->db)));
      }
    }
    for (;;) {
      if (c->in_pack) {
        while (c->pos < c->end) {
          const std::size_t i = c->pos++;
          if (!c->b.thread || Codec::thread(c->pk->entries, t->width, i) == c->b.thread_v) {
            c->entry = i;
            return SQLITE_OK;
          }
        }
        c->in_pack = false;
      }
      if (c->lookup) {
        c->eof = true;
        return SQLITE_OK;
      }
      const int rc = sqlite3_step(c->st.packs.get());
      if (rc == SQLITE_DONE) {
        c->eof = true;
        return SQLITE_OK;
      }
      if (rc != SQLITE_ROW) {
        return sqlite::vtab_error(t, fmt::format("{}: {}", t->name, sqlite3_errmsg(t->db)));
      }
      if (int r = load_pack(c); r != SQLITE_OK) {
        return r;
      }
      c->pos = 0;
      c->end = Codec::size(c->pk->entries, t->width);
      c->in_pack = true;
    }
  }

  // Positions a one-thread filter (b.thread_v of b.iv_lo) on its entries of the pack: the pack
  // decoded last when it is that one, else the one the packs statement finds.
  static int find_in_pack(cursor *c) {
    auto *t = static_cast<table *>(c->pVtab);
    const std::int64_t iv = c->b.iv_lo;
    if (!c->holds(iv)) {
      if (t->last && t->last->interval == iv) {
        c->pk = t->last;
      } else {
        const int rc = sqlite3_step(c->st.packs.get());
        if (rc == SQLITE_DONE) {
          c->pk.reset();
          return SQLITE_OK; // no pack: only the row table may have the rows
        }
        if (rc != SQLITE_ROW) {
          return sqlite::vtab_error(t, fmt::format("{}: {}", t->name, sqlite3_errmsg(t->db)));
        }
        if (int r = load_pack(c); r != SQLITE_OK) {
          return r;
        }
      }
    }
    // Entries are in thread_id order (each codec's unpack checks): a binary search.
    const auto &v = c->pk->entries;
    const std::size_t w = t->width;
    const std::size_t n = Codec::size(v, w);
    std::size_t lo = 0;
    std::size_t hi = n;
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (Codec::thread(v, w, mid) < c->b.thread_v) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    std::size_t end = lo;
    while (end < n && Codec::thread(v, w, end) == c->b.thread_v) {
      ++end;
    }
    c->in_pack = lo != end;
    c->pos = lo;
    c->end = end;
    return SQLITE_OK;
  }

  static int filter(cursor &cur, int idx, const char * /*idx_str*/, int argc,
                    sqlite3_value **argv) {
    auto *c = &cur;
    auto *t = static_cast<table *>(c->pVtab);
    bounds b;
    int a = 0;
    for (const int bit : bits) {
      if ((idx & bit) == 0) {
        continue;
      }
      if (a >= argc) {
        return sqlite::vtab_error(t, fmt::format("{}: constraint values missing", t->name));
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
      case thread_eq:
        b.thread = true;
        b.thread_v = x;
        break;
      default:
        break;
      }
    }
    const int shape = (b.iv_lo == b.iv_hi ? iv_eq : 0) | (b.thread ? thread_eq : 0);
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
                         fmt::format("SELECT {} FROM {}.{} WHERE {}", t->row_columns, s,
                                     t->row_table, where_of(shape, true)),
                         fresh.rows);
        if (rc == SQLITE_OK) {
          rc = prepare(t,
                       fmt::format("SELECT interval_id, data FROM {}.{} WHERE {}", s, t->pack_table,
                                   where_of(shape, false)),
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
    }
    if (b.thread) {
      sqlite3_bind_int64(c->st.rows.get(), 3, b.thread_v);
    }
    c->b = b;
    c->rowid = 0;
    c->eof = b.empty || b.iv_lo > b.iv_hi;
    c->in_rows = false;
    c->in_pack = false;
    c->rows_left = !c->eof;
    c->lookup = (shape & (iv_eq | thread_eq)) == (iv_eq | thread_eq);
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

  static int next(cursor &cur) {
    auto *c = &cur;
    ++c->rowid;
    return advance(c);
  }

  static bool eof(const cursor &c) { return c.eof; }

  static sqlite3_int64 rowid(const cursor &c) { return c.rowid; }

  static int column(cursor &cur, sqlite3_context *ctx, int col) {
    auto *c = &cur;
    if (c->in_rows) {
      sqlite3_result_value(ctx, sqlite3_column_value(c->st.rows.get(), col));
      return SQLITE_OK;
    }
    if (col == c_interval) {
      sqlite3_result_int64(ctx, c->pk->interval);
    } else {
      const auto *t = static_cast<const table *>(c->pVtab);
      Codec::column(ctx, c->pk->entries, t->width, c->entry, col);
    }
    return SQLITE_OK;
  }
};

} // namespace rsched::store::detail
