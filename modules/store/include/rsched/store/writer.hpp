#pragma once
// The daemon's side of the database: creates or opens it, writes one interval per transaction.
#include "rsched/base/result.hpp"
#include "rsched/store/records.hpp"

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rsched::store {

// How long each tier is kept and how large the whole file may grow (docs/SCHEMA.md, "Tiers and
// retention"). Defaults: raw intervals 2 days, 1-minute rollups 30 days, 1-hour rollups 1 year,
// 8 GiB in all. A keep of 0 means forever; max_bytes 0 means no size limit.
struct retention {
  std::int64_t keep_raw_ns = 2LL * 86400 * 1'000'000'000;
  std::int64_t keep_1m_ns = 30LL * 86400 * 1'000'000'000;
  std::int64_t keep_1h_ns = 365LL * 86400 * 1'000'000'000;
  std::uint64_t max_bytes = 8ULL << 30;
};

// What one maintain() call did.
struct maintenance_report {
  int buckets_built = 0;     // rollup buckets (1 min and 1 h) written
  int buckets_from_sums = 0; // of them, 1-minute ones merged from the writer's own sums
  // Besides them: rollups of intervals written late into buckets already built (a second
  // interval of the bucket; a clock set back, a restart within the minute).
  int late_buckets_built = 0;
  std::int64_t rows_deleted = 0;    // intervals rows deleted by retention (their data with them)
  std::int64_t threads_deleted = 0; // thread, culprit and cgroup identities no row refers to
  std::int64_t pages_freed = 0;     // pages given back to the file system (incremental vacuum)
  bool over_size = false;           // the file was above max_bytes at the start of the call
  // Rows whose blobs no longer decode, moved into damaged_rows so that the rollups go on
  // without them (schema 22), and what was wrong with the first ("" when none).
  std::int64_t rows_set_aside = 0;
  std::string damage;
  [[nodiscard]] bool idle() const {
    return buckets_built == 0 && late_buckets_built == 0 && rows_deleted == 0 && pages_freed == 0;
  }
};

// How writer::open opens the database.
struct open_options {
  // Take the writer lock (one writer per database). Only tests turn it off, to show that the
  // rollups and retention stay exact with a second writer that bypassed the lock.
  bool lock = true;
  // Readers without root (docs/SCHEMA.md, "Who can read the history"): the database, its -wal
  // and -shm files get this group and group read (0640), and so does the database's directory
  // (0750) when it is a private one of ours (owned by us, nothing granted to others). nullopt:
  // ownership is left as it is.
  std::optional<gid_t> group;
  // Where the writer says what it does on its own (one line each, ending in a newline): that
  // its -wal file was deleted or replaced and a fresh one started. Nothing when empty.
  std::function<void(std::string_view)> note;
};

// Schema 14: one flight recorder capture (table `captures`, docs/SCHEMA.md).
struct capture_row {
  std::int64_t start_ns = 0; // UTC ns
  std::int64_t end_ns = 0;
  std::string trigger; // "signal", "threshold", "annotation"
  std::string reason;
  std::optional<std::int64_t> annotation_id;
  std::string file;
  std::uint64_t bytes = 0;
  std::uint64_t events = 0;
  std::string lossy_cpus; // "0,3"
  std::int64_t created_ns = 0;
};

// An annotation that asks for a capture (tag `capture`).
struct capture_request {
  std::int64_t id = 0;
  std::int64_t start_ns = 0; // UTC ns
  std::string text;
};

// The first check writer::open makes (docs/ARCHITECTURE.md, "Databases in shared places"), alone:
// the database at `path` and its -wal, -shm and -journal are in a place no other user can plant
// or change them (`group`: the readers' group, open_options::group). rschedd calls it before it
// loads anything, so that a refused database is its only line. Nothing is created.
result<void> check_place(const std::string &path, std::optional<gid_t> group);

class writer {
public:
  // Opens (creating file, parent directory and schema when missing) the database at `path`.
  // A new file gets mode 0640, its directory 0750. WAL mode, synchronous=NORMAL. A database of
  // schema version 1 is upgraded in place to the current version (one transaction; the v1 data
  // stays). A file that is not an rsched database, or one of a newer schema version, is refused
  // and left untouched.
  //
  // One writer per database: open takes an exclusive lock on the file (an open file description
  // lock on a byte far past any data, held until the writer is destroyed or the process dies,
  // kill -9 included) before it creates or upgrades anything, and records its pid in meta
  // (`writer_pid`). While another writer holds the file (another process, or another writer of
  // this process, through any path or link to the same file) open fails with
  //   database PATH is already being recorded by pid N (one writer per database; use --db to
  //   record elsewhere)
  // (one line). A file that cannot be written (read-only file system, no permission) fails with
  // `database PATH is not writable: <reason>`, one whose pages are damaged (PRAGMA quick_check,
  // within a time budget on a large file) with `database PATH is corrupt: <first problem>`.
  // The writer lock is released when the writer is destroyed (after its connection closes).
  // Caveat: closing the lock's descriptor (at that point, or when an open in this process is
  // refused) drops the POSIX locks SQLite holds on the file for OTHER connections of this
  // process, as closing any descriptor of a file does; rschedd has no other connection.
  static result<writer> open(const std::string &path);
  static result<writer> open(const std::string &path, const open_options &opt);

  // Writes one interval (intervals row, thread, CPU, perf counter time and schedstat rows) in a
  // single transaction with prepared statements. On error nothing of the interval is written.
  // First it checks that the database's -wal file is still the one it writes into: deleted or
  // replaced, it is noted (open_options::note), checkpointed into the database and a fresh one
  // started (docs/SCHEMA.md, "The file").
  result<void> write(const interval_row &iv);

  // Records that the intervals of [start_ns, end_ns) (UTC ns) were lost to failing writes
  // (`intervals` of them, the first failure's message `error`), once writing works again: an
  // annotation with source 'rschedd' and tag 'write-failed' that gaps() reads to say why that
  // time is missing (docs/SQL.md, "Coverage and gaps").
  result<void> note_write_failure(std::int64_t start_ns, std::int64_t end_ns,
                                  std::uint64_t intervals, const std::string &error);

  // Background upkeep, called by the daemon after each write: rolls complete minutes of raw
  // intervals into the 1-minute tier and complete hours of that into the 1-hour tier (merging
  // histograms bucket by bucket, summing counts and totals), deletes what is older than the
  // retention allows or does not fit in max_bytes (oldest first, finest tier first), and gives
  // freed pages back to the file system. Each step is its own short transaction and the work of
  // one call is bounded (a few buckets, a few minutes of raw rows, a few MiB of pages), so
  // recording never stalls; a backlog (an upgraded database, a lowered limit) is worked off
  // over the following calls. `now_ns` is the UTC wall clock.
  result<maintenance_report> maintain(std::int64_t now_ns);
  void set_retention(const retention &r);

  // The flight recorder's captures (schema 14). add_capture lists one; prune_captures keeps the
  // newest `keep` whose bytes add up to at most `max_bytes` (0 = no limit; the newest is always
  // kept) and returns the files of the rows it deleted, for the caller to remove.
  result<std::int64_t> add_capture(const capture_row &c);
  result<std::vector<std::string>> prune_captures(std::uint32_t keep, std::uint64_t max_bytes);
  // The annotations tagged `capture` (a tag of the comma-separated list) with an id above
  // `after_id`, oldest first; last_annotation_id() is where to start (the newest id, 0 none).
  result<std::vector<capture_request>> capture_requests(std::int64_t after_id);
  result<std::int64_t> last_annotation_id();
  // Bytes in use in the file (pages holding data) and the file's size in pages * page size.
  [[nodiscard]] result<std::pair<std::uint64_t, std::uint64_t>> size() const;

  writer(writer &&) noexcept;
  writer &operator=(writer &&) noexcept;
  ~writer();

private:
  struct impl;
  explicit writer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

} // namespace rsched::store
