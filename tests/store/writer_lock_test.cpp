// One writer per database (issue 10): writer::open takes an exclusive lock that a second writer
// (in this process or another, through any path to the file) is refused on with the holder's pid,
// and that dies with its process (kill -9 included). Rollups stay exact even with a second writer
// forced past the lock. A database that cannot be written (read-only file system) or whose pages
// are damaged is refused at open with one line.
#include "rsched/query/reader.hpp"
#include "rsched/store/writer.hpp"

#include "root_guard.hpp"
#include "store_test_util.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <optional>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace store_test;
using rsched::store::open_options;
using rsched::store::retention;

namespace {

// A minute boundary (an hour boundary, too).
constexpr std::int64_t t0 = 1'699'999'200LL * sec;

std::string refused_by(const std::string &path, long pid) {
  return fmt::format("database {} is already being recorded by pid {} (one writer per database; "
                     "use --db to record elsewhere)",
                     path, pid);
}

std::string open_error(const std::string &path, const open_options &opt = {}) {
  auto w = writer::open(path, opt);
  REQUIRE_FALSE(w.ok());
  const std::string msg = w.err().msg;
  CHECK(msg.find('\n') == std::string::npos);
  return msg;
}

writer open_unlocked(const std::string &path) {
  open_options o;
  o.lock = false;
  auto w = writer::open(path, o);
  INFO("error: " << (w.ok() ? std::string() : w.err().msg));
  REQUIRE(w.ok());
  return std::move(w).value();
}

void settle(writer &w, std::int64_t now) {
  for (int i = 0; i < 1000; ++i) {
    auto r = w.maintain(now);
    INFO("maintain: " << (r.ok() ? std::string() : r.err().msg));
    REQUIRE(r.ok());
    if (r->idle()) {
      return;
    }
  }
  FAIL("maintenance never settled");
}

} // namespace

TEST_CASE("a second writer on the same database is refused with the holder's pid",
          "[store][lock]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::optional<writer> first = open_writer(path);

  CHECK(open_error(path) == refused_by(path, getpid()));

  // The same file through a symlink and a hard link is the same lock.
  const std::string sym = dir.file("link.db");
  fs::create_symlink(path, sym);
  CHECK(open_error(sym) == refused_by(sym, getpid()));
  const std::string hard = dir.file("hard.db");
  fs::create_hard_link(path, hard);
  CHECK(open_error(hard) == refused_by(hard, getpid()));

  // The first writer is untouched by the refusals.
  write_ok(*first, make_interval(t0, {make_thread(1, "a", {1000})}));

  first.reset();
  writer again = open_writer(sym);
  write_ok(again, make_interval(t0 + sec, {make_thread(1, "a", {1000})}));
  auto r = open_reader(path);
  CHECK(as_text(run(r, "SELECT value FROM meta WHERE key = 'writer_pid'").rows.at(0).at(0)) ==
        std::to_string(getpid()));
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 2);
}

TEST_CASE("the writer lock of a killed process is released", "[store][lock]") {
  temp_dir dir;
  const std::string path = dir.file("sub/rsched.db");
  int ready[2];
  REQUIRE(pipe2(ready, O_CLOEXEC) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::close(ready[0]);
    auto w = writer::open(path);
    const char c = w.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    for (;;) {
      pause();
    }
  }
  ::close(ready[1]);
  // Whatever fails below, the child does not outlive the test.
  struct reaper {
    pid_t pid;
    ~reaper() {
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
  } guard{child};
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  ::close(ready[0]);
  REQUIRE(c == 'y');

  const std::string held = open_error(path);
  kill(child, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  guard.pid = 0;
  REQUIRE(WIFSIGNALED(status));
  CHECK(held == refused_by(path, child));

  writer w = open_writer(path); // no stale lock
  auto r = open_reader(path);
  CHECK(as_text(run(r, "SELECT value FROM meta WHERE key = 'writer_pid'").rows.at(0).at(0)) ==
        std::to_string(getpid()));
}

// Writer A starts a maintenance call while a third connection holds the write lock, so A has
// begun its step and waits for the lock; writer B then builds the minutes; only then does A get
// the lock. Before the fix A decided on the bucket from tiers.built_ns read before its
// transaction and built every minute a second time; now it reads built_ns under the lock and
// finds them built.
TEST_CASE("two writers forced past the lock build each minute once", "[store][lock][rollup]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  writer a = open_unlocked(path);
  writer b = open_unlocked(path);
  a.set_retention(forever());
  b.set_retention(forever());
  // Three complete minutes of 10 s intervals, and one interval of the fourth.
  std::int64_t t = t0;
  for (std::uint64_t i = 0; t <= t0 + 3 * minute; t += 10 * sec, ++i) {
    write_ok(a, make_interval(t, {make_thread(1, "alpha", {1000 + i, 2000 + 3 * i}),
                                  make_thread(2, "beta", {50000 + i}),
                                  make_thread(3, "alpha", {7000})}));
  }
  const std::int64_t now = t;

  sqlite3 *blocker = nullptr;
  REQUIRE(sqlite3_open_v2(path.c_str(), &blocker, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_exec(blocker, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  std::string a_error;
  std::thread ta([&] {
    auto r = a.maintain(now);
    if (!r) {
      a_error = r.err().msg;
    }
  });
  // A has read what it reads before taking the write lock and now retries it, every 100 ms by
  // now (SQLite's busy handler); B takes the lock the moment it is free.
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  REQUIRE(sqlite3_exec(blocker, "COMMIT", nullptr, nullptr, nullptr) == SQLITE_OK);
  settle(b, now);
  ta.join();
  sqlite3_close(blocker);
  INFO("writer A: " << a_error);
  REQUIRE(a_error.empty());
  settle(a, now);
  settle(b, now);

  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 1") == 3);
  CHECK(scalar_int(r, "SELECT count(*) FROM (SELECT start_ns FROM intervals WHERE tier = 1 "
                      "GROUP BY start_ns, boot_id HAVING count(*) > 1)") == 0);
  CHECK(scalar_int(r, "SELECT count(*) FROM (SELECT ts, comm, cgroup FROM sched_delay_1m "
                      "GROUP BY ts, comm, cgroup HAVING count(*) > 1)") == 0);
  // Counts and totals of each (minute, comm) equal the sums of its raw rows.
  const std::string limit = std::to_string(t0 + 3 * minute);
  const auto raw = run(r, "SELECT ts - ts % 60000000000, comm, sum(count), sum(total_ns) FROM "
                          "sched_delay WHERE tier = 0 AND ts < " +
                              limit + " GROUP BY 1, 2 ORDER BY 1, 2");
  const auto m1 =
      run(r, "SELECT ts, comm, sum(count), sum(total_ns) FROM sched_delay_1m GROUP BY 1, 2 "
             "ORDER BY 1, 2");
  REQUIRE(raw.rows.size() == 6);
  CHECK(m1.rows == raw.rows);
}

TEST_CASE("a database with a damaged page is refused at open", "[store][lock]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  {
    writer w = open_writer(path);
    for (int i = 0; i < 200; ++i) {
      std::vector<rsched::store::thread_row> threads;
      for (std::uint32_t tid = 1; tid <= 20; ++tid) {
        threads.push_back(make_thread(tid, "t" + std::to_string(tid), {1000u * tid, 5000}));
      }
      write_ok(w, make_interval(t0 + i * 10 * sec, std::move(threads)));
    }
  }
  raw_exec(path, "PRAGMA wal_checkpoint(TRUNCATE)");
  std::int64_t page = 0;
  std::int64_t page_size = 0;
  {
    auto r = open_reader(path);
    page = scalar_int(r, "SELECT rootpage FROM sqlite_master WHERE name = 'thread_hist_pack'");
    page_size = scalar_int(r, "PRAGMA page_size");
    // Several pages: the root is an interior page, not read to open the file.
    REQUIRE(scalar_int(r, "SELECT count(*) FROM thread_hist") > 1000);
  }
  REQUIRE(page > 1);
  std::string bytes = read_file(path);
  // The b-tree page header: page type, first freeblock, cell count, cell content start.
  const auto at = static_cast<std::size_t>((page - 1) * page_size);
  REQUIRE(at + 16 < bytes.size());
  for (std::size_t i = 0; i < 8; ++i) {
    bytes[at + 1 + i] = static_cast<char>(0xA5);
  }
  write_file(path, bytes);

  const std::string msg = open_error(path);
  INFO(msg);
  CHECK(msg.rfind("database " + path + " is corrupt: ", 0) == 0);
  CHECK(read_file(path) == bytes); // a refused file is not modified
}

// Root: a read-only file system (as root, chmod does not stop a write; a read-only mount does).
TEST_CASE("a database on a read-only file system is refused at open", "[store][root]") {
  if (!rsched::test::root_available("store root test")) {
    return;
  }
  temp_dir dir;
  const std::string mnt = dir.file("mnt");
  fs::create_directories(mnt);
  REQUIRE(mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=16m,mode=0755") == 0);
  struct unmount {
    std::string at;
    ~unmount() { umount2(at.c_str(), MNT_DETACH); }
  } guard{mnt};
  const std::string path = mnt + "/rsched.db";
  {
    writer w = open_writer(path);
    write_ok(w, make_interval(t0, {make_thread(1, "a", {1000})}));
  }
  REQUIRE(mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=16m,mode=0755") == 0);
  CHECK(open_error(path) == "database " + path + " is not writable: Read-only file system");
  // A reader still opens it.
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals") == 1);
}
