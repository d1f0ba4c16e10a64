// The sparse blob encoding: round trips and hostile input.
#include "rsched/stats/encoding.hpp"

#include <catch2/catch.hpp>

#include <random>

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
  // random garbage never crashes
  std::mt19937_64 rng(1);
  for (int i = 0; i < 20000; ++i) {
    bytes b(rng() % 24);
    for (auto &x : b) {
      x = static_cast<std::uint8_t>(rng());
    }
    (void)decode(b);
  }
  CHECK(decode(bytes{1}).ok());
}
