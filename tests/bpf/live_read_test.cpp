// A live thread's changes are read every interval, whichever way live threads are read: from the
// dirty list, by the task iterator, and with a dirty list too small for the interval (every read
// then falls back to the iterator). The thread's per-interval counts must add up to the kernel's
// own timeslice count, and it must have a row in every interval it was alive, not only at the
// periodic full read or at its exit.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;

namespace {

using test::mono_ns;

// Sleeps `period_ns` in a loop for `run_ns`: one wakeup, hence one scheduling delay, per period.
[[noreturn]] void sleeper(const char *name, std::uint64_t period_ns, std::uint64_t run_ns) {
  prctl(PR_SET_NAME, name);
  const std::uint64_t end = mono_ns() + run_ns;
  while (mono_ns() < end) {
    timespec ts{0, static_cast<long>(period_ns)};
    nanosleep(&ts, nullptr);
  }
  _exit(0);
}

std::vector<std::int64_t> counts_per_interval(const std::string &db, pid_t tid) {
  auto r = query::reader::open(db);
  REQUIRE(r.ok());
  std::vector<std::int64_t> out;
  query::result_sink sink;
  sink.on_columns = [](const std::vector<std::string> &) {};
  sink.on_row = [&](const std::vector<query::value> &row) {
    out.push_back(std::get<std::int64_t>(row[0]));
  };
  auto ok = r->exec(
      "SELECT count FROM sched_delay WHERE tid = " + std::to_string(tid) + " ORDER BY ts", sink);
  INFO((ok.ok() ? std::string() : ok.err().msg));
  REQUIRE(ok.ok());
  return out;
}

void run_live_read(const std::vector<std::string> &read_args, const std::string &banner,
                   bool expect_full_reads) {
  if (!test::bpf_available()) {
    return;
  }
  std::vector<std::string> args{"-i", "1", "--stats"};
  args.insert(args.end(), read_args.begin(), read_args.end());
  test::recording rec(args);

  // Background: 40 threads that change every 20 ms (more than a 16-entry list holds).
  std::vector<pid_t> noise;
  for (int i = 0; i < 40; ++i) {
    noise.push_back(
        test::fork_child([] { sleeper("rs-live-noise", 20'000'000, 5'500'000'000ULL); }));
  }
  // The thread under test: a wakeup every 10 ms for 4.5 s.
  const pid_t child = test::fork_child([] { sleeper("rs-live", 10'000'000, 4'500'000'000ULL); });
  std::uint64_t kernel = 0;
  test::read_zombie(child, 20ms, [&] {
    if (const auto s = test::proc_schedstat(child)) {
      kernel = s->timeslices;
    }
  });
  for (pid_t p : noise) {
    REQUIRE(waitpid(p, nullptr, 0) == p);
  }
  std::this_thread::sleep_for(1500ms);
  REQUIRE(rec.d.stop(SIGINT) == 0);
  const std::string err = rec.d.stderr_text();
  INFO(err);
  CHECK(err.find(banner) != std::string::npos);

  // Full reads: the first read of a run, then every 60th; with an overflowing list, every read.
  std::size_t lines = 0;
  std::size_t with_full = 0;
  for (std::size_t at = err.find("rschedd-stats:"); at != std::string::npos;
       at = err.find("rschedd-stats:", at + 1)) {
    const std::size_t f = err.find("full_reads=", at);
    REQUIRE(f != std::string::npos);
    ++lines;
    with_full += std::stoul(err.substr(f + 11)) > 0 ? 1U : 0U;
  }
  REQUIRE(lines >= 5);
  if (expect_full_reads) {
    CHECK(with_full >= 5); // each interval while the 40 background threads run (5.5 s)
  } else {
    CHECK(with_full <= 1);
  }

  const auto counts = counts_per_interval(rec.db, child);
  std::int64_t sum = 0;
  std::string per;
  for (auto c : counts) {
    sum += c;
    per += std::to_string(c) + " ";
  }
  INFO("kernel timeslices " << kernel << ", recorded per interval: " << per);
  // Alive for 4.5 s at 1 s intervals: at least 4 intervals hold its samples, and every interval
  // but its first and last saw ~100 wakeups (at least 50 here, on a loaded machine).
  REQUIRE(counts.size() >= 4);
  for (std::size_t i = 1; i + 1 < counts.size(); ++i) {
    CHECK(counts[i] >= 50);
  }
  REQUIRE(kernel > 200);
  // Every read, list or iterator, adds up to the zombie's count, read after its last switch.
  CHECK(sum == static_cast<std::int64_t>(kernel));
}

} // namespace

TEST_CASE("Dirty-list reads see a live thread every interval, matching the kernel's timeslices",
          "[root][bpf]") {
  run_live_read({"--live-read", "dirty-list"}, "(tp_btf mode, dirty-list reads)", false);
}

TEST_CASE("Iterator reads see a live thread every interval, matching the kernel's timeslices",
          "[root][bpf]") {
  run_live_read({"--live-read", "iterator"}, "(tp_btf mode, iterator reads)", false);
}

TEST_CASE("A dirty list too small for the interval falls back to reading every thread",
          "[root][bpf]") {
  run_live_read({"--live-read", "dirty-list", "--dirty-list-entries", "16"},
                "(tp_btf mode, dirty-list reads)", true);
}
