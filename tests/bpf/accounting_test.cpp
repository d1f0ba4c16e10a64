// rschedd's recorded scheduling delay with --delay-clock runqueue against the kernel's own
// accounting (run_delay and the timeslice count of /proc/<pid>/schedstat), per thread, including
// threads that exit before recording stops. (The default monotonic clock is checked against an
// independent monotonic measurement in attribution_test.cpp.)
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <unistd.h>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::mono_ns;

// A CPU-hungry child: bursts of spinning with short sleeps in between, so that it is woken often,
// preempted often and waits on a saturated runqueue.
[[noreturn]] void child_work(int idx, std::uint64_t run_ns) {
  const std::string name = "rs-acct-" + std::to_string(idx);
  prctl(PR_SET_NAME, name.c_str());
  const std::uint64_t end = mono_ns() + run_ns;
  const std::uint64_t spin_ns = 200'000 + static_cast<std::uint64_t>(idx) * 150'000;
  volatile std::uint64_t sink = 0;
  while (mono_ns() < end) {
    const std::uint64_t until = mono_ns() + spin_ns;
    while (mono_ns() < until) {
      sink = sink + 1;
    }
    if (idx % 3 != 2) { // every third child never sleeps: it is only ever preempted
      timespec ts{0, 100'000 * (idx % 3 + 1)};
      nanosleep(&ts, nullptr);
    }
  }
  _exit(0);
}

struct ours {
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
};

std::map<std::int64_t, ours> recorded(const std::string &db) {
  auto r = query::reader::open(db);
  REQUIRE(r.ok());
  std::map<std::int64_t, ours> out;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    out[std::get<std::int64_t>(row[0])] = {
        static_cast<std::uint64_t>(std::get<std::int64_t>(row[1])),
        static_cast<std::uint64_t>(std::get<std::int64_t>(row[2]))};
  };
  // Every comm: a child's first samples are under the test's name until it renames itself.
  auto ok = r->exec("SELECT tid, sum(count), sum(total_ns) FROM sched_delay GROUP BY tid", sink);
  INFO((ok.ok() ? std::string() : ok.err().msg));
  REQUIRE(ok.ok());
  return out;
}

void run_accounting(const std::string &mode) {
  if (!test::bpf_available()) {
    return;
  }
  test::sysctl_guard delayacct("/proc/sys/kernel/task_delayacct", "1");
  test::recording rec({"-i", "1", "--bpf-mode", mode, "--delay-clock", "runqueue"});

  // 6 children on 2 CPUs: 3 exit after 1.2 s (well before recording stops), 3 after 3 s.
  const int nchildren = 6;
  std::vector<pid_t> pids;
  pids.reserve(nchildren);
  for (int i = 0; i < nchildren; ++i) {
    pids.push_back(
        test::fork_child([i] { child_work(i, i < 3 ? 1'200'000'000ULL : 3'000'000'000ULL); }));
  }
  // Ground truth from each zombie before it is reaped: its final kernel accounting.
  std::map<std::int64_t, test::schedstat> kernel;
  for (pid_t p : pids) {
    test::read_zombie(p, 20ms, [&] {
      auto t = test::proc_schedstat(p);
      REQUIRE(t.has_value());
      kernel[p] = *t;
    });
  }
  std::this_thread::sleep_for(1500ms); // at least one more interval after the last exit
  REQUIRE(rec.d.stop(SIGINT) == 0);

  const auto got = recorded(rec.db);
  for (const auto &[pid, k] : kernel) {
    INFO("mode " << mode << " pid " << pid << ": kernel run_delay " << k.run_delay_ns
                 << " ns, timeslices " << k.timeslices);
    REQUIRE(k.timeslices > 50); // the workload really did switch a lot
    REQUIRE(k.run_delay_ns > 10'000'000);
    auto it = got.find(pid);
    REQUIRE(it != got.end());
    const auto &o = it->second;
    INFO("recorded total " << o.total_ns << " ns, count " << o.count);
    const double delay_err =
        std::fabs(static_cast<double>(o.total_ns) - static_cast<double>(k.run_delay_ns)) /
        static_cast<double>(k.run_delay_ns);
    const double count_err =
        std::fabs(static_cast<double>(o.count) - static_cast<double>(k.timeslices)) /
        static_cast<double>(k.timeslices);
    std::printf("accounting[%s] pid %lld: run_delay kernel %llu ns, recorded %llu ns (%.2f%%); "
                "timeslices kernel %llu, recorded %llu (%.2f%%)\n",
                mode.c_str(), static_cast<long long>(pid),
                static_cast<unsigned long long>(k.run_delay_ns),
                static_cast<unsigned long long>(o.total_ns), delay_err * 100,
                static_cast<unsigned long long>(k.timeslices),
                static_cast<unsigned long long>(o.count), count_err * 100);
    CHECK(delay_err <= 0.05);
    // A few of the switch-ins the kernel counts per thread are missing, in both modes: 0 to 7 a
    // thread in 1.2 or 3 s of this overload, whether the thread made 80 or 3,400 of them (4 of
    // 333 in one CI run). No drop counter moves and bpftool shows no recursion misses; the cause
    // is not known. So the bound is a share or a handful, whichever is larger: a lost class of
    // switch-ins (every wakeup, every preemption) is hundreds. raw_tp (the fallback mode) misses
    // a few more (tests/bpf/attribution_test.cpp, missing_allowed).
    const double share = mode == "raw_tp" ? 0.03 : 0.01;
    const double allowed = std::max(share * static_cast<double>(k.timeslices), 8.0) /
                           static_cast<double>(k.timeslices);
    INFO("count error " << count_err << ", allowed " << allowed);
    CHECK(count_err <= allowed);
  }
  const auto clocks =
      test::query_db(rec.db, "SELECT DISTINCT delay_clock FROM intervals WHERE tier = 0");
  REQUIRE(clocks.size() == 1);
  CHECK(std::get<std::string>(clocks[0][0]) == "runqueue");
}

} // namespace

TEST_CASE(
    "--delay-clock runqueue: recorded delay matches the kernel's run_delay per thread (tp_btf)",
    "[root][bpf]") {
  run_accounting("tp_btf");
}

TEST_CASE(
    "--delay-clock runqueue: recorded delay matches the kernel's run_delay per thread (raw_tp)",
    "[root][bpf]") {
  run_accounting("raw_tp");
}
