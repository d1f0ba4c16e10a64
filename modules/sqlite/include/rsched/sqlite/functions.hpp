#pragma once
// SQL functions as a table: a module lists its scalars (name, arity, body, kind) and registers
// them in one call, instead of a sqlite3_create_function_v2 call and an error path each.
// Arguments read here follow one rule: an error is the function's name, ": ", and the reason.
#include "rsched/base/result.hpp"

#include <cstdint>
#include <functional>
#include <span>
#include <sqlite3.h>
#include <string>
#include <string_view>

namespace rsched::sqlite {

using scalar_fn = void (*)(sqlite3_context *, int, sqlite3_value **);

// pure: same inputs, same result, no side effects (SQLite may use it in indexes, views and
// constant folding); clock: depends on the clock or the connection's settings (zone, now).
enum class fn_kind { pure, clock };
inline constexpr int pure_flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
inline constexpr int clock_flags = SQLITE_UTF8 | SQLITE_INNOCUOUS;

struct scalar_def {
  const char *name;
  int nargs; // -1: any number
  scalar_fn fn;
  fn_kind kind = fn_kind::pure;
};

// Registers every function of `fns` with `user` as its user data (sqlite3_user_data).
result<void> define(sqlite3 *db, std::span<const scalar_def> fns, void *user);
// The same with each function's own name as its user data (one body serving several names).
result<void> define_named(sqlite3 *db, std::span<const scalar_def> fns);

// Sets `msg` as the function's error.
void result_error(sqlite3_context *ctx, const std::string &msg);

// A nanosecond argument: INTEGER as is, a finite REAL truncated, TEXT through `parse`; `kind`
// ("time", "duration") names it in errors, `expected` is the message for NULL or a BLOB.
result<std::int64_t> ns_arg(sqlite3_value *v, const char *what, const char *kind,
                            const std::string &expected,
                            const std::function<result<std::int64_t>(std::string_view)> &parse);
// A duration argument: INTEGER/REAL = ns, TEXT = the duration grammar (base/timefmt.hpp).
result<std::int64_t> duration_arg(sqlite3_value *v, const char *what);

} // namespace rsched::sqlite
