#pragma once
// Rollups and retention of the rsched database (docs/SCHEMA.md, "Tiers and retention"). Private
// to the store module; runs on the writer's connection, which has rsched's SQL functions
// (hist_merge) registered.
#include "rsched/base/result.hpp"
#include "rsched/store/writer.hpp"

#include "bucket_sums.hpp"

#include <cstdint>
#include <memory>
#include <utility>

struct sqlite3;

namespace rsched::store::detail {

inline constexpr std::int64_t minute_ns = 60LL * 1'000'000'000;
inline constexpr std::int64_t hour_ns = 60 * minute_ns;

// Limits of one maintenance call, so that a backlog never stalls recording.
struct maintenance_budget {
  int buckets = 4;                          // rollup buckets per call (per tier)
  std::int64_t raw_span_ns = 2 * minute_ns; // raw intervals deleted per call
  std::int64_t minute_span_ns = 2 * hour_ns;
  std::int64_t hour_span_ns = 48 * hour_ns;
  int vacuum_pages = 2048; // pages given back per call (8 MiB at 4 KiB pages)
};

class maintenance {
public:
  explicit maintenance(sqlite3 *db, maintenance_budget b = {});
  ~maintenance();
  maintenance(const maintenance &) = delete;
  maintenance &operator=(const maintenance &) = delete;

  result<maintenance_report> run(std::int64_t now_ns, const retention &keep);
  // (bytes holding data, bytes of the file)
  [[nodiscard]] result<std::pair<std::uint64_t, std::uint64_t>> size() const;
  // The writer's sums of the 1-minute buckets it writes (bucket_sums.hpp).
  bucket_sums &sums();

private:
  struct impl;
  std::unique_ptr<impl> p_;
};

} // namespace rsched::store::detail
