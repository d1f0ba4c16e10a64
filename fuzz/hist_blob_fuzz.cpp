// libFuzzer target: histogram blobs as read from a database (rsched::stats::decode), and what the
// SQL functions do with a decoded one (percentiles, mean). A blob that decodes re-encodes to a
// blob that decodes to the same histogram and is no longer than the input (the encoding is the
// shortest form; the input may spell a varint with redundant bytes). A latency_fine blob (layout 5)
// decodes to its coarsening, and decode_fine gives it back at its own precision.
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/percentile.hpp"

#include "fuzz_check.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t *data, std::size_t size) {
  using namespace rsched::stats;
  const std::span<const std::uint8_t> in(data, size);
  const auto h = decode(in);
  if (!h) {
    RSCHED_FUZZ_CHECK(!h.err().msg.empty());
    return 0;
  }
  const auto again = encode(h.value());
  RSCHED_FUZZ_CHECK(again.size() <= in.size());
  const auto h2 = decode(again);
  RSCHED_FUZZ_CHECK(h2.ok());
  RSCHED_FUZZ_CHECK(h2.value() == h.value());
  for (std::size_t s = slot_count(h->kind); s < max_slots; ++s) {
    RSCHED_FUZZ_CHECK(h->slots[s] == 0);
  }
  for (const double p : {1e-9, 50.0, 99.0, 99.9, 100.0}) {
    const auto r = percentile(h.value(), p);
    RSCHED_FUZZ_CHECK(r.has_value() == !h->empty());
    if (r) {
      RSCHED_FUZZ_CHECK(r->value >= r->bounds.lo && r->value <= r->bounds.hi);
      RSCHED_FUZZ_CHECK(h->slots[r->slot] != 0);
    }
  }
  if (const auto m = mean(h.value()); m) {
    RSCHED_FUZZ_CHECK(std::isfinite(*m) && *m >= 0);
  }
  // A latency_fine blob: decode() read it coarsened; decode_fine() keeps it, and the two agree.
  const auto f = decode_fine(in);
  RSCHED_FUZZ_CHECK(f.ok() == (in[0] == static_cast<std::uint8_t>(layout::latency_fine)));
  if (f) {
    RSCHED_FUZZ_CHECK(coarsen(f.value()) == h.value());
    const auto fa = encode(f.value());
    RSCHED_FUZZ_CHECK(fa.size() <= in.size());
    const auto f2 = decode_fine(fa);
    RSCHED_FUZZ_CHECK(f2.ok() && f2.value() == f.value());
    for (const double p : {1e-9, 50.0, 99.0, 100.0}) {
      const auto r = percentile(f.value(), p);
      const auto c = percentile(h.value(), p);
      RSCHED_FUZZ_CHECK(r.has_value() == c.has_value());
      if (r) {
        RSCHED_FUZZ_CHECK(c->bounds.lo <= r->bounds.lo && r->bounds.hi <= c->bounds.hi);
      }
    }
  }
  return 0;
}
