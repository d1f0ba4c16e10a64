#include "rsched/sqlite/statement.hpp"

#include <string>
#include <utility>

namespace rsched::sqlite {

result<std::int64_t> query_int(sqlite3 *db, const char *sql) {
  auto prepared = prepare_stmt(db, sql);
  if (!prepared) {
    return prepared.err();
  }
  const auto &st = *prepared;
  const int rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) {
    return make_error(rc == SQLITE_DONE ? std::string("no result") : sqlite3_errmsg(db));
  }
  return std::int64_t{sqlite3_column_int64(st.get(), 0)};
}

result<void> exec(sqlite3 *db, const char *sql) {
  char *msg = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &msg) != SQLITE_OK) {
    std::string m = msg != nullptr ? msg : sqlite3_errmsg(db);
    sqlite3_free(msg);
    return make_error(std::move(m));
  }
  return {};
}

} // namespace rsched::sqlite
