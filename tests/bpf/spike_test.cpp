// A recording with an injected spike (a burst of CPU hogs for a few seconds): spikes() finds that
// window and names the hogs, compare() ranks them first.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <thread>
#include <unistd.h>

using namespace rsched;
using namespace std::chrono_literals;

namespace {
using test::query_db;

} // namespace

TEST_CASE_METHOD(test::db_dir,
                 "spikes() finds an injected burst of CPU hogs and compare() ranks them first",
                 "[root][bpf][spike]") {
  if (!test::bpf_available()) {
    return;
  }
  test::daemon d({"--db", db, "-i", "1"});
  INFO(d.stderr_text());
  REQUIRE(d.wait_attached());
  std::this_thread::sleep_for(3s); // quiet baseline
  const std::int64_t burst_start = test::realtime_ns();
  std::vector<pid_t> hogs;
  for (int i = 0; i < 6; ++i) { // 6 busy loops on 2 CPUs: each waits for the others' slices
    hogs.push_back(test::fork_child([] {
      prctl(PR_SET_NAME, "rs-hog");
      volatile std::uint64_t x = 0;
      for (;;) {
        x = x + 1;
      }
    }));
  }
  std::this_thread::sleep_for(4s);
  for (pid_t p : hogs) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  const std::int64_t burst_end = test::realtime_ns();
  std::this_thread::sleep_for(3s); // quiet again
  REQUIRE(d.stop(SIGINT) == 0);

  // Per comm (the default) and merged over every thread: the spike that overlaps the burst is
  // the hogs'. Per comm, other comms may spike too while the hogs hold the CPUs.
  for (const char *by : {"comm", "all"}) {
    const auto spikes =
        query_db(db, std::string("SELECT ts, end_ts, top_comms, victim, cause FROM "
                                 "spikes('sched_delay', '3ms', NULL, NULL, NULL, '") +
                         by + "')");
    REQUIRE_FALSE(spikes.empty());
    bool found = false;
    for (const auto &s : spikes) {
      const auto start = std::get<std::int64_t>(s[0]);
      const auto end = std::get<std::int64_t>(s[1]);
      const auto &top = std::get<std::string>(s[2]);
      const auto &victim = std::get<std::string>(s[3]);
      INFO(by << ": spike " << start << ".." << end << " top " << top << " victim " << victim
              << " cause " << std::get<std::string>(s[4]));
      if (start < burst_end && end > burst_start && (victim == "rs-hog" || victim == "all")) {
        found = true;
        CHECK(top.rfind("rs-hog", 0) == 0);
        CHECK(end - start >= 2'000'000'000); // most of the 4 s burst
        // The default groups record CPU pressure: the cause names it.
        CHECK(std::get<std::string>(s[4]).find("CPU pressure") != std::string::npos);
      }
    }
    CHECK(found);
  }
  // compare() takes every interval that overlaps a window: the baseline window ends 1.1 s
  // before the burst so that the 1 s interval holding its start is not in both windows.
  const auto cmp = query_db(
      db, "SELECT key FROM compare(" + std::to_string(burst_start - 3'500'000'000) + ", " +
              std::to_string(burst_start - 1'100'000'000) + ", " + std::to_string(burst_start) +
              ", " + std::to_string(burst_end) + ") LIMIT 1");
  REQUIRE(cmp.size() == 1);
  CHECK(std::get<std::string>(cmp[0][0]) == "rs-hog");
}
