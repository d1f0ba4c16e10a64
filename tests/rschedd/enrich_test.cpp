// The per-interval additions of enrich.hpp and the startup steps of startup.hpp, without root:
// schedstat from fixture files and a fake sysctl, the process's own health, the banner.
#include "rsched/rschedd/enrich.hpp"
#include "rsched/rschedd/options.hpp"
#include "rsched/rschedd/startup.hpp"

#include "../topology/fake_sysfs.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

using namespace rsched;
using namespace rsched::rschedd;
using rsched::test::temp_dir;

namespace {

std::string schedstat_fixture(const std::string &name) {
  // tests/rschedd/data (which need not exist) -> tests/schedstat/data
  const std::filesystem::path tests = std::filesystem::path(RSCHED_TEST_DATA_DIR).parent_path();
  return (tests.parent_path() / "schedstat" / "data" / name).string();
}

std::string read_all(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const store::schedstat_cpu_delta *cpu_field(const store::interval_row &row, std::uint32_t cpu,
                                            const std::string &field) {
  for (const auto &c : row.schedstat_cpu) {
    if (c.cpu == cpu && c.field == field) {
      return &c;
    }
  }
  return nullptr;
}

} // namespace

TEST_CASE("schedstat_feed: deltas between two reads, sysctl switched on and restored",
          "[rschedd]") {
  temp_dir dir;
  const std::string file = dir.file("schedstat");
  const std::string sysctl = dir.file("sched_schedstats");
  std::filesystem::copy_file(schedstat_fixture("schedstat_v17.txt"), file);
  std::ofstream(sysctl) << "0\n";
  {
    auto feed = schedstat_feed::open(file, sysctl);
    REQUIRE(feed);
    CHECK(read_all(sysctl) == "1");
    store::interval_row same;
    feed->add_to(same); // the same text again: nothing moved
    CHECK(same.schedstat_cpu.empty());
    CHECK(same.schedstat_domain.empty());

    std::filesystem::copy_file(schedstat_fixture("schedstat_v17_later.txt"), file,
                               std::filesystem::copy_options::overwrite_existing);
    store::interval_row row;
    feed->add_to(row);
    // cpu0's first line: yld_count 3706 -> 3715, pcount 4562708 -> 4580147.
    const auto *yld = cpu_field(row, 0, "yld_count");
    REQUIRE(yld != nullptr);
    CHECK(yld->delta == 9);
    const auto *pcount = cpu_field(row, 0, "pcount");
    REQUIRE(pcount != nullptr);
    CHECK(pcount->delta == 4580147 - 4562708);
    CHECK(cpu_field(row, 0, "legacy_zero") == nullptr); // zero deltas are not rows
    CHECK_FALSE(row.schedstat_domain.empty());
    CHECK(feed->live_table().find("yld_count") != std::string::npos);

    std::filesystem::remove(file); // a failed read adds nothing and keeps the baseline
    store::interval_row gone;
    feed->add_to(gone);
    CHECK(gone.schedstat_cpu.empty());
  }
  CHECK(read_all(sysctl) == "0"); // restored
}

TEST_CASE("schedstat_feed: a missing file is an error and leaves the sysctl as it was",
          "[rschedd]") {
  temp_dir dir;
  const std::string sysctl = dir.file("sched_schedstats");
  std::ofstream(sysctl) << "0\n";
  auto feed = schedstat_feed::open(dir.file("no-such-file"), sysctl);
  REQUIRE_FALSE(feed);
  CHECK(feed.err().msg.find("no-such-file") != std::string::npos);
  CHECK(read_all(sysctl) == "0");
  // Already on: never switched off afterwards.
  std::ofstream(sysctl, std::ios::trunc) << "1\n";
  const std::string file = dir.file("schedstat");
  std::filesystem::copy_file(schedstat_fixture("schedstat_v15.txt"), file);
  { REQUIRE(schedstat_feed::open(file, sysctl)); }
  CHECK(read_all(sysctl) == "1\n");
}

TEST_CASE("self_health: CPU time and RSS of this process, no BPF without a program", "[rschedd]") {
  self_health h(nullptr);
  volatile std::uint64_t spin = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    spin = spin + static_cast<std::uint64_t>(i);
  }
  store::interval_row row;
  h.add_to(row);
  REQUIRE(row.cpu_ns);
  CHECK(*row.cpu_ns > 0);
  REQUIRE(row.rss_bytes);
  CHECK(*row.rss_bytes > 1024 * 1024);
  CHECK_FALSE(row.bpf_run_ns);
  CHECK_FALSE(row.bpf_run_cnt);
}

TEST_CASE("open_perf: nothing without the perf group, an unknown event is bad usage", "[rschedd]") {
  group_selection g;
  auto none = open_perf(g, RSCHED_G_LATENCY);
  REQUIRE(none);
  CHECK(none->sets.empty());
  CHECK(none->slot_mask == 0);
  CHECK(none->notes.empty());
  g.events = {"no-such-event"};
  auto bad = open_perf(g, RSCHED_G_LATENCY | RSCHED_G_PERF);
  REQUIRE_FALSE(bad);
  CHECK(bad.err().errnum == EINVAL);
  CHECK(bad.err().msg.find("no-such-event") != std::string::npos);
}

TEST_CASE("banner: upstream's lines, hostile patterns escaped", "[rschedd]") {
  auto opt = parse_options({"-c", "post\x1b[2Jgres", "-p", "42", "-r", "5", "-g", "latency,slice"});
  REQUIRE(opt);
  const std::string b = banner(*opt);
  CHECK(b.rfind("Starting rsched\nOptions active:\n", 0) == 0);
  CHECK(b.find("  - Command pattern: post\\x1b[2Jgres\n") != std::string::npos);
  CHECK(b.find('\x1b') == std::string::npos);
  CHECK(b.find("  - PID: 42\n") != std::string::npos);
  CHECK(b.find("  - Runtime limit: 5 seconds\n") != std::string::npos);
  CHECK(b.find("  - Metric groups: latency, slice\n") != std::string::npos);
  auto plain = parse_options({"--no-db"});
  REQUIRE(plain);
  CHECK(banner(*plain) == "Starting rsched\n");
}

TEST_CASE("pressure_rows: the interval's threads' cgroups, their ancestors and the system",
          "[rschedd]") {
  pressure::readings prev{{"/", {1000, 0, 10, {}, {}, {}}},
                          {"/a", {10, 1, 5, 3, 1, 100}},
                          {"/a/b", {1, 1, 1, 1, 0, 0}},
                          {"/quiet", {0, 0, 0, {}, {}, {}}}};
  pressure::readings cur{{"/", {1500, 0, 30, {}, {}, {}}},
                         {"/a", {40, 1, 9, 8, 3, 400}},
                         {"/a/b", {6, 2, 2, 2, 0, 0}},
                         {"/quiet", {9, 0, 9, {}, {}, {}}}};
  store::thread_row t;
  t.cgroup = "/a/b";
  store::thread_row unknown; // cgroup "" : no row
  const auto rows = pressure_rows(prev, cur, {t, unknown});
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].cgroup == "/");
  CHECK(rows[0].some_ns == 500);
  CHECK_FALSE(rows[0].periods);
  CHECK(rows[1].cgroup == "/a");
  CHECK(rows[1].throttled == 2);
  CHECK(rows[1].throttled_ns == 300);
  CHECK(rows[2].cgroup == "/a/b");
  CHECK(rows[2].full_ns == 1);
}

TEST_CASE("machine_feed: the topology with the first interval and after hotplug, sched_ext "
          "every interval",
          "[rschedd]") {
  using rsched::topology::testing::fake_cpu;
  rsched::topology::testing::fake_sysfs sys;
  for (unsigned c = 0; c < 4; ++c) {
    fake_cpu f;
    f.package = 0;
    f.core = static_cast<int>(c);
    f.l3 = c < 2 ? "0-1" : "2-3";
    sys.cpu(c, f);
  }
  sys.node(0, "0-3");
  sys.write("devices/system/cpu/online", "0-3\n");
  std::vector<std::string> notes;
  machine_feed feed(sys.root(), [&](std::string_view s) { notes.emplace_back(s); });

  rsched::store::interval_row first;
  feed.add_to(first);
  REQUIRE(first.topology.size() == 4);
  CHECK(first.topology[1].llc == 0);
  CHECK(first.topology[2].llc == 1);
  CHECK(first.topology[3].node == 0);
  CHECK(first.topology[3].core == 3);
  CHECK_FALSE(first.sched_ext.has_value()); // no kernel/sched_ext: none

  rsched::store::interval_row second;
  feed.add_to(second);
  CHECK(second.topology.empty()); // unchanged: not read again

  // CPU 3 goes offline; a BPF scheduler is loaded.
  sys.write("devices/system/cpu/cpu3/online", "0\n");
  sys.write("devices/system/cpu/online", "0-2\n");
  sys.write("kernel/sched_ext/state", "enabled\n");
  sys.write("kernel/sched_ext/enable_seq", "1\n");
  sys.write("kernel/sched_ext/root/ops", "scx_lavd\n");
  rsched::store::interval_row third;
  feed.add_to(third);
  CHECK(third.topology.size() == 3);
  REQUIRE(third.sched_ext.has_value());
  CHECK(*third.sched_ext == rsched::store::sched_ext_row{"enabled", "scx_lavd", 1});

  // Passed again about once a minute (the writer keeps it only if the file lacks it).
  int resent = 0;
  for (int i = 0; i < 60; ++i) {
    rsched::store::interval_row r;
    feed.add_to(r);
    resent += r.topology.empty() ? 0 : 1;
    if (!r.topology.empty()) {
      CHECK(r.topology == third.topology);
    }
  }
  CHECK(resent == 1);
  CHECK(notes.empty());

  // A broken sched_ext directory: one note, recording goes on without the state.
  std::filesystem::remove(sys.root() / "kernel/sched_ext/state");
  for (int i = 0; i < 3; ++i) {
    rsched::store::interval_row r;
    feed.add_to(r);
    CHECK_FALSE(r.sched_ext.has_value());
  }
  REQUIRE(notes.size() == 1);
  CHECK(notes[0].find("sched_ext state not recorded") != std::string::npos);
}

// issue 32: "CPU pressure 101%". The PSI deltas are taken between reads that come a little after
// each interval's end, late by a varying amount: a delta can cover more than its interval.
TEST_CASE("pressure_feed: PSI stall times are fitted to the interval they are stored with",
          "[rschedd]") {
  rsched::test::temp_dir dir;
  const std::string psi = dir.file("cpu.pressure");
  const auto write_total = [&](std::uint64_t some_us) {
    std::ofstream(psi) << "some avg10=100.00 avg60=100.00 avg300=100.00 total=" << some_us
                       << "\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  };
  write_total(1'000'000);
  pressure::sources src;
  src.system_psi = psi;
  pressure_feed feed(src, nullptr);
  // A saturated machine: stalled all along the 40 ms between the reads; the interval the
  // recorder timed is 10 ms of it.
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  write_total(1'040'000);
  store::interval_row row;
  row.dur_ns = 10'000'000;
  feed.add_to(row);
  REQUIRE(row.cgroup_cpu.size() == 1);
  REQUIRE(row.cgroup_cpu[0].some_ns);
  CHECK(*row.cgroup_cpu[0].some_ns <= row.dur_ns);
  CHECK(*row.cgroup_cpu[0].some_ns > 5'000'000); // still most of it
  CHECK(row.cgroup_cpu[0].full_ns == 0);

  // The same, pure: scaled by the interval over the read span, at most the interval.
  std::vector<store::cgroup_cpu_row> rows(2);
  rows[0].some_ns = 1'012'000'000;
  rows[0].full_ns = 506'000'000;
  rows[0].usage_ns = 2'000'000'000;
  rows[1].some_ns = 500'000'000;
  fit_pressure(rows, 1'012'000'000, 1'000'000'000);
  CHECK(rows[0].some_ns == 1'000'000'000);
  CHECK(rows[0].full_ns == 500'000'000);
  CHECK(rows[0].usage_ns == 2'000'000'000); // CPU time: not a share of the interval
  CHECK(rows[1].some_ns == 494'071'146);
  fit_pressure(rows, 500'000'000, 1'000'000'000); // a short read span: never past the interval
  CHECK(rows[0].some_ns == 1'000'000'000);
  CHECK(rows[1].some_ns == 988'142'292);
  fit_pressure(rows, 0, 1'000'000'000); // no span: left as read
  CHECK(rows[1].some_ns == 988'142'292);
}
