#pragma once
// Small helpers of rsched-sql's own queries (pictures, report): a text as an SQL literal, a
// whole result in memory, typed access to values. Private to the rsched-sql library.
#include "rsched/base/result.hpp"
#include "rsched/query/reader.hpp"
#include "rsched/sqlite/quote.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::sql_shell::detail {

// `s` as an SQL string literal ('' for ').
inline std::string quote(std::string_view s) {
  return sqlite::sql_literal(s);
}

struct rowset {
  std::vector<std::string> columns;
  std::vector<std::vector<query::value>> rows;
};

// Runs `sql` (one statement) and keeps its whole result; `params` bound to ?1, ?2, ... (a
// value from the user or a file goes in as a value, not spliced into the text).
inline result<rowset> query(query::reader &db, const std::string &sql,
                            const std::vector<query::value> &params = {}) {
  rowset r;
  query::result_sink sink;
  sink.on_columns = [&](const std::vector<std::string> &c) { r.columns = c; };
  sink.on_row = [&](const std::vector<query::value> &v) { r.rows.push_back(v); };
  if (auto ok = db.exec(sql, params, sink); !ok) {
    return ok.err();
  }
  return r;
}

// An INTEGER (or a REAL, truncated); nullopt for NULL, text and blobs.
inline std::optional<std::int64_t> int_of(const query::value &v) {
  if (const auto *i = std::get_if<std::int64_t>(&v)) {
    return *i;
  }
  if (const auto *d = std::get_if<double>(&v)) {
    return static_cast<std::int64_t>(*d);
  }
  return std::nullopt;
}

// Whether the schema has a table or view named `name` (over several hosts, --host: a TEMP view
// that combines the hosts' objects of that name).
inline bool has_object(query::reader &db, const std::string &name) {
  auto r = query(db, "SELECT count(*) FROM (SELECT name FROM sqlite_master UNION ALL SELECT name "
                     "FROM sqlite_temp_master) WHERE name = " +
                         quote(name));
  return r && !r->rows.empty() && int_of(r->rows[0][0]).value_or(0) > 0;
}

} // namespace rsched::sql_shell::detail
