// The disk fills up under a running rschedd: the failed writes are reported once, the daemon keeps
// running, recording resumes by itself when space returns, and the lost time shows as a gap.
#include "rsched/query/reader.hpp"

#include "root_test_util.hpp"

#include <sys/mount.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace rsched;
using namespace std::chrono_literals;

namespace {
using test::query_db;

std::int64_t int_of(const query::value &v) {
  return std::holds_alternative<std::int64_t>(v) ? std::get<std::int64_t>(v) : -1;
}

// Threads that sleep and wake all the time, so that every interval has rows to write.
class sleepers {
public:
  explicit sleepers(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        while (!stop_.load()) {
          std::this_thread::sleep_for(1ms);
        }
      });
    }
  }
  ~sleepers() {
    stop_ = true;
    for (auto &t : threads_) {
      t.join();
    }
  }
  sleepers(const sleepers &) = delete;
  sleepers &operator=(const sleepers &) = delete;

private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

} // namespace

TEST_CASE("The disk fills up: failed writes are reported once, the daemon keeps running, "
          "recording resumes by itself and the lost time is a gap",
          "[root][bpf][faults]") {
  if (!test::bpf_available()) {
    return;
  }
  // Room for the database as it grows meanwhile: its WAL alone reaches 4 MiB before the first
  // checkpoint (1000 pages), and an interval of a busy machine takes hundreds of KiB.
  test::tmpfs_dir fs("64m");
  REQUIRE(fs.mounted());
  const std::string db = fs.mnt() + "/rsched.db";
  const std::string filler = fs.mnt() + "/filler";
  sleepers work(4);

  std::int64_t full_from = 0;
  std::int64_t full_until = 0;
  std::int64_t written_while_full = -1;
  {
    test::daemon d({"--db", db, "-i", "1", "-g", "latency,slice,sleep"});
    d.require(d.wait_attached(), "rschedd did not attach");
    d.require(test::wait_for_intervals(db, 1, 10s), "no intervals before the disk filled up");

    const std::int64_t filled = test::fill(filler);
    full_from = test::realtime_ns();
    d.require(filled > 0, "could not fill the tmpfs");
    INFO("filler: " << filled << " bytes");
    const std::int64_t n_full = test::raw_intervals(db);
    // Several intervals that cannot be written.
    std::this_thread::sleep_for(5s);
    written_while_full = test::raw_intervals(db) - n_full;

    std::filesystem::remove(filler);
    full_until = test::realtime_ns();
    const std::int64_t n_freed = test::raw_intervals(db);
    // Recording resumes by itself: a new interval within a few seconds, then more.
    d.require(test::wait_for_intervals(db, n_freed, 10s), "recording did not resume");
    d.require(test::wait_for_intervals(db, n_freed + 1, 10s), "recording did not go on");

    const int status = d.stop(SIGINT);
    const std::string &err = d.stderr_text();
    INFO("rschedd's stderr:\n" << err);
    REQUIRE(status == 0); // it stayed up, and an interrupt still ends it cleanly
    // One clear line per outage (a write that happened to fit in the meantime may end an outage
    // early: then the next failure is a new one and reported again).
    const std::string what = "rschedd: writing interval failed: ";
    const auto pos = err.find(what);
    REQUIRE(pos != std::string::npos);
    const std::string line = err.substr(pos, err.find('\n', pos) - pos);
    INFO("the message: " << line);
    CHECK(line.find("database or disk is full") != std::string::npos);
    CHECK(line.find(db) != std::string::npos);
    std::size_t reports = 0;
    for (auto p = err.find(what); p != std::string::npos; p = err.find(what, p + 1)) {
      ++reports;
    }
    CHECK(reports >= 1);
    CHECK(reports <= 3);
    CHECK(err.find("stopped after") != std::string::npos);
  }
  INFO("intervals committed while the disk was full: " << written_while_full);

  const auto check = query_db(db, "PRAGMA integrity_check");
  REQUIRE(check.size() == 1);
  CHECK(std::get<std::string>(check[0][0]) == "ok");

  // The largest hole between consecutive intervals is the time the disk was full.
  const auto hole = query_db(db, "SELECT a.start_ns + a.dur_ns, b.start_ns, "
                                 "b.start_ns - (a.start_ns + a.dur_ns) AS hole, b.flags "
                                 "FROM intervals a JOIN intervals b ON b.id = (SELECT min(id) FROM "
                                 "intervals WHERE id > a.id AND tier = 0) WHERE a.tier = 0 "
                                 "ORDER BY hole DESC LIMIT 1");
  REQUIRE(hole.size() == 1);
  const std::int64_t hole_start = int_of(hole[0][0]);
  const std::int64_t hole_end = int_of(hole[0][1]);
  const std::int64_t hole_ns = int_of(hole[0][2]);
  INFO("hole " << hole_start << " .. " << hole_end << " (" << hole_ns / 1'000'000
               << " ms); disk full " << full_from << " .. " << full_until << " ("
               << (full_until - full_from) / 1'000'000 << " ms)");
  CHECK(hole_ns >= 1'000'000'000);
  CHECK(hole_ns <= full_until - full_from + 5'000'000'000);
  // The hole lies around the time the disk was full: it starts with the first interval whose
  // write found the disk full (one that ended shortly before the filler completed, or earlier
  // when the daemon runs late), and ends with the interval that was running when space returned
  // (its write succeeds).
  CHECK(hole_start <= full_from + 1'000'000'000);
  CHECK(hole_start >= full_from - 5'000'000'000);
  CHECK(hole_end <= full_until + 1'000'000'000);
  CHECK(int_of(hole[0][3]) == 0); // the interval after the hole is an ordinary one
  // Nothing overlaps.
  // (Raw intervals: rollup rows of the 1-minute tier sit between them in id order.)
  const auto overlaps =
      query_db(db, "SELECT count(*) FROM intervals a JOIN intervals b ON b.id = (SELECT min(id) "
                   "FROM intervals WHERE id > a.id AND tier = 0) WHERE a.tier = 0 AND "
                   "b.start_ns < a.start_ns + a.dur_ns - 1000000");
  CHECK(int_of(overlaps[0][0]) == 0);

  // gaps() reports exactly that hole.
  const auto gaps = query_db(db, "SELECT ts, end_ts, dur, reason FROM gaps() "
                                 "ORDER BY dur DESC");
  REQUIRE_FALSE(gaps.empty());
  CHECK(int_of(gaps[0][0]) == hole_start);
  CHECK(int_of(gaps[0][1]) == hole_end);
  CHECK(int_of(gaps[0][2]) == hole_ns);
  // Its reason is the write failure, not "not recording" (issue 30): rschedd noted the lost span
  // in the database once writing worked again.
  const std::string reason = std::get<std::string>(gaps[0][3]);
  CHECK(reason.rfind("write failed: ", 0) == 0);
  CHECK(reason.find("database or disk is full") != std::string::npos);
  CHECK(reason.find("intervals lost)") != std::string::npos);
}
