#pragma once
// The database file the writer opens (private to the store module): its directories and file
// mode, the one-writer lock, the start-up integrity check and the first write.
#include "rsched/base/result.hpp"

#include <sys/types.h>

#include <array>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;

namespace rsched::store::detail {

bool is_memory(const std::string &path);
std::string errno_text(int e);
// SQLITE_CORRUPT or SQLITE_NOTADB (extended codes included).
bool is_corrupt(int rc);
// `s` with its newlines turned into "; " (SQLite's multi-line messages as one line).
std::string one_line(std::string s);

// Creates the missing directories of `dir`, each with mode 0750 (chmod'ed explicitly so that the
// daemon's umask does not matter). Existing directories are left as they are. true when `dir`
// itself was created.
result<bool> make_dirs(const std::filesystem::path &dir);

// Creates the database file with mode 0640 when it does not exist. SQLite gives its -wal and
// -shm files the mode (and, as root, the owner) of the database file, so they follow.
result<void> create_file(const std::string &path);

// Where the writer opens the database at `path` (docs/ARCHITECTURE.md, "Databases in shared
// places"): the place is checked (rsched::database_place, `group` the readers' group) before
// anything is created, then the missing directories (make_dirs) and the file (create_file, O_EXCL
// and O_NOFOLLOW) are created and the place checked again. The path to open, links resolved, or
// one line ("refusing database PATH: ...") with nothing created. `dir_is_ours`: the directory is
// rschedd's own (it created it, or it is the default one), for share_with_group.
result<std::string> open_place(const std::string &path, std::optional<gid_t> group,
                               bool &dir_is_ours);

// After SQLite has opened the database at `real` (`path` as named) and, by a first read, its -wal
// and -shm: the same check as open_place's on what is at those names now, both present. Refused:
// the connection is set to close without a checkpoint (nothing SQLite read from a foreign -wal
// reaches the database) and the error says why.
result<void> check_opened(sqlite3 *h, const std::string &path, const std::string &real,
                          std::optional<gid_t> group);

// Gives the database at `path`, its -wal and -shm files (those that exist) the group `gid` with
// group read, and its directory group read and search when that is rschedd's own (`dir_is_ours`:
// created by it, or the default directory; or already of that group) and private (owned by
// this user, group root's or `gid`, nothing for others). Files owned by another user, links and
// anything swapped in after the check are left alone. docs/SCHEMA.md, "Who can read the
// history".
result<void> share_with_group(const std::string &path, gid_t gid, bool dir_is_ours);

// The writer lock (one writer per database, docs/SCHEMA.md "One writer per database"; how it
// works: writer_file.cpp). Released when destroyed.
class writer_lock {
public:
  writer_lock() = default;
  explicit writer_lock(int fd) : fd_(fd) {}
  writer_lock(writer_lock &&o) noexcept;
  writer_lock &operator=(writer_lock &&o) noexcept;
  writer_lock(const writer_lock &) = delete;
  writer_lock &operator=(const writer_lock &) = delete;
  ~writer_lock() { reset(); }

  // Takes the lock of the database file at `real` (which exists; opened O_NOFOLLOW and checked
  // with fstat to be a regular file of root's or ours), or says who holds it. Messages name
  // `path`, the database as the user named it.
  static result<writer_lock> take(const std::string &real, const std::string &path);

private:
  static int set(int fd, int type, off_t start, off_t len);
  void reset();
  int fd_ = -1;
};

// PRAGMA quick_check, stopped after a time budget (a large file is then checked in part): the
// first problem it reports, or nothing for a file that looks sound.
result<void> quick_check(sqlite3 *h, const std::string &path);

// The writer's first write, at open: records its pid in meta (`writer_pid`) and so shows that the
// file can be written at all (a read-only file system, a damaged page the write touches) before
// the daemon starts recording.
result<void> record_writer(sqlite3 *h, const std::string &path);

// The -wal file the writer's connection writes into, and the -shm it maps. A -wal deleted while
// the connection is open (a clean-up script, an operator) goes unnoticed by SQLite: the connection
// keeps writing into the unlinked file, a reader opened since fails with "disk I/O error" (and
// creates an empty -wal of its own at the name), and whatever was not yet checkpointed into the
// database would die with the process. A -shm deleted likewise: the writer keeps its mapping of
// the unlinked one, a reader of another process makes a new one at the name that the writer
// never sees (two wal-indexes of one WAL), and a reader that may not create files in the
// directory (the readers' group) cannot open the database at all. The writer checks both names
// against the files it opened before each interval (two stats) and, when one changed, notes one
// line, checkpoints everything into the database (through the descriptors it still holds) and
// closes and opens the WAL, which starts fresh files at the names.
class wal_watch {
public:
  wal_watch() = default; // watches nothing (an in-memory database)
  // Watches the -wal and -shm files of `h`'s main database as they are now.
  explicit wal_watch(sqlite3 *h);
  // Before an interval: when the -wal or -shm at its name is not the file opened (deleted, or
  // another in its place), `note` gets one line naming it (the first time), the WAL is
  // checkpointed into the database (TRUNCATE) and switched off and on again, which opens fresh
  // ones. That switch needs the database to itself: while a reader holds it, every call
  // checkpoints again and retries, and after_write() checkpoints each interval as soon as it is
  // written.
  void check(sqlite3 *h, const std::function<void(std::string_view)> &note);
  void after_write(sqlite3 *h);
  [[nodiscard]] bool lost() const { return lost_; }

private:
  struct watched {
    std::string path;
    bool known = false; // the file was there when watching began (or since the last renewal)
    dev_t dev = 0;
    ino_t ino = 0;
  };
  void renew(sqlite3 *h);
  std::array<watched, 2> files_; // -wal, -shm
  bool lost_ = false;
};

} // namespace rsched::store::detail
