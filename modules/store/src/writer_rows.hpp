#pragma once
// The writer's input rows (private to the store module): what a row must hold to be written,
// and the merge of rows given twice for one thread or CPU in an interval.
#include "rsched/store/records.hpp"

#include <cstdint>
#include <limits>

namespace rsched::store::detail {

// SQLite integers are signed 64-bit. Counters never come near 2^63 in practice; saturate rather
// than store a negative value if one ever does.
inline std::int64_t to_i64(std::uint64_t v) {
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(v > max ? max : v);
}

inline std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return a + b < a ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

inline std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    return b > 0 ? std::numeric_limits<std::int64_t>::max()
                 : std::numeric_limits<std::int64_t>::min();
  }
  return r;
}

bool has_data(const hist_value &v);
bool has_migrations(const thread_row &t);
bool has_ipc_data(const thread_row &t);
bool has_any(const thread_row &t);

void add_row(thread_row &a, const thread_row &b);
void add_row(cpu_row &a, const cpu_row &b);

// Checks an interval before anything of it is written, but for its threads' rows: perf event
// names, the CPUs' metric layouts, schedstat field names, pressure rows. The error names the CPU
// where there is one.
result<void> validate(const interval_row &iv);
// Checks one thread's row (metric layouts, perf event indexes) as the writer reaches it: at
// 10,000 threads a pass of its own over every thread's values cost a few ms of cache misses. A
// bad row fails the interval's transaction, which is rolled back. The error names the thread.
result<void> validate_thread(const thread_row &t, std::size_t events);

} // namespace rsched::store::detail
