#include "sql_functions.hpp"

#include "rsched/sqlite/functions.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/hist_functions.hpp"

#include "explain_scope.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <sqlite3.h>
#include <string>
#include <type_traits>

namespace rsched::query::detail {

result<std::int64_t> time_arg(sqlite3_value *v, const fn_context &ctx, const char *what) {
  const std::string got = sqlite3_value_type(v) == SQLITE_NULL ? "NULL" : "a BLOB";
  return sqlite::ns_arg(
      v, what, "time", "expected a time (text or ns), got " + got,
      [&](std::string_view s) { return timefmt::parse_time(s, ctx.now(), ctx.zone); });
}

namespace {

using sqlite::result_error;

void ipc_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL || sqlite3_value_type(argv[1]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  const double cycles = sqlite3_value_double(argv[1]);
  if (cycles == 0.0) {
    sqlite3_result_null(ctx);
    return;
  }
  sqlite3_result_double(ctx, sqlite3_value_double(argv[0]) / cycles);
}

void rate_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL || sqlite3_value_type(argv[1]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  const double dur = sqlite3_value_double(argv[1]);
  if (dur == 0.0) {
    sqlite3_result_null(ctx);
    return;
  }
  sqlite3_result_double(ctx, sqlite3_value_double(argv[0]) * 1e9 / dur);
}

const fn_context &ctx_of(sqlite3_context *ctx) {
  return *static_cast<const fn_context *>(sqlite3_user_data(ctx));
}

void t_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  auto r = time_arg(argv[0], ctx_of(ctx), "t");
  if (!r) {
    result_error(ctx, r.err().msg);
    return;
  }
  sqlite3_result_int64(ctx, *r);
}

void ago_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  auto r = duration_arg(argv[0], "ago");
  if (!r) {
    result_error(ctx, r.err().msg);
    return;
  }
  const auto t = timefmt::detail::checked_sub(ctx_of(ctx).now(), *r);
  if (!t) {
    result_error(ctx, std::string("ago: ") + timefmt::out_of_range);
    return;
  }
  sqlite3_result_int64(ctx, *t);
}

// bucket(ts, width): ts rounded down to a multiple of width (ns or a duration text), counted
// from the epoch (UTC): rows of one bucket share a value, for GROUP BY over time.
void bucket_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL || sqlite3_value_type(argv[1]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  auto w = duration_arg(argv[1], "bucket: width");
  if (!w) {
    result_error(ctx, w.err().msg);
    return;
  }
  if (*w <= 0) {
    result_error(ctx, "bucket: the width must be positive");
    return;
  }
  auto t = time_arg(argv[0], ctx_of(ctx), "bucket: time");
  if (!t) {
    result_error(ctx, t.err().msg);
    return;
  }
  std::int64_t q = *t / *w;
  if (*t % *w != 0 && *t < 0) {
    --q;
  }
  sqlite3_result_int64(ctx, q * *w);
}

// annotation_margin(): the connection's margin around annotations (ns); annotation_margin(dur)
// sets it (a duration, >= 0) and returns it.
void margin_func(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  auto *fc = static_cast<fn_context *>(sqlite3_user_data(ctx));
  if (argc == 1) {
    auto r = duration_arg(argv[0], "annotation_margin");
    if (!r) {
      result_error(ctx, r.err().msg);
      return;
    }
    if (*r < 0) {
      result_error(ctx, "annotation_margin: the margin must not be negative");
      return;
    }
    fc->annotation_margin_ns = *r;
  }
  sqlite3_result_int64(ctx, fc->annotation_margin_ns);
}

void dur_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  auto r = duration_arg(argv[0], "dur");
  if (!r) {
    result_error(ctx, r.err().msg);
    return;
  }
  sqlite3_result_int64(ctx, *r);
}

void fmt_time_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  if (sqlite3_value_type(argv[0]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  const int type = sqlite3_value_numeric_type(argv[0]);
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) {
    result_error(ctx, "fmt_time: expected UTC ns (an INTEGER)");
    return;
  }
  const std::string s = timefmt::format_time(sqlite3_value_int64(argv[0]), ctx_of(ctx).zone);
  sqlite3_result_text(ctx, s.data(), static_cast<int>(s.size()), SQLITE_TRANSIENT);
}

// rsched_in_service(rule, comm, cgroup): whether the thread is the service of `rule`, a pointer
// explain() binds (explain_scope.hpp); false for anything else (SQL cannot make such a pointer).
void in_service_func(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  const auto *rule =
      static_cast<const service_rule *>(sqlite3_value_pointer(argv[0], service_rule_pointer_type));
  const auto text_of = [](sqlite3_value *v) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
    return std::string_view(p != nullptr ? p : "",
                            static_cast<std::size_t>(sqlite3_value_bytes(v)));
  };
  sqlite3_result_int(ctx, rule != nullptr && rule->matches(text_of(argv[1]), text_of(argv[2])));
}

} // namespace

result<void> register_functions(sqlite3 *db, fn_context *fctx) {
  // The histogram functions belong to the stored format: store::register_storage registers them
  // (with the storage virtual tables) on every connection before this.
  using sqlite::fn_kind;
  static constexpr sqlite::scalar_def pure[] = {
      {"ipc", 2, ipc_func, fn_kind::pure},
      {"rate", 2, rate_func, fn_kind::pure},
      {"dur", 1, dur_func, fn_kind::pure},
      {in_service_function, 3, in_service_func, fn_kind::pure},
  };
  if (auto r = sqlite::define(db, pure, nullptr); !r) {
    return r;
  }
  // These read the connection's context (its zone, its fixed now, its annotation margin).
  static constexpr sqlite::scalar_def with_context[] = {
      {"t", 1, t_func, fn_kind::clock},
      {"bucket", 2, bucket_func, fn_kind::clock},
      {"ago", 1, ago_func, fn_kind::clock},
      {"fmt_time", 1, fmt_time_func, fn_kind::clock},
      {"annotation_margin", 0, margin_func, fn_kind::clock},
      {"annotation_margin", 1, margin_func, fn_kind::clock},
  };
  if (auto r = sqlite::define(db, with_context, fctx); !r) {
    return r;
  }
  return register_table_functions(db, fctx);
}

} // namespace rsched::query::detail
