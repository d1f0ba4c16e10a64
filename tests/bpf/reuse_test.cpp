// PID reuse within one interval or across intervals does not merge two threads' data: rows are
// keyed by (tid, task start time), and each thread's recorded count matches its own kernel
// accounting, even with the same name.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>
#include <unistd.h>

using namespace rsched;
using namespace std::chrono_literals;

namespace {
// Forks a child named `name` that sleeps and wakes `n` times; returns its pid and its final
// timeslice count read from the zombie.
std::pair<pid_t, std::uint64_t> run_child(const char *name, int n) {
  const pid_t p = test::fork_child([name, n] {
    prctl(PR_SET_NAME, name);
    for (int i = 0; i < n; ++i) {
      usleep(1000);
    }
  });
  std::uint64_t slices = 0;
  test::read_zombie(p, 10ms, [&] {
    if (const auto s = test::proc_schedstat(p)) {
      slices = s->timeslices;
    }
  });
  return {p, slices};
}
} // namespace

TEST_CASE("pid reuse within one interval and across intervals keeps two threads apart",
          "[root][bpf][reuse]") {
  if (!test::bpf_available()) {
    return;
  }
  // Both children have the same name: only the task start time tells them apart.
  for (const bool across : {false, true}) {
    INFO((across ? "across intervals" : "within one interval"));
    test::sysctl_guard delayacct("/proc/sys/kernel/task_delayacct", "1");
    // Within: one long interval holds both threads. Across: 1 s intervals and a pause between.
    test::recording rec({"-i", across ? "1" : "5"});
    const auto [pid_a, slices_a] = run_child("reuse", 100);
    if (across) {
      std::this_thread::sleep_for(2500ms);
    }
    // Ask the kernel for the same pid again (ns_last_pid = pid - 1); retry if another fork
    // wins.
    pid_t pid_b = 0;
    std::uint64_t slices_b = 0;
    for (int attempt = 0; attempt < 20 && pid_b != pid_a; ++attempt) {
      {
        std::ofstream last("/proc/sys/kernel/ns_last_pid");
        last << (pid_a - 1);
      }
      std::tie(pid_b, slices_b) = run_child("reuse", 60);
    }
    REQUIRE(pid_b == pid_a);
    std::this_thread::sleep_for(1500ms);
    REQUIRE(rec.d.stop(SIGINT) == 0);

    auto r = query::reader::open(rec.db);
    REQUIRE(r.ok());
    std::vector<std::pair<std::int64_t, std::int64_t>> rows; // (start time, samples)
    query::result_sink sink;
    sink.on_columns = [](const std::vector<std::string> &) {};
    sink.on_row = [&](const std::vector<query::value> &row) {
      rows.emplace_back(std::get<std::int64_t>(row[0]), std::get<std::int64_t>(row[1]));
    };
    // Per thread identity (raw rows: the rollups' group identity has tid 0), under every name
    // it had (a child's first switch-in is under the test's name, before it renames itself).
    REQUIRE(r->exec("SELECT t.start_time_ns, sum(h.count) "
                    "FROM thread_hist AS h JOIN thread AS t ON t.id = h.thread_id "
                    "WHERE h.metric = 1 AND t.tid = " +
                        std::to_string(pid_a) +
                        " GROUP BY t.start_time_ns ORDER BY t.start_time_ns",
                    sink)
                .ok());
    INFO("kernel timeslices: a " << slices_a << ", b " << slices_b);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].first < rows[1].first);
    // each thread's own count, not a merge (60-100 samples each; a merge would add the other's):
    // exactly the kernel's, read from each zombie after its last switch.
    CHECK(rows[0].second == static_cast<std::int64_t>(slices_a));
    CHECK(rows[1].second == static_cast<std::int64_t>(slices_b));
  }
}
