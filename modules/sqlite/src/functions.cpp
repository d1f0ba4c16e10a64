#include "rsched/sqlite/functions.hpp"

#include "rsched/base/timefmt.hpp"

#include <cmath>

namespace rsched::sqlite {

namespace {

result<void> define_each(sqlite3 *db, std::span<const scalar_def> fns, void *user, bool named) {
  for (const scalar_def &f : fns) {
    const int flags = f.kind == fn_kind::pure ? pure_flags : clock_flags;
    void *data = named ? const_cast<char *>(f.name) : user;
    if (sqlite3_create_function_v2(db, f.name, f.nargs, flags, data, f.fn, nullptr, nullptr,
                                   nullptr) != SQLITE_OK) {
      return make_error(std::string("registering ") + f.name + ": " + sqlite3_errmsg(db));
    }
  }
  return {};
}

} // namespace

result<void> define(sqlite3 *db, std::span<const scalar_def> fns, void *user) {
  return define_each(db, fns, user, false);
}

result<void> define_named(sqlite3 *db, std::span<const scalar_def> fns) {
  return define_each(db, fns, nullptr, true);
}

void result_error(sqlite3_context *ctx, const std::string &msg) {
  sqlite3_result_error(ctx, msg.c_str(), static_cast<int>(msg.size()));
}

result<std::int64_t> ns_arg(sqlite3_value *v, const char *what, const char *kind,
                            const std::string &expected,
                            const std::function<result<std::int64_t>(std::string_view)> &parse) {
  switch (sqlite3_value_type(v)) {
  case SQLITE_INTEGER:
    return std::int64_t{sqlite3_value_int64(v)};
  case SQLITE_FLOAT: {
    const double d = sqlite3_value_double(v);
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) {
      return make_error(std::string(what) + ": " + kind + " out of range");
    }
    return static_cast<std::int64_t>(d);
  }
  case SQLITE_TEXT: {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
    const std::string_view s(p != nullptr ? p : "",
                             static_cast<std::size_t>(sqlite3_value_bytes(v)));
    result<std::int64_t> r = parse(s);
    if (!r) {
      return make_error(std::string(what) + ": " + r.err().msg);
    }
    return *r;
  }
  default:
    return make_error(std::string(what) + ": " + expected);
  }
}

result<std::int64_t> duration_arg(sqlite3_value *v, const char *what) {
  return ns_arg(v, what, "duration", "expected a duration (text or ns)",
                [](std::string_view s) { return timefmt::parse_duration(s); });
}

} // namespace rsched::sqlite
