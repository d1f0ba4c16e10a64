// rsched::sqlite::module: a virtual table from a class, and what becomes of a C++ exception
// thrown inside one of its callbacks (an error of the statement, never an unwind through SQLite).
#include "rsched/sqlite/functions.hpp"
#include "rsched/sqlite/module.hpp"
#include "rsched/sqlite/statement.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <new>
#include <sqlite3.h>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// counter(n): the rows 1..n of column `x`; n = -1 throws a runtime_error in filter, n = -2 a
// bad_alloc; the class's `close` counts the cursors it closed.
struct counter_table : sqlite3_vtab {};
struct counter_cursor : sqlite3_vtab_cursor {
  sqlite3_int64 at = 1;
  sqlite3_int64 n = 0;
};
int closed_cursors = 0;

struct counter_vtab {
  using table = counter_table;
  using cursor = counter_cursor;
  static constexpr bool eponymous_only = true;
  static int connect(sqlite3 *db, void * /*aux*/, int /*argc*/, const char *const * /*argv*/,
                     table **out, std::string & /*err*/) {
    if (const int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(x INTEGER, n HIDDEN)");
        rc != SQLITE_OK) {
      return rc;
    }
    *out = new table();
    return SQLITE_OK;
  }
  static int best_index(table & /*t*/, sqlite3_index_info &info) {
    for (int i = 0; i < info.nConstraint; ++i) {
      if (info.aConstraint[i].iColumn == 1 && info.aConstraint[i].usable != 0 &&
          info.aConstraint[i].op == SQLITE_INDEX_CONSTRAINT_EQ) {
        info.aConstraintUsage[i].argvIndex = 1;
        info.aConstraintUsage[i].omit = 1;
        info.idxNum = 1;
        return SQLITE_OK;
      }
    }
    return SQLITE_CONSTRAINT;
  }
  static void close(table & /*t*/, cursor *c) {
    ++closed_cursors;
    delete c;
  }
  static int filter(cursor &c, int /*idx_num*/, const char * /*idx_str*/, int argc,
                    sqlite3_value **argv) {
    c.n = argc > 0 ? sqlite3_value_int64(argv[0]) : 0;
    if (c.n == -1) {
      throw std::runtime_error("counter: a thrown error");
    }
    if (c.n == -2) {
      throw std::bad_alloc();
    }
    c.at = 1;
    return SQLITE_OK;
  }
  static int next(cursor &c) {
    ++c.at;
    return SQLITE_OK;
  }
  static bool eof(const cursor &c) { return c.at > c.n; }
  static int column(cursor &c, sqlite3_context *ctx, int /*col*/) {
    sqlite3_result_int64(ctx, c.at);
    return SQLITE_OK;
  }
  static sqlite3_int64 rowid(const cursor &c) { return c.at; }
};

struct db_closer {
  void operator()(sqlite3 *db) const { sqlite3_close(db); }
};

std::unique_ptr<sqlite3, db_closer> open_memory() {
  sqlite3 *db = nullptr;
  REQUIRE(sqlite3_open(":memory:", &db) == SQLITE_OK);
  return std::unique_ptr<sqlite3, db_closer>(db);
}

// The rows of `sql`'s first column, or the error.
std::vector<std::int64_t> ints(sqlite3 *db, const std::string &sql, std::string &err) {
  std::vector<std::int64_t> out;
  auto st = rsched::sqlite::prepare_stmt(db, sql);
  if (!st) {
    err = st.err().msg;
    return out;
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    out.push_back(sqlite3_column_int64(st->get(), 0));
  }
  if (rc != SQLITE_DONE) {
    err = sqlite3_errmsg(db);
  }
  return out;
}

} // namespace

TEST_CASE("sqlite::module: a table function from a class returns its rows", "[sqlite]") {
  auto db = open_memory();
  REQUIRE(rsched::sqlite::create_module<counter_vtab>(db.get(), "counter").ok());
  std::string err;
  CHECK(ints(db.get(), "SELECT x FROM counter(3)", err) == std::vector<std::int64_t>{1, 2, 3});
  CHECK(err.empty());
  CHECK(ints(db.get(), "SELECT sum(x) FROM counter(100)", err) == std::vector<std::int64_t>{5050});
  // Eponymous only: no CREATE VIRTUAL TABLE of it.
  CHECK_FALSE(rsched::sqlite::exec(db.get(), "CREATE VIRTUAL TABLE c USING counter").ok());
}

TEST_CASE("sqlite::module: an exception in a callback is the statement's error", "[sqlite]") {
  auto db = open_memory();
  REQUIRE(rsched::sqlite::create_module<counter_vtab>(db.get(), "counter").ok());
  std::string err;
  const int closed_before = closed_cursors;
  CHECK(ints(db.get(), "SELECT x FROM counter(-1)", err).empty());
  CHECK(err == "counter: a thrown error");
  err.clear();
  CHECK(ints(db.get(), "SELECT x FROM counter(-2)", err).empty());
  CHECK(err == "out of memory");
  // The connection still works, and the cursors were closed through the class's close.
  err.clear();
  CHECK(ints(db.get(), "SELECT x FROM counter(2)", err) == std::vector<std::int64_t>{1, 2});
  CHECK(err.empty());
  CHECK(closed_cursors == closed_before + 3);
}

TEST_CASE("sqlite::define registers a table of scalar functions", "[sqlite]") {
  auto db = open_memory();
  static constexpr rsched::sqlite::scalar_def fns[] = {
      {"twice", 1,
       [](sqlite3_context *ctx, int, sqlite3_value **argv) {
         sqlite3_result_int64(ctx, 2 * sqlite3_value_int64(argv[0]));
       }},
      {"ns_of", 1,
       [](sqlite3_context *ctx, int, sqlite3_value **argv) {
         auto ns = rsched::sqlite::duration_arg(argv[0], "ns_of");
         if (!ns) {
           rsched::sqlite::result_error(ctx, ns.err().msg);
           return;
         }
         sqlite3_result_int64(ctx, *ns);
       }},
  };
  REQUIRE(rsched::sqlite::define(db.get(), fns, nullptr).ok());
  std::string err;
  CHECK(ints(db.get(), "SELECT twice(21)", err) == std::vector<std::int64_t>{42});
  CHECK(ints(db.get(), "SELECT ns_of('1.5ms')", err) == std::vector<std::int64_t>{1'500'000});
  CHECK(err.empty());
  CHECK(ints(db.get(), "SELECT ns_of(x'00')", err).empty());
  CHECK(err == "ns_of: expected a duration (text or ns)");
}
