// read_sched_ext against fake sysfs trees (this kernel has no sched_ext).
#include "rsched/collect/sched_ext.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>

using rsched::collect::read_sched_ext;
using rsched::collect::sched_ext_state;

namespace {
void put(const std::filesystem::path &p, const std::string &text) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}
} // namespace

TEST_CASE("sched_ext: a kernel without it reads as none", "[collect]") {
  const rsched::test::temp_dir tmp("rsched-scx");
  std::filesystem::create_directories(tmp.path() / "kernel");
  auto s = read_sched_ext(tmp.path());
  REQUIRE(s.ok());
  CHECK_FALSE(s->has_value());
}

TEST_CASE("sched_ext: state, the loaded scheduler and enable_seq", "[collect]") {
  const rsched::test::temp_dir tmp("rsched-scx");
  const auto dir = tmp.path() / "kernel" / "sched_ext";
  put(dir / "state", "disabled\n");
  put(dir / "enable_seq", "0\n");
  put(dir / "switch_all", "0\n");
  auto off = read_sched_ext(tmp.path());
  REQUIRE(off.ok());
  REQUIRE(off->has_value());
  CHECK(**off == sched_ext_state{"disabled", "", 0});

  put(dir / "state", "enabled\n");
  put(dir / "enable_seq", "3\n");
  put(dir / "root" / "ops", "scx_lavd_1.0.6_g9f3a_x86_64_unknown_linux_gnu\n");
  auto on = read_sched_ext(tmp.path());
  REQUIRE(on.ok());
  REQUIRE(on->has_value());
  CHECK(**on == sched_ext_state{"enabled", "scx_lavd_1.0.6_g9f3a_x86_64_unknown_linux_gnu", 3});

  // A name is whatever the scheduler called itself: kept as bytes.
  put(dir / "root" / "ops", std::string("evil\x1b[31m,\"x\"\xff\n"));
  auto odd = read_sched_ext(tmp.path());
  REQUIRE(odd.ok());
  CHECK((*odd)->ops == std::string("evil\x1b[31m,\"x\"\xff"));
}

TEST_CASE("sched_ext: a kernel before enable_seq, and broken files", "[collect]") {
  const rsched::test::temp_dir tmp("rsched-scx");
  const auto dir = tmp.path() / "kernel" / "sched_ext";
  put(dir / "state", "enabling\n");
  auto old = read_sched_ext(tmp.path());
  REQUIRE(old.ok());
  CHECK(**old == sched_ext_state{"enabling", "", 0});

  put(dir / "enable_seq", "many\x1b[2J\n");
  auto bad = read_sched_ext(tmp.path());
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(bad.err().msg, Catch::Contains("enable_seq: not a count"));
  CHECK(bad.err().msg.find('\x1b') == std::string::npos); // escaped for a terminal

  put(dir / "enable_seq", "2\n");
  std::filesystem::remove(dir / "state");
  auto none = read_sched_ext(tmp.path());
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.err().msg, Catch::Contains("state: missing or empty"));
}
