#pragma once
// Histograms as plain data, their bucket bounds and the arithmetic on them.
//
// Four layouts exist (all fixed, versioned by their id, which the blob encoding carries):
//  - latency: durations in ns; the hybrid layout of rsched_hist_slot() in sched_abi.h;
//  - depth:   small integers (runqueue depth); slot = value, the last slot open-ended;
//  - count:   per-second event counts (migrations): 0..63 exact, then log2 buckets
//             [2^6, 2^7-1] .. [2^15, 2^16-1], the last slot open-ended (>= 2^16);
//  - log2:    large per-second counts (perf events): slot 0 = {0}, slot s = [2^(s-1), 2^s-1]
//             for s = 1..64 (65 slots, every u64 value has a bounded bucket);
//  - latency_fine: durations in ns; rsched_hist_fine_slot() in sched_abi.h: latency's slots
//             below 512 us, then 8 sub-buckets per power of two (<= 12.5 % wide), 236 slots.
//             Every latency boundary is a latency_fine boundary: a fine histogram coarsens
//             exactly into a latency one (coarsen()).
// Merging is defined between histograms of one layout, and between latency and latency_fine
// (the result is latency: the fine side is coarsened).
//
// `histogram` holds max_slots (75) slots, enough for every layout but latency_fine, which has
// its own type, `fine_histogram` (236 slots): the common type stays small (the query paths copy
// and walk many of them), and a fine one never meets code that indexes 75 slots.
#include "rsched/abi/sched_abi.h"
#include "rsched/base/result.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace rsched::stats {

enum class layout : std::uint8_t {
  latency = 1,      // ns, RSCHED_HIST_SLOTS hybrid slots
  depth = 2,        // count, RSCHED_DEPTH_SLOTS linear slots
  count = 3,        // per-second counts, 75 slots: 64 exact then log2
  log2 = 4,         // per-second counts, 65 log2 slots
  latency_fine = 5, // ns, RSCHED_HIST_FINE_SLOTS: latency's below 512 us, then 8 per octave
};

inline constexpr std::size_t max_slots = RSCHED_HIST_SLOTS;
inline constexpr std::size_t fine_slots = RSCHED_HIST_FINE_SLOTS;
static_assert(RSCHED_DEPTH_SLOTS <= RSCHED_HIST_SLOTS);

constexpr std::size_t slot_count(layout l) {
  switch (l) {
  case layout::latency:
    return RSCHED_HIST_SLOTS;
  case layout::depth:
    return RSCHED_DEPTH_SLOTS;
  case layout::count:
    return 75;
  case layout::log2:
    return 65;
  case layout::latency_fine:
    return RSCHED_HIST_FINE_SLOTS;
  }
  return 0;
}

constexpr bool valid_layout(std::uint8_t id) {
  return id >= 1 && id <= 5;
}

// The layout a `histogram` (75 slots) holds a blob of layout `l` in: latency_fine is read as
// latency (coarsened, encoding.hpp), every other layout as itself.
constexpr layout coarse_layout(layout l) {
  return l == layout::latency_fine ? layout::latency : l;
}

// The latency slot that holds latency_fine slot `fine` (fine < fine_slots); as
// rsched_fine_to_coarse.
constexpr std::size_t coarse_slot(std::size_t fine) {
  constexpr std::size_t linear = RSCHED_HIST_LINEAR_SLOTS;
  return fine <= linear ? fine : linear + 1 + ((fine - linear - 1) >> RSCHED_HIST_FINE_SUB_BITS);
}

// Lower bound in ns of latency_fine slot `slot`, RSCHED_HIST_LINEAR_SLOTS < slot < fine_slots;
// as rsched_fine_lo_ns.
constexpr std::uint64_t fine_lo_ns(std::size_t slot) {
  const std::size_t k = slot - RSCHED_HIST_LINEAR_SLOTS - 1;
  return std::uint64_t{1000 + 125 * (k & 7)} << (9 + (k >> RSCHED_HIST_FINE_SUB_BITS));
}

// Inclusive bounds of one bucket. `hi` is numeric_limits<uint64_t>::max() for the open-ended
// top bucket.
struct bucket {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  [[nodiscard]] constexpr bool open_ended() const {
    return hi == std::numeric_limits<std::uint64_t>::max();
  }
  // Width of the bucket (hi - lo + 1); for the open-ended bucket, its lower bound (the bucket is
  // at least that wide and the documented bound is "at least lo").
  [[nodiscard]] constexpr std::uint64_t width() const { return open_ended() ? lo : hi - lo + 1; }
};

// Bounds of `slot` in `l`. Slots outside the layout return {0, 0}.
constexpr bucket bucket_bounds(layout l, std::size_t slot) {
  constexpr auto inf = std::numeric_limits<std::uint64_t>::max();
  if (slot >= slot_count(l)) {
    return {};
  }
  if (l == layout::depth) {
    return slot + 1 == slot_count(l) ? bucket{slot, inf} : bucket{slot, slot};
  }
  if (l == layout::count) {
    if (slot < 64) {
      return {slot, slot};
    }
    const auto n = slot - 58; // slot 64 = [2^6, 2^7 - 1]
    return slot + 1 == slot_count(l)
               ? bucket{std::uint64_t{1} << n, inf}
               : bucket{std::uint64_t{1} << n, (std::uint64_t{1} << (n + 1)) - 1};
  }
  if (l == layout::log2) {
    if (slot == 0) {
      return {0, 0};
    }
    const std::uint64_t lo = std::uint64_t{1} << (slot - 1);
    return {lo, slot == 64 ? inf : (lo << 1) - 1};
  }
  constexpr std::uint64_t us = 1000;
  if (l == layout::latency_fine && slot > RSCHED_HIST_LINEAR_SLOTS) {
    const std::uint64_t lo = fine_lo_ns(slot);
    return slot + 1 == fine_slots ? bucket{lo, inf} : bucket{lo, fine_lo_ns(slot + 1) - 1};
  }
  if (slot < RSCHED_HIST_LINEAR_SLOTS) {
    const std::uint64_t lo_us = slot * RSCHED_HIST_LINEAR_STEP_US;
    return {lo_us * us, (lo_us + RSCHED_HIST_LINEAR_STEP_US) * us - 1};
  }
  if (slot == RSCHED_HIST_LINEAR_SLOTS) {
    return {500 * us, 512 * us - 1};
  }
  const auto n = slot - RSCHED_HIST_LOG2_BASE_SLOT; // log2 of the lower bound in us
  const std::uint64_t lo = (std::uint64_t{1} << n) * us;
  if (slot + 1 == std::size_t{RSCHED_HIST_SLOTS}) {
    return {lo, inf};
  }
  return {lo, (std::uint64_t{1} << (n + 1)) * us - 1};
}

// Slot that holds `value` in `l` (the same function the BPF programs use).
inline std::size_t slot_of(layout l, std::uint64_t value) {
  switch (l) {
  case layout::latency:
    return rsched_hist_slot(value);
  case layout::depth:
    return rsched_depth_slot(value);
  case layout::count:
    if (value < 64) {
      return static_cast<std::size_t>(value);
    }
    return std::min<std::size_t>(rsched_log2_u64(value) + 58, 74);
  case layout::log2:
    return value == 0 ? 0 : rsched_log2_u64(value) + 1;
  case layout::latency_fine:
    return rsched_hist_fine_slot(value);
  }
  return 0;
}

// Spans: a histogram's slots in groups of span_slots (the kernel's `used` groups, sched_abi.h).
// Bit k of a span mask covers slots [k * span_slots, (k + 1) * span_slots): 64 bytes, so a
// thread that woke a few times in a second has its counts in one or two cache lines of the
// 600-byte histogram, and a walk told which spans may hold counts reads only those.
inline constexpr std::size_t span_slots = RSCHED_USED_SPAN;
inline constexpr std::size_t span_count = (max_slots + span_slots - 1) / span_slots;
using span_mask = std::uint16_t;
static_assert(span_count <= 16);
inline constexpr span_mask all_spans = static_cast<span_mask>((1U << span_count) - 1);
constexpr span_mask span_bit(std::size_t slot) {
  return static_cast<span_mask>(1U << (slot / span_slots));
}
// Calls fn(first, last) (slot indexes, last exclusive) for each span of `m`, in slot order.
template <typename Fn> constexpr void for_each_span(span_mask m, Fn &&fn) {
  m = static_cast<span_mask>(m & all_spans);
  while (m != 0) {
    const auto k = static_cast<std::size_t>(__builtin_ctz(m));
    m = static_cast<span_mask>(m & (m - 1));
    const std::size_t first = k * span_slots;
    fn(first, first + span_slots < max_slots ? first + span_slots : max_slots);
  }
}

struct histogram {
  layout kind = layout::latency;
  std::array<std::uint64_t, max_slots> slots{}; // slots past slot_count(kind) stay 0

  [[nodiscard]] std::uint64_t total() const {
    std::uint64_t t = 0;
    for (auto c : slots) {
      t += c;
    }
    return t;
  }
  [[nodiscard]] bool empty() const { return total() == 0; }
  void add(std::uint64_t value, std::uint64_t n = 1) { slots[slot_of(kind, value)] += n; }
  friend bool operator==(const histogram &, const histogram &) = default;
};

// a += b, bucket by bucket. Fails when the layouts differ.
inline result<void> merge_into(histogram &a, const histogram &b) {
  if (a.kind != b.kind) {
    return make_error("cannot merge histograms of different layouts");
  }
  for (std::size_t i = 0; i < max_slots; ++i) {
    a.slots[i] += b.slots[i];
  }
  return {};
}

// Bucket-wise difference of two cumulative histograms (cur - prev). A bucket that went down
// means the counters were reset (a new thread behind a reused key): the delta is then `cur`.
inline void delta_into(histogram &d, const histogram &cur, const histogram &prev) {
  d.kind = cur.kind;
  unsigned down = 0;
  for (std::size_t i = 0; i < max_slots; ++i) { // one pass, no branch: vectorised
    d.slots[i] = cur.slots[i] - prev.slots[i];
    down |= static_cast<unsigned>(cur.slots[i] < prev.slots[i]);
  }
  if (down != 0) {
    d.slots = cur.slots;
  }
}
inline histogram delta(const histogram &cur, const histogram &prev) {
  histogram d;
  delta_into(d, cur, prev);
  return d;
}

// A latency_fine histogram (layout 5). Its kind is always latency_fine.
struct fine_histogram {
  static constexpr layout kind = layout::latency_fine;
  std::array<std::uint64_t, fine_slots> slots{};

  [[nodiscard]] std::uint64_t total() const {
    std::uint64_t t = 0;
    for (auto c : slots) {
      t += c;
    }
    return t;
  }
  [[nodiscard]] bool empty() const { return total() == 0; }
  void add(std::uint64_t value, std::uint64_t n = 1) { slots[rsched_hist_fine_slot(value)] += n; }
  friend bool operator==(const fine_histogram &, const fine_histogram &) = default;
};

// The latency histogram of the same samples: each fine bucket's count in the latency bucket that
// holds it (exact: every latency bucket is a union of fine buckets).
inline histogram coarsen(const fine_histogram &f) {
  histogram h{layout::latency, {}};
  for (std::size_t s = 0; s < fine_slots; ++s) {
    h.slots[coarse_slot(s)] += f.slots[s];
  }
  return h;
}

inline void merge_into(fine_histogram &a, const fine_histogram &b) {
  for (std::size_t i = 0; i < fine_slots; ++i) {
    a.slots[i] += b.slots[i];
  }
}

// a += b where a is latency (a mixed window): b coarsened. Fails for any other layout of a.
inline result<void> merge_into(histogram &a, const fine_histogram &b) {
  if (a.kind != layout::latency) {
    return make_error("cannot merge histograms of different layouts");
  }
  for (std::size_t s = 0; s < fine_slots; ++s) {
    a.slots[coarse_slot(s)] += b.slots[s];
  }
  return {};
}

// Bucket-wise difference of two cumulative fine histograms, as delta_into above.
inline void delta_into(fine_histogram &d, const fine_histogram &cur, const fine_histogram &prev) {
  unsigned down = 0;
  for (std::size_t i = 0; i < fine_slots; ++i) {
    d.slots[i] = cur.slots[i] - prev.slots[i];
    down |= static_cast<unsigned>(cur.slots[i] < prev.slots[i]);
  }
  if (down != 0) {
    d.slots = cur.slots;
  }
}

} // namespace rsched::stats
