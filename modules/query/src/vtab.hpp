#pragma once
// The generic adapter from a table-valued function to an SQLite eponymous virtual table: the
// function's result columns, its arguments as HIDDEN columns (bound by equality constraints, the
// first `required` ones mandatory), former column names as HIDDEN aliases, and a body that computes
// all rows in xFilter (they are small) which the cursor hands out from memory. On a connection over
// several hosts the body runs once per host, on that host's connection, and a leading `host`
// column tells the rows apart. The analytics themselves are in table_functions.hpp.
#include "rsched/base/result.hpp"
#include "rsched/query/reader.hpp"

#include "sql_functions.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

struct sqlite3;
struct sqlite3_value;

namespace rsched::query::detail {

using row = std::vector<value>;
using rows = std::vector<row>;
// Arguments as given (nullptr = not given).
using args_t = std::vector<sqlite3_value *>;
using body_t = std::function<result<rows>(sqlite3 *, const fn_context &, const args_t &)>;

// A former column name, kept as a hidden column that reads column `column`.
struct column_alias {
  const char *name;
  std::size_t column;
};

// What one host answered on a connection over several hosts (fn_context::hosts): the body's
// rows (without a host column) and the window it recorded (during, around).
struct host_rows {
  const host_source *host = nullptr;
  rows data;
  std::optional<std::pair<std::int64_t, std::int64_t>> window;
};
// Makes a function's rows over several hosts from what each host answered.
using merge_t = std::function<result<rows>(std::vector<host_rows> &)>;

// One table-valued function.
struct tvf {
  const char *name;
  std::vector<const char *> columns;
  std::vector<const char *> args; // hidden argument columns
  std::size_t required;
  body_t body;
  // Hidden columns under a former name. `SELECT *`
  // shows the current names; queries written for the old ones keep working.
  std::vector<column_alias> aliases = {};
  // Over several hosts: the body runs on each host's own connection and `merge` combines the
  // answers. Empty: the function reads no database (hist_buckets) and runs once.
  merge_t merge = {};
  // Over several hosts, whether the rows start with a `host` column (the host's name).
  bool host_column = false;
  fn_context *ctx = nullptr;
};

// Registers each of `defs` as an eponymous virtual table on `db`, all with `ctx`. The definitions
// live as long as the connection.
result<void> register_vtabs(sqlite3 *db, fn_context *ctx, std::vector<tvf> defs);

} // namespace rsched::query::detail
