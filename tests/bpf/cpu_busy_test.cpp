// cpu_busy (a CPU's busy periods, from leaving idle to going idle again) against the kernel's
// own per-CPU time accounting in /proc/stat, and with cpu_idle covering the recording.
#include "rsched/query/reader.hpp"
#include "rsched/stats/histogram.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sched.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <variant>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::as_int;
using test::as_text;

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(static_cast<std::size_t>(cpu), &set);
  REQUIRE(sched_setaffinity(0, sizeof(set), &set) == 0);
}

void spin_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

} // namespace

TEST_CASE_METHOD(
    test::db_dir,
    "A CPU's busy periods add up to the busy time /proc/stat accounts to it, and with its "
    "idle periods to the recording",
    "[root][bpf][groups]") {
  if (!test::bpf_available()) {
    return;
  }
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    WARN("needs two CPUs");
    return;
  }
  const int cpu = 1;
  test::daemon d({"--db", db, "-i", "1", "-g", "sleep"});
  INFO(d.stderr_text());
  REQUIRE(d.wait_attached());
  // A thread on CPU 1 that is busy 4 ms out of every 10 for 3 s: about 300 busy periods of
  // 4 ms and 1.2 s busy in all (the rest of the system adds a little).
  test::cpu_times before{};
  test::cpu_times after{};
  std::thread worker([&] {
    pin_to(cpu);
    std::this_thread::sleep_for(100ms); // the migration settles
    before = test::proc_stat_cpu(cpu);
    for (int i = 0; i < 300; ++i) {
      spin_for(4ms);
      std::this_thread::sleep_for(6ms);
    }
    after = test::proc_stat_cpu(cpu);
  });
  worker.join();
  REQUIRE(d.stop(SIGINT) == 0);

  const auto busy =
      test::query_db(db, "SELECT coalesce(sum(count), 0), coalesce(sum(total_ns), 0), "
                         "hist_percentile(hist, 50) FROM cpu_busy WHERE cpu "
                         "= " +
                             std::to_string(cpu));
  const auto idle = test::query_db(
      db, "SELECT coalesce(sum(total_ns), 0) FROM cpu_idle WHERE cpu = " + std::to_string(cpu));
  const auto span = test::query_db(db, "SELECT sum(dur_ns) FROM intervals WHERE tier = 0");
  const std::int64_t periods = as_int(busy[0][0]);
  const std::int64_t busy_ns = as_int(busy[0][1]);
  const std::int64_t kernel_busy = after.busy - before.busy;
  const std::int64_t recorded = as_int(span[0][0]);
  INFO("busy periods " << periods << ", busy " << busy_ns << " ns (p50 " << as_int(busy[0][2])
                       << " ns); /proc/stat busy " << kernel_busy << " ns over the workload, "
                       << "idle " << (after.idle - before.idle) << " ns; cpu_idle "
                       << as_int(idle[0][0]) << " ns; recorded " << recorded << " ns");
  std::printf("cpu_busy: %lld periods, busy %lld ns; /proc/stat busy %lld ns, idle %lld ns over "
              "the workload; cpu_idle %lld ns; recorded %lld ns\n",
              static_cast<long long>(periods), static_cast<long long>(busy_ns),
              static_cast<long long>(kernel_busy), static_cast<long long>(after.idle - before.idle),
              static_cast<long long>(as_int(idle[0][0])), static_cast<long long>(recorded));
  // The worker's 6 ms sleeps leave CPU 1 idle 1.81-1.82 s of the 3 on a quiet machine (five
  // runs). Other work that fills part of them joins the worker's busy periods into fewer, longer
  // ones, and one still running when the recording stops stays open past its end, counted
  // nowhere (a period is counted when it ends): with `stress-ng --cpu 1 --cpu-load 30` on CPU 1
  // (idle 1.25 s) 228 periods, not 300; in one CI run, with clang-tidy beside the suite (idle
  // 1.26 s), 0.84 s of busy periods against 2.07 s. Such a machine is said, not failed.
  if (after.idle - before.idle < 1'500'000'000) {
    WARN("CPU 1 idled only " << (after.idle - before.idle) / 1'000'000
                             << " ms of the workload's 3 s, not 1.8 s (other work there): busy "
                                "periods not checked");
    return;
  }
  CHECK(periods >= 250); // one per wakeup of the worker (+ whatever else ran there)
  // The workload's busy time is inside the recording; the recording also holds a little more
  // (from attach to the first /proc/stat read, and after the last). /proc/stat counts in ticks
  // (10 ms) and charges IRQs in idle to busy: 10 % + 50 ms.
  CHECK(busy_ns >= kernel_busy - kernel_busy / 10 - 50'000'000);
  CHECK(busy_ns <= kernel_busy + kernel_busy / 10 + 300'000'000);
  // Every moment of the CPU is in an idle or a busy period, except the two periods open at the
  // ends of the recording. The periods may also cover time no interval does (from the programs'
  // attach to the first interval's start, the likely part): 50 ms of slack held for weeks; once,
  // in the whole root suite on a host switching at half last week's speed, 70.6 ms were over.
  const std::int64_t covered = busy_ns + as_int(idle[0][0]);
  CHECK(covered <= recorded + 150'000'000);
  CHECK(covered >= recorded - recorded / 10);
  // A 4 ms busy period is what the CPU mostly did: the median is in the bucket that holds 4 ms.
  const auto b4 = stats::bucket_bounds(stats::layout::latency,
                                       stats::slot_of(stats::layout::latency, 4'000'000));
  CHECK(static_cast<std::uint64_t>(as_int(busy[0][2])) >= b4.lo);
  CHECK(static_cast<std::uint64_t>(as_int(busy[0][2])) <= b4.hi);
}
