#pragma once
// Which tier answers which part of a time window (the routed data views, docs/SQL.md "Which
// tier answers"): pure logic over the tiers' state, tested without a database.
#include <array>
#include <cstdint>
#include <vector>

namespace rsched::query {

// The tiers' state (table `tiers`): index 0 raw, 1 the 1-minute tier, 2 the 1-hour tier.
struct tier_bounds {
  std::array<std::int64_t, 3> built{};  // every bucket before it is rolled up
  std::array<std::int64_t, 3> cutoff{}; // rows before it were deleted by retention
};

// A part [from, to) of a ts window and where it is read: 2 from V_1h, 1 from V_1m, 0 from V.
struct tier_segment {
  int tier = 0;
  std::int64_t from = 0;
  std::int64_t to = 0;
  friend bool operator==(const tier_segment &, const tier_segment &) = default;
};

inline constexpr std::int64_t minute_ns = 60'000'000'000;
inline constexpr std::int64_t hour_ns = 60 * minute_ns;

// Splits [lo, hi) (ts, UTC ns; lo < hi) into segments in time order, adjacent ones of a tier
// merged: whole hours of the 1-hour tier where exact, else whole minutes of the 1-minute tier
// where exact, else the view. `late` holds, sorted, the starts of the minutes with a raw
// interval written late (their rollups, and their hour's, are not exact).
std::vector<tier_segment> plan_tiers(std::int64_t lo, std::int64_t hi, const tier_bounds &t,
                                     const std::vector<std::int64_t> &late);

} // namespace rsched::query
