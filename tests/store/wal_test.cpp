// A -wal file deleted while rschedd records (issue 51, "a deleted -wal goes unnoticed"): SQLite
// keeps writing into the unlinked file, so a reader opened since fails and whatever was not yet
// checkpointed lives only in a file nobody can open again. The writer notices at the next
// interval, says so in one line, checkpoints into the database and starts a fresh -wal.
#include "store_test_util.hpp"

#include <sys/stat.h>

#include <fcntl.h>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

using namespace store_test;

namespace {

rsched::store::writer open_noting(const std::string &path, std::vector<std::string> &notes) {
  rsched::store::open_options o;
  o.note = [&notes](std::string_view s) { notes.emplace_back(s); };
  auto w = rsched::store::writer::open(path, o);
  INFO("error: " << (w.ok() ? std::string() : w.err().msg));
  REQUIRE(w.ok());
  return std::move(w).value();
}

rsched::store::interval_row interval(int i) {
  // Enough rows that an interval fills several pages of the WAL.
  std::vector<rsched::store::thread_row> threads;
  for (std::uint32_t t = 0; t < 40; ++t) {
    threads.push_back(make_thread(100 + t + 1000 * static_cast<std::uint32_t>(i),
                                  "w" + std::to_string(t), {1000, 2000, 4000 + t}));
  }
  return make_interval(1'795'183'200 * sec + i * 10 * sec, std::move(threads));
}

ino_t inode(const std::string &p) {
  struct stat st {};
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_ino;
}

// What a crash would leave: the database file and the -wal at its name, copied elsewhere and
// opened there, as the next start after a kill -9 would.
std::int64_t intervals_after_crash(temp_dir &dir, const std::string &path, const char *name) {
  const std::string copy = dir.file(name);
  write_file(copy, read_file(path));
  if (::access((path + "-wal").c_str(), F_OK) == 0) {
    write_file(copy + "-wal", read_file(path + "-wal"));
  }
  auto r = open_reader(copy);
  return scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0");
}

} // namespace

TEST_CASE("a deleted -wal is noticed at the next interval: one line, nothing lost", "[store]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::vector<std::string> notes;
  auto w = open_noting(path, notes);
  for (int i = 0; i < 5; ++i) {
    write_ok(w, interval(i));
  }
  REQUIRE(::unlink((path + "-wal").c_str()) == 0);
  for (int i = 5; i < 10; ++i) {
    write_ok(w, interval(i));
    REQUIRE(w.maintain(1'795'183'200 * sec + i * 10 * sec).ok());
  }
  // One warning line, naming the file.
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == path + "-wal was deleted or replaced while recording: what it held is "
                           "checkpointed into the database and a fresh one started\n");
  // A fresh -wal at the name, and every interval where a new connection finds it: now, and
  // after a crash (the database file and that -wal are all there is).
  CHECK(::access((path + "-wal").c_str(), F_OK) == 0);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0") == 10);
  CHECK(scalar_int(r, "SELECT count(DISTINCT tid) FROM sched_delay") == 400);
  CHECK(intervals_after_crash(dir, path, "crash.db") == 10);
  // A second deletion later is noticed again.
  REQUIRE(::unlink((path + "-wal").c_str()) == 0);
  write_ok(w, interval(10));
  CHECK(notes.size() == 2);
  CHECK(intervals_after_crash(dir, path, "crash2.db") == 11);
}

TEST_CASE("a deleted -wal with a reader in the way: each interval checkpointed until it leaves",
          "[store]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::vector<std::string> notes;
  auto w = open_noting(path, notes);
  write_ok(w, interval(0));
  {
    // A reader that opened before (rsched-sql left open): it holds the database, so the WAL
    // cannot be switched off and on.
    auto early = open_reader(path);
    CHECK(scalar_int(early, "SELECT count(*) FROM intervals WHERE tier = 0") == 1);
    REQUIRE(::unlink((path + "-wal").c_str()) == 0);
    for (int i = 1; i < 4; ++i) {
      write_ok(w, interval(i));
      // Each interval is in the database file as soon as it is written.
      CHECK(intervals_after_crash(dir, path, ("held" + std::to_string(i) + ".db").c_str()) ==
            i + 1);
    }
    CHECK(scalar_int(early, "SELECT count(*) FROM intervals WHERE tier = 0") == 4);
  }
  CHECK(notes.size() == 1);
  // The reader gone, the next interval starts a fresh -wal.
  write_ok(w, interval(4));
  write_ok(w, interval(5));
  CHECK(::access((path + "-wal").c_str(), F_OK) == 0);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0") == 6);
  CHECK(intervals_after_crash(dir, path, "after.db") == 6);
  CHECK(notes.size() == 1);
}

TEST_CASE("a -wal replaced by another file is noticed too", "[store]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::vector<std::string> notes;
  auto w = open_noting(path, notes);
  write_ok(w, interval(0));
  const ino_t before = inode(path + "-wal");
  REQUIRE(::rename((path + "-wal").c_str(), dir.file("moved-wal").c_str()) == 0);
  write_file(path + "-wal", ""); // an empty file in its place (a reader would make one)
  write_ok(w, interval(1));
  CHECK(notes.size() == 1);
  CHECK(inode(path + "-wal") != before);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0") == 2);
  CHECK(intervals_after_crash(dir, path, "crash.db") == 2);
}

// Issue 51, the -shm likewise: the writer kept mapping the unlinked file, a reader of another
// process made a second wal-index at the name, and a reader that may not create files in the
// directory (the readers' group) could not open the database until rschedd restarted.
TEST_CASE("a deleted -shm is noticed at the next interval: one line, a fresh one, nothing lost",
          "[store]") {
  temp_dir dir;
  const std::string path = dir.file("rsched.db");
  std::vector<std::string> notes;
  auto w = open_noting(path, notes);
  for (int i = 0; i < 3; ++i) {
    write_ok(w, interval(i));
  }
  const ino_t before = inode(path + "-shm");
  // Held open, so that the fresh file cannot get the deleted one's inode number.
  const int old_shm = ::open((path + "-shm").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(old_shm >= 0);
  REQUIRE(::unlink((path + "-shm").c_str()) == 0);
  for (int i = 3; i < 6; ++i) {
    write_ok(w, interval(i));
  }
  REQUIRE(notes.size() == 1);
  CHECK(notes[0] == path + "-shm was deleted or replaced while recording: the WAL is closed and "
                           "opened again, which starts a fresh one (readers that may not create "
                           "it cannot open the database without it)\n");
  // A fresh -shm at the name, the one the writer maps: a reader that may not create files finds
  // it and every interval.
  REQUIRE(::access((path + "-shm").c_str(), F_OK) == 0);
  CHECK(inode(path + "-shm") != before);
  ::close(old_shm);
  auto r = open_reader(path);
  CHECK(scalar_int(r, "SELECT count(*) FROM intervals WHERE tier = 0") == 6);
  CHECK(intervals_after_crash(dir, path, "crash.db") == 6);
  // Replaced by another file (as a reader of another process would make it): noticed again.
  r = open_reader(":memory:");
  const ino_t fresh = inode(path + "-shm");
  REQUIRE(::rename((path + "-shm").c_str(), dir.file("moved-shm").c_str()) == 0); // kept
  write_file(path + "-shm", "");
  write_ok(w, interval(6));
  CHECK(notes.size() == 2);
  CHECK(inode(path + "-shm") != fresh);
  auto again = open_reader(path);
  CHECK(scalar_int(again, "SELECT count(*) FROM intervals WHERE tier = 0") == 7);
}
