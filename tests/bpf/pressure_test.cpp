// The pressure group against the kernel: a process in a cgroup with a CPU quota of 10 % of one
// CPU spins; rschedd's cpu_throttling rows for that cgroup must hold the throttling the kernel
// counted (cpu.stat of the cpu controller: on this VM's hybrid layout the v1 controller at the
// cgroup's v2 path) and its CPU usage (cgroup v2 cpu.stat) must match the process's own run time.
#include "root_test_util.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <variant>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::as_int;

std::map<std::string, std::int64_t> stat_of(const std::string &file) {
  std::map<std::string, std::int64_t> out;
  std::ifstream in(file);
  std::string k;
  std::int64_t v = 0;
  while (in >> k >> v) {
    out[k] = v;
  }
  return out;
}

} // namespace

TEST_CASE("Pressure: a cgroup's CFS throttling and CPU usage as the kernel counts them",
          "[root][bpf][pressure]") {
  if (!test::bpf_available()) {
    return;
  }
  const std::string name = "rsched-throttle-" + std::to_string(getpid());
  test::hybrid_cgroup cg(name);
  cg.set_quota(10000);
  const std::string quota_stat = cg.cpu_dir() + "/cpu.stat";
  test::recording rec({"-i", "1", "-g", "latency,pressure"});
  // A child that joins the cgroup(s) and spins for 2.5 s: 10 % of a CPU is what it gets.
  int go[2];
  REQUIRE(pipe(go) == 0);
  const pid_t child = test::fork_child([&] {
    close(go[1]);
    char c = 0;
    if (read(go[0], &c, 1) != 1) {
      _exit(2);
    }
    const std::uint64_t end = test::mono_ns() + 2'500'000'000ULL;
    volatile std::uint64_t sink = 0;
    while (test::mono_ns() < end) {
      sink = sink + 1;
    }
    _exit(0);
  });
  close(go[0]);
  cg.add(child);
  auto before = stat_of(quota_stat);
  REQUIRE(write(go[1], "x", 1) == 1);
  close(go[1]);
  std::uint64_t exec_ns = 0;
  std::map<std::string, std::int64_t> after;
  test::read_zombie(child, 100ms, [&] {
    auto s = test::proc_schedstat(child);
    REQUIRE(s);
    exec_ns = s->exec_ns;
    after = stat_of(quota_stat);
  });
  std::this_thread::sleep_for(1200ms); // an interval after the child's end
  REQUIRE(rec.d.stop(SIGINT) == 0);

  const std::string &path = cg.path();
  const auto t =
      test::query_db(rec.db, "SELECT coalesce(sum(throttled), -1), "
                             "coalesce(sum(throttled_ns), -1), coalesce(sum(periods), -1), "
                             "coalesce(sum(usage_ns), -1) FROM cpu_throttling WHERE "
                             "cgroup = '" +
                                 path + "'");
  const std::int64_t kernel_throttled = after["nr_throttled"] - before["nr_throttled"];
  const std::int64_t kernel_ns = after.count("throttled_time") != 0
                                     ? after["throttled_time"] - before["throttled_time"]
                                     : (after["throttled_usec"] - before["throttled_usec"]) * 1000;
  INFO("recorded: throttled " << as_int(t[0][0]) << " periods, " << as_int(t[0][1])
                              << " ns, periods " << as_int(t[0][2]) << ", usage " << as_int(t[0][3])
                              << " ns; kernel: throttled " << kernel_throttled << " periods, "
                              << kernel_ns << " ns; the process ran " << exec_ns << " ns");
  REQUIRE(kernel_throttled > 10);
  // The recording covers the child's whole life (and a little of the cgroup's before it).
  CHECK(as_int(t[0][0]) >= kernel_throttled);
  CHECK(as_int(t[0][0]) <= kernel_throttled + 3);
  CHECK(as_int(t[0][1]) >= kernel_ns);
  CHECK(as_int(t[0][1]) <= kernel_ns + kernel_ns / 10 + 50'000'000);
  // The cgroup's CPU usage is the process's run time (10 % of 2.5 s, about 250 ms).
  CHECK(as_int(t[0][3]) >= static_cast<std::int64_t>(exec_ns) * 9 / 10);
  CHECK(as_int(t[0][3]) <= static_cast<std::int64_t>(exec_ns) * 11 / 10 + 5'000'000);
  CHECK(exec_ns < 500'000'000); // the quota held
  // The system's pressure is recorded every interval, and the cgroup's row sits under '/'.
  const auto sys = test::query_db(rec.db, "SELECT count(*), count(some_ns) FROM cpu_pressure WHERE "
                                          "cgroup = '/'");
  CHECK(as_int(sys[0][0]) >= 3);
  CHECK(as_int(sys[0][1]) == as_int(sys[0][0]));
}
