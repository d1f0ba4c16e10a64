// The sparse blob encoding: round trips and hostile input.
#include "rsched/stats/encoding.hpp"

#include <catch2/catch.hpp>

#include <cstddef>
#include <random>
#include <span>
#include <string>
#include <vector>

using namespace rsched::stats;

TEST_CASE("encode/decode round trip for random histograms", "[stats]") {
  std::mt19937_64 rng(2024);
  for (int trial = 0; trial < 5000; ++trial) {
    histogram h{trial % 3 == 0 ? layout::depth : layout::latency, {}};
    const std::size_t n = slot_count(h.kind);
    const int filled = static_cast<int>(rng() % 12);
    for (int i = 0; i < filled; ++i) {
      h.slots[rng() % n] += (trial % 7 == 0) ? (rng() >> 1) / 64 : rng() % 1000;
    }
    const auto blob = encode(h);
    const auto back = decode(blob);
    REQUIRE(back.ok());
    REQUIRE(back.value() == h);
  }
}

TEST_CASE("encoding is compact", "[stats]") {
  histogram h{layout::latency, {}};
  CHECK(encode(h).size() == 1); // empty: just the layout byte
  h.slots[3] = 100;
  h.slots[4] = 20;
  h.slots[7] = 1;
  h.slots[55] = 2;
  h.slots[60] = 1;
  h.slots[74] = 1;
  // 1 + 6 * (gap byte + count byte) = 13
  CHECK(encode(h).size() == 13);
  CHECK(encode(h)[0] == 1);
}

TEST_CASE("malformed blobs are errors, never crashes", "[stats]") {
  using bytes = std::vector<std::uint8_t>;
  CHECK_FALSE(decode(bytes{}).ok());
  CHECK_FALSE(decode(bytes{9}).ok());              // unknown layout
  CHECK_FALSE(decode(bytes{1, 0}).ok());           // truncated pair
  CHECK_FALSE(decode(bytes{1, 0, 0x80}).ok());     // truncated varint
  CHECK_FALSE(decode(bytes{1, 0, 0}).ok());        // zero count
  CHECK_FALSE(decode(bytes{1, 75, 1}).ok());       // past the last slot
  CHECK_FALSE(decode(bytes{2, 64, 1}).ok());       // past the last depth slot
  CHECK_FALSE(decode(bytes{1, 70, 1, 4, 1}).ok()); // second bucket past the end
  bytes overflow{1, 0};
  for (int i = 0; i < 9; ++i) {
    overflow.push_back(0xFF);
  }
  overflow.push_back(0x7F); // > 64 bits
  CHECK_FALSE(decode(overflow).ok());
  // two counts that overflow when summed
  bytes sum{1, 0,    0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01,
            0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
  CHECK_FALSE(decode(sum).ok());
  CHECK(decode(bytes{1}).ok());
}

namespace {
// One blob of the fuzz loop: decoding either fails cleanly (a one-line message) or yields a
// histogram that encodes to a blob decoding to the same histogram. Returns whether it decoded.
bool check_decode_is_clean(std::span<const std::uint8_t> b) {
  const auto h = decode(b);
  if (!h.ok()) {
    CHECK_FALSE(h.err().msg.empty());
    CHECK(h.err().msg.find('\n') == std::string::npos);
    return false;
  }
  // (Compare histograms, not bytes: a decodable varint may be longer than encode writes it.)
  const auto again = decode(encode(h.value()));
  REQUIRE(again.ok());
  CHECK(again.value() == h.value());
  return true;
}
} // namespace

TEST_CASE("fuzz: random and mutated blobs decode cleanly or round-trip", "[stats]") {
  using bytes = std::vector<std::uint8_t>;
  std::mt19937_64 rng(1);
  int decoded = 0;
  // Random bytes; the first is a valid layout id half of the time so that decoding gets past it.
  for (int i = 0; i < 20000; ++i) {
    bytes b(rng() % 24);
    for (auto &x : b) {
      x = static_cast<std::uint8_t>(rng());
    }
    if (!b.empty() && rng() % 2 == 0) {
      b[0] = static_cast<std::uint8_t>(rng() % 2 == 0 ? layout::latency : layout::depth);
    }
    decoded += check_decode_is_clean(b) ? 1 : 0;
  }
  // Valid blobs with one to three bytes changed, dropped or appended.
  for (int i = 0; i < 20000; ++i) {
    histogram h{i % 3 == 0 ? layout::depth : layout::latency, {}};
    for (int k = static_cast<int>(rng() % 8); k > 0; --k) {
      h.slots[rng() % slot_count(h.kind)] += rng() % 5000 + 1;
    }
    bytes b = encode(h);
    REQUIRE(decode(b).ok());
    REQUIRE(decode(b).value() == h);
    for (int k = static_cast<int>(rng() % 3) + 1; k > 0; --k) {
      switch (rng() % 3) {
      case 0:
        b[rng() % b.size()] = static_cast<std::uint8_t>(rng());
        break;
      case 1:
        if (b.size() > 1) {
          b.erase(b.begin() + static_cast<std::ptrdiff_t>(1 + rng() % (b.size() - 1)));
        }
        break;
      default:
        b.push_back(static_cast<std::uint8_t>(rng()));
        break;
      }
    }
    decoded += check_decode_is_clean(b) ? 1 : 0;
  }
  // Both outcomes were exercised, not only the error path.
  INFO("decoded " << decoded << " of 40000");
  CHECK(decoded > 1000);
  CHECK(decoded < 39000);
}
