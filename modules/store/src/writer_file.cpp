#include "writer_file.hpp"

#include "rsched/base/safe_file.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/records.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <mutex>
#include <sqlite3.h>
#include <thread>
#include <unistd.h>
#include <utility>

namespace rsched::store::detail {

namespace {
constexpr mode_t dir_mode = 0750;
constexpr mode_t file_mode = 0640;
} // namespace

bool is_memory(const std::string &path) {
  return path == ":memory:";
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// Creates the missing directories of `dir`, each with mode 0750 (chmod'ed explicitly so that the
// daemon's umask does not matter). Existing directories are left as they are.
result<bool> make_dirs(const std::filesystem::path &dir) {
  if (dir.empty()) {
    return false;
  }
  std::filesystem::path cur;
  bool created = false;
  for (const auto &part : dir) {
    created = false;
    cur /= part;
    struct stat st {};
    if (stat(cur.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return make_error(fmt::format("{}: not a directory", cur.string()), ENOTDIR);
      }
      continue;
    }
    if (mkdir(cur.c_str(), dir_mode) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      const int e = errno;
      return make_error(fmt::format("{}: cannot create directory: {}", cur.string(), errno_text(e)),
                        e);
    }
    if (chmod(cur.c_str(), dir_mode) != 0) {
      const int e = errno;
      return make_error(fmt::format("{}: chmod: {}", cur.string(), errno_text(e)), e);
    }
  }
  return created;
}

// Creates the database file with mode 0640 when it does not exist. SQLite gives its -wal and
// -shm files the mode (and, as root, the owner) of the database file, so they follow.
result<void> create_file(const std::string &path) {
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, file_mode);
  if (fd < 0) {
    if (errno == EEXIST) {
      return {}; // an existing file (or a racing creator): SQLite decides what it is
    }
    const int e = errno;
    return make_error(fmt::format("{}: cannot create: {}", path, errno_text(e)), e);
  }
  const int rc = fchmod(fd, file_mode); // the umask may have removed bits
  const int e = errno;
  ::close(fd);
  if (rc != 0) {
    return make_error(fmt::format("{}: chmod: {}", path, errno_text(e)), e);
  }
  return {};
}

namespace {

std::string refusal(const std::string &path, const std::string &why) {
  return fmt::format("refusing database {}: {}", path, why);
}

} // namespace

result<std::string> open_place(const std::string &path, std::optional<gid_t> group,
                               bool &dir_is_ours) {
  // Before anything is created: a missing directory is checked at its nearest existing one.
  auto before = database_place(path, group);
  if (!before) {
    return make_error(refusal(path, before.err().msg), before.err().errnum);
  }
  auto made = make_dirs(std::filesystem::path(*before).parent_path());
  if (!made) {
    return made.err();
  }
  dir_is_ours = *made || std::filesystem::path(path).parent_path() ==
                             std::filesystem::path(default_db_path).parent_path();
  auto where = database_place(path, group);
  if (!where) {
    return make_error(refusal(path, where.err().msg), where.err().errnum);
  }
  if (auto r = create_file(*where); !r) {
    return r.err();
  }
  // Once more: the file now exists, made by us or (a race in a sticky directory) by another.
  auto real = database_place(path, group);
  if (!real) {
    return make_error(refusal(path, real.err().msg), real.err().errnum);
  }
  return real;
}

result<void> check_opened(sqlite3 *h, const std::string &path, const std::string &real,
                          std::optional<gid_t> group) {
  // A read opens the -wal and -shm (a new database has none before its first one).
  auto read = sqlite::exec(h, "SELECT count(*) FROM sqlite_schema");
  std::string why;
  if (auto r = database_place(real, group); !r) {
    why = r.err().msg;
  } else {
    for (const char *suffix : {"-wal", "-shm"}) {
      struct stat st {};
      if (read && ::lstat((real + suffix).c_str(), &st) != 0) {
        why = fmt::format("{}{} went away while it was being opened", real, suffix);
      }
    }
  }
  if (why.empty()) {
    return {};
  }
  // What SQLite read from a foreign -wal must never be checkpointed into the database.
  sqlite3_db_config(h, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  return make_error(refusal(path, why), EPERM);
}

namespace {

// Group `gid` and the `add` permission bits on `p` if it is ours and of the kind `want_dir` says,
// through a descriptor opened O_NOFOLLOW and checked with fstat: nothing swapped in after the
// check (a link to another file) is ever changed. false: not ours or not that kind, left alone.
// `only_if`: a further condition on what fstat saw.
result<bool> give_group(const std::string &p, gid_t gid, mode_t add, bool want_dir,
                        const std::function<bool(const struct stat &)> &only_if) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY |
                                       (want_dir ? O_DIRECTORY : 0));
  if (fd < 0) {
    if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) {
      return false; // missing, or a link: left alone
    }
    const int e = errno;
    return make_error(fmt::format("{}: {}", p, errno_text(e)), e);
  }
  struct stat st {};
  result<bool> out = false;
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    out = make_error(fmt::format("{}: {}", p, errno_text(e)), e);
  } else if ((want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) && st.st_uid == ::geteuid() &&
             (!only_if || only_if(st))) {
    const mode_t mode = (st.st_mode & 07777 & ~static_cast<mode_t>(S_IWGRP)) | add;
    if (st.st_gid != gid && ::fchown(fd, static_cast<uid_t>(-1), gid) != 0) {
      const int e = errno;
      out = make_error(fmt::format("{}: cannot give it group {}: {}", p, gid, errno_text(e)), e);
    } else if (mode != (st.st_mode & 07777) && ::fchmod(fd, mode) != 0) {
      const int e = errno;
      out = make_error(fmt::format("{}: chmod: {}", p, errno_text(e)), e);
    } else {
      out = true;
    }
  }
  ::close(fd);
  return out;
}

} // namespace

result<void> share_with_group(const std::string &path, gid_t gid, bool dir_is_ours) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) {
    dir = ".";
  }
  // The directory only when it is rschedd's own (created by it, the default one, or already
  // shared by an earlier start) and private: owned by us, its group root's or already the
  // readers', nothing granted to others. Never /root, /tmp or a directory shared with a group.
  if (auto r = give_group(dir, gid, S_IRGRP | S_IXGRP, true,
                          [&](const struct stat &st) {
                            return (dir_is_ours || st.st_gid == gid) &&
                                   (st.st_gid == 0 || st.st_gid == gid) &&
                                   (st.st_mode & S_IRWXO) == 0;
                          });
      !r) {
    return r.err();
  }
  for (const char *suffix : {"", "-wal", "-shm"}) {
    if (auto r = give_group(path + suffix, gid, S_IRGRP, false, nullptr); !r) {
      return r.err();
    }
  }
  return {};
}

// The writer lock (one writer per database, docs/SCHEMA.md "One writer per database"). An open
// file description lock (F_OFD_SETLK) on the database file itself, on bytes far past any data
// SQLite could write (SQLite's own POSIX locks are at 1 GiB and in the -shm file, so the two never
// meet): it belongs to our descriptor alone, so it is released when the writer closes it or the
// process dies (kill -9 included), never left stale; a second open in the same process
// conflicts as another process does; and the same file reached by another path (symlink, hard
// link) is the same lock. The holder also locks byte lock_base + 1 + its pid: a refused writer
// finds the holder's pid from the start of that lock (F_OFD_GETLK cannot report the pid of an
// OFD lock's owner). Only the holder of lock_base ever takes a pid byte.
constexpr off_t lock_base = 0x7fff00000000;
constexpr off_t lock_pid_span = off_t{1} << 23; // pid_max is at most 2^22
// How long a refused writer looks for the holder's pid (the holder takes its pid byte just after
// the lock) and retries the lock (the holder may just be exiting).
constexpr int lock_attempts = 100;
constexpr auto lock_retry = std::chrono::milliseconds(5);
// PRAGMA quick_check reads every page: at start, stop it after this long (a large file is then
// checked in part; what the writer touches is checked again by the test write).
constexpr auto quick_check_budget = std::chrono::milliseconds(2000);

writer_lock::writer_lock(writer_lock &&o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

writer_lock &writer_lock::operator=(writer_lock &&o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

result<writer_lock> writer_lock::take(const std::string &real, const std::string &path) {
  const int fd = ::open(real.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    if (e == EROFS || e == EACCES || e == EPERM || e == ETXTBSY) {
      return make_error(fmt::format("database {} is not writable: {}", path, errno_text(e)), e);
    }
    return make_error(fmt::format("{}: cannot open: {}", path, errno_text(e)), e);
  }
  writer_lock lock(fd);
  // The very file checked by name (open_place): a regular file of root's or ours.
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      (st.st_uid != 0 && st.st_uid != ::geteuid())) {
    return make_error(fmt::format("refusing database {}: it changed while being opened", path),
                      EPERM);
  }
  for (int attempt = 0; attempt < lock_attempts; ++attempt) {
    if (set(fd, F_WRLCK, lock_base, 1) == 0) {
      // Best effort: without it a refused writer says the pid is unknown.
      (void)set(fd, F_WRLCK, lock_base + 1 + getpid(), 1);
      return lock;
    }
    const int e = errno;
    if (e != EAGAIN && e != EACCES) {
      return make_error(
          fmt::format("database {}: cannot take the writer lock: {}", path, errno_text(e)), e);
    }
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = lock_base + 1;
    fl.l_len = lock_pid_span;
    if (fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
      return make_error(fmt::format("database {} is already being recorded by pid {} (one "
                                    "writer per database; use --db to record elsewhere)",
                                    path, fl.l_start - lock_base - 1),
                        EBUSY);
    }
    std::this_thread::sleep_for(lock_retry);
  }
  return make_error(fmt::format("database {} is already being recorded by another process (its "
                                "pid is unknown; one writer per database; use --db to record "
                                "elsewhere)",
                                path),
                    EBUSY);
}

int writer_lock::set(int fd, int type, off_t start, off_t len) {
  struct flock fl {};
  fl.l_type = static_cast<short>(type);
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  return fcntl(fd, F_OFD_SETLK, &fl);
}

void writer_lock::reset() {
  if (fd_ >= 0) {
    ::close(fd_); // releases the OFD locks of this description (nobody else shares it)
    fd_ = -1;
  }
}

bool is_corrupt(int rc) {
  return (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
}

std::string one_line(std::string s) {
  for (auto pos = s.find('\n'); pos != std::string::npos; pos = s.find('\n', pos)) {
    s.replace(pos, 1, "; ");
  }
  return s;
}

// PRAGMA quick_check, stopped after quick_check_budget (a large file is then checked in part):
// the first problem it reports, or nothing for a file that looks sound.
result<void> quick_check(sqlite3 *h, const std::string &path) {
  // The whole check is one VDBE instruction, which a progress handler never interrupts:
  // sqlite3_interrupt from a watchdog thread does (the b-tree check polls for it).
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  bool interrupted = false;
  std::thread watchdog([&] {
    std::unique_lock<std::mutex> l(m);
    if (!cv.wait_for(l, quick_check_budget, [&] { return done; })) {
      interrupted = true;
      sqlite3_interrupt(h);
    }
  });
  sqlite3_stmt *raw = nullptr;
  int rc = sqlite3_prepare_v2(h, "PRAGMA quick_check(1)", -1, &raw, nullptr);
  sqlite::stmt_ptr st(raw);
  std::string problem;
  if (rc == SQLITE_OK) {
    rc = sqlite3_step(st.get());
    if (rc == SQLITE_ROW) {
      problem = sqlite::column_text(st.get(), 0);
    }
  }
  const std::string msg = sqlite3_errmsg(h);
  rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : sqlite3_extended_errcode(h);
  st.reset();
  {
    const std::lock_guard<std::mutex> l(m);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
  if (interrupted) {
    // Out of time (a large file): what was checked is sound. An interrupt that arrived after
    // the statement ended is harmless: it only affects statements running at the time.
    if (rc == SQLITE_INTERRUPT || problem == "ok" || problem.empty()) {
      return {};
    }
  }
  if (is_corrupt(rc)) {
    return make_error(fmt::format("database {} is corrupt: {}", path, one_line(msg)));
  }
  if (rc != SQLITE_OK) {
    return make_error(fmt::format("{}: checking the database: {}", path, one_line(msg)));
  }
  if (problem != "ok") {
    return make_error(fmt::format("database {} is corrupt: {}", path, one_line(problem)));
  }
  return {};
}

// The writer's first write, at open: records its pid in meta (`writer_pid`) and so shows that the
// file can be written at all (a read-only file system, a damaged page the write touches) before
// the daemon starts recording.
result<void> record_writer(sqlite3 *h, const std::string &path) {
  const std::string sql =
      fmt::format("BEGIN IMMEDIATE; INSERT OR REPLACE INTO meta(key, value) VALUES('writer_pid', "
                  "'{}'); COMMIT",
                  getpid());
  char *err = nullptr;
  const int rc = sqlite3_exec(h, sql.c_str(), nullptr, nullptr, &err);
  if (rc == SQLITE_OK) {
    return {};
  }
  const int ext = sqlite3_extended_errcode(h);
  const int sys = sqlite3_system_errno(h);
  std::string msg = one_line(err != nullptr ? err : sqlite3_errmsg(h));
  sqlite3_free(err);
  if (sqlite3_get_autocommit(h) == 0) {
    sqlite3_exec(h, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  if (sys != 0) {
    msg += fmt::format(" ({})", errno_text(sys));
  }
  if (is_corrupt(ext)) {
    return make_error(fmt::format("database {} is corrupt: {}", path, msg));
  }
  return make_error(fmt::format("database {} is not writable: {}", path, msg), sys);
}

namespace {

// The identity of the file at `path`; false when there is none.
bool file_id(const std::string &path, dev_t &dev, ino_t &ino) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) {
    return false;
  }
  dev = st.st_dev;
  ino = st.st_ino;
  return true;
}

// Resets the connection's statements that are still in a result set: a journal mode change
// refuses to run beside an unfinished read ("cannot change out of wal mode from within a
// transaction"). Every statement of the writer is reset before its next use anyway.
void reset_statements(sqlite3 *h) {
  for (sqlite3_stmt *st = sqlite3_next_stmt(h, nullptr); st != nullptr;
       st = sqlite3_next_stmt(h, st)) {
    if (sqlite3_stmt_busy(st) != 0) {
      sqlite3_reset(st);
    }
  }
}

std::string journal_mode(sqlite3 *h, const char *pragma) {
  sqlite3_stmt *st = nullptr;
  std::string mode;
  if (sqlite3_prepare_v2(h, pragma, -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    if (const auto *t = sqlite3_column_text(st, 0); t != nullptr) {
      mode = reinterpret_cast<const char *>(t);
    }
  }
  sqlite3_finalize(st);
  return mode;
}

} // namespace

wal_watch::wal_watch(sqlite3 *h) {
  const char *db = sqlite3_db_filename(h, "main");
  if (db == nullptr || *db == '\0') {
    return; // in memory, or a temporary database: no file to watch
  }
  files_[0].path = sqlite3_filename_wal(db);
  files_[1].path = std::string(db) + "-shm";
  for (auto &f : files_) {
    f.known = file_id(f.path, f.dev, f.ino);
  }
}

void wal_watch::check(sqlite3 *h, const std::function<void(std::string_view)> &note) {
  if (files_[0].path.empty()) {
    return;
  }
  if (!lost_) {
    for (auto &f : files_) {
      dev_t dev = 0;
      ino_t ino = 0;
      const bool there = file_id(f.path, dev, ino);
      if (!f.known) { // none when watching began: the first one SQLite makes is ours
        f.known = there;
        f.dev = dev;
        f.ino = ino;
        continue;
      }
      if ((there && dev == f.dev && ino == f.ino) || lost_) {
        continue;
      }
      lost_ = true;
      if (note && &f == &files_[0]) {
        note(fmt::format("{} was deleted or replaced while recording: what it held is "
                         "checkpointed into the database and a fresh one started\n",
                         f.path));
      } else if (note) {
        note(fmt::format("{} was deleted or replaced while recording: the WAL is closed and "
                         "opened again, which starts a fresh one (readers that may not create it "
                         "cannot open the database without it)\n",
                         f.path));
      }
    }
    if (!lost_) {
      return;
    }
  }
  renew(h);
}

void wal_watch::renew(sqlite3 *h) {
  reset_statements(h);
  // Everything written so far into the database file, read through the descriptor this
  // connection still holds on the deleted -wal.
  (void)sqlite::exec(h, "PRAGMA wal_checkpoint(TRUNCATE)");
  // Closing the WAL (journal mode DELETE) and opening it again (WAL) makes SQLite open both names
  // anew (the -shm once no connection of this process maps the old one). Both need the database
  // to itself; a reader in the way leaves it for the next interval.
  if (journal_mode(h, "PRAGMA journal_mode = DELETE") != "delete" ||
      journal_mode(h, "PRAGMA journal_mode = WAL") != "wal") {
    return;
  }
  lost_ = false;
  for (auto &f : files_) {
    f.known = file_id(f.path, f.dev, f.ino);
  }
}

void wal_watch::after_write(sqlite3 *h) {
  if (lost_) {
    // Still writing into the deleted file: nothing may stay only there.
    reset_statements(h);
    (void)sqlite::exec(h, "PRAGMA wal_checkpoint(TRUNCATE)");
  }
}

} // namespace rsched::store::detail
