#pragma once
// Percentiles of bucketed histograms.
//
// The rule (docs/SQL.md, "Percentiles"): for N samples and 0 < p <= 100, the exact p-th
// percentile is the nearest-rank sample, rank r = ceil(p/100 * N) (1-based, in sorted order).
// The bucket holding that sample is the first bucket whose cumulative count reaches r. Inside it
// we interpolate linearly at the middle of the sample's share of the bucket:
//     value = lo + floor(width * (r - before - 0.5) / in_bucket)
// which always lies in [lo, hi], so the reported value is inside the bucket that contains the
// exact percentile, and |reported - exact| < bucket width (the error bound). For the open-ended
// top bucket the value is its lower bound (the true value is at least that).
#include "rsched/stats/histogram.hpp"

#include <cmath>
#include <cstdint>
#include <optional>

namespace rsched::stats {

// Nearest rank of the p-th percentile among n samples (1..n). Requires n > 0 and 0 < p <= 100.
inline std::uint64_t percentile_rank(std::uint64_t n, double p) {
  // ceil(p * n / 100) computed in long double to stay exact for counts up to 2^63.
  const long double x = static_cast<long double>(p) * static_cast<long double>(n) / 100.0L;
  auto r = static_cast<std::uint64_t>(std::ceil(x - 1e-9L));
  if (r < 1) {
    r = 1;
  }
  if (r > n) {
    r = n;
  }
  return r;
}

struct percentile_result {
  std::uint64_t value = 0; // the reported percentile
  std::size_t slot = 0;    // bucket holding the exact percentile
  bucket bounds;           // its bounds; bounds.width() is the error bound
};

inline bool valid_percentile(double p) {
  return std::isfinite(p) && p > 0.0 && p <= 100.0;
}

namespace detail {
// percentile() of any histogram type (histogram, fine_histogram): its kind and slots.
template <typename H> std::optional<percentile_result> percentile_of(const H &h, double p) {
  if (!valid_percentile(p)) {
    return std::nullopt;
  }
  const std::uint64_t n = h.total();
  if (n == 0) {
    return std::nullopt;
  }
  const std::uint64_t r = percentile_rank(n, p);
  std::uint64_t before = 0;
  const std::size_t slots = slot_count(h.kind);
  for (std::size_t s = 0; s < slots; ++s) {
    const std::uint64_t c = h.slots[s];
    if (c == 0) {
      continue;
    }
    if (before + c >= r) {
      const bucket b = bucket_bounds(h.kind, s);
      percentile_result out{b.lo, s, b};
      if (!b.open_ended()) {
        const long double width = static_cast<long double>(b.hi - b.lo + 1);
        const long double frac =
            (static_cast<long double>(r - before) - 0.5L) / static_cast<long double>(c);
        auto off = static_cast<std::uint64_t>(std::floor(width * frac));
        if (off > b.hi - b.lo) {
          off = b.hi - b.lo;
        }
        out.value = b.lo + off;
      }
      return out;
    }
    before += c;
  }
  return std::nullopt; // unreachable: the slots sum to n
}
} // namespace detail

// Percentile of `h`, or nullopt when the histogram is empty or p is outside (0, 100].
inline std::optional<percentile_result> percentile(const histogram &h, double p) {
  return detail::percentile_of(h, p);
}
// The same at latency_fine's precision (bounds.width() <= 12.5 % of bounds.lo from 80 us).
inline std::optional<percentile_result> percentile(const fine_histogram &h, double p) {
  return detail::percentile_of(h, p);
}

// Convenience: the percentile value or 0 for an empty histogram (live display).
inline std::uint64_t percentile_or_zero(const histogram &h, double p) {
  const auto r = percentile(h, p);
  return r ? r->value : 0;
}

namespace detail {
template <typename H> std::optional<double> mean_of(const H &h) {
  const std::uint64_t n = h.total();
  if (n == 0) {
    return std::nullopt;
  }
  long double sum = 0;
  for (std::size_t s = 0; s < slot_count(h.kind); ++s) {
    if (h.slots[s] == 0) {
      continue;
    }
    const bucket b = bucket_bounds(h.kind, s);
    const long double mid = b.open_ended() ? static_cast<long double>(b.lo)
                                           : (static_cast<long double>(b.lo) + b.hi) / 2.0L;
    sum += mid * static_cast<long double>(h.slots[s]);
  }
  return static_cast<double>(sum / static_cast<long double>(n));
}
} // namespace detail

// Arithmetic mean estimated from bucket midpoints (lower bound for the open-ended bucket).
inline std::optional<double> mean(const histogram &h) {
  return detail::mean_of(h);
}
inline std::optional<double> mean(const fine_histogram &h) {
  return detail::mean_of(h);
}

} // namespace rsched::stats
