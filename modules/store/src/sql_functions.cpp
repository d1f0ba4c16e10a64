#include "sql_functions.hpp"

#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include <cstdint>
#include <limits>
#include <span>
#include <sqlite3.h>
#include <string>
#include <type_traits>

namespace rsched::store::detail {

namespace {

constexpr const char *err_p_range = "hist_percentile: p must be in (0, 100]";
constexpr const char *err_p_constant = "hist_percentile: p must be the same in every row";
constexpr const char *err_layouts = "hist_percentile: histograms of different layouts";
constexpr const char *err_not_blob = "hist_percentile: hist must be a BLOB or NULL";
constexpr const char *err_overflow = "hist_percentile: sample counts overflow 64 bits";

// State of one hist_percentile group. It lives in sqlite3_aggregate_context() memory, which
// SQLite zero-fills and frees itself, so it must be trivial: all-zero is the initial state and
// nothing needs a destructor (xFinal is not a reliable place to free when a step fails).
struct pct_state {
  std::uint64_t slots[stats::max_slots];
  std::uint64_t total;
  double p;
  std::uint8_t layout; // 0 until the first non-NULL blob
  bool p_set;
};
static_assert(std::is_trivial_v<pct_state>);

void result_error(sqlite3_context *ctx, const std::string &msg) {
  sqlite3_result_error(ctx, msg.c_str(), static_cast<int>(msg.size()));
}

// Reads and checks p; false (with the error set on ctx) when it is invalid or not constant.
bool read_p(sqlite3_context *ctx, pct_state &st, sqlite3_value *arg) {
  const int type = sqlite3_value_numeric_type(arg);
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) {
    result_error(ctx, err_p_range);
    return false;
  }
  const double p = sqlite3_value_double(arg);
  if (!stats::valid_percentile(p)) {
    result_error(ctx, err_p_range);
    return false;
  }
  if (!st.p_set) {
    st.p = p;
    st.p_set = true;
  } else if (st.p != p) {
    result_error(ctx, err_p_constant);
    return false;
  }
  return true;
}

// Decodes the blob argument. Returns false with the error set on ctx for a bad value; sets
// `is_null` for SQL NULL (which contributes nothing).
bool read_hist(sqlite3_context *ctx, sqlite3_value *arg, stats::histogram &out, bool &is_null) {
  is_null = false;
  const int type = sqlite3_value_type(arg);
  if (type == SQLITE_NULL) {
    is_null = true;
    return true;
  }
  if (type != SQLITE_BLOB) {
    result_error(ctx, err_not_blob);
    return false;
  }
  const void *data = sqlite3_value_blob(arg);
  const int n = sqlite3_value_bytes(arg);
  const std::span<const std::uint8_t> bytes(static_cast<const std::uint8_t *>(data),
                                            static_cast<std::size_t>(n));
  auto h = stats::decode(bytes);
  if (!h) {
    result_error(ctx, "hist_percentile: " + h.err().msg);
    return false;
  }
  out = *h;
  return true;
}

pct_state *state_of(sqlite3_context *ctx) {
  return static_cast<pct_state *>(sqlite3_aggregate_context(ctx, sizeof(pct_state)));
}

void pct_step(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  pct_state *st = state_of(ctx);
  if (st == nullptr) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (!read_p(ctx, *st, argv[1])) {
    return;
  }
  stats::histogram h;
  bool is_null = false;
  if (!read_hist(ctx, argv[0], h, is_null) || is_null) {
    return;
  }
  const auto id = static_cast<std::uint8_t>(h.kind);
  if (st->layout == 0) {
    st->layout = id;
  } else if (st->layout != id) {
    result_error(ctx, err_layouts);
    return;
  }
  // Checked sums: blobs come from the user, a crafted one must not wrap a counter.
  std::uint64_t total = st->total;
  for (std::size_t i = 0; i < stats::max_slots; ++i) {
    const std::uint64_t c = h.slots[i];
    if (st->slots[i] + c < c || total + c < c) {
      result_error(ctx, err_overflow);
      return;
    }
    total += c;
  }
  for (std::size_t i = 0; i < stats::max_slots; ++i) {
    st->slots[i] += h.slots[i];
  }
  st->total = total;
}

// Window functions: remove a row that left the frame. SQLite only passes rows that were stepped
// before, so the subtraction cannot underflow for blobs that decode the same way twice.
void pct_inverse(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  pct_state *st = state_of(ctx);
  if (st == nullptr) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  stats::histogram h;
  bool is_null = false;
  if (!read_hist(ctx, argv[0], h, is_null) || is_null) {
    return;
  }
  for (std::size_t i = 0; i < stats::max_slots; ++i) {
    const std::uint64_t c = h.slots[i] <= st->slots[i] ? h.slots[i] : st->slots[i];
    st->slots[i] -= c;
    st->total -= c;
  }
}

void pct_result(sqlite3_context *ctx, const pct_state *st) {
  if (st == nullptr || st->layout == 0 || st->total == 0) {
    sqlite3_result_null(ctx);
    return;
  }
  stats::histogram h{static_cast<stats::layout>(st->layout), {}};
  for (std::size_t i = 0; i < stats::max_slots; ++i) {
    h.slots[i] = st->slots[i];
  }
  const auto r = stats::percentile(h, st->p);
  if (!r) {
    sqlite3_result_null(ctx);
    return;
  }
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  sqlite3_result_int64(ctx, static_cast<sqlite3_int64>(r->value > max ? max : r->value));
}

void pct_value(sqlite3_context *ctx) {
  pct_result(ctx, state_of(ctx));
}

void pct_final(sqlite3_context *ctx) {
  // Size 0: do not allocate for a group that never had a row (result NULL).
  pct_result(ctx, static_cast<const pct_state *>(sqlite3_aggregate_context(ctx, 0)));
}

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

} // namespace

result<void> register_functions(sqlite3 *db) {
  // Deterministic (same inputs, same result) and innocuous (no side effects): usable in indexes,
  // views, triggers and the query planner's constant folding.
  constexpr int flags = SQLITE_UTF8 | SQLITE_DETERMINISTIC | SQLITE_INNOCUOUS;
  if (sqlite3_create_window_function(db, "hist_percentile", 2, flags, nullptr, pct_step, pct_final,
                                     pct_value, pct_inverse, nullptr) != SQLITE_OK) {
    return make_error(std::string("registering hist_percentile: ") + sqlite3_errmsg(db));
  }
  if (sqlite3_create_function_v2(db, "ipc", 2, flags, nullptr, ipc_func, nullptr, nullptr,
                                 nullptr) != SQLITE_OK) {
    return make_error(std::string("registering ipc: ") + sqlite3_errmsg(db));
  }
  return {};
}

} // namespace rsched::store::detail
