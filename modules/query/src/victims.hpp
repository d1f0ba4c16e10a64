#pragma once
// Which threads a victim pattern selects ("postgres", "comm:post*",
// "cgroup:/system.slice/db.service", "pid:1234", "tid:1234", a service), as SQL over the thread
// identity `t` and as a check of one identity; what every analysis of a window starts from.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;
#include "rsched/sqlite/statement.hpp"

namespace rsched::query::detail {

// A condition on the thread identity `t` (an SQL expression with one parameter ?N, or TRUE).
struct service_rule;

struct victim {
  enum class kind { all, comm, cgroup, pid, tid, service } what = kind::all;
  // kind::service: the service's rule (explain_scope.hpp), matched by the SQL function
  // rsched_in_service(?N, t.comm, t.cgroup) with ?N bound to it as a pointer.
  std::shared_ptr<const service_rule> service;
  std::string text;        // the pattern (comm, cgroup) as given
  std::int64_t number = 0; // pid, tid
  bool glob = false;       // the pattern has GLOB wildcards (* ? [)
  bool descendants = true; // cgroup without wildcards: its descendants too
  // "t.comm GLOB ?7" etc. with `param` the parameter's number; "1" for all threads.
  [[nodiscard]] std::string sql(int param) const;
  // Binds the pattern or number to parameter `param` of `st` (nothing for all threads).
  void bind(sqlite3_stmt *st, int param) const;
  // Whether a thread of this comm and cgroup matches, as sql() says it in SQL (GLOB as
  // sqlite3_strglob); pid and tid patterns never match here (they need the thread's ids).
  [[nodiscard]] bool matches(std::string_view comm, std::string_view cgroup) const;
  // "comm postgres", "cgroup /x", "pid 12", "all threads", the service's rule.
  [[nodiscard]] std::string describe() const;
};

// The database has a table of that name (in main).
bool has_table(sqlite3 *db, const char *name);
// Whether `table` (a table or view) has a column `column`.
bool has_column(sqlite3 *db, const char *table, const char *column);

// Parses a victim pattern; "" or NULL (nullopt) is every thread. The error names the function.
result<victim> parse_victim(std::optional<std::string_view> text, const char *fn);

// Threads matching every one of `vs` (a victim pattern and the key of a spike, say).
using victims = std::vector<victim>;
// "c1 AND c2 ..." with parameters from `first` on, and their binding.
std::string victims_sql(const victims &vs, int first);
void bind_victims(sqlite3_stmt *st, const victims &vs, int first);

// Runs `sql` (?1, ?2: a window [a, b); ?3...: the victims) and hands each row to `on_row`; an
// SQLite error is the result's error.
result<void> each_row(sqlite3 *db, const std::string &sql, std::int64_t a, std::int64_t b,
                      const victims &vs, const std::function<void(sqlite3_stmt *)> &on_row);

// Prepares `sql`, whose ?1 and ?2 are a window [a, b) and ?3... the conditions of `vs`.
result<sqlite::stmt_ptr> prepare_window(sqlite3 *db, const std::string &sql, std::int64_t a,
                                        std::int64_t b, const victims &vs);

} // namespace rsched::query::detail
