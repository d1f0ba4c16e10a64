// topology::load on fake sysfs trees (one per machine shape) and on this machine's /sys.
#include "rsched/abi/sched_abi.h"
#include "rsched/topology/cpulist.hpp"
#include "rsched/topology/topology.hpp"

#include "fake_sysfs.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace rsched::topology;
using rsched::topology::testing::fake_cpu;
using rsched::topology::testing::fake_sysfs;

static_assert(max_cpus == RSCHED_MAX_CPUS, "topology tables must match the BPF tables");

namespace {

topology loaded(const fake_sysfs &fs) {
  auto r = load(fs.root());
  INFO("load error: " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  return r.value();
}

std::vector<unsigned> cpu_numbers(const topology &t) {
  std::vector<unsigned> out;
  for (const auto &c : t.cpus) {
    out.push_back(c.cpu);
  }
  return out;
}

// The error of loading the tree at `root`, which must fail.
std::string load_error(const std::filesystem::path &root) {
  const auto r = load(root);
  REQUIRE_FALSE(r.ok());
  return r.err().msg;
}

int die_of(const topology &t, unsigned cpu) {
  const auto c = t.find(cpu);
  REQUIRE(c.has_value());
  return c->die;
}

} // namespace

TEST_CASE("load: two sockets, two NUMA nodes, interleaved CPU numbers", "[topology]") {
  // Intel-style numbering: even CPUs on socket 0, odd on socket 1; one die per socket.
  fake_sysfs fs;
  for (unsigned cpu = 0; cpu < 8; ++cpu) {
    const int pkg = static_cast<int>(cpu % 2);
    const std::string mine = pkg == 0 ? "0,2,4,6" : "1,3,5,7";
    fs.cpu(cpu, {.online = cpu == 0 ? std::nullopt : std::optional<std::string>("1"),
                 .package = pkg,
                 .core = static_cast<int>(cpu / 2),
                 .die_id = 0,
                 .die_cpus_list = mine,
                 .l3 = mine,
                 .l2 = std::to_string(cpu)});
  }
  fs.node(0, "0,2,4,6");
  fs.node(1, "1,3,5,7");

  const auto t = loaded(fs);
  REQUIRE(t.cpus.size() == 8);
  CHECK(t.num_dies() == 2);
  CHECK(t.num_numa_nodes() == 2);
  CHECK(t.num_llcs() == 2);
  for (const auto &c : t.cpus) {
    INFO("cpu " << c.cpu);
    CHECK(c.package == static_cast<int>(c.cpu % 2));
    CHECK(c.core == static_cast<int>(c.cpu / 2));
    CHECK(c.die == static_cast<int>(c.cpu % 2));
    CHECK(c.numa == static_cast<int>(c.cpu % 2));
    CHECK(c.llc == static_cast<int>(c.cpu % 2)); // L3, not the per-CPU L2
  }
}

TEST_CASE("load: AMD-style single socket with 4 CCXs", "[topology]") {
  // 16 cores, 32 threads; CCX k holds cores 4k..4k+3 and their SMT siblings 16+4k..16+4k+3.
  fake_sysfs fs;
  auto ccx_list = [](unsigned k) {
    return std::to_string(4 * k) + "-" + std::to_string(4 * k + 3) + "," +
           std::to_string(16 + 4 * k) + "-" + std::to_string(16 + 4 * k + 3);
  };
  for (unsigned cpu = 0; cpu < 32; ++cpu) {
    const unsigned ccx = (cpu % 16) / 4;
    fs.cpu(cpu, {.online = "1",
                 .package = 0,
                 .core = static_cast<int>(cpu % 16),
                 .die_id = 0, // the kernel reports one die per package on Zen
                 .die_cpus_list = ccx_list(ccx),
                 .l3 = ccx_list(ccx)});
  }
  fs.node(0, "0-31");

  const auto t = loaded(fs);
  REQUIRE(t.cpus.size() == 32);
  CHECK(t.num_dies() == 4);
  CHECK(t.num_llcs() == 4);
  CHECK(t.num_numa_nodes() == 1);
  CHECK(die_of(t, 0) == 0);
  CHECK(die_of(t, 3) == 0);
  CHECK(die_of(t, 17) == 0); // SMT sibling of CPU 1
  CHECK(die_of(t, 4) == 1);
  CHECK(die_of(t, 20) == 1);
  CHECK(die_of(t, 12) == 3);
  CHECK(die_of(t, 31) == 3);
  for (const auto &c : t.cpus) {
    CHECK(c.llc == c.die);
  }
}

TEST_CASE("load: offline CPUs and non-contiguous numbers", "[topology]") {
  // CPUs 0, 1, 4, 5, 64, 65, 66 exist; cpu1, cpu65 and cpu66 are offline; cpu1024 and cpu2000 are
  // beyond max_cpus. No die_cpus_list: the die comes from (package, die_id). Only an L2 (no index3)
  // except cpu64, which has no cache information at all.
  fake_sysfs fs;
  fs.cpu(0, {.package = 0, .core = 0, .die_id = 0, .l2 = "0,4"});
  fs.cpu(1, {.online = "0", .package = 0, .core = 1, .die_id = 0, .l2 = "1"});
  fs.cpu(4, {.online = "1", .package = 0, .core = 4, .die_id = 0, .l2 = "0,4"});
  fs.cpu(5, {.online = "1", .package = 0, .core = 5, .die_id = 1, .l2 = "5"});
  fs.cpu(64, {.online = "1\n", .package = 0, .core = 64, .die_id = 1});
  // Only "1" means online; anything else (here an empty file) is treated as offline.
  fs.cpu(65, {.online = "", .package = 0, .core = 65, .die_id = 1});
  fs.cpu(66, {.online = "2", .package = 0, .core = 66, .die_id = 1});
  fs.cpu(1024, {.online = "1", .package = 9, .die_id = 9});
  fs.cpu(2000, {.online = "1", .package = 9, .die_id = 9});
  // Entries that are not CPUs.
  fs.write("devices/system/cpu/cpufreq/policy0/x", "1");
  fs.write("devices/system/cpu/cpuidle/current_driver", "none");
  fs.write("devices/system/cpu/online", "0,4-5,64");
  fs.write("devices/system/cpu/cpu01x/online", "1");
  fs.node(0, "0-1,4-5,64");

  const auto t = loaded(fs);
  CHECK(cpu_numbers(t) == std::vector<unsigned>{0, 4, 5, 64});
  CHECK_FALSE(t.find(1).has_value());
  CHECK_FALSE(t.find(1024).has_value());
  CHECK(die_of(t, 0) == 0);
  CHECK(die_of(t, 4) == 0);
  CHECK(die_of(t, 5) == 1);
  CHECK(die_of(t, 64) == 1);
  CHECK(t.num_dies() == 2);
  CHECK(t.find(0)->llc == 0);
  CHECK(t.find(4)->llc == 0);
  CHECK(t.find(5)->llc == 1);
  CHECK(t.find(64)->llc == 2);
  CHECK(t.find(64)->numa == 0);
}

TEST_CASE("load: no NUMA directory gives numa -1 everywhere", "[topology]") {
  fake_sysfs fs;
  for (unsigned cpu = 0; cpu < 4; ++cpu) {
    fs.cpu(cpu, {.package = 0,
                 .core = static_cast<int>(cpu),
                 .die_id = 0,
                 .die_cpus_list = "0-3",
                 .l3 = "0-3"});
  }
  const auto t = loaded(fs);
  REQUIRE(t.cpus.size() == 4);
  CHECK(t.num_numa_nodes() == 0);
  CHECK(t.num_dies() == 1);
  for (const auto &c : t.cpus) {
    CHECK(c.numa == -1);
    CHECK(c.die == 0);
  }
}

TEST_CASE("load: multi-socket AMD where die_id wraps per socket", "[topology]") {
  // 2 sockets x 2 CCX x 2 CPUs; die_id is 0,1 in each socket.
  auto build = [](fake_sysfs &fs, bool with_die_cpus_list) {
    for (unsigned cpu = 0; cpu < 8; ++cpu) {
      const unsigned group = cpu / 2;
      const std::string list = std::to_string(2 * group) + "-" + std::to_string(2 * group + 1);
      fake_cpu c{.online = "1",
                 .package = static_cast<int>(cpu / 4),
                 .core = static_cast<int>(cpu % 4),
                 .die_id = static_cast<int>(group % 2),
                 .l3 = list};
      if (with_die_cpus_list) {
        c.die_cpus_list = list;
      }
      fs.cpu(cpu, c);
    }
    fs.node(0, "0-3");
    fs.node(1, "4-7");
  };

  SECTION("grouped by die_cpus_list (upstream)") {
    fake_sysfs fs;
    build(fs, true);
    const auto t = loaded(fs);
    CHECK(t.num_dies() == 4);
    for (const auto &c : t.cpus) {
      CHECK(c.die == static_cast<int>(c.cpu / 2));
    }
  }
  SECTION("fallback keyed by (package, die_id) also keeps them apart (upstream would not)") {
    fake_sysfs fs;
    build(fs, false);
    const auto t = loaded(fs);
    CHECK(t.num_dies() == 4);
    for (const auto &c : t.cpus) {
      CHECK(c.die == static_cast<int>(c.cpu / 2));
    }
  }
}

TEST_CASE("load: group ids and fallback ids share one dense numbering", "[topology]") {
  // cpus 0-1 have die_cpus_list, 2-3 only die_id 0 (upstream would call both groups die 0).
  fake_sysfs fs;
  fs.cpu(0, {.package = 0, .die_id = 0, .die_cpus_list = "0-1"});
  fs.cpu(1, {.package = 0, .die_id = 0, .die_cpus_list = "0-1"});
  fs.cpu(2, {.package = 0, .die_id = 0});
  fs.cpu(3, {.package = 0, .die_id = 0});
  fs.cpu(4, {});             // no topology directory at all
  fs.cpu(5, {.package = 1}); // package only
  const auto t = loaded(fs);
  CHECK(die_of(t, 0) == 0);
  CHECK(die_of(t, 1) == 0);
  CHECK(die_of(t, 2) == 1);
  CHECK(die_of(t, 3) == 1);
  CHECK(die_of(t, 4) == -1);
  CHECK(die_of(t, 5) == 2);
  CHECK(t.num_dies() == 3);
  CHECK(t.find(4)->package == -1);
  CHECK(t.find(4)->core == -1);
}

TEST_CASE("load: errors name the path", "[topology]") {
  SECTION("missing root") {
    CHECK(load_error("/nonexistent/rsched-topology-root")
              .find("/nonexistent/rsched-topology-root/devices/system/cpu") != std::string::npos);
  }
  SECTION("no CPU at all") {
    fake_sysfs fs;
    CHECK(load_error(fs.root()).find("no online CPU") != std::string::npos);
  }
  SECTION("only offline CPUs") {
    fake_sysfs fs;
    fs.cpu(0, {.online = "0"});
    CHECK_FALSE(load(fs.root()).ok());
  }
  SECTION("malformed integer attribute") {
    fake_sysfs fs;
    fs.cpu(0, {.package = 0});
    fs.write("devices/system/cpu/cpu0/topology/core_id", "abc\n");
    CHECK(load_error(fs.root()).find("cpu0/topology/core_id") != std::string::npos);
  }
  SECTION("malformed cpulist attribute") {
    fake_sysfs fs;
    fs.cpu(0, {.package = 0, .die_cpus_list = "0-"});
    CHECK(load_error(fs.root()).find("die_cpus_list") != std::string::npos);
  }
  SECTION("malformed node cpulist") {
    fake_sysfs fs;
    fs.cpu(0, {.package = 0});
    fs.node(0, "zero");
    CHECK(load_error(fs.root()).find("node0/cpulist") != std::string::npos);
  }
  SECTION("CPU in two nodes") {
    fake_sysfs fs;
    fs.cpu(0, {.package = 0});
    fs.node(0, "0");
    fs.node(1, "0");
    CHECK_FALSE(load(fs.root()).ok());
  }
  SECTION("unreadable attribute (a directory where a file should be)") {
    fake_sysfs fs;
    fs.cpu(0, {.package = 0});
    std::filesystem::create_directories(fs.root() / "devices/system/cpu/cpu0/online");
    const auto r = load(fs.root());
    REQUIRE_FALSE(r.ok());
    CHECK(r.err().msg.find("cpu0/online") != std::string::npos);
    CHECK(r.err().errnum != 0);
  }
  SECTION("cpu<N> that is not a directory") {
    fake_sysfs fs;
    fs.cpu(0, {.package = 0});
    fs.write("devices/system/cpu/cpu1", "1");
    CHECK(load_error(fs.root()).find("cpu1") != std::string::npos);
  }
}

TEST_CASE("load: this machine's /sys", "[topology]") {
  const auto r = load();
  INFO("load error: " << (r.ok() ? std::string() : r.err().msg));
  REQUIRE(r.ok());
  const auto &t = r.value();
  REQUIRE_FALSE(t.cpus.empty());
  // Same set of CPUs as the kernel's own online mask (below max_cpus).
  std::ifstream f("/sys/devices/system/cpu/online");
  std::stringstream ss;
  ss << f.rdbuf();
  const auto online = parse_cpulist(ss.str());
  REQUIRE(online.ok());
  std::vector<unsigned> expected;
  for (unsigned c : online.value()) {
    if (c < max_cpus) {
      expected.push_back(c);
    }
  }
  CHECK(cpu_numbers(t) == expected);
  CHECK(t.num_llcs() >= 1);
  for (const auto &c : t.cpus) {
    CHECK(c.llc >= 0);
  }
}
