#include "rsched/store/hist_functions.hpp"

#include "rsched/sqlite/functions.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include <cstdint>
#include <limits>
#include <span>
#include <sqlite3.h>
#include <string>
#include <type_traits>
#include <variant>

namespace rsched::store {

result<std::optional<stats::histogram>> hist_arg(sqlite3_value *v, const char *fn) {
  const int type = sqlite3_value_type(v);
  if (type == SQLITE_NULL) {
    return std::optional<stats::histogram>();
  }
  if (type != SQLITE_BLOB) {
    return make_error(std::string(fn) + ": hist must be a BLOB or NULL");
  }
  const void *data = sqlite3_value_blob(v);
  const int n = sqlite3_value_bytes(v);
  const std::span<const std::uint8_t> bytes(static_cast<const std::uint8_t *>(data),
                                            static_cast<std::size_t>(n));
  auto h = stats::decode(bytes);
  if (!h) {
    return make_error(std::string(fn) + ": " + h.err().msg);
  }
  return std::optional<stats::histogram>(*h);
}

namespace {
template <typename H> double count_above_of(const H &h, std::uint64_t ns) {
  long double n = 0;
  for (std::size_t s = 0; s < stats::slot_count(h.kind); ++s) {
    const std::uint64_t c = h.slots[s];
    if (c == 0) {
      continue;
    }
    const stats::bucket b = stats::bucket_bounds(h.kind, s);
    if (b.lo >= ns) {
      n += static_cast<long double>(c);
    } else if (b.open_ended() || ns <= b.hi) {
      if (b.open_ended()) {
        n += static_cast<long double>(c);
      } else {
        const long double share =
            static_cast<long double>(b.hi - ns + 1) / static_cast<long double>(b.hi - b.lo + 1);
        n += static_cast<long double>(c) * share;
      }
    }
  }
  return static_cast<double>(n);
}
} // namespace

double count_above(const stats::histogram &h, std::uint64_t ns) {
  return count_above_of(h, ns);
}

answer_precision &answered_precision() {
  thread_local answer_precision tally;
  return tally;
}

namespace {

// A blob argument at its own precision: a latency_fine blob as a fine_histogram (hist_arg reads
// it coarsened), every other layout as a histogram.
using any_hist = std::variant<stats::histogram, stats::fine_histogram>;

result<std::optional<any_hist>> any_hist_arg(sqlite3_value *v, const char *fn) {
  const int type = sqlite3_value_type(v);
  if (type != SQLITE_BLOB || sqlite3_value_bytes(v) < 1 ||
      static_cast<const std::uint8_t *>(sqlite3_value_blob(v))[0] !=
          static_cast<std::uint8_t>(stats::layout::latency_fine)) {
    auto h = hist_arg(v, fn);
    if (!h) {
      return h.err();
    }
    return *h ? std::optional<any_hist>(any_hist(**h)) : std::optional<any_hist>();
  }
  const std::span<const std::uint8_t> bytes(
      static_cast<const std::uint8_t *>(sqlite3_value_blob(v)),
      static_cast<std::size_t>(sqlite3_value_bytes(v)));
  auto f = stats::decode_fine(bytes);
  if (!f) {
    return make_error(std::string(fn) + ": " + f.err().msg);
  }
  return std::optional<any_hist>(any_hist(*f));
}

// What an aggregate over histogram blobs returns.
enum class agg_mode { percentile, merge, error_bound };

struct agg_info {
  agg_mode mode;
  const char *name;
};
constexpr agg_info pct_info{agg_mode::percentile, "hist_percentile"};
constexpr agg_info merge_info{agg_mode::merge, "hist_merge"};
constexpr agg_info err_info{agg_mode::error_bound, "hist_percentile_error"};

// State of one aggregate group. It lives in sqlite3_aggregate_context() memory, which SQLite
// zero-fills and frees itself, so it must be trivial: all-zero is the initial state and nothing
// needs a destructor (xFinal is not a reliable place to free when a step fails).
// latency and latency_fine rows merge (one coarse layout id): the fine rows are summed apart, and
// the result is fine while the frame holds fine rows only, else latency (the fine part
// coarsened: exact, every latency bucket is a union of fine ones).
struct agg_state {
  std::uint64_t slots[stats::max_slots]; // rows of every layout but latency_fine
  std::uint64_t fine[stats::fine_slots]; // latency_fine rows
  std::uint64_t total;                   // samples of both
  std::uint64_t coarse_rows;             // non-NULL rows in `slots` (in the frame)
  std::uint64_t fine_rows;               // non-NULL rows in `fine`
  double p;
  std::uint8_t layout; // coarse_layout id of the first non-NULL blob; 0 until then
  bool p_set;
};
static_assert(std::is_trivial_v<agg_state>);

using sqlite::result_error;

const agg_info &info_of(sqlite3_context *ctx) {
  return *static_cast<const agg_info *>(sqlite3_user_data(ctx));
}

// Reads p (in (0, 100]); false with the error set on ctx.
bool read_p(sqlite3_context *ctx, const char *fn, sqlite3_value *arg, double &p) {
  const int type = sqlite3_value_numeric_type(arg);
  if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) {
    result_error(ctx, std::string(fn) + ": p must be in (0, 100]");
    return false;
  }
  p = sqlite3_value_double(arg);
  if (!stats::valid_percentile(p)) {
    result_error(ctx, std::string(fn) + ": p must be in (0, 100]");
    return false;
  }
  return true;
}

agg_state *state_of(sqlite3_context *ctx) {
  return static_cast<agg_state *>(sqlite3_aggregate_context(ctx, sizeof(agg_state)));
}

void agg_step(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  const agg_info &info = info_of(ctx);
  agg_state *st = state_of(ctx);
  if (st == nullptr) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  if (argc == 2) {
    double p = 0;
    if (!read_p(ctx, info.name, argv[1], p)) {
      return;
    }
    if (!st->p_set) {
      st->p = p;
      st->p_set = true;
    } else if (st->p != p) {
      result_error(ctx, std::string(info.name) + ": p must be the same in every row");
      return;
    }
  }
  auto h = any_hist_arg(argv[0], info.name);
  if (!h) {
    result_error(ctx, h.err().msg);
    return;
  }
  if (!*h) {
    return;
  }
  std::visit(
      [&](const auto &hist) {
        const auto id = static_cast<std::uint8_t>(stats::coarse_layout(hist.kind));
        if (st->layout == 0) {
          st->layout = id;
        } else if (st->layout != id) {
          result_error(ctx, std::string(info.name) + ": histograms of different layouts");
          return;
        }
        constexpr bool fine = std::is_same_v<std::decay_t<decltype(hist)>, stats::fine_histogram>;
        std::uint64_t *into = fine ? st->fine : st->slots;
        // Checked sums: blobs come from the user, a crafted one must not wrap a counter (no
        // slot can wrap, in either array or coarsened, while the total of both does not).
        std::uint64_t total = st->total;
        for (std::size_t i = 0; i < hist.slots.size(); ++i) {
          const std::uint64_t c = hist.slots[i];
          if (total + c < c) {
            result_error(ctx, std::string(info.name) + ": sample counts overflow 64 bits");
            return;
          }
          total += c;
        }
        for (std::size_t i = 0; i < hist.slots.size(); ++i) {
          into[i] += hist.slots[i];
        }
        st->total = total;
        ++(fine ? st->fine_rows : st->coarse_rows);
      },
      **h);
}

// Window functions: remove a row that left the frame. SQLite only passes rows that were stepped
// before, so the subtraction cannot underflow for blobs that decode the same way twice.
void agg_inverse(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  agg_state *st = state_of(ctx);
  if (st == nullptr) {
    sqlite3_result_error_nomem(ctx);
    return;
  }
  auto h = any_hist_arg(argv[0], info_of(ctx).name);
  if (!h || !*h) {
    return;
  }
  std::visit(
      [&](const auto &hist) {
        constexpr bool fine = std::is_same_v<std::decay_t<decltype(hist)>, stats::fine_histogram>;
        std::uint64_t *from = fine ? st->fine : st->slots;
        for (std::size_t i = 0; i < hist.slots.size(); ++i) {
          const std::uint64_t c = hist.slots[i] <= from[i] ? hist.slots[i] : from[i];
          from[i] -= c;
          st->total -= c;
        }
        std::uint64_t &rows = fine ? st->fine_rows : st->coarse_rows;
        rows -= rows > 0 ? 1 : 0;
      },
      **h);
}

void result_u64(sqlite3_context *ctx, std::uint64_t v) {
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  sqlite3_result_int64(ctx, static_cast<sqlite3_int64>(v > max ? max : v));
}

template <typename H> void result_blob(sqlite3_context *ctx, const H &h) {
  const auto bytes = stats::encode(h);
  sqlite3_result_blob64(ctx, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
}

// Percentile value or its error bound (bucket width) of h; NULL when empty.
template <typename H>
void percentile_result(sqlite3_context *ctx, const H &h, double p, bool error) {
  const auto r = stats::percentile(h, p);
  if (!r) {
    sqlite3_result_null(ctx);
    return;
  }
  ++(h.kind == stats::layout::latency_fine ? answered_precision().fine
                                           : answered_precision().coarse);
  result_u64(ctx, error ? r->bounds.width() : r->value);
}

void agg_result(sqlite3_context *ctx, const agg_state *st) {
  const agg_info &info = info_of(ctx);
  if (st == nullptr || st->layout == 0) {
    sqlite3_result_null(ctx);
    return;
  }
  if (st->coarse_rows == 0 && st->fine_rows > 0) { // fine rows only: their own precision
    stats::fine_histogram f;
    for (std::size_t i = 0; i < stats::fine_slots; ++i) {
      f.slots[i] = st->fine[i];
    }
    if (info.mode == agg_mode::merge) {
      result_blob(ctx, f);
      return;
    }
    percentile_result(ctx, f, st->p, info.mode == agg_mode::error_bound);
    return;
  }
  stats::histogram h{static_cast<stats::layout>(st->layout), {}};
  for (std::size_t i = 0; i < stats::max_slots; ++i) {
    h.slots[i] = st->slots[i];
  }
  if (st->fine_rows > 0 && h.kind == stats::layout::latency) { // a window across the upgrade
    for (std::size_t i = 0; i < stats::fine_slots; ++i) {
      h.slots[stats::coarse_slot(i)] += st->fine[i];
    }
  }
  if (info.mode == agg_mode::merge) {
    result_blob(ctx, h);
    return;
  }
  percentile_result(ctx, h, st->p, info.mode == agg_mode::error_bound);
}

void agg_value(sqlite3_context *ctx) {
  agg_result(ctx, state_of(ctx));
}

void agg_final(sqlite3_context *ctx) {
  // Size 0: do not allocate for a group that never had a row (result NULL).
  agg_result(ctx, static_cast<const agg_state *>(sqlite3_aggregate_context(ctx, 0)));
}

// Scalars on one blob. The function name comes from the user data.
const char *fn_name(sqlite3_context *ctx) {
  return static_cast<const char *>(sqlite3_user_data(ctx));
}

// Decodes argv[0] at its own precision; false when the result is already set (NULL in, or an
// error).
bool scalar_hist(sqlite3_context *ctx, sqlite3_value *arg, any_hist &out) {
  auto h = any_hist_arg(arg, fn_name(ctx));
  if (!h) {
    result_error(ctx, h.err().msg);
    return false;
  }
  if (!*h) {
    sqlite3_result_null(ctx);
    return false;
  }
  out = **h;
  return true;
}

void pct_scalar(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  any_hist h;
  double p = 0;
  if (!read_p(ctx, fn_name(ctx), argv[1], p) || !scalar_hist(ctx, argv[0], h)) {
    return;
  }
  const std::string name = fn_name(ctx);
  std::visit([&](const auto &hist) { percentile_result(ctx, hist, p, name == "hist_error"); }, h);
}

void count_scalar(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  any_hist h;
  if (scalar_hist(ctx, argv[0], h)) {
    result_u64(ctx, std::visit([](const auto &hist) { return hist.total(); }, h));
  }
}

// Reads a threshold in ns (>= 0, INTEGER or REAL, or a duration text like '5ms').
bool read_ns(sqlite3_context *ctx, sqlite3_value *arg, std::uint64_t &ns) {
  auto d = sqlite::duration_arg(arg, fn_name(ctx));
  if (!d) {
    result_error(ctx, d.err().msg);
    return false;
  }
  ns = *d < 0 ? 0 : static_cast<std::uint64_t>(*d);
  return true;
}

void above_scalar(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  any_hist h;
  std::uint64_t ns = 0;
  if (sqlite3_value_type(argv[1]) == SQLITE_NULL) {
    sqlite3_result_null(ctx);
    return;
  }
  if (!read_ns(ctx, argv[1], ns) || !scalar_hist(ctx, argv[0], h)) {
    return;
  }
  const double n = std::visit([ns](const auto &hist) { return count_above_of(hist, ns); }, h);
  const std::string name = fn_name(ctx);
  if (name == "hist_fraction_above") {
    const auto total = std::visit([](const auto &hist) { return hist.total(); }, h);
    if (total == 0) {
      sqlite3_result_null(ctx);
    } else {
      sqlite3_result_double(ctx, n / static_cast<double>(total));
    }
    return;
  }
  sqlite3_result_double(ctx, n);
}

void mean_scalar(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  any_hist h;
  if (!scalar_hist(ctx, argv[0], h)) {
    return;
  }
  const auto m = std::visit([](const auto &hist) { return stats::mean(hist); }, h);
  if (!m) {
    sqlite3_result_null(ctx);
  } else {
    sqlite3_result_double(ctx, *m);
  }
}

void max_scalar(sqlite3_context *ctx, int /*argc*/, sqlite3_value **argv) {
  any_hist h;
  if (!scalar_hist(ctx, argv[0], h)) {
    return;
  }
  std::visit(
      [ctx](const auto &hist) {
        for (std::size_t s = stats::slot_count(hist.kind); s-- > 0;) {
          if (hist.slots[s] != 0) {
            const stats::bucket b = stats::bucket_bounds(hist.kind, s);
            result_u64(ctx, b.open_ended() ? b.lo : b.hi);
            return;
          }
        }
        sqlite3_result_null(ctx);
      },
      h);
}

} // namespace

result<void> register_hist_functions(sqlite3 *db) {
  struct agg {
    const agg_info *info;
    int nargs;
  };
  for (const agg &a : {agg{&pct_info, 2}, agg{&merge_info, 1}, agg{&err_info, 2}}) {
    if (sqlite3_create_window_function(db, a.info->name, a.nargs, sqlite::pure_flags,
                                       const_cast<agg_info *>(a.info), agg_step, agg_final,
                                       agg_value, agg_inverse, nullptr) != SQLITE_OK) {
      return make_error(std::string("registering ") + a.info->name + ": " + sqlite3_errmsg(db));
    }
  }
  // The scalars find their own name in their user data (hist_pct and hist_error share a body).
  static constexpr sqlite::scalar_def scalars[] = {
      {"hist_pct", 2, pct_scalar, sqlite::fn_kind::pure},
      {"hist_error", 2, pct_scalar, sqlite::fn_kind::pure},
      {"hist_count", 1, count_scalar, sqlite::fn_kind::pure},
      {"hist_count_above", 2, above_scalar, sqlite::fn_kind::pure},
      {"hist_fraction_above", 2, above_scalar, sqlite::fn_kind::pure},
      {"hist_mean", 1, mean_scalar, sqlite::fn_kind::pure},
      {"hist_max", 1, max_scalar, sqlite::fn_kind::pure},
  };
  return sqlite::define_named(db, scalars);
}

} // namespace rsched::store
