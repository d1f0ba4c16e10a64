#include "rsched/store/writer.hpp"

#include "rsched/stats/encoding.hpp"

#include "schema.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <SQLiteCpp/Statement.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <compare>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <limits>
#include <map>
#include <sqlite3.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::store {

namespace {

constexpr mode_t dir_mode = 0750;
constexpr mode_t file_mode = 0640;
constexpr int busy_timeout_ms = 5000;
// The thread-id cache only saves a SELECT per thread and interval; a daemon that sees millions of
// short-lived threads must not grow without bound, so the cache is dropped past this size.
constexpr std::size_t thread_cache_limit = 65536;
// Keep at most this much of the WAL file after a checkpoint (SQLite truncates it down to this).
constexpr const char *journal_size_limit = "PRAGMA journal_size_limit = 67108864";

bool is_memory(const std::string &path) {
  return path == ":memory:";
}

std::string errno_text(int e) {
  return std::strerror(e);
}

// Creates the missing directories of `dir`, each with mode 0750 (chmod'ed explicitly so that the
// daemon's umask does not matter). Existing directories are left as they are.
result<void> make_dirs(const std::filesystem::path &dir) {
  if (dir.empty()) {
    return {};
  }
  std::filesystem::path cur;
  for (const auto &part : dir) {
    cur /= part;
    struct stat st {};
    if (stat(cur.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return make_error(fmt::format("{}: not a directory", cur.string()), ENOTDIR);
      }
      continue;
    }
    if (mkdir(cur.c_str(), dir_mode) != 0 && errno != EEXIST) {
      const int e = errno;
      return make_error(fmt::format("{}: cannot create directory: {}", cur.string(), errno_text(e)),
                        e);
    }
    if (chmod(cur.c_str(), dir_mode) != 0) {
      const int e = errno;
      return make_error(fmt::format("{}: chmod: {}", cur.string(), errno_text(e)), e);
    }
  }
  return {};
}

// Creates the database file with mode 0640 when it does not exist. SQLite gives its -wal and
// -shm files the mode (and, as root, the owner) of the database file, so they follow.
result<void> create_file(const std::string &path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, file_mode);
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

// SQLite integers are signed 64-bit. Counters never come near 2^63 in practice; saturate rather
// than store a negative value if one ever does.
std::int64_t to_i64(std::uint64_t v) {
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(v > max ? max : v);
}

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) {
  return a + b < a ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

struct thread_key {
  std::string boot_id;
  std::uint32_t tid = 0;
  std::uint64_t start_time_ns = 0;
  std::string comm;
  std::string cgroup;
  auto operator<=>(const thread_key &) const = default;
};

bool has_data(std::uint64_t count, const stats::histogram &h) {
  return count != 0 || !h.empty();
}

// Sums two rows of the same thread or CPU (a duplicate in the input) into the first.
void add_row(thread_row &a, const thread_row &b) {
  a.delay_count = sat_add(a.delay_count, b.delay_count);
  a.delay_total_ns = sat_add(a.delay_total_ns, b.delay_total_ns);
  (void)stats::merge_into(a.delay_hist, b.delay_hist); // layouts checked before
  a.depth_count = sat_add(a.depth_count, b.depth_count);
  a.depth_total = sat_add(a.depth_total, b.depth_total);
  (void)stats::merge_into(a.depth_hist, b.depth_hist);
}

void add_row(cpu_row &a, const cpu_row &b) {
  a.delay_count = sat_add(a.delay_count, b.delay_count);
  a.delay_total_ns = sat_add(a.delay_total_ns, b.delay_total_ns);
  (void)stats::merge_into(a.delay_hist, b.delay_hist);
}

result<void> validate(const interval_row &iv) {
  for (const auto &t : iv.threads) {
    if (t.delay_hist.kind != stats::layout::latency || t.depth_hist.kind != stats::layout::depth) {
      return make_error(fmt::format("thread {}: histogram of the wrong layout", t.tid));
    }
  }
  for (const auto &c : iv.cpus) {
    if (c.delay_hist.kind != stats::layout::latency) {
      return make_error(fmt::format("cpu {}: histogram of the wrong layout", c.cpu));
    }
  }
  return {};
}

} // namespace

struct writer::impl {
  std::string path;
  SQLite::Database db;
  // Prepared once, reused for every interval (reset before each use).
  SQLite::Statement ins_interval;
  SQLite::Statement ins_thread;
  SQLite::Statement sel_thread;
  SQLite::Statement ins_thread_hist;
  SQLite::Statement ins_cpu_hist;
  SQLite::Statement begin;
  SQLite::Statement commit;
  // Thread identity -> thread.id of rows that are committed.
  std::map<thread_key, std::int64_t> threads;

  impl(std::string p, SQLite::Database &&d)
      : path(std::move(p)), db(std::move(d)),
        ins_interval(db, "INSERT INTO intervals(start_ns, dur_ns, boot_id, flags, "
                         "drops_task_state, drops_graveyard, drops_stale_tid, drops_no_rq, "
                         "discarded_too_long) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"),
        ins_thread(db, "INSERT OR IGNORE INTO thread(boot_id, tid, pid, start_time_ns, comm, "
                       "cgroup) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"),
        sel_thread(db, "SELECT id FROM thread WHERE boot_id = ?1 AND tid = ?2 AND "
                       "start_time_ns = ?3 AND comm = ?4 AND cgroup = ?5"),
        ins_thread_hist(db, "INSERT INTO thread_hist(interval_id, metric, thread_id, count, "
                            "total, hist) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"),
        ins_cpu_hist(db, "INSERT INTO cpu_hist(interval_id, metric, cpu, count, total, hist) "
                         "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"),
        begin(db, "BEGIN IMMEDIATE"), commit(db, "COMMIT") {}

  // Leaves the connection as it was before write(): statements reset, transaction rolled back.
  void abort() noexcept {
    for (auto *s : {&ins_interval, &ins_thread, &sel_thread, &ins_thread_hist, &ins_cpu_hist,
                    &begin, &commit}) {
      s->tryReset();
    }
    if (sqlite3_get_autocommit(db.getHandle()) == 0) {
      sqlite3_exec(db.getHandle(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

  static void run(SQLite::Statement &s) {
    s.reset();
    s.exec();
  }

  // thread.id of `t`, inserting the identity when it is new. `fresh` collects the ids created or
  // looked up in this (not yet committed) transaction: they enter the cache only after COMMIT,
  // since a rollback would take newly inserted rows with it.
  std::int64_t thread_id(const thread_key &key, std::uint32_t pid,
                         std::map<thread_key, std::int64_t> &fresh) {
    if (auto it = threads.find(key); it != threads.end()) {
      return it->second;
    }
    if (auto it = fresh.find(key); it != fresh.end()) {
      return it->second;
    }
    ins_thread.reset();
    ins_thread.bindNoCopy(1, key.boot_id);
    ins_thread.bind(2, key.tid);
    ins_thread.bind(3, pid);
    ins_thread.bind(4, to_i64(key.start_time_ns));
    ins_thread.bindNoCopy(5, key.comm);
    ins_thread.bindNoCopy(6, key.cgroup);
    std::int64_t id = 0;
    if (ins_thread.exec() == 1) {
      id = db.getLastInsertRowid();
    } else {
      // Known from an earlier run of the daemon (or evicted from the cache).
      sel_thread.reset();
      sel_thread.bindNoCopy(1, key.boot_id);
      sel_thread.bind(2, key.tid);
      sel_thread.bind(3, to_i64(key.start_time_ns));
      sel_thread.bindNoCopy(4, key.comm);
      sel_thread.bindNoCopy(5, key.cgroup);
      if (!sel_thread.executeStep()) {
        throw SQLite::Exception("thread row vanished after INSERT OR IGNORE");
      }
      id = sel_thread.getColumn(0).getInt64();
      sel_thread.reset();
    }
    fresh.emplace(key, id);
    return id;
  }

  void insert_hist(SQLite::Statement &s, std::int64_t interval_id, metric m, std::int64_t key,
                   std::uint64_t count, std::uint64_t total, const stats::histogram &h) {
    const std::vector<std::uint8_t> blob = stats::encode(h);
    s.reset();
    s.bind(1, interval_id);
    s.bind(2, static_cast<int>(m));
    s.bind(3, key);
    s.bind(4, to_i64(count));
    s.bind(5, to_i64(total));
    s.bindNoCopy(6, blob.data(), static_cast<int>(blob.size()));
    s.exec();
  }

  void write_tx(const interval_row &iv) {
    run(begin);

    ins_interval.reset();
    ins_interval.bind(1, iv.start_ns);
    ins_interval.bind(2, iv.dur_ns);
    ins_interval.bindNoCopy(3, iv.boot_id);
    ins_interval.bind(4, iv.final_interval ? 1 : 0);
    ins_interval.bind(5, to_i64(iv.drops[RSCHED_DROP_TASK_STATE]));
    ins_interval.bind(6, to_i64(iv.drops[RSCHED_DROP_GRAVEYARD]));
    ins_interval.bind(7, to_i64(iv.drops[RSCHED_DROP_STALE_TID]));
    ins_interval.bind(8, to_i64(iv.drops[RSCHED_DROP_NO_RQ]));
    ins_interval.bind(9, to_i64(iv.drops[RSCHED_DROP_TOO_LONG]));
    ins_interval.exec();
    const std::int64_t interval_id = db.getLastInsertRowid();

    // Resolve thread ids; rows of one identity that appear twice in the input are summed (the
    // primary key allows one row per thread, metric and interval).
    std::map<thread_key, std::int64_t> fresh;
    std::vector<std::pair<std::int64_t, thread_row>> rows;
    std::unordered_map<std::int64_t, std::size_t> row_of;
    for (const auto &t : iv.threads) {
      if (!has_data(t.delay_count, t.delay_hist) && !has_data(t.depth_count, t.depth_hist)) {
        continue;
      }
      const thread_key key{iv.boot_id, t.tid, t.start_time_ns, t.comm, t.cgroup};
      const std::int64_t id = thread_id(key, t.pid, fresh);
      if (auto [it, added] = row_of.emplace(id, rows.size()); !added) {
        add_row(rows[it->second].second, t);
        continue;
      }
      rows.emplace_back(id, t);
    }
    for (const auto &[id, t] : rows) {
      if (has_data(t.delay_count, t.delay_hist)) {
        insert_hist(ins_thread_hist, interval_id, metric::sched_delay, id, t.delay_count,
                    t.delay_total_ns, t.delay_hist);
      }
      if (has_data(t.depth_count, t.depth_hist)) {
        insert_hist(ins_thread_hist, interval_id, metric::runq_depth, id, t.depth_count,
                    t.depth_total, t.depth_hist);
      }
    }

    std::map<std::uint32_t, cpu_row> cpus;
    for (const auto &c : iv.cpus) {
      if (!has_data(c.delay_count, c.delay_hist)) {
        continue;
      }
      if (auto [it, added] = cpus.emplace(c.cpu, c); !added) {
        add_row(it->second, c);
      }
    }
    for (const auto &[cpu, c] : cpus) {
      insert_hist(ins_cpu_hist, interval_id, metric::sched_delay, std::int64_t{cpu}, c.delay_count,
                  c.delay_total_ns, c.delay_hist);
    }

    run(commit);

    if (threads.size() + fresh.size() > thread_cache_limit) {
      threads.clear();
    }
    threads.merge(fresh);
  }
};

result<writer> writer::open(const std::string &path) {
  try {
    int flags = SQLite::OPEN_READWRITE;
    if (is_memory(path)) {
      flags |= SQLite::OPEN_CREATE;
    } else {
      if (auto r = make_dirs(std::filesystem::path(path).parent_path()); !r) {
        return r.err();
      }
      if (auto r = create_file(path); !r) {
        return r.err();
      }
    }
    // Without OPEN_CREATE: the file exists now, and SQLite must not create one behind our back.
    SQLite::Database db(path, flags, busy_timeout_ms);
    sqlite3 *h = db.getHandle();
    sqlite3_extended_result_codes(h, 1);

    // Classify before changing anything: a refused file must stay byte-identical (setting the
    // journal mode alone would rewrite the header of a foreign database).
    auto state = detail::check(h, path);
    if (!state) {
      return state.err();
    }
    // WAL lets rsched-sql read while the daemon writes; NORMAL is durable across application
    // crashes, and a power loss can only lose the last transactions, never corrupt the file.
    if (auto r = detail::exec(h, "PRAGMA journal_mode = WAL"); !r) {
      return make_error(fmt::format("{}: journal_mode=WAL: {}", path, r.err().msg));
    }
    if (auto r = detail::exec(h, "PRAGMA synchronous = NORMAL"); !r) {
      return make_error(fmt::format("{}: synchronous=NORMAL: {}", path, r.err().msg));
    }
    (void)detail::exec(h, journal_size_limit);
    // Keep the -wal and -shm files when the daemon closes the database: a read-only reader
    // (group member, no write access to the 0750 directory) cannot create them itself and could
    // then not open a WAL database at all.
    int persist = 1;
    sqlite3_file_control(h, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);

    if (*state == detail::db_state::empty) {
      if (auto r = detail::create(h, path); !r) {
        return r.err();
      }
    }
    return writer(std::make_unique<impl>(path, std::move(db)));
  } catch (const SQLite::Exception &e) {
    return make_error(fmt::format("{}: {}", path, e.what()));
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: {}", path, e.what()));
  }
}

result<void> writer::write(const interval_row &iv) {
  if (!p_) {
    return make_error("store writer used after move");
  }
  if (auto r = validate(iv); !r) {
    return make_error(fmt::format("{}: writing interval: {}", p_->path, r.err().msg));
  }
  try {
    p_->write_tx(iv);
    return {};
  } catch (const SQLite::Exception &e) {
    // errno of the failed system call (ENOSPC, EIO, ...) when SQLite recorded one; it does not
    // on every path (not for a failed COMMIT), so this is best effort.
    const int sys = sqlite3_system_errno(p_->db.getHandle());
    p_->abort();
    std::string msg = fmt::format("{}: writing interval: {}", p_->path, e.what());
    if (sys != 0) {
      msg += fmt::format(" ({})", errno_text(sys));
    }
    return make_error(std::move(msg), sys);
  } catch (const std::exception &e) {
    p_->abort();
    return make_error(fmt::format("{}: writing interval: {}", p_->path, e.what()));
  }
}

writer::writer(std::unique_ptr<impl> p) : p_(std::move(p)) {}
writer::writer(writer &&) noexcept = default;
writer &writer::operator=(writer &&) noexcept = default;
writer::~writer() = default;

} // namespace rsched::store
