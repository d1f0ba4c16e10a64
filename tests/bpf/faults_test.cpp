// What rschedd leaves behind when things go wrong: kill -9 at random moments, a foreign file as
// the database, a bad option.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"
#include "support/temp_dir.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace rsched;
using namespace std::chrono_literals;

namespace {
using test::query_db;

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
} // namespace

TEST_CASE_METHOD(
    test::db_dir,
    "kill -9 at random moments: integrity holds, at most the interval in flight is lost, "
    "the next start appends",
    "[root][bpf][faults]") {
  if (!test::bpf_available()) {
    return;
  }
  std::mt19937 rng(20261122);
  std::int64_t prev_intervals = 0;
  for (int round = 0; round < 20; ++round) {
    test::daemon d({"--db", db, "-i", "1", "-g", "latency,slice,sleep"});
    INFO("round " << round << ": " << d.stderr_text());
    REQUIRE(d.wait_attached());
    // Between 0.2 and 2.2 s: sometimes before the first interval, sometimes mid-write.
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + rng() % 2000));
    REQUIRE(d.stop(SIGKILL) == -SIGKILL);
    const auto check = query_db(db, "PRAGMA integrity_check");
    REQUIRE(check.size() == 1);
    CHECK(std::get<std::string>(check[0][0]) == "ok");
    const auto n =
        std::get<std::int64_t>(query_db(db, "SELECT count(*) FROM intervals WHERE tier = 0")[0][0]);
    CHECK(n >= prev_intervals); // nothing committed was lost; the next start appended
    prev_intervals = n;
  }
  // 20 rounds of ~1.2 s on average with 1 s intervals: most rounds committed something.
  CHECK(prev_intervals >= 10);
  // Intervals are contiguous within each run and never overlap across runs.
  // (Raw intervals: rollup rows of the 1-minute tier sit between them in id order.)
  const auto overlaps =
      query_db(db, "SELECT count(*) FROM intervals a JOIN intervals b ON b.id = (SELECT min(id) "
                   "FROM intervals WHERE id > a.id AND tier = 0) WHERE a.tier = 0 AND "
                   "b.start_ns < a.start_ns + a.dur_ns - 1000000");
  CHECK(std::get<std::int64_t>(overlaps[0][0]) == 0);
}

TEST_CASE_METHOD(test::db_dir,
                 "a foreign file as the database: one-line error, exit 1, file untouched",
                 "[root][bpf][faults]") {
  if (!test::bpf_available()) {
    return;
  }
  for (const std::string &content :
       {std::string("this is not a database\n"), std::string(4096, '\x42'),
        std::string("SQLite format 3") + std::string(100, '\0')}) {
    const std::string path = dir + "/foreign.db";
    {
      std::ofstream out(path, std::ios::binary);
      out << content;
    }
    test::daemon d({"--db", path, "-r", "1"});
    const bool attached = d.wait_attached(5000);
    const int status = d.stop(0);
    INFO(d.stderr_text());
    CHECK_FALSE(attached);
    CHECK(status == 1);
    CHECK(d.stderr_text().find("rschedd: ") != std::string::npos);
    CHECK(std::count(d.stderr_text().begin(), d.stderr_text().end(), '\n') == 1);
    CHECK(slurp(path) == content);
  }
}
