// Perf event resolution (upstream pmu.rs order and encodings, plus our software and generic
// hardware aliases), --perf-list text and cpulist parsing, against fake sysfs trees.
#include "rsched/collect/perf.hpp"

#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>
#include <linux/perf_event.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

using namespace rsched;
using namespace rsched::collect;
namespace fs = std::filesystem;

namespace {

// A sysfs-like tree in a temporary directory removed at scope exit.
class temp_tree {
public:
  temp_tree() = default;
  temp_tree(const temp_tree &) = delete;
  temp_tree &operator=(const temp_tree &) = delete;

  void write(const fs::path &rel, const std::string &content) const {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << content;
  }
  [[nodiscard]] const fs::path &root() const { return root_; }

private:
  rsched::test::temp_dir dir_{"rsched-perf"};
  const fs::path &root_ = dir_.path();
};

std::size_t lines(const std::string &s) {
  return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n'));
}

// A sysfs root where nothing exists: resolution must not depend on the machine running the test.
const fs::path no_sysfs = "/nonexistent-rsched-sysfs";

// An alias and the event it must resolve to without sysfs.
struct alias {
  const char *token;
  const char *name;
  std::uint32_t type;
  std::uint64_t config;
};

// Each alias resolves to its name, type and config, and none is "ipc".
void check_aliases(std::span<const alias> all) {
  for (const auto &w : all) {
    INFO(w.token);
    auto e = resolve_event(w.token, no_sysfs);
    REQUIRE(e.ok());
    CHECK(e->name == w.name);
    CHECK(e->type == w.type);
    CHECK(e->config == w.config);
    CHECK_FALSE(e->ipc);
  }
}

} // namespace

TEST_CASE("encode_amd_raw splits the event select over bits 0-7 and 32-35", "[perf]") {
  CHECK(encode_amd_raw(0x64, 0x09) == 0x0964);
  CHECK(encode_amd_raw(0x18e, 0x18) == 0x10000188eULL);
  CHECK(encode_amd_raw(0x43, 0xd8) == 0xd843);
  CHECK(encode_amd_raw(0xfff, 0xff) == 0xf0000ffffULL);
  CHECK(encode_amd_raw(0x1000, 0) == 0); // bits above 11 are dropped, as upstream
}

TEST_CASE("upstream's aliases resolve to its exact names and encodings", "[perf]") {
  auto ipc = resolve_event("ipc", no_sysfs);
  REQUIRE(ipc.ok());
  CHECK(ipc->ipc);
  CHECK(ipc->name == "ipc");

  const alias all[] = {
      {"l1d-miss", "L1D Read Misses", PERF_TYPE_HW_CACHE, 0x10000},
      {"l2-miss", "L2 Cache Misses", PERF_TYPE_RAW, encode_amd_raw(0x64, 0x09)},
      {"l1i-miss", "L1I Cache Misses", PERF_TYPE_RAW, 0x10000188eULL},
      {"l3-miss", "L3 Misses (DRAM Fills)", PERF_TYPE_RAW, encode_amd_raw(0x43, 0xd8)},
  };
  check_aliases(all);
  CHECK(resolve_event("l2-miss", no_sysfs)->config == 0x964);
  CHECK(resolve_event("l3-miss", no_sysfs)->config == 0xd843);
}

TEST_CASE("software and generic hardware aliases (our extension)", "[perf]") {
  const alias all[] = {
      {"cpu-clock", "cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK},
      {"task-clock", "task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
      {"context-switches", "context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"cs", "context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES},
      {"page-faults", "page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
      {"cpu-migrations", "cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS},
      {"minor-faults", "minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN},
      {"major-faults", "major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ},
      {"cycles", "cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
      {"instructions", "instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
      {"cache-misses", "cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
      {"branch-misses", "branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
  };
  check_aliases(all);
}

TEST_CASE("r<hex> is a raw event with the config verbatim", "[perf]") {
  auto e = resolve_event("r0964", no_sysfs);
  REQUIRE(e.ok());
  CHECK(e->type == PERF_TYPE_RAW);
  CHECK(e->config == 0x964);
  CHECK(e->name == "raw:0x964");

  auto big = resolve_event("rFFFFFFFFFFFFFFFF", no_sysfs);
  REQUIRE(big.ok());
  CHECK(big->config == 0xffffffffffffffffULL);
  CHECK(big->name == "raw:0xffffffffffffffff");

  CHECK(resolve_event("r0", no_sysfs)->name == "raw:0x0");

  for (const char *bad : {"r", "rxyz", "r12g4", "r0x964", "r10000000000000000", "r-1", "r 12"}) {
    INFO(bad);
    auto b = resolve_event(bad, no_sysfs);
    REQUIRE_FALSE(b.ok());
    CHECK(b.err().msg.find("unknown perf event") != std::string::npos);
    CHECK(b.err().msg.find('\n') == std::string::npos);
  }
  CHECK(resolve_event("rxyz", no_sysfs).err().msg.find("'xyz' is not a 64-bit hex number") !=
        std::string::npos);
}

TEST_CASE("sysfs events of the core PMU", "[perf]") {
  temp_tree t;
  const fs::path cpu = "bus/event_source/devices/cpu";
  t.write(cpu / "type", "8\n");
  t.write(cpu / "events/foo", "event=0x76,umask=0x3\n");
  t.write(cpu / "events/dec", "event=118,umask=3");
  t.write(cpu / "events/wide", "event=0x18e,umask=0x18,cmask=2,inv");
  t.write(cpu / "events/ref-cycles", "event=0x00,umask=0x03"); // starts with 'r', not hex
  t.write(cpu / "events/broken", "event=zz");
  t.write(cpu / "events/foo.unit", "Joules");

  SECTION("event= and umask= in hex or decimal, type from the PMU's type file") {
    auto foo = resolve_event("foo", t.root());
    REQUIRE(foo.ok());
    CHECK(foo->name == "foo");
    CHECK(foo->type == 8);
    CHECK(foo->config == encode_amd_raw(0x76, 0x3));
    CHECK(foo->config == 0x376);
    CHECK_FALSE(foo->ipc);

    auto dec = resolve_event("dec", t.root());
    REQUIRE(dec.ok());
    CHECK(dec->config == 0x376);

    auto wide = resolve_event("wide", t.root());
    REQUIRE(wide.ok());
    CHECK(wide->config == 0x10000188eULL); // other fields ignored, high event bits at 32-35

    auto ref = resolve_event("ref-cycles", t.root());
    REQUIRE(ref.ok());
    CHECK(ref->config == 0x300);
  }
  SECTION("an unparseable event file is an error that names it") {
    auto b = resolve_event("broken", t.root());
    REQUIRE_FALSE(b.ok());
    CHECK(b.err().msg.find("broken") != std::string::npos);
    CHECK(b.err().msg.find("event=zz") != std::string::npos);
    CHECK(b.err().msg.find('\n') == std::string::npos);
  }
  SECTION("aliases and raw events win over sysfs names") {
    t.write(cpu / "events/cycles", "event=0x76");
    t.write(cpu / "events/r12", "event=0x76");
    CHECK(resolve_event("cycles", t.root())->type == PERF_TYPE_HARDWARE);
    CHECK(resolve_event("r12", t.root())->type == PERF_TYPE_RAW);
    CHECK(resolve_event("r12", t.root())->config == 0x12);
  }
  SECTION("names cannot leave the events directory") {
    t.write(cpu / "type2", "event=0x1");
    CHECK_FALSE(resolve_event("../type2", t.root()).ok());
    CHECK_FALSE(resolve_event("..", t.root()).ok());
    CHECK_FALSE(resolve_event(".", t.root()).ok());
    CHECK_FALSE(resolve_event("", t.root()).ok());
  }
  SECTION("unknown names list the aliases and the sysfs directory, in one line") {
    auto u = resolve_event("nope", t.root());
    REQUIRE_FALSE(u.ok());
    const auto &msg = u.err().msg;
    INFO(msg);
    CHECK(msg.find("unknown perf event 'nope'") != std::string::npos);
    for (const char *name : {"ipc", "l1d-miss", "l2-miss", "l1i-miss", "l3-miss",
                             "context-switches", "cpu-clock", "cycles", "r<hex>"}) {
      CHECK(msg.find(name) != std::string::npos);
    }
    CHECK(msg.find("(5 here; see --perf-list)") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("upstream's /sys/devices/cpu path works too, the type falls back to 4", "[perf]") {
  temp_tree t;
  t.write("devices/cpu/events/foo", "event=0x76,umask=0x3");
  auto foo = resolve_event("foo", t.root());
  REQUIRE(foo.ok());
  CHECK(foo->type == PERF_TYPE_RAW);
  CHECK(foo->config == 0x376);
}

TEST_CASE("unknown names without a CPU PMU in sysfs", "[perf]") {
  auto u = resolve_event("l4-miss", no_sysfs);
  REQUIRE_FALSE(u.ok());
  CHECK(u.err().msg.find("none here: no CPU PMU in sysfs") != std::string::npos);
  CHECK(u.err().msg.find('\n') == std::string::npos);
  // Control bytes in the token cannot break the one-line error.
  auto c = resolve_event("a\nb\x1b[2J", no_sysfs);
  REQUIRE_FALSE(c.ok());
  CHECK(c.err().msg.find('\n') == std::string::npos);
  CHECK(c.err().msg.find('\x1b') == std::string::npos);
}

TEST_CASE("the perf-list text (--perf-list)", "[perf]") {
  SECTION("with a fake core PMU") {
    temp_tree t;
    const fs::path cpu = "bus/event_source/devices/cpu";
    t.write(cpu / "type", "4");
    t.write(cpu / "events/foo", "event=0x76,umask=0x3\n");
    t.write(cpu / "events/bar", "event=0x3c\n");
    t.write(cpu / "events/bar.scale", "1e-9\n");
    const std::string out = perf_list(t.root());
    INFO(out);
    CHECK(out.starts_with("Built-in perf event aliases:\n"
                          "  ipc          Instructions per cycle (user/kernel)\n"
                          "  l1d-miss     L1 data cache read misses (PERF_TYPE_HW_CACHE)\n"
                          "  l2-miss      L2 cache misses (AMD: event=0x64, umask=0x09)\n"
                          "  l1i-miss     L1 instruction cache misses (AMD: event=0x18e, "
                          "umask=0x18)\n"
                          "  l3-miss      L3 miss proxy / DRAM fills (AMD: event=0x43, "
                          "umask=0xd8)\n"));
    CHECK(out.find("  cs           Same as context-switches\n") != std::string::npos);
    CHECK(out.find("  context-switches Context switches (software)\n") != std::string::npos);
    CHECK(out.find("  cpu-clock    ") != std::string::npos);
    CHECK(out.find("\nRaw event format: r<hex> (e.g. r0964 for event=0x64, umask=0x09)\n") !=
          std::string::npos);
    const std::string sysfs = "\nSysfs events (" + (t.root() / "devices/cpu/events").string() +
                              "/):\n"
                              "  bar                            event=0x3c\n"
                              "  foo                            event=0x76,umask=0x3\n";
    CHECK(out.find(sysfs) != std::string::npos);
    CHECK(out.find("bar.scale") == std::string::npos);
    CHECK(out.ends_with("\nlibpfm4 event listing is not included (rsched accepts only the events "
                        "above)\n"));
  }
  SECTION("without a CPU PMU") {
    const std::string out = perf_list(no_sysfs);
    CHECK(out.find("/devices/cpu/events/):\n  (none: no CPU PMU in sysfs)\n") != std::string::npos);
    // 17 aliases + 2 headers + raw format + libpfm note + 3 blank lines + "(none...)".
    CHECK(lines(out) == 25);
  }
  SECTION("the default root prints upstream's heading") {
    CHECK(perf_list().find("\nSysfs events (/sys/devices/cpu/events/):\n") != std::string::npos);
  }
}

TEST_CASE("online cpus", "[perf]") {
  temp_tree t;
  t.write("devices/system/cpu/online", "0-1,4-5,7\n");
  auto on = online_cpus(t.root());
  REQUIRE(on.ok());
  CHECK(*on == std::vector<unsigned>{0, 1, 4, 5, 7});
  auto missing = online_cpus(no_sysfs);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.err().msg.find("devices/system/cpu/online") != std::string::npos);

  auto real = online_cpus();
  REQUIRE(real.ok());
  CHECK_FALSE(real->empty());
}

TEST_CASE("counter_set rejects bad requests before opening anything", "[perf]") {
  const std::vector<event_spec> nine(
      9, event_spec{"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES});
  auto too_many = counter_set::open(nine, false, {0});
  REQUIRE_FALSE(too_many.ok());
  CHECK(too_many.err().msg == "Too many generic perf events (9, max 8)");

  auto ipc_as_generic = counter_set::open({resolve_event("ipc", no_sysfs).value()}, false, {0});
  REQUIRE_FALSE(ipc_as_generic.ok());

  auto big_cpu = counter_set::open({nine[0]}, false, {1024});
  REQUIRE_FALSE(big_cpu.ok());
  CHECK(big_cpu.err().msg.find("cpu 1024") != std::string::npos);

  counter_set empty;
  CHECK(empty.fds().empty());
  CHECK(empty.slot_mask() == 0);
  auto times = empty.read_times();
  REQUIRE(times.ok());
  CHECK(times->empty());
}
