#pragma once
// The sparse histogram blob stored in SQLite (docs/SCHEMA.md, "Histogram blobs").
//
//   byte 0      format/layout id: 1 = latency (ns, hybrid), 2 = depth (linear), 3 = count,
//               4 = log2, 5 = latency_fine (ns, 236 slots; histogram.hpp)
//   then, for each non-empty bucket in increasing slot order:
//     varint(slot - previous_slot - 1)   (previous_slot starts at -1)
//     varint(count)                      (count > 0)
// Varints are unsigned LEB128. An empty histogram is the single layout byte. A typical
// scheduling-delay histogram with 6 non-empty buckets takes about 13 bytes.
#include "rsched/base/result.hpp"
#include "rsched/stats/histogram.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace rsched::stats {

namespace detail {
// Zigzag: signed integers as unsigned, small magnitudes small (0, -1, 1, -2 ... -> 0, 1, 2, 3).
inline std::uint64_t zigzag(std::int64_t v) {
  return (static_cast<std::uint64_t>(v) << 1) ^ static_cast<std::uint64_t>(v >> 63);
}
inline std::int64_t unzigzag(std::uint64_t v) {
  return static_cast<std::int64_t>(v >> 1) ^ -static_cast<std::int64_t>(v & 1);
}

inline void put_varint(std::vector<std::uint8_t> &out, std::uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<std::uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<std::uint8_t>(v));
}

inline bool get_varint(std::span<const std::uint8_t> in, std::size_t &pos, std::uint64_t &v) {
  if (pos < in.size() && in[pos] < 0x80) { // one byte: most ids, gaps and counts
    v = in[pos++];
    return true;
  }
  v = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    if (pos >= in.size()) {
      return false;
    }
    const std::uint8_t b = in[pos++];
    if (shift == 63 && (b & 0x7E) != 0) {
      return false; // would overflow 64 bits
    }
    v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) {
      return true;
    }
  }
  return false;
}
} // namespace detail

// Encodes into `out` (cleared first; its capacity is reused), reading only the spans of
// `spans` (every other slot of h is zero).
inline void encode_into(const histogram &h, std::vector<std::uint8_t> &out, span_mask spans) {
  out.clear();
  out.push_back(static_cast<std::uint8_t>(h.kind));
  std::int64_t prev = -1;
  const std::size_t n = slot_count(h.kind);
  for_each_span(spans, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t s = lo; s < hi && s < n; ++s) {
      if (h.slots[s] == 0) {
        continue;
      }
      detail::put_varint(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(s) - prev - 1));
      detail::put_varint(out, h.slots[s]);
      prev = static_cast<std::int64_t>(s);
    }
  });
}

inline void encode_into(const histogram &h, std::vector<std::uint8_t> &out) {
  encode_into(h, out, all_spans);
}

inline std::vector<std::uint8_t> encode(const histogram &h) {
  std::vector<std::uint8_t> out;
  out.reserve(16);
  encode_into(h, out);
  return out;
}

// Calls fn(slot, count) for each bucket of a blob in slot order, slots of the layout the blob
// was written in (latency_fine's included), after checking the layout id (fn is not called for
// a blob that fails it). Every malformed input (unknown layout, truncated varint, slot past the
// layout, zero count, trailing garbage, counts that overflow when summed) is an error, never a
// crash; buckets before the damage have been visited.
template <typename Fn>
result<void> for_each_stored_bucket(std::span<const std::uint8_t> in, Fn &&fn) {
  if (in.empty()) {
    return make_error("histogram blob is empty");
  }
  if (!valid_layout(in[0])) {
    return make_error("histogram blob has unknown layout id " + std::to_string(in[0]));
  }
  const std::size_t slots = slot_count(static_cast<layout>(in[0]));
  std::size_t pos = 1;
  std::uint64_t next_slot = 0;
  std::uint64_t sum = 0;
  while (pos < in.size()) {
    std::uint64_t gap = 0;
    std::uint64_t count = 0;
    if (!detail::get_varint(in, pos, gap) || !detail::get_varint(in, pos, count)) {
      return make_error("histogram blob is truncated");
    }
    if (gap >= slots || next_slot + gap >= slots) {
      return make_error("histogram blob has a bucket past the last slot");
    }
    if (count == 0) {
      return make_error("histogram blob has an empty bucket entry");
    }
    if (sum + count < sum) {
      return make_error("histogram blob counts overflow 64 bits");
    }
    sum += count;
    const std::uint64_t slot = next_slot + gap;
    if (auto r = fn(static_cast<std::size_t>(slot), count); !r) {
      return r;
    }
    next_slot = slot + 1;
  }
  return {};
}

// The layout of a blob as a `histogram` holds it (coarse_layout of its id), or nullopt for an
// empty blob or an unknown id.
inline std::optional<layout> blob_layout(std::span<const std::uint8_t> in) {
  if (in.empty() || !valid_layout(in[0])) {
    return std::nullopt;
  }
  return coarse_layout(static_cast<layout>(in[0]));
}

// for_each_stored_bucket in the slots of blob_layout(in): a latency_fine blob is read as
// latency, each fine bucket counted in the latency bucket that holds it (fn may then be called
// more than once for one slot, in non-decreasing slot order: callers add).
template <typename Fn> result<void> for_each_bucket(std::span<const std::uint8_t> in, Fn &&fn) {
  if (!in.empty() && in[0] == static_cast<std::uint8_t>(layout::latency_fine)) {
    return for_each_stored_bucket(
        in, [&fn](std::size_t slot, std::uint64_t count) { return fn(coarse_slot(slot), count); });
  }
  return for_each_stored_bucket(in, fn);
}

// Decodes a blob, with for_each_bucket's checks, into the layout blob_layout names (a
// latency_fine blob comes back coarsened to latency).
inline result<histogram> decode(std::span<const std::uint8_t> in) {
  histogram h{};
  auto r = for_each_bucket(in, [&h](std::size_t slot, std::uint64_t count) -> result<void> {
    h.slots[slot] += count;
    return {};
  });
  if (!r) {
    return r.err();
  }
  h.kind = coarse_layout(static_cast<layout>(in[0]));
  return h;
}

// Decodes a latency_fine blob at its own precision; any other layout is an error.
inline result<fine_histogram> decode_fine(std::span<const std::uint8_t> in) {
  if (in.empty() || in[0] != static_cast<std::uint8_t>(layout::latency_fine)) {
    return make_error("histogram blob is not of the latency_fine layout");
  }
  fine_histogram h{};
  auto r = for_each_stored_bucket(in, [&h](std::size_t slot, std::uint64_t count) -> result<void> {
    h.slots[slot] = count;
    return {};
  });
  if (!r) {
    return r.err();
  }
  return h;
}

inline void encode_into(const fine_histogram &h, std::vector<std::uint8_t> &out) {
  out.clear();
  out.push_back(static_cast<std::uint8_t>(layout::latency_fine));
  std::int64_t prev = -1;
  for (std::size_t s = 0; s < fine_slots; ++s) {
    if (h.slots[s] == 0) {
      continue;
    }
    detail::put_varint(out, static_cast<std::uint64_t>(static_cast<std::int64_t>(s) - prev - 1));
    detail::put_varint(out, h.slots[s]);
    prev = static_cast<std::int64_t>(s);
  }
}

inline std::vector<std::uint8_t> encode(const fine_histogram &h) {
  std::vector<std::uint8_t> out;
  out.reserve(24);
  encode_into(h, out);
  return out;
}

} // namespace rsched::stats
