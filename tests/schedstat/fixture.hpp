#pragma once
// Loads a raw /proc/schedstat sample from tests/schedstat/data.
#include "rsched/schedstat/schedstat.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>
#include <string>

inline std::string fixture_path(const std::string &name) {
  return std::string(RSCHED_TEST_DATA_DIR) + "/" + name;
}

inline std::string fixture_text(const std::string &name) {
  std::ifstream in(fixture_path(name), std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline rsched::schedstat::snapshot fixture_snapshot(const std::string &name) {
  auto r = rsched::schedstat::parse(fixture_text(name));
  INFO((r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return std::move(r).value();
}
