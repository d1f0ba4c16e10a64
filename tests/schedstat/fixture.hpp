#pragma once
// Loads a raw /proc/schedstat sample from tests/schedstat/data; compares the counters of a cpu
// line.
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

// Each of the nine counters of `got` equals the one of `want`, which lists them in the order of a
// cpuN line (yld_count, 0, sched_count, sched_goidle, ttwu_count, ttwu_local, rq_cpu_time_ns,
// run_delay_ns, pcount). One CHECK per counter, named when it fails.
inline void check_cpu_fields(const rsched::schedstat::cpu_fields &got,
                             const rsched::schedstat::cpu_fields &want) {
  for (const auto &f : rsched::schedstat::cpu_field_layout) {
    INFO(f.name);
    CHECK(got.*f.member == want.*f.member);
  }
}
