#pragma once
// rsched::sqlite: the one binding layer over SQLite that the store and query modules share.
// Statements run through SQLiteCpp (SQLite::Database, SQLite::Statement, SQLite::Transaction)
// wherever a connection is a SQLite::Database; the raw C API is kept only where SQLiteCpp cannot
// do the job:
//   - inside SQL functions and virtual tables, whose callbacks receive a raw sqlite3 * /
//     sqlite3_context / sqlite3_value;
//   - on connections handed around as a raw sqlite3 * (store/schema.hpp, the rollups);
//   - where a statement's tail or error offset is needed (query::reader::exec runs a script).
// Those places use stmt_ptr / prepare_stmt / exec / query_int from here.
// Error model, the same everywhere: these helpers return rsched::result with SQLite's message;
// SQLiteCpp exceptions are caught at a module's API boundary (sqlite_guard) and turned into the
// same result. No exception crosses a public function of store or query.
#include "rsched/base/result.hpp"

#include <SQLiteCpp/Exception.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <sqlite3.h>
#include <string>
#include <utility>

namespace rsched::sqlite {

// Finalizes a prepared statement (sqlite3_finalize accepts nullptr).
struct stmt_finalizer {
  void operator()(sqlite3_stmt *s) const noexcept { sqlite3_finalize(s); }
};
// An owned raw prepared statement.
using stmt_ptr = std::unique_ptr<sqlite3_stmt, stmt_finalizer>;

// Prepares the first statement of `sql`; the error message is SQLite's.
inline result<stmt_ptr> prepare_stmt(sqlite3 *db, const std::string &sql) {
  sqlite3_stmt *raw = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &raw, nullptr) !=
      SQLITE_OK) {
    sqlite3_finalize(raw);
    return make_error(sqlite3_errmsg(db));
  }
  return stmt_ptr(raw);
}

// Runs one statement that returns a single integer (a PRAGMA); finalizes it before returning.
result<std::int64_t> query_int(sqlite3 *db, const char *sql);

// Runs statements without results (sqlite3_exec). The error message is SQLite's.
result<void> exec(sqlite3 *db, const char *sql);

// Column `i` as exact bytes (embedded NULs and invalid UTF-8 included); "" for NULL.
inline std::string column_text(sqlite3_stmt *st, int i) {
  const unsigned char *p = sqlite3_column_text(st, i);
  const int n = sqlite3_column_bytes(st, i);
  return p == nullptr ? std::string()
                      : std::string(reinterpret_cast<const char *>(p), static_cast<std::size_t>(n));
}

// Runs `f` (which uses SQLiteCpp and may throw SQLite::Exception) and turns an exception into
// rsched::result's error: `prefix` + SQLite's message. `f` returns a result<T> itself.
template <class F> auto sqlite_guard(const std::string &prefix, F &&f) -> decltype(f()) {
  try {
    return std::forward<F>(f)();
  } catch (const SQLite::Exception &e) {
    return make_error(prefix + e.what());
  }
}

} // namespace rsched::sqlite
