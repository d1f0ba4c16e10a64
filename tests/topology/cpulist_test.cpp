// parse_cpulist: the kernel format, whitespace, and malformed input as errors.
#include "rsched/topology/cpulist.hpp"

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

using rsched::topology::parse_cpulist;
using list = std::vector<unsigned>;

namespace {
list parsed(std::string_view s) {
  auto r = parse_cpulist(s);
  INFO("input: " << std::string(s));
  REQUIRE(r.ok());
  return r.value();
}
} // namespace

TEST_CASE("cpulist: kernel format", "[topology]") {
  CHECK(parsed("0") == list{0});
  CHECK(parsed("0-3,8,10-11") == list{0, 1, 2, 3, 8, 10, 11});
  CHECK(parsed("0-3,8,10-11\n") == list{0, 1, 2, 3, 8, 10, 11});
  CHECK(parsed("5-5") == list{5});
  CHECK(parsed("1023") == list{1023});
  CHECK(parsed("0,64,128-129") == list{0, 64, 128, 129});
}

TEST_CASE("cpulist: empty and whitespace", "[topology]") {
  CHECK(parsed("").empty());
  CHECK(parsed("\n").empty());
  CHECK(parsed("  \t\n ").empty());
  CHECK(parsed(" 1 , 3 - 4 \n") == list{1, 3, 4});
  CHECK(parsed("\t0-1,\n2\n") == list{0, 1, 2});
}

TEST_CASE("cpulist: result is sorted and unique", "[topology]") {
  CHECK(parsed("3,1,1-2,2") == list{1, 2, 3});
  CHECK(parsed("10-12,0,11") == list{0, 10, 11, 12});
}

TEST_CASE("cpulist: bounds", "[topology]") {
  CHECK(parsed("65535") == list{65535});
  CHECK(parsed("0-65535").size() == 65536);
  CHECK_FALSE(parse_cpulist("65536").ok());
  CHECK_FALSE(parse_cpulist("0-65536").ok());
  CHECK_FALSE(parse_cpulist("0-4000000000").ok());
  CHECK_FALSE(parse_cpulist("99999999999999999999999").ok());
  // Many overlapping maximal ranges stay cheap (bitmap, not a growing list).
  std::string many;
  for (int i = 0; i < 2000; ++i) {
    many += "0-65535,";
  }
  many += "7";
  CHECK(parsed(many).size() == 65536);
}

TEST_CASE("cpulist: malformed input is an error", "[topology]") {
  for (const char *bad : {"a", "1-", "-1", "-", "3-1", "1,,2", "1,", ",1", ",", "1-2-3", "0x1",
                          "+1", "1 2", "1-2 3", "0-15:2/4", "1.5", "1;2", "\xff", "0\n1"}) {
    INFO("input: " << bad);
    const auto r = parse_cpulist(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find("cpulist") != std::string::npos);
    CHECK(r.err().msg.find('\n') == std::string::npos); // one line
  }
}

TEST_CASE("cpulist: random garbage never crashes", "[topology]") {
  std::mt19937 rng(7);
  const std::string alphabet = "0123456789,- \n\t:/x";
  for (int trial = 0; trial < 20000; ++trial) {
    std::string s;
    const auto len = rng() % 24;
    for (unsigned i = 0; i < len; ++i) {
      s += (rng() % 16 == 0) ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
    }
    const auto r = parse_cpulist(s);
    if (r.ok()) {
      for (std::size_t i = 1; i < r.value().size(); ++i) {
        REQUIRE(r.value()[i - 1] < r.value()[i]);
      }
    }
  }
}
