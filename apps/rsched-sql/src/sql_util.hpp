#pragma once
// Small helpers of rsched-sql's own queries (pictures, report, export): a whole result in
// memory, typed access to values, values as bound parameters. Private to the rsched-sql library.
//
// rsched-sql splices no value into SQL: numbers (times, limits, ids), names and texts read from
// the database (comms, cgroups) go in as parameters ?1, ?2, ... through query::reader::exec.
// What stays SQL text is SQL: the program's own pieces, identifiers (sqlite::sql_ident), and a
// user's --where condition, which is SQL by design (see has_sql_parameter).
#include "rsched/base/result.hpp"
#include "rsched/query/reader.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::sql_shell::detail {

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

// Appends `texts` to `params` as values and returns their placeholders, "?3, ?4, ?5": the list
// of an IN (...) whose members are data.
inline std::string placeholders(std::vector<query::value> &params,
                                const std::vector<std::string> &texts) {
  std::string out;
  for (const auto &t : texts) {
    params.emplace_back(t);
    out += (out.empty() ? "?" : ", ?") + std::to_string(params.size());
  }
  return out;
}

// Whether the schema has a table or view named `name` (over several hosts, --host: a TEMP view
// that combines the hosts' objects of that name).
inline bool has_object(query::reader &db, const std::string &name) {
  auto r = query(db,
                 "SELECT count(*) FROM (SELECT name FROM sqlite_master UNION ALL SELECT name "
                 "FROM sqlite_temp_master) WHERE name = ?1",
                 {name});
  return r && !r->rows.empty() && int_of(r->rows[0][0]).value_or(0) > 0;
}

// When sql[i] starts a string literal, a quoted name or a comment, the index just past it (the
// end of `sql` when it is not closed); otherwise i. A doubled quote inside a literal reads as
// two literals in a row, which is the same for a scan.
inline std::size_t skip_literal_or_comment(std::string_view sql, std::size_t i) {
  const char c = sql[i];
  if (c == '\'' || c == '"' || c == '`' || c == '[') {
    const auto end = sql.find(c == '[' ? ']' : c, i + 1);
    return end == std::string_view::npos ? sql.size() : end + 1;
  }
  if (sql.substr(i, 2) == "--") {
    const auto nl = sql.find('\n', i);
    return nl == std::string_view::npos ? sql.size() : nl + 1;
  }
  if (sql.substr(i, 2) == "/*") {
    const auto end = sql.find("*/", i + 2);
    return end == std::string_view::npos ? sql.size() : end + 2;
  }
  return i;
}

// Whether the SQL text `sql` holds a parameter (?, ?NNN, :name, @name, $name, #name) outside
// its string literals, quoted identifiers and comments.
//
// A --where condition (heatmap, report, export) is SQL by design: a condition on the view's
// columns, written by the user, spliced as the text it is into rsched-sql's statements, which
// the reader runs on a read-only connection whose authorizer refuses every write. It is not a
// value, so it cannot be bound. Those statements bind their own values (?1 the window's
// start, ...): a parameter in the condition would be given one of them, so the condition must
// hold none (heatmap, report and export refuse it with where_parameter_error).
inline bool has_sql_parameter(std::string_view sql) {
  const auto ident = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '$' || static_cast<unsigned char>(c) >= 0x80;
  };
  std::size_t i = 0;
  while (i < sql.size()) {
    const char c = sql[i];
    if (const std::size_t past = skip_literal_or_comment(sql, i); past != i) {
      i = past;
    } else if (c == '?' || ((c == ':' || c == '@' || c == '$' || c == '#') && i + 1 < sql.size() &&
                            ident(sql[i + 1]))) {
      return true; // ?, ?NNN, or a named parameter
    } else if (ident(c)) {
      while (i < sql.size() && ident(sql[i])) {
        ++i; // a word: a '$' inside it is part of it
      }
    } else {
      ++i;
    }
  }
  return false;
}

inline constexpr const char *where_parameter_error =
    "--where is a condition in SQL and takes no parameter (?, ?1, :name, @name, $name): write "
    "the value itself";

} // namespace rsched::sql_shell::detail
