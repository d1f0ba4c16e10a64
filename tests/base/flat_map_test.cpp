// base::flat_map: the same answers as std::map over random keys, through growth and collisions.
#include "rsched/base/flat_map.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <random>
#include <tuple>

namespace {
struct tuple_hash {
  std::size_t operator()(const std::tuple<std::int64_t, std::int64_t, int> &k) const {
    const auto [a, b, c] = k;
    return std::hash<std::int64_t>{}(a * 1'000'003 + b * 31 + c);
  }
};
} // namespace

TEST_CASE("flat_map: sums by key equal std::map's, through growth", "[base][flat_map]") {
  rsched::base::flat_map<std::tuple<std::int64_t, std::int64_t, int>, std::int64_t, tuple_hash> m;
  std::map<std::tuple<std::int64_t, std::int64_t, int>, std::int64_t> want;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200'000; ++i) {
    // Few distinct keys at first, then many: every key's sum must survive each doubling.
    const std::uint64_t spread = i < 1000 ? 10 : 5000;
    const auto k =
        std::make_tuple(static_cast<std::int64_t>(rng() % spread),
                        static_cast<std::int64_t>(rng() % 7), static_cast<int>(rng() % 3));
    const auto v = static_cast<std::int64_t>(rng() % 1000);
    m[k] += v;
    want[k] += v;
  }
  CHECK(m.size() == want.size());
  std::size_t seen = 0;
  m.for_each([&](const auto &k, std::int64_t v) {
    ++seen;
    CHECK(want.at(k) == v);
  });
  CHECK(seen == want.size());
  for (const auto &[k, v] : want) {
    const auto *got = m.find(k);
    REQUIRE(got != nullptr);
    CHECK(*got == v);
  }
  CHECK(m.find(std::make_tuple(-1, 0, 0)) == nullptr);
  m.clear();
  CHECK(m.empty());
  CHECK(m.find(std::make_tuple(0, 0, 0)) == nullptr);
}

TEST_CASE("flat_map: keys whose hashes collide (the same low bits) are kept apart",
          "[base][flat_map]") {
  struct same_hash {
    std::size_t operator()(std::uint64_t) const { return 42; }
  };
  rsched::base::flat_map<std::uint64_t, int, same_hash> m;
  for (std::uint64_t k = 0; k < 100; ++k) {
    m[k] = static_cast<int>(k) + 1;
  }
  CHECK(m.size() == 100);
  for (std::uint64_t k = 0; k < 100; ++k) {
    REQUIRE(m.find(k) != nullptr);
    CHECK(*m.find(k) == static_cast<int>(k) + 1);
  }
  CHECK(m.find(100) == nullptr);
}
