// rsched::units: durations and sizes as a command line gives them, nothing around them and a
// unit on every number (issue 51, "Strict units").
#include "rsched/base/units.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using namespace std::string_literals;

namespace {
constexpr std::int64_t s = 1'000'000'000;
} // namespace

TEST_CASE("units::parse_duration: the grammar's forms with their units", "[base]") {
  const std::pair<const char *, std::int64_t> ok[] = {
      {"2d", 2 * 86400 * s}, {"12h", 12 * 3600 * s},      {"1d12h", 36 * 3600 * s},
      {"50ms", s / 20},      {"90 minutes", 90 * 60 * s}, {"1h 30m", 90 * 60 * s},
      {"1.5s", 3 * s / 2},   {"250\xc2\xb5s", 250'000},   {"2W", 14 * 86400 * s}};
  for (const auto &[in, ns] : ok) {
    INFO(in);
    auto d = rsched::units::parse_duration(in);
    REQUIRE(d.ok());
    CHECK(*d == ns);
  }
}

TEST_CASE("units::parse_duration refuses a bare number and anything around or in the value",
          "[base]") {
  // Each was read as a duration before: the bare ones as seconds, the others trimmed.
  for (const std::string &bad : {"7"s, "0"s, "1.5"s, " 7\t"s, "7\n"s, "\t2d"s, "2d\n"s, " 2d"s,
                                 "2d "s, "1h  30m"s, "1h\t30m"s, "2d\r"s, "\v2d"s, "2d\f"s,
                                 "2\x00"
                                 "d"s,
                                 ""s}) {
    INFO("'" << bad << "'");
    auto d = rsched::units::parse_duration(bad);
    REQUIRE_FALSE(d.ok());
    CHECK(d.err().msg.find('\n') == std::string::npos);
    CHECK(d.err().msg.find('\t') == std::string::npos);
  }
  auto bare = rsched::units::parse_duration("7");
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.err().msg == "a duration needs a unit (7s? 7m? 7h?): ns, us, ms, s, m, h, d or w");
  auto around = rsched::units::parse_duration(" 7\t");
  REQUIRE_FALSE(around.ok());
  CHECK(around.err().msg.find("a space, tab, newline or control character") != std::string::npos);
}

TEST_CASE("units::parse_size: a whole number and its binary unit; 0 alone", "[base]") {
  const std::pair<const char *, std::uint64_t> ok[] = {{"0", 0},
                                                       {"000", 0},
                                                       {"0G", 0},
                                                       {"4096B", 4096},
                                                       {"4096b", 4096},
                                                       {"2k", 2048},
                                                       {"2K", 2048},
                                                       {"2KB", 2048},
                                                       {"2KiB", 2048},
                                                       {"500M", 500ULL << 20},
                                                       {"500mb", 500ULL << 20},
                                                       {"8G", 8ULL << 30},
                                                       {"8GB", 8ULL << 30},
                                                       {"8gib", 8ULL << 30},
                                                       {"1T", 1ULL << 40},
                                                       {"1048576T", 1ULL << 60}};
  for (const auto &[in, bytes] : ok) {
    INFO(in);
    auto n = rsched::units::parse_size(in);
    REQUIRE(n.ok());
    CHECK(*n == bytes);
  }
}

TEST_CASE("units::parse_size refuses a bare size like a bare duration", "[base]") {
  // "--max-size 8" was 8 bytes.
  auto bare = rsched::units::parse_size("8");
  REQUIRE_FALSE(bare.ok());
  CHECK(bare.err().msg == "a size needs a unit (8G? 8M?): B, K, M, G or T (1K = 1024 bytes)");
  for (const std::string &bad :
       {"8"s, "4096"s, " 8G"s, "8G "s, "8G\n"s, "\t8G"s, "8 G"s, "8X"s, "8BB"s, "8Bi"s, "8iB"s,
        "G"s, "-8G"s, "8.5G"s, "1048577T"s, "99999999999999999999G"s, "0x10M"s, ""s}) {
    INFO("'" << bad << "'");
    auto n = rsched::units::parse_size(bad);
    REQUIRE_FALSE(n.ok());
    CHECK(n.err().msg.find('\n') == std::string::npos);
  }
}
