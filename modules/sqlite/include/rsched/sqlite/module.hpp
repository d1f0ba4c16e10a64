#pragma once
// Read-only virtual tables from a class, in the spirit of Perfetto's sqlite::Module<Impl>: a
// module writes only its own logic, with its own table and cursor types; the sqlite3_module, the
// casts from SQLite's base structs, and the error plumbing are here once. rsched's four modules
// use it: thread_hist and thread_blame (store), the table functions and the tier router (query).
//
// Impl provides
//   using table = T;   // derived from sqlite3_vtab
//   using cursor = C;  // derived from sqlite3_vtab_cursor
//   static int connect(sqlite3 *db, void *aux, int argc, const char *const *argv, table **out,
//                      std::string &err);  // declare the table, make it; err: SQLite's *pzErr
//   static int best_index(table &t, sqlite3_index_info &info);
//   static int filter(cursor &c, int idx_num, const char *idx_str, int argc,
//                     sqlite3_value **argv);
//   static int next(cursor &c);
//   static bool eof(const cursor &c);
//   static int column(cursor &c, sqlite3_context *ctx, int col);
//   static sqlite3_int64 rowid(const cursor &c);
// and may provide
//   static constexpr bool eponymous_only = true;  // a table function: no CREATE VIRTUAL TABLE
//   static void close(table &t, cursor *c);       // default: delete c
// Cursors are made by `new cursor()`; a cursor finds its table through pVtab.
// A C++ exception escaping a callback (a bad_alloc, a library's throw) never unwinds through
// SQLite's C frames: it becomes the statement's error (SQLITE_NOMEM for bad_alloc).
#include "rsched/base/result.hpp"

#include <exception>
#include <new>
#include <sqlite3.h>
#include <string>

namespace rsched::sqlite {

// Sets `msg` as the virtual table's error message; returns SQLITE_ERROR.
inline int vtab_error(sqlite3_vtab *vt, const std::string &msg) {
  sqlite3_free(vt->zErrMsg);
  vt->zErrMsg = sqlite3_mprintf("%s", msg.c_str());
  return SQLITE_ERROR;
}

template <class Impl> class module {
public:
  using table = typename Impl::table;
  using cursor = typename Impl::cursor;

  // The sqlite3_module of Impl, for sqlite3_create_module_v2.
  static const sqlite3_module &get() {
    static const sqlite3_module m = make();
    return m;
  }

private:
  static table &tab(sqlite3_vtab *v) { return *static_cast<table *>(v); }
  static cursor &cur(sqlite3_vtab_cursor *c) { return *static_cast<cursor *>(c); }

  template <class F> static int guarded(sqlite3_vtab *vt, F &&f) noexcept {
    try {
      return f();
    } catch (const std::bad_alloc &) {
      return SQLITE_NOMEM;
    } catch (const std::exception &e) {
      return vtab_error(vt, e.what());
    }
  }

  static int x_connect(sqlite3 *db, void *aux, int argc, const char *const *argv,
                       sqlite3_vtab **out, char **err) noexcept {
    try {
      table *t = nullptr;
      std::string msg;
      const int rc = Impl::connect(db, aux, argc, argv, &t, msg);
      if (rc != SQLITE_OK) {
        delete t;
        if (!msg.empty()) {
          *err = sqlite3_mprintf("%s", msg.c_str());
        }
        return rc;
      }
      *out = t;
      return SQLITE_OK;
    } catch (const std::bad_alloc &) {
      return SQLITE_NOMEM;
    } catch (const std::exception &e) {
      *err = sqlite3_mprintf("%s", e.what());
      return SQLITE_ERROR;
    }
  }
  static int x_disconnect(sqlite3_vtab *vt) noexcept {
    delete static_cast<table *>(vt);
    return SQLITE_OK;
  }
  static int x_best_index(sqlite3_vtab *vt, sqlite3_index_info *info) noexcept {
    return guarded(vt, [&] { return Impl::best_index(tab(vt), *info); });
  }
  static int x_open(sqlite3_vtab * /*vt*/, sqlite3_vtab_cursor **out) noexcept {
    auto *c = new (std::nothrow) cursor();
    if (c == nullptr) {
      return SQLITE_NOMEM;
    }
    *out = c;
    return SQLITE_OK;
  }
  static int x_close(sqlite3_vtab_cursor *c) noexcept {
    if constexpr (requires(table & t, cursor * p) { Impl::close(t, p); }) {
      Impl::close(tab(c->pVtab), &cur(c));
    } else {
      delete &cur(c);
    }
    return SQLITE_OK;
  }
  static int x_filter(sqlite3_vtab_cursor *c, int idx_num, const char *idx_str, int argc,
                      sqlite3_value **argv) noexcept {
    return guarded(c->pVtab, [&] { return Impl::filter(cur(c), idx_num, idx_str, argc, argv); });
  }
  static int x_next(sqlite3_vtab_cursor *c) noexcept {
    return guarded(c->pVtab, [&] { return Impl::next(cur(c)); });
  }
  static int x_eof(sqlite3_vtab_cursor *c) noexcept { return Impl::eof(cur(c)) ? 1 : 0; }
  static int x_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col) noexcept {
    return guarded(c->pVtab, [&] { return Impl::column(cur(c), ctx, col); });
  }
  static int x_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *out) noexcept {
    *out = Impl::rowid(cur(c));
    return SQLITE_OK;
  }

  static sqlite3_module make() {
    sqlite3_module m{};
    m.iVersion = 0;
    if constexpr (requires { Impl::eponymous_only; }) {
      m.xCreate = Impl::eponymous_only ? nullptr : x_connect;
    } else {
      m.xCreate = x_connect;
    }
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
    return m; // read-only: no xUpdate, no transactions
  }
};

// Registers Impl's module under `name`; `aux` reaches Impl::connect.
template <class Impl>
result<void> create_module(sqlite3 *db, const char *name, void *aux = nullptr) {
  if (sqlite3_create_module_v2(db, name, &module<Impl>::get(), aux, nullptr) != SQLITE_OK) {
    return make_error(std::string("registering ") + name + ": " + sqlite3_errmsg(db));
  }
  return {};
}

} // namespace rsched::sqlite
