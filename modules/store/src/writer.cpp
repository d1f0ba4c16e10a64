#include "rsched/store/writer.hpp"

#include "rsched/base/safe_file.hpp"
#include "rsched/base/timefmt.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/store/blame_pack.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/hist_summary.hpp"
#include "rsched/store/row_pack.hpp"
#include "rsched/store/schema.hpp"

#include "maintenance.hpp"
#include "writer_file.hpp"
#include "writer_rows.hpp"

#include <SQLiteCpp/Database.h>
#include <SQLiteCpp/Exception.h>
#include <SQLiteCpp/Statement.h>
#include <SQLiteCpp/Transaction.h>
#include <SQLiteCpp/VariadicBind.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <compare>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sqlite3.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::store {

using namespace detail;

namespace {

// Runs a prepared statement again with `args` bound to ?1, ?2, ... in order.
template <class... A> void rerun(SQLite::Statement &s, const A &...args) {
  s.reset();
  SQLite::bind(s, args...);
  s.exec();
}

constexpr int busy_timeout_ms = 5000;
// The thread-id cache only saves a SELECT per thread and interval; a daemon that sees millions of
// short-lived threads must not grow without bound, so the cache is dropped past this size.
constexpr std::size_t thread_cache_limit = 65536;
// Keep at most this much of the WAL file after a checkpoint (SQLite truncates it down to this
// when the next write starts the WAL over). Between checkpoints the WAL holds ~1000 pages
// (4 MiB); it grows past that only while a reader holds one snapshot for a long time.
constexpr const char *journal_size_limit = "PRAGMA journal_size_limit = 16777216";

// Identity of a thread row within one boot: the writer's cache holds the ids of one boot's
// threads at a time (threads_boot).
struct thread_key {
  std::uint32_t tid = 0;
  std::uint64_t start_time_ns = 0;
  std::string comm;
  std::string cgroup;
};
// The same, looking at a row's strings (a look-up copies nothing).
struct thread_key_ref {
  std::uint32_t tid = 0;
  std::uint64_t start_time_ns = 0;
  std::string_view comm;
  std::string_view cgroup;
};
struct thread_key_hash {
  using is_transparent = void;
  // The thread alone: its rows under other comms or cgroups (renames, moves) share a bucket,
  // and no string is hashed per thread and interval.
  std::size_t operator()(const thread_key_ref &k) const noexcept {
    const std::uint64_t h =
        (k.start_time_ns ^ (std::uint64_t{k.tid} << 40)) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h ^ (h >> 31));
  }
  std::size_t operator()(const thread_key &k) const noexcept {
    return (*this)(thread_key_ref{k.tid, k.start_time_ns, k.comm, k.cgroup});
  }
};
struct thread_key_eq {
  using is_transparent = void;
  static thread_key_ref ref(const thread_key &k) {
    return {k.tid, k.start_time_ns, k.comm, k.cgroup};
  }
  static const thread_key_ref &ref(const thread_key_ref &k) { return k; }
  template <typename A, typename B> bool operator()(const A &a, const B &b) const noexcept {
    const thread_key_ref x = ref(a);
    const thread_key_ref y = ref(b);
    return x.tid == y.tid && x.start_time_ns == y.start_time_ns && x.comm == y.comm &&
           x.cgroup == y.cgroup;
  }
};
using thread_cache = std::unordered_map<thread_key, std::int64_t, thread_key_hash, thread_key_eq>;

// Identity of a culprit row (blame) within one boot (the cache holds one boot's, as for
// threads; pseudo-culprits are boot '' in the table, shared by every boot).
struct culprit_key {
  std::uint32_t pid = 0;
  int kind = 0;
  std::string comm;
  std::string cgroup;
};
struct culprit_ref {
  std::uint32_t pid = 0;
  int kind = 0;
  std::string_view comm;
  std::string_view cgroup;
};
struct culprit_key_hash {
  using is_transparent = void;
  std::size_t operator()(const culprit_ref &k) const noexcept {
    const std::uint64_t pk = std::uint64_t{k.pid} << 8 | static_cast<std::uint8_t>(k.kind);
    std::size_t h = std::hash<std::uint64_t>{}(pk * 0x9E3779B97F4A7C15ULL);
    h ^= std::hash<std::string_view>{}(k.comm) + 0x9E3779B9U + (h << 6) + (h >> 2);
    h ^= std::hash<std::string_view>{}(k.cgroup) + 0x9E3779B9U + (h << 6) + (h >> 2);
    return h;
  }
  std::size_t operator()(const culprit_key &k) const noexcept {
    return (*this)(culprit_ref{k.pid, k.kind, k.comm, k.cgroup});
  }
};
struct culprit_key_eq {
  using is_transparent = void;
  static culprit_ref ref(const culprit_key &k) { return {k.pid, k.kind, k.comm, k.cgroup}; }
  static const culprit_ref &ref(const culprit_ref &k) { return k; }
  template <typename A, typename B> bool operator()(const A &a, const B &b) const noexcept {
    const culprit_ref x = ref(a);
    const culprit_ref y = ref(b);
    return x.pid == y.pid && x.kind == y.kind && x.comm == y.comm && x.cgroup == y.cgroup;
  }
};
using culprit_cache =
    std::unordered_map<culprit_key, std::int64_t, culprit_key_hash, culprit_key_eq>;

// The culprit row of `b` (its boot: the interval's for a process, '' for a pseudo-culprit).
culprit_ref culprit_of(const blame_row &b) {
  switch (b.kind) {
  case culprit_kind::idle:
    return {0, 1, "<idle>", ""};
  case culprit_kind::unknown:
    return {0, 2, "<unknown>", ""};
  case culprit_kind::other:
    return {0, 3, "<other>", ""};
  case culprit_kind::process:
    break;
  }
  return {b.pid, 0, b.comm, b.cgroup};
}

// Identity of a scheduling domain row (schedstat_domain_def).
struct domain_key {
  std::uint32_t cpu = 0;
  std::uint32_t domain = 0;
  std::string name;
  auto operator<=>(const domain_key &) const = default;
};

// Keeps `cache` bounded (see thread_cache_limit), then adds the ids committed with `fresh`.
template <typename Map> void commit_cache(Map &cache, Map &fresh) {
  if (cache.size() + fresh.size() > thread_cache_limit) {
    cache.clear();
  }
  cache.merge(fresh);
}

} // namespace

struct writer::impl {
  std::string path;
  // Before db: released only after the connection is closed.
  writer_lock lock;
  SQLite::Database db;
  retention keep;
  std::unique_ptr<detail::maintenance> maint;
  // The -wal file written into, checked before each interval, and where that is noted.
  detail::wal_watch wal;
  std::function<void(std::string_view)> note;
  // The previous interval and how long its write took: stored with the next write.
  std::int64_t prev_interval = 0;
  std::int64_t prev_write_ns = 0;
  // Prepared once, reused for every interval (reset before each use).
  SQLite::Statement ins_interval;
  SQLite::Statement upd_write_ns;
  SQLite::Statement ins_thread;
  SQLite::Statement sel_thread;
  // One thread_hist_pack row per metric: every thread's value of the interval in one blob,
  // the metrics' packs built side by side in one pass over the threads.
  SQLite::Statement ins_thread_pack;
  std::array<pack_builder, metrics::thread_set::n> packs;
  std::vector<std::uint8_t> hist_blob;
  // Schema v12: sched_delay's per-interval summary for spikes() (hist_summary.hpp).
  SQLite::Statement ins_summary;
  summary_builder summary;
  SQLite::Statement ins_cpu_hist;
  SQLite::Statement ins_migration;
  SQLite::Statement ins_io;
  SQLite::Statement ins_perf;
  SQLite::Statement ins_event_def;
  SQLite::Statement sel_event_def;
  SQLite::Statement ins_thread_event;
  SQLite::Statement ins_counter_time;
  SQLite::Statement ins_field;
  SQLite::Statement sel_field;
  SQLite::Statement ins_domain;
  SQLite::Statement sel_domain;
  SQLite::Statement ins_schedstat_cpu;
  SQLite::Statement ins_schedstat_domain;
  SQLite::Statement ins_culprit;
  SQLite::Statement sel_culprit;
  // The interval's thread_blame rows in one thread_blame_pack row (schema v13).
  SQLite::Statement ins_blame_pack;
  blame_pack_builder blame_pack;
  struct blame_out {
    std::int64_t thread, culprit, wait_ns, waits, preempts;
    // Schema v9: the culprit's CPU, policy and prio and the waiter's policy and prio; -1 NULL.
    std::array<int, 5> sched;
    std::int64_t approx_ns; // schema v11: the part of wait_ns estimated
  };
  std::vector<blame_out> blame_rows;
  // Schema v15: the wakeup group's rows (two input rows of one waker and state are summed),
  // packed since v18: the interval's rows of thread_wakeup and thread_blocked in one
  // <table>_pack row each (rsched/store/row_pack.hpp), collected in thread id order.
  SQLite::Statement ins_wakeup_pack;
  SQLite::Statement ins_blocked_pack;
  row_pack_builder wakeup_pack{5, 3};                       // keys: thread, waker, state
  row_pack_builder blocked_pack{4, 2};                      // keys: thread, stack
  std::vector<std::array<std::int64_t, 5>> wakeup_rows;     // thread, waker, state, sleep_ns, count
  std::vector<std::array<std::int64_t, 4>> blocked_rows;    // thread, stack, sleep_ns, count
  std::vector<std::pair<std::int64_t, culprit_ref>> wakers; // one thread's, by culprit id
  // ... and its sleeps' kernel stacks (each inserted with its frames once per boot).
  SQLite::Statement ins_kstack;
  SQLite::Statement sel_kstack;
  SQLite::Statement ins_kframe;
  std::map<std::pair<std::string, std::uint64_t>, std::int64_t> kstack_ids;
  SQLite::Statement ins_cgroup;
  SQLite::Statement sel_cgroup;
  SQLite::Statement ins_cgroup_cpu;
  // Schema v9: the boot's topology in force, replaced or added to; the sched_ext state of the
  // interval before, and the annotation of a change.
  SQLite::Statement sel_topology;
  SQLite::Statement del_topology;
  SQLite::Statement ins_topology;
  SQLite::Statement sel_prev_scx;
  SQLite::Statement ins_annotation;
  SQLite::Statement ins_clock_step;
  SQLite::Statement begin;
  SQLite::Statement commit;
  // Ids of rows that are committed: thread identity, perf event name, schedstat field name and
  // scheduling domain -> id.
  thread_cache threads;
  std::string threads_boot; // the boot of the ids in `threads`
  std::map<std::string, std::int64_t> events;
  std::map<std::string, std::int64_t> fields;
  std::map<domain_key, std::int64_t> domains;
  culprit_cache culprits; // of threads_boot, as `threads`
  std::map<std::string, std::int64_t> cgroups;

  // Ids created or looked up in the running (not yet committed) transaction: they enter the
  // caches only after COMMIT, since a rollback would take newly inserted rows with it.
  struct pending {
    thread_cache threads;
    std::map<std::string, std::int64_t> events;
    std::map<std::string, std::int64_t> fields;
    std::map<domain_key, std::int64_t> domains;
    culprit_cache culprits;
    std::map<std::string, std::int64_t> cgroups;
  };

  impl(std::string p, writer_lock &&l, SQLite::Database &&d)
      : path(std::move(p)), lock(std::move(l)), db(std::move(d)),
        ins_interval(db, "INSERT INTO intervals(start_ns, dur_ns, boot_id, flags, "
                         "drops_task_state, drops_graveyard, drops_stale_tid, drops_no_rq, "
                         "discarded_too_long, groups, drops_perf_read, collect_ns, maint_ns, "
                         "cpu_ns, rss_bytes, bpf_run_ns, bpf_run_cnt, delay_clock, "
                         "drops_segment, scx_state, scx_ops, scx_enable_seq, unseen_events) "
                         // flags bit 2: written late, into a minute already rolled up
                         // (schema v10; the views then read that minute from raw rows)
                         "VALUES(?1, ?2, ?3, ?4 | CASE WHEN ?1 < (SELECT built_ns FROM tiers "
                         "WHERE tier = 1) THEN 4 ELSE 0 END, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
                         "?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)"),
        upd_write_ns(db, "UPDATE intervals SET write_ns = ?2 WHERE id = ?1"),
        ins_thread(db, "INSERT OR IGNORE INTO thread(boot_id, tid, pid, start_time_ns, comm, "
                       "cgroup, last_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
        sel_thread(db, "SELECT id FROM thread WHERE boot_id = ?1 AND tid = ?2 AND "
                       "start_time_ns = ?3 AND comm = ?4 AND cgroup = ?5"),
        ins_thread_pack(db, "INSERT INTO thread_hist_pack(interval_id, metric, threads, data) "
                            "VALUES(?1, ?2, ?3, ?4)"),
        ins_summary(db, "INSERT INTO hist_summary(interval_id, metric, data) VALUES(?1, ?2, ?3)"),
        ins_cpu_hist(db, "INSERT INTO cpu_hist(interval_id, metric, cpu, count, total, hist) "
                         "VALUES(?1, ?2, ?3, ?4, ?5, ?6)"),
        ins_migration(db, "INSERT INTO thread_migration(interval_id, thread_id, count, "
                          "cross_ccx, cross_numa) VALUES(?1, ?2, ?3, ?4, ?5)"),
        ins_io(db, "INSERT INTO thread_io(interval_id, thread_id, read_bytes, write_bytes) "
                   "VALUES(?1, ?2, ?3, ?4)"),
        ins_perf(db, "INSERT INTO thread_perf(interval_id, thread_id, user_cycles, kernel_cycles, "
                     "user_instructions, kernel_instructions) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"),
        ins_event_def(db, "INSERT OR IGNORE INTO perf_event(name, type, config) "
                          "VALUES(?1, ?2, ?3)"),
        sel_event_def(db, "SELECT id FROM perf_event WHERE name = ?1"),
        ins_thread_event(db, "INSERT INTO thread_perf_event(interval_id, event_id, thread_id, "
                             "value, rate_hist) VALUES(?1, ?2, ?3, ?4, ?5)"),
        ins_counter_time(db, "INSERT INTO counter_time(interval_id, cpu, counter, enabled_ns, "
                             "running_ns) VALUES(?1, ?2, ?3, ?4, ?5)"),
        ins_field(db, "INSERT OR IGNORE INTO schedstat_field(name) VALUES(?1)"),
        sel_field(db, "SELECT id FROM schedstat_field WHERE name = ?1"),
        ins_domain(db, "INSERT OR IGNORE INTO schedstat_domain_def(cpu, domain, name) "
                       "VALUES(?1, ?2, ?3)"),
        sel_domain(db, "SELECT id FROM schedstat_domain_def WHERE cpu = ?1 AND domain = ?2 AND "
                       "name = ?3"),
        ins_schedstat_cpu(db, "INSERT INTO schedstat_cpu_delta(interval_id, field_id, cpu, delta) "
                              "VALUES(?1, ?2, ?3, ?4)"),
        ins_schedstat_domain(db, "INSERT INTO schedstat_domain_delta(interval_id, field_id, "
                                 "domain_id, delta) VALUES(?1, ?2, ?3, ?4)"),
        ins_culprit(db, "INSERT OR IGNORE INTO culprit(boot_id, pid, comm, cgroup, kind, "
                        "last_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6)"),
        sel_culprit(db, "SELECT id FROM culprit WHERE boot_id = ?1 AND pid = ?2 AND comm = ?3 "
                        "AND cgroup = ?4 AND kind = ?5"),
        ins_blame_pack(db, "INSERT INTO thread_blame_pack(interval_id, rows, data) "
                           "VALUES(?1, ?2, ?3)"),
        ins_wakeup_pack(db, "INSERT INTO thread_wakeup_pack(interval_id, rows, data) "
                            "VALUES(?1, ?2, ?3)"),
        ins_blocked_pack(db, "INSERT INTO thread_blocked_pack(interval_id, rows, data) "
                             "VALUES(?1, ?2, ?3)"),
        ins_kstack(db, "INSERT OR IGNORE INTO kstack(boot_id, hash, depth, state) "
                       "VALUES(?1, ?2, ?3, ?4)"),
        sel_kstack(db, "SELECT id FROM kstack WHERE boot_id = ?1 AND hash = ?2"),
        ins_kframe(db, "INSERT OR IGNORE INTO kstack_frame(stack_id, depth, func) "
                       "VALUES(?1, ?2, ?3)"),
        ins_cgroup(db, "INSERT OR IGNORE INTO cgroup(path, last_ns) VALUES(?1, ?2)"),
        sel_cgroup(db, "SELECT id FROM cgroup WHERE path = ?1"),
        ins_cgroup_cpu(db, "INSERT INTO cgroup_cpu(interval_id, cgroup_id, some_ns, full_ns, "
                           "usage_ns, periods, throttled, throttled_ns) "
                           "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        sel_topology(db, "SELECT cpu, core, package, die, llc, node FROM cpu_topology "
                         "WHERE boot_id = ?1 AND since_ns = (SELECT max(since_ns) FROM "
                         "cpu_topology WHERE boot_id = ?1) ORDER BY cpu"),
        del_topology(db, "DELETE FROM cpu_topology WHERE boot_id = ?1 AND since_ns = ?2"),
        ins_topology(db, "INSERT INTO cpu_topology(boot_id, since_ns, cpu, core, package, die, "
                         "llc, node) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"),
        sel_prev_scx(db, "SELECT boot_id, scx_state, scx_ops, scx_enable_seq FROM intervals "
                         "WHERE tier = 0 AND start_ns < ?1 ORDER BY start_ns DESC LIMIT 1"),
        ins_annotation(db, "INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                           "created_ns) VALUES(?1, ?2, 'rschedd', ?3, 'sched_ext', ?4)"),
        ins_clock_step(db, "INSERT INTO clock_steps(at_ns, step_ns, boot_id) VALUES(?1, ?2, ?3)"),
        begin(db, "BEGIN IMMEDIATE"), commit(db, "COMMIT") {}

  // The 1-minute rollup's sums (bucket_sums.hpp): every thread_hist, thread_blame,
  // thread_wakeup and thread_blocked row written is added to its minute's.
  detail::bucket_sums &sums() { return maint->sums(); }

  // Leaves the connection as it was before write(): statements reset, transaction rolled back.
  void abort() noexcept {
    for (auto *s : {&ins_interval,
                    &upd_write_ns,
                    &ins_thread,
                    &sel_thread,
                    &ins_thread_pack,
                    &ins_summary,
                    &ins_cpu_hist,
                    &ins_migration,
                    &ins_io,
                    &ins_perf,
                    &ins_event_def,
                    &sel_event_def,
                    &ins_thread_event,
                    &ins_counter_time,
                    &ins_field,
                    &sel_field,
                    &ins_domain,
                    &sel_domain,
                    &ins_schedstat_cpu,
                    &ins_schedstat_domain,
                    &ins_culprit,
                    &sel_culprit,
                    &ins_blame_pack,
                    &ins_wakeup_pack,
                    &ins_blocked_pack,
                    &ins_cgroup,
                    &sel_cgroup,
                    &ins_cgroup_cpu,
                    &sel_topology,
                    &del_topology,
                    &ins_topology,
                    &sel_prev_scx,
                    &ins_annotation,
                    &begin,
                    &commit}) {
      s->tryReset();
    }
    if (sqlite3_get_autocommit(db.getHandle()) == 0) {
      sqlite3_exec(db.getHandle(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
    if (maint) {
      maint->sums().discard();
    }
    summary.clear();
  }

  static void run(SQLite::Statement &s) {
    s.reset();
    s.exec();
  }

  // Id of a row of a deduplicated table (UNIQUE key): `bind_ins` binds the INSERT OR IGNORE,
  // `bind_sel` the SELECT by the key that runs when the row already existed.
  template <typename BindIns, typename BindSel>
  std::int64_t insert_or_select(SQLite::Statement &ins, SQLite::Statement &sel, BindIns bind_ins,
                                BindSel bind_sel) {
    ins.reset();
    bind_ins(ins);
    if (ins.exec() == 1) {
      return db.getLastInsertRowid();
    }
    sel.reset();
    bind_sel(sel);
    if (!sel.executeStep()) {
      throw SQLite::Exception("row vanished after INSERT OR IGNORE");
    }
    const std::int64_t id = sel.getColumn(0).getInt64();
    sel.reset();
    return id;
  }

  // Cached id of `key`: the committed cache, then this transaction's, then the database.
  template <typename Key, typename Resolve>
  static std::int64_t cached(std::map<Key, std::int64_t> &cache, std::map<Key, std::int64_t> &fresh,
                             const Key &key, Resolve resolve) {
    if (auto it = cache.find(key); it != cache.end()) {
      return it->second;
    }
    if (auto it = fresh.find(key); it != fresh.end()) {
      return it->second;
    }
    const std::int64_t id = resolve();
    fresh.emplace(key, id);
    return id;
  }

  // thread.id of `t` in boot `boot_id` (threads_boot), inserting the identity when it is new (or
  // known from an earlier run of the daemon, or evicted from the cache: then the SELECT finds
  // it). The committed cache, then this transaction's, then the database.
  std::int64_t thread_id(const std::string &boot_id, const thread_row &t, std::int64_t now,
                         pending &tx) {
    const thread_key_ref ref{t.tid, t.start_time_ns, t.comm, t.cgroup};
    if (auto it = threads.find(ref); it != threads.end()) {
      return it->second;
    }
    if (auto it = tx.threads.find(ref); it != tx.threads.end()) {
      return it->second;
    }
    const std::int64_t id = insert_or_select(
        ins_thread, sel_thread,
        [&](SQLite::Statement &s) {
          s.bindNoCopy(1, boot_id);
          s.bind(2, t.tid);
          s.bind(3, t.pid);
          s.bind(4, to_i64(t.start_time_ns));
          s.bindNoCopy(5, t.comm);
          s.bindNoCopy(6, t.cgroup);
          s.bind(7, now);
        },
        [&](SQLite::Statement &s) {
          s.bindNoCopy(1, boot_id);
          s.bind(2, t.tid);
          s.bind(3, to_i64(t.start_time_ns));
          s.bindNoCopy(4, t.comm);
          s.bindNoCopy(5, t.cgroup);
        });
    tx.threads.emplace(thread_key{t.tid, t.start_time_ns, t.comm, t.cgroup}, id);
    return id;
  }

  // perf_event.id of a definition. A name keeps the type and config it was first stored with.
  std::int64_t event_id(const perf_event_def &e, pending &tx) {
    return cached(events, tx.events, e.name, [&] {
      return insert_or_select(
          ins_event_def, sel_event_def,
          [&](SQLite::Statement &s) {
            s.bindNoCopy(1, e.name);
            s.bind(2, e.type);
            // The 64-bit pattern: a config with bit 63 set reads back negative.
            s.bind(3, static_cast<std::int64_t>(e.config));
          },
          [&](SQLite::Statement &s) { s.bindNoCopy(1, e.name); });
    });
  }

  std::int64_t field_id(const std::string &name, pending &tx) {
    return cached(fields, tx.fields, name, [&] {
      auto bind = [&](SQLite::Statement &s) { s.bindNoCopy(1, name); };
      return insert_or_select(ins_field, sel_field, bind, bind);
    });
  }

  std::int64_t domain_id(const domain_key &key, pending &tx) {
    return cached(domains, tx.domains, key, [&] {
      auto bind = [&](SQLite::Statement &s) {
        s.bind(1, key.cpu);
        s.bind(2, key.domain);
        s.bindNoCopy(3, key.name);
      };
      return insert_or_select(ins_domain, sel_domain, bind, bind);
    });
  }

  // culprit.id of `who` (a process of boot `boot_id`, or a pseudo-culprit), as thread_id.
  std::int64_t culprit_id(const culprit_ref &who, const std::string &boot_id, std::int64_t now,
                          pending &tx) {
    if (auto it = culprits.find(who); it != culprits.end()) {
      return it->second;
    }
    if (auto it = tx.culprits.find(who); it != tx.culprits.end()) {
      return it->second;
    }
    // Not cached: rare (a new culprit), so the key's strings are copied for the binds.
    culprit_key key{who.pid, who.kind, std::string(who.comm), std::string(who.cgroup)};
    const std::string boot = who.kind == 0 ? boot_id : std::string();
    const auto bind_key = [&](SQLite::Statement &s) {
      SQLite::bind(s, boot, key.pid, key.comm, key.cgroup, key.kind);
    };
    const std::int64_t id = insert_or_select(
        ins_culprit, sel_culprit,
        [&](SQLite::Statement &s) {
          bind_key(s);
          s.bind(6, now);
        },
        bind_key);
    tx.culprits.emplace(std::move(key), id);
    return id;
  }

  std::int64_t cgroup_id(const std::string &cgroup, std::int64_t now, pending &tx) {
    return cached(cgroups, tx.cgroups, cgroup, [&] {
      return insert_or_select(
          ins_cgroup, sel_cgroup, [&](SQLite::Statement &s) { SQLite::bind(s, cgroup, now); },
          [&](SQLite::Statement &s) { SQLite::bind(s, cgroup); });
    });
  }

  // The thread's blame rows, summed per culprit identity (two rows of one culprit in the input
  // are one row in the table).
  // Collects thread t's blame rows (by culprit) into blame_rows.
  void write_blame(std::int64_t thread, const thread_row &t, const std::string &boot_id,
                   std::int64_t now, pending &tx) {
    if (t.blame.empty()) {
      return;
    }
    by_culprit.clear(); // a few per thread: a vector kept from thread to thread
    for (const auto &b : t.blame) {
      if (b.wait_ns == 0 && b.waits == 0 && b.preempts == 0) {
        continue;
      }
      const culprit_ref who = culprit_of(b);
      const std::int64_t id = culprit_id(who, boot_id, now, tx);
      auto it = std::find_if(by_culprit.begin(), by_culprit.end(),
                             [id](const culprit_sum &c) { return c.id == id; });
      if (it == by_culprit.end()) {
        it = by_culprit.insert(by_culprit.end(), culprit_sum{id, who});
      }
      culprit_sum &x = *it;
      x.wait_ns = sat_add(x.wait_ns, b.wait_ns);
      x.waits = sat_add(x.waits, b.waits);
      x.preempts = sat_add(x.preempts, b.preempts);
      x.approx_ns = sat_add(x.approx_ns, b.approx_ns);
      if (b.kind == culprit_kind::process && b.prio >= 0) {
        x.sched = {b.cpu, b.policy, b.prio, b.waiter_policy, b.waiter_prio};
      }
    }
    // In culprit id order (the table's key order).
    std::sort(by_culprit.begin(), by_culprit.end(),
              [](const culprit_sum &a, const culprit_sum &b) { return a.id < b.id; });
    for (const auto &x : by_culprit) {
      // The estimated part is part of wait_ns (and stays so where a sum saturated).
      blame_rows.push_back({thread, x.id, to_i64(x.wait_ns), to_i64(x.waits), to_i64(x.preempts),
                            x.sched, to_i64(std::min(x.approx_ns, x.wait_ns))});
      const auto &b = blame_rows.back();
      sums().add_blame(thread, t.comm, t.cgroup, x.id, x.who.comm, x.who.cgroup, x.who.kind,
                       b.wait_ns, b.waits, b.preempts, b.approx_ns);
    }
  }
  // The waker row of `w` (its boot: the interval's for a process, '' for a pseudo-waker).
  static culprit_ref waker_of(const wakeup_row &w) {
    switch (w.kind) {
    case waker_kind::hardirq:
      return {0, 4, "<hardirq>", ""};
    case waker_kind::softirq:
      return {0, 5, "<softirq>", ""};
    case waker_kind::timer:
      return {0, 6, "<timer>", ""};
    case waker_kind::idle:
      return {0, 1, "<idle>", ""};
    case waker_kind::other:
      return {0, 3, "<other>", ""};
    case waker_kind::process:
      break;
    }
    return {w.pid, 0, w.comm, w.cgroup};
  }

  // Sorts the rows of one thread (from `first` on) by their key (the first K columns) and sums
  // those of one key into one (sleep_ns and count: the last two columns).
  template <std::size_t N, std::size_t K>
  static void sum_by_key(std::vector<std::array<std::int64_t, N>> &rows, std::size_t first) {
    const auto key_less = [](const auto &a, const auto &b) {
      return std::lexicographical_compare(a.begin(), a.begin() + K, b.begin(), b.begin() + K);
    };
    const auto from = rows.begin() + static_cast<std::ptrdiff_t>(first);
    std::sort(from, rows.end(), key_less);
    auto out = from;
    for (auto it = from; it != rows.end(); ++it) {
      if (out != from && !key_less(*(out - 1), *it)) {
        auto &kept = *(out - 1);
        kept[N - 2] = add_saturated(kept[N - 2], (*it)[N - 2]);
        kept[N - 1] = add_saturated(kept[N - 1], (*it)[N - 1]);
      } else {
        *out++ = *it;
      }
    }
    rows.erase(out, rows.end());
  }
  static std::int64_t add_saturated(std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<std::int64_t>::max() : r;
  }

  // Collects thread t's wakeup rows (schema v15; packed by insert_row_pack, v18).
  void write_wakeups(std::int64_t thread, const thread_row &t, const std::string &boot_id,
                     std::int64_t now, pending &tx) {
    const std::size_t first = wakeup_rows.size();
    for (const auto &w : t.wakeups) {
      if (w.count == 0 && w.sleep_ns == 0) {
        continue;
      }
      if (w.state > 2) {
        throw std::invalid_argument("wakeup row with an unknown sleep state");
      }
      const culprit_ref who = waker_of(w);
      const std::int64_t id = culprit_id(who, boot_id, now, tx);
      if (std::none_of(wakers.begin(), wakers.end(),
                       [id](const auto &k) { return k.first == id; })) {
        wakers.emplace_back(id, who);
      }
      wakeup_rows.push_back(
          {thread, id, static_cast<std::int64_t>(w.state), to_i64(w.sleep_ns), to_i64(w.count)});
    }
    sum_by_key<5, 3>(wakeup_rows, first);
    // The minute's sums, from the rows as written (their waker's group by its identity).
    for (std::size_t i = first; i < wakeup_rows.size(); ++i) {
      const auto &r = wakeup_rows[i];
      const auto k = std::find_if(wakers.begin(), wakers.end(),
                                  [&](const auto &x) { return x.first == r[1]; });
      sums().add_wakeup(thread, t.comm, t.cgroup, r[1], k->second.comm, k->second.cgroup,
                        k->second.kind, r[2], r[3], r[4]);
    }
    wakers.clear();
  }

  // The rows collected (in thread, then key order) as the interval's row of `ins`'s pack table.
  // (`pack` keeps its buffers from one interval to the next.)
  template <std::size_t N>
  void insert_row_pack(std::int64_t interval_id, SQLite::Statement &ins, row_pack_builder &pack,
                       std::vector<std::array<std::int64_t, N>> &rows, const char *table) {
    if (rows.empty()) {
      return;
    }
    pack.clear();
    for (const auto &r : rows) {
      if (!pack.add(r)) {
        throw std::logic_error(std::string(table) + ": rows out of key order");
      }
    }
    insert_pack(ins, interval_id, pack.size(), pack.finish());
    rows.clear();
  }

  // One row of a pack table: (interval_id, rows, data).
  static void insert_pack(SQLite::Statement &ins, std::int64_t interval_id, std::size_t rows,
                          const std::vector<std::uint8_t> &blob) {
    ins.reset();
    ins.bind(1, interval_id);
    ins.bind(2, static_cast<std::int64_t>(rows));
    ins.bind(3, blob.data(), static_cast<int>(blob.size()));
    ins.exec();
  }

  // kstack.id of a stack of boot `boot_id` (hash 0: <other>), its frames inserted with it.
  std::int64_t kstack_id(const blocked_row &b, const std::string &boot_id) {
    const std::string boot = b.hash == 0 ? std::string() : boot_id;
    if (auto it = kstack_ids.find({boot, b.hash}); it != kstack_ids.end()) {
      return it->second;
    }
    const auto hash = static_cast<std::int64_t>(b.hash);
    ins_kstack.reset();
    SQLite::bind(ins_kstack, boot, hash, static_cast<std::int64_t>(b.frames.size()),
                 static_cast<std::int64_t>(b.hash == 0 ? 1 : b.state));
    const bool inserted = ins_kstack.exec() > 0;
    sel_kstack.reset();
    SQLite::bind(sel_kstack, boot, hash);
    if (!sel_kstack.executeStep()) {
      throw std::logic_error("kstack row missing after its insert");
    }
    const std::int64_t id = sel_kstack.getColumn(0).getInt64();
    sel_kstack.reset();
    if (inserted) {
      for (std::size_t d = 0; d < b.frames.size(); ++d) {
        rerun(ins_kframe, id, static_cast<std::int64_t>(d), b.frames[d]);
      }
    }
    if (kstack_ids.size() > 65536) {
      kstack_ids.clear(); // a cache
    }
    kstack_ids.emplace(std::pair{boot, b.hash}, id);
    return id;
  }

  // Collects thread t's D sleeps and long sleeps by kernel stack (schema v15, state v16;
  // packed by insert_row_pack, v18).
  void write_blocked(std::int64_t thread, const thread_row &t, const std::string &boot_id) {
    const std::size_t first = blocked_rows.size();
    for (const auto &b : t.blocked) {
      if (b.count == 0 && b.sleep_ns == 0) {
        continue;
      }
      blocked_rows.push_back({thread, kstack_id(b, boot_id), to_i64(b.sleep_ns), to_i64(b.count)});
    }
    sum_by_key<4, 2>(blocked_rows, first);
    for (std::size_t i = first; i < blocked_rows.size(); ++i) {
      const auto &r = blocked_rows[i];
      sums().add_blocked(thread, t.comm, t.cgroup, r[1], r[2], r[3]);
    }
  }

  // One thread's blame summed per culprit identity (write_blame's scratch).
  struct culprit_sum {
    std::int64_t id = 0;
    culprit_ref who; // views of the thread's first row of the culprit
    std::uint64_t wait_ns = 0, waits = 0, preempts = 0, approx_ns = 0;
    std::array<int, 5> sched{-1, -1, -1, -1, -1};
  };
  std::vector<culprit_sum> by_culprit;

  // The blame rows write_blame collected (in thread, then culprit order) as the interval's
  // pack.
  void insert_blame_rows(std::int64_t interval_id) {
    if (blame_rows.empty()) {
      return;
    }
    blame_pack.clear();
    for (const auto &b : blame_rows) {
      blame_entry e;
      e.thread_id = b.thread;
      e.culprit_id = b.culprit;
      e.wait_ns = b.wait_ns;
      e.waits = b.waits;
      e.preempts = b.preempts;
      for (std::size_t k = 0; k < e.sched.size(); ++k) {
        if (b.sched[k] >= 0) {
          e.sched[k] = b.sched[k];
        }
      }
      e.approx_ns = b.approx_ns;
      if (!blame_pack.add(e)) {
        throw std::logic_error("thread_blame_pack: rows out of (thread, culprit) order");
      }
    }
    insert_pack(ins_blame_pack, interval_id, blame_pack.size(), blame_pack.finish());
    blame_rows.clear();
  }

  void write_cgroup_cpu(std::int64_t interval_id, const interval_row &iv, pending &tx) {
    std::set<std::string> seen;
    for (const auto &c : iv.cgroup_cpu) {
      if (!seen.insert(c.cgroup).second) {
        continue; // the first row of a cgroup wins (the source reports each cgroup once)
      }
      ins_cgroup_cpu.reset();
      ins_cgroup_cpu.bind(1, interval_id);
      ins_cgroup_cpu.bind(2, cgroup_id(c.cgroup, iv.start_ns, tx));
      const std::optional<std::int64_t> v[] = {c.some_ns, c.full_ns,   c.usage_ns,
                                               c.periods, c.throttled, c.throttled_ns};
      for (int i = 0; i < 6; ++i) {
        if (v[i]) {
          ins_cgroup_cpu.bind(3 + i, *v[i]);
        } else {
          ins_cgroup_cpu.bind(3 + i);
        }
      }
      ins_cgroup_cpu.exec();
    }
  }

  // Whether metric m's value v is written as latency_fine: a scheduling delay known at that
  // precision (a fine tail, or no sample from 512 us up). Every other value is written in its
  // registry layout.
  static bool fine_row(metrics::id m, const hist_value &v) {
    return metrics::keeps_fine_tail(m) && metrics::has_fine(v);
  }
  static std::vector<std::uint8_t> encoded(metrics::id m, const hist_value &v) {
    if (fine_row(m, v)) {
      std::vector<std::uint8_t> out;
      metrics::encode_fine_into(v, out);
      return out;
    }
    return stats::encode(v.hist);
  }

  // Writes metric i of the set when it has samples, under its registry id.
  template <metrics::scope S>
  void insert_value(SQLite::Statement &s, std::int64_t interval_id, std::int64_t key,
                    const metrics::set<S> &values, std::size_t i) {
    constexpr auto defs = metrics::entries<S>();
    const hist_value &v = values.at(i);
    if (!values.has(i) || !has_data(v)) {
      return;
    }
    rerun_blob(s, interval_id, defs[i].db_id, key, v, encoded(defs[i].metric, v));
  }

  // The positions of scope S's metrics in the order of their ids in the database.
  template <metrics::scope S> static constexpr auto in_db_id_order() {
    constexpr auto defs = metrics::entries<S>();
    std::array<std::size_t, defs.size()> order{};
    for (std::size_t i = 0; i < defs.size(); ++i) {
      order[i] = i;
    }
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return defs[a].db_id < defs[b].db_id; });
    return order;
  }

  // Row t's metric values with samples into their metrics' packs (rows come in thread id order)
  // and the minute's sums.
  void pack_thread_hists(std::int64_t id, const thread_row &t) {
    constexpr auto defs = metrics::entries<metrics::scope::thread>();
    for (std::size_t i = 0; i < defs.size(); ++i) {
      if (!t.m.has(i)) {
        continue;
      }
      const hist_value &v = t.m.at(i);
      if (!has_data(v)) {
        continue;
      }
      if (fine_row(defs[i].metric, v)) { // latency_fine: the sums add the blob
        metrics::encode_fine_into(v, hist_blob);
        sums().add_hist_blob(defs[i].db_id, id, t.comm, t.cgroup, to_i64(v.count), to_i64(v.total),
                             hist_blob);
      } else {
        sums().add_hist(defs[i].db_id, id, t.comm, t.cgroup, to_i64(v.count), to_i64(v.total),
                        v.hist, v.spans);
        stats::encode_into(v.hist, hist_blob, v.spans);
      }
      if (!packs[i].add(id, to_i64(v.count), to_i64(v.total), hist_blob)) {
        throw std::logic_error("thread_hist_pack: thread ids out of order");
      }
      if (defs[i].db_id == summary_metric && !summary.add(id, t.comm, v.hist)) {
        throw std::logic_error("hist_summary: thread ids out of order, or another layout");
      }
    }
  }

  // The packs pack_thread_hists built, one thread_hist_pack row per metric with samples.
  void insert_thread_packs(std::int64_t interval_id) {
    constexpr auto defs = metrics::entries<metrics::scope::thread>();
    for (const std::size_t i : in_db_id_order<metrics::scope::thread>()) { // primary-key order
      pack_builder &pack = packs[i];
      if (pack.size() == 0) {
        continue;
      }
      const auto &blob = pack.finish();
      ins_thread_pack.reset();
      ins_thread_pack.bind(1, interval_id);
      ins_thread_pack.bind(2, defs[i].db_id);
      ins_thread_pack.bind(3, static_cast<std::int64_t>(pack.size()));
      ins_thread_pack.bindNoCopy(4, blob.data(), static_cast<int>(blob.size()));
      ins_thread_pack.exec();
      pack.clear();
    }
    if (summary.size() != 0) {
      const auto blob = summary.finish();
      ins_summary.reset();
      ins_summary.bind(1, interval_id);
      ins_summary.bind(2, summary_metric);
      ins_summary.bindNoCopy(3, blob.data(), static_cast<int>(blob.size()));
      ins_summary.exec();
    }
  }

  static void rerun_blob(SQLite::Statement &s, std::int64_t interval_id, int metric,
                         std::int64_t key, const hist_value &v,
                         const std::vector<std::uint8_t> &blob) {
    s.reset();
    s.bind(1, interval_id);
    s.bind(2, metric);
    s.bind(3, key);
    s.bind(4, to_i64(v.count));
    s.bind(5, to_i64(v.total));
    s.bindNoCopy(6, blob.data(), static_cast<int>(blob.size()));
    s.exec();
  }

  void write_thread_events(std::int64_t interval_id, std::int64_t thread, const thread_row &t,
                           const std::vector<std::int64_t> &event_ids) {
    if (t.events.empty()) {
      return;
    }
    struct acc {
      std::uint64_t value = 0;
      stats::histogram rate{stats::layout::log2, {}};
    };
    std::map<std::int64_t, acc> per_event; // by perf_event.id: duplicates are summed
    for (const auto &[idx, v] : t.events) {
      auto &a = per_event[event_ids[idx]];
      a.value = sat_add(a.value, v);
    }
    for (const auto &[idx, h] : t.event_rates) {
      if (auto it = per_event.find(event_ids[idx]); it != per_event.end() && !h.empty()) {
        (void)stats::merge_into(it->second.rate, h); // layout checked before
      }
    }
    for (const auto &[id, a] : per_event) {
      if (a.value == 0) {
        continue;
      }
      ins_thread_event.reset();
      ins_thread_event.bind(1, interval_id);
      ins_thread_event.bind(2, id);
      ins_thread_event.bind(3, thread);
      ins_thread_event.bind(4, to_i64(a.value));
      std::vector<std::uint8_t> blob;
      if (a.rate.empty()) {
        ins_thread_event.bind(5); // NULL: no per-second samples
      } else {
        blob = stats::encode(a.rate);
        ins_thread_event.bindNoCopy(5, blob.data(), static_cast<int>(blob.size()));
      }
      ins_thread_event.exec();
    }
  }

  // A thread's rows other than its histograms (written table by table: write_tx).
  void write_thread(std::int64_t interval_id, std::int64_t id, const thread_row &t,
                    const std::vector<std::int64_t> &event_ids) {
    if (has_migrations(t)) {
      rerun(ins_migration, interval_id, id, to_i64(t.migrations), to_i64(t.cross_ccx),
            to_i64(t.cross_numa));
    }
    if (t.io_read_bytes != 0 || t.io_write_bytes != 0) {
      rerun(ins_io, interval_id, id, to_i64(t.io_read_bytes), to_i64(t.io_write_bytes));
    }
    if (has_ipc_data(t)) {
      rerun(ins_perf, interval_id, id, to_i64(t.user_cycles), to_i64(t.kernel_cycles),
            to_i64(t.user_instructions), to_i64(t.kernel_instructions));
    }
    write_thread_events(interval_id, id, t, event_ids);
  }

  void write_cpus(std::int64_t interval_id, const interval_row &iv) {
    std::map<std::uint32_t, cpu_row> cpus;
    for (const auto &c : iv.cpus) {
      if (c.m.empty()) {
        continue;
      }
      if (auto [it, added] = cpus.emplace(c.cpu, c); !added) {
        add_row(it->second, c);
      }
    }
    for (const std::size_t i : in_db_id_order<metrics::scope::cpu>()) { // primary-key order
      for (const auto &[cpu, c] : cpus) {
        insert_value(ins_cpu_hist, interval_id, std::int64_t{cpu}, c.m, i);
      }
    }
  }

  void write_counter_times(std::int64_t interval_id, const interval_row &iv) {
    // Written as given, zeros included; a (cpu, counter) listed twice is summed.
    std::map<std::pair<std::uint32_t, std::string>, std::pair<std::uint64_t, std::uint64_t>> rows;
    for (const auto &c : iv.counter_times) {
      auto &[enabled, running] = rows[{c.cpu, c.counter}];
      enabled = sat_add(enabled, c.enabled_ns);
      running = sat_add(running, c.running_ns);
    }
    for (const auto &[key, times] : rows) {
      ins_counter_time.reset();
      ins_counter_time.bind(1, interval_id);
      ins_counter_time.bind(2, key.first);
      ins_counter_time.bindNoCopy(3, key.second);
      ins_counter_time.bind(4, to_i64(times.first));
      ins_counter_time.bind(5, to_i64(times.second));
      ins_counter_time.exec();
    }
  }

  // Non-zero deltas only; a key listed twice is summed (and skipped when the sum is 0).
  static void
  insert_deltas(SQLite::Statement &s, std::int64_t interval_id,
                const std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> &m) {
    for (const auto &[key, delta] : m) {
      if (delta == 0) {
        continue;
      }
      rerun(s, interval_id, key.first, key.second, delta);
    }
  }

  void write_schedstat(std::int64_t interval_id, const interval_row &iv, pending &tx) {
    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> cpu; // (field, cpu)
    for (const auto &d : iv.schedstat_cpu) {
      if (d.delta == 0) {
        continue;
      }
      auto &v = cpu[{field_id(d.field, tx), std::int64_t{d.cpu}}];
      v = sat_add(v, d.delta);
    }
    insert_deltas(ins_schedstat_cpu, interval_id, cpu);

    std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> dom; // (field, domain id)
    for (const auto &d : iv.schedstat_domain) {
      if (d.delta == 0) {
        continue;
      }
      const std::int64_t domain = domain_id(domain_key{d.cpu, d.domain, d.name}, tx);
      auto &v = dom[{field_id(d.field, tx), domain}];
      v = sat_add(v, d.delta);
    }
    insert_deltas(ins_schedstat_domain, interval_id, dom);
  }

  // Schema v9: `iv.topology` when it is not the set in force for the boot. The boot's first set
  // is in force from the boot (since_ns 0), a later one from this interval's start.
  void write_topology(const interval_row &iv) {
    if (iv.topology.empty()) {
      return;
    }
    std::vector<cpu_topology_row> want = iv.topology;
    std::sort(want.begin(), want.end(), [](const auto &a, const auto &b) { return a.cpu < b.cpu; });
    std::vector<cpu_topology_row> have;
    sel_topology.reset();
    sel_topology.bindNoCopy(1, iv.boot_id);
    const auto opt_int = [](const SQLite::Column &c) {
      return c.isNull() ? -1 : static_cast<int>(c.getInt64());
    };
    while (sel_topology.executeStep()) {
      have.push_back({static_cast<std::uint32_t>(sel_topology.getColumn(0).getInt64()),
                      opt_int(sel_topology.getColumn(1)), opt_int(sel_topology.getColumn(2)),
                      opt_int(sel_topology.getColumn(3)), opt_int(sel_topology.getColumn(4)),
                      opt_int(sel_topology.getColumn(5))});
    }
    sel_topology.reset();
    if (have == want) {
      return;
    }
    const std::int64_t since = have.empty() ? 0 : iv.start_ns;
    rerun(del_topology, iv.boot_id, since); // a set at the very same instant is replaced
    for (const auto &c : want) {
      ins_topology.reset();
      ins_topology.bindNoCopy(1, iv.boot_id);
      ins_topology.bind(2, since);
      ins_topology.bind(3, std::int64_t{c.cpu});
      const int vals[] = {c.core, c.package, c.die, c.llc, c.node};
      for (int i = 0; i < 5; ++i) {
        if (vals[i] < 0) {
          ins_topology.bind(4 + i);
        } else {
          ins_topology.bind(4 + i, vals[i]);
        }
      }
      ins_topology.exec();
    }
  }

  // Schema v9: the annotation of a sched_ext change since the raw interval before this one, when
  // it is of the same boot (enable_seq counts from the boot). Runs before the interval's insert.
  void annotate_sched_ext(const interval_row &iv) {
    if (!iv.sched_ext) {
      return;
    }
    std::optional<sched_ext_row> before;
    sel_prev_scx.reset();
    sel_prev_scx.bind(1, iv.start_ns);
    if (sel_prev_scx.executeStep() && sel_prev_scx.getColumn(0).getString() == iv.boot_id &&
        !sel_prev_scx.getColumn(1).isNull()) {
      before =
          sched_ext_row{sel_prev_scx.getColumn(1).getString(),
                        sel_prev_scx.getColumn(2).isNull() ? std::string()
                                                           : sel_prev_scx.getColumn(2).getString(),
                        sel_prev_scx.getColumn(3).getInt64()};
    }
    sel_prev_scx.reset();
    const std::string text = sched_ext_change(before ? &*before : nullptr, *iv.sched_ext);
    if (text.empty()) {
      return;
    }
    // The change happened between the previous read and this one: the interval is its span.
    ins_annotation.reset();
    ins_annotation.bind(1, iv.start_ns);
    ins_annotation.bind(2, iv.start_ns + iv.dur_ns);
    ins_annotation.bindNoCopy(3, text);
    ins_annotation.bind(4, timefmt::realtime_now_ns());
    ins_annotation.exec();
  }

  // The interval's row of `intervals`; its id.
  std::int64_t insert_interval(const interval_row &iv) {
    ins_interval.reset();
    ins_interval.bind(1, iv.start_ns);
    ins_interval.bind(2, iv.dur_ns);
    ins_interval.bindNoCopy(3, iv.boot_id);
    ins_interval.bind(4, (iv.final_interval ? 1 : 0) | (iv.stalled ? 2 : 0));
    ins_interval.bind(5, to_i64(iv.drops[RSCHED_DROP_TASK_STATE]));
    ins_interval.bind(6, to_i64(iv.drops[RSCHED_DROP_GRAVEYARD]));
    ins_interval.bind(7, to_i64(iv.drops[RSCHED_DROP_STALE_TID]));
    ins_interval.bind(8, to_i64(iv.drops[RSCHED_DROP_NO_RQ]));
    ins_interval.bind(9, to_i64(iv.drops[RSCHED_DROP_TOO_LONG]));
    ins_interval.bind(10, iv.groups);
    ins_interval.bind(11, to_i64(iv.drops[RSCHED_DROP_PERF_READ]));
    const std::optional<std::int64_t> health[] = {iv.collect_ns, iv.maint_ns,   iv.cpu_ns,
                                                  iv.rss_bytes,  iv.bpf_run_ns, iv.bpf_run_cnt};
    for (int i = 0; i < 6; ++i) {
      if (health[i]) {
        ins_interval.bind(12 + i, *health[i]);
      } else {
        ins_interval.bind(12 + i);
      }
    }
    if (iv.delay_clock.empty()) {
      ins_interval.bind(18);
    } else {
      ins_interval.bindNoCopy(18, iv.delay_clock);
    }
    ins_interval.bind(19, to_i64(iv.drops[RSCHED_DROP_SEGMENT]));
    ins_interval.bind(23, to_i64(iv.drops[RSCHED_DROP_UNSEEN]));
    if (iv.sched_ext) {
      ins_interval.bindNoCopy(20, iv.sched_ext->state);
      if (iv.sched_ext->ops.empty()) {
        ins_interval.bind(21);
      } else {
        ins_interval.bindNoCopy(21, iv.sched_ext->ops);
      }
      ins_interval.bind(22, iv.sched_ext->enable_seq);
    } else {
      for (int i = 20; i <= 22; ++i) {
        ins_interval.bind(i);
      }
    }
    ins_interval.exec();
    return db.getLastInsertRowid();
  }

  // One interval in one transaction. SQLite's errors are SQLite::Exception (the caller rolls
  // back); a thread row the checks refuse is returned before anything of it is written, and the
  // caller rolls back the same way.
  result<void> write_tx(const interval_row &iv) {
    run(begin);
    annotate_sched_ext(iv);
    const std::int64_t interval_id = insert_interval(iv);
    for (const clock_step &c : iv.clock_steps) {
      rerun(ins_clock_step, c.at_ns, c.step_ns, iv.boot_id);
    }
    sums().begin(interval_id, iv.boot_id, iv.start_ns);
    if (prev_interval != 0) {
      rerun(upd_write_ns, prev_interval, prev_write_ns);
    }

    pending tx;
    std::vector<std::int64_t> event_ids;
    event_ids.reserve(iv.events.size());
    for (const auto &e : iv.events) {
      event_ids.push_back(event_id(e, tx));
    }

    // Resolve thread ids; rows of one identity that appear twice in the input are summed (the
    // primary keys allow one row per thread and metric in an interval).
    // Rows point into the input; only a duplicate gets a summed copy (rows are ~6 KB each).
    if (threads_boot != iv.boot_id) {
      threads.clear(); // the caches hold one boot's identities
      culprits.clear();
      threads_boot = iv.boot_id;
    }
    std::vector<std::pair<std::int64_t, const thread_row *>> rows;
    rows.reserve(iv.threads.size());
    const std::size_t ahead = 4; // rows whose values are being fetched while one is checked
    for (std::size_t k = 0; k < iv.threads.size(); ++k) {
      if (k + 2 * ahead < iv.threads.size()) {
        __builtin_prefetch(&iv.threads[k + 2 * ahead].m);
      }
      if (k + ahead < iv.threads.size()) {
        iv.threads[k + ahead].m.prefetch();
      }
      const thread_row &t = iv.threads[k];
      if (auto r = validate_thread(t, iv.events.size()); !r) {
        return r; // the caller rolls the transaction back
      }
      if (!has_any(t)) {
        continue;
      }
      rows.emplace_back(thread_id(iv.boot_id, t, iv.start_ns, tx), &t);
    }
    // In primary-key order, table by table: every insert then appends at the right edge of
    // its b-tree (no search from the root, no split that leaves half-full pages behind).
    // Rows of one identity that appear twice in the input are then adjacent, and summed (the
    // primary keys allow one row per thread and metric in an interval): only a duplicate gets
    // a summed copy.
    std::stable_sort(rows.begin(), rows.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
    std::deque<thread_row> summed; // deque: earlier copies stay where they are
    std::size_t kept = 0;
    for (std::size_t k = 0; k < rows.size(); ++k) {
      if (kept > 0 && rows[kept - 1].first == rows[k].first) {
        auto &row = rows[kept - 1].second;
        if (summed.empty() || row != &summed.back()) {
          row = &summed.emplace_back(*row);
        }
        add_row(summed.back(), *rows[k].second);
        continue;
      }
      rows[kept++] = rows[k];
    }
    rows.resize(kept);
    // One pass over the threads (at 10,000 threads each pass over their rows and values is a
    // few ms of cache misses): histograms into the packs, migration and perf rows inserted
    // (thread id order), blame rows collected; then the packs and the blame rows.
    for (auto &p : packs) {
      p.clear();
    }
    blame_rows.clear();
    wakeup_rows.clear();
    blocked_rows.clear();
    for (std::size_t k = 0; k < rows.size(); ++k) {
      if (k + 2 * ahead < rows.size()) {
        __builtin_prefetch(&rows[k + 2 * ahead].second->m); // the row, then (below) its values
      }
      if (k + ahead < rows.size()) {
        rows[k + ahead].second->m.prefetch();
      }
      const auto &[id, t] = rows[k];
      pack_thread_hists(id, *t);
      write_thread(interval_id, id, *t, event_ids);
      write_blame(id, *t, iv.boot_id, iv.start_ns, tx);
      write_wakeups(id, *t, iv.boot_id, iv.start_ns, tx);
      write_blocked(id, *t, iv.boot_id);
    }
    insert_thread_packs(interval_id);
    insert_blame_rows(interval_id);
    insert_row_pack(interval_id, ins_wakeup_pack, wakeup_pack, wakeup_rows, "thread_wakeup_pack");
    insert_row_pack(interval_id, ins_blocked_pack, blocked_pack, blocked_rows,
                    "thread_blocked_pack");

    write_cpus(interval_id, iv);
    write_counter_times(interval_id, iv);
    write_schedstat(interval_id, iv, tx);
    write_cgroup_cpu(interval_id, iv, tx);
    write_topology(iv);

    run(commit);
    sums().commit();
    prev_interval = interval_id;

    commit_cache(threads, tx.threads);
    commit_cache(events, tx.events);
    commit_cache(fields, tx.fields);
    commit_cache(domains, tx.domains);
    commit_cache(culprits, tx.culprits);
    commit_cache(cgroups, tx.cgroups);
    return {};
  }
};

result<void> check_place(const std::string &path, std::optional<gid_t> group) {
  if (is_memory(path)) {
    return {};
  }
  if (auto p = database_place(path, group); !p) {
    return make_error(fmt::format("refusing database {}: {}", path, p.err().msg), p.err().errnum);
  }
  return {};
}

result<writer> writer::open(const std::string &path) {
  return open(path, open_options{});
}

result<writer> writer::open(const std::string &path, const open_options &opt) {
  try {
    // One thread uses the connection at a time (the recorder's): SQLite's per-call mutexes,
    // ~1 % of the recorder's CPU at 10,000 threads, are not needed.
    int flags = SQLite::OPEN_READWRITE | SQLite::OPEN_NOMUTEX;
    writer_lock lock;         // declared before db: on every exit the connection closes first
    bool dir_is_ours = false; // the database's directory is rschedd's own (share_with_group)
    std::string real = path;  // what is opened: `path` with its links resolved
    if (is_memory(path)) {
      flags |= SQLite::OPEN_CREATE;
    } else {
      // Checked before anything is created, and again once the file exists (open_place).
      auto where = open_place(path, opt.group, dir_is_ours);
      if (!where) {
        return where.err();
      }
      real = std::move(*where);
      // Before SQLite reads anything: of two processes creating or upgrading the file at once,
      // the second is refused here.
      if (opt.lock) {
        auto l = writer_lock::take(real, path);
        if (!l) {
          return l.err();
        }
        lock = std::move(*l);
      }
    }
    // Without OPEN_CREATE: the file exists now, and SQLite must not create one behind our back.
    SQLite::Database db(real, flags, busy_timeout_ms);
    sqlite3 *h = db.getHandle();
    sqlite3_extended_result_codes(h, 1);
    // thread_hist and thread_blame are virtual tables (created by create/upgrade below), and the
    // rollups call hist_merge: nothing more of SQL is needed to write.
    if (auto r = store::register_storage(h); !r) {
      return make_error(fmt::format("{}: {}", path, r.err().msg));
    }

    // Classify before changing anything: a refused file must stay byte-identical (setting the
    // journal mode alone would rewrite the header of a foreign database).
    auto state = store::check(h, path);
    if (!state) {
      if ((sqlite3_extended_errcode(h) & 0xff) == SQLITE_CORRUPT) {
        return make_error(fmt::format("database {} is corrupt: {}", path, sqlite3_errmsg(h)));
      }
      return state.err();
    }
    if (!state->empty() && !is_memory(path)) {
      if (auto r = quick_check(h, path); !r) {
        return r.err();
      }
    }
    // WAL lets rsched-sql read while the daemon writes; NORMAL is durable across application
    // crashes, and a power loss can only lose the last transactions, never corrupt the file.
    if (auto r = sqlite::exec(h, "PRAGMA journal_mode = WAL"); !r) {
      return make_error(fmt::format("{}: journal_mode=WAL: {}", path, r.err().msg));
    }
    if (auto r = sqlite::exec(h, "PRAGMA synchronous = NORMAL"); !r) {
      return make_error(fmt::format("{}: synchronous=NORMAL: {}", path, r.err().msg));
    }
    (void)sqlite::exec(h, journal_size_limit);
    // Keep the -wal and -shm files when the daemon closes the database: a read-only reader
    // (group member, no write access to the 0750 directory) cannot create them itself and could
    // then not open a WAL database at all.
    int persist = 1;
    sqlite3_file_control(h, "main", SQLITE_FCNTL_PERSIST_WAL, &persist);
    if (!is_memory(path)) {
      // What SQLite opened at the -wal and -shm names is ours too (writer_file.hpp).
      if (auto r = check_opened(h, path, real, opt.group); !r) {
        return r.err();
      }
    }
    // The -wal and -shm files exist from here on: all three (and our directory) to the readers'
    // group, when one is asked for.
    if (opt.group && !is_memory(path)) {
      if (auto r = share_with_group(real, *opt.group, dir_is_ours); !r) {
        return r.err();
      }
    }

    if (state->empty()) {
      if (auto r = store::create(h, path); !r) {
        return r.err();
      }
    } else if (!state->current()) {
      if (auto r = store::upgrade(h, path, *state); !r) {
        return r.err();
      }
    }
    if (auto r = store::add_new_metrics(h, path); !r) {
      return r.err();
    }
    if (auto r = record_writer(h, path); !r) {
      return r.err();
    }
    // A database created before schema 3 has no incremental auto-vacuum: switching needs one
    // full VACUUM (it rewrites the file once). Best effort: if it fails (no room for the copy,
    // a reader in the way) the data is intact and the next start tries again; until then
    // retention still frees pages for reuse inside the file.
    if (!is_memory(path)) {
      if (auto av = sqlite::query_int(h, "PRAGMA auto_vacuum"); av && *av == 0) {
        (void)sqlite::exec(h, "PRAGMA auto_vacuum = INCREMENTAL");
        (void)sqlite::exec(h, "VACUUM");
      }
    }
    auto p = std::make_unique<impl>(path, std::move(lock), std::move(db));
    p->maint = std::make_unique<detail::maintenance>(p->db.getHandle());
    p->wal = detail::wal_watch(p->db.getHandle());
    p->note = opt.note;
    return writer(std::move(p));
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
    const auto t0 = std::chrono::steady_clock::now();
    p_->wal.check(p_->db.getHandle(), p_->note);
    if (auto r = p_->write_tx(iv); !r) {
      p_->abort();
      return make_error(fmt::format("{}: writing interval: {}", p_->path, r.err().msg));
    }
    p_->wal.after_write(p_->db.getHandle());
    p_->prev_write_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    if (iv.final_interval) {
      // No next transaction will carry this one's write time: store it now, on its own. Best
      // effort: the interval itself is committed, and a missing write time is only NULL.
      try {
        rerun(p_->upd_write_ns, p_->prev_interval, p_->prev_write_ns);
      } catch (const SQLite::Exception &) {
        (void)p_->upd_write_ns.tryReset();
      }
      p_->prev_interval = 0;
    }
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

result<void> writer::note_write_failure(std::int64_t start_ns, std::int64_t end_ns,
                                        std::uint64_t intervals, const std::string &error) {
  if (!p_) {
    return make_error("store writer used after move");
  }
  try {
    SQLite::Statement ins(p_->db, "INSERT INTO annotations(start_ns, end_ns, source, text, tags, "
                                  "created_ns) VALUES (?, ?, 'rschedd', ?, 'write-failed', ?)");
    ins.bind(1, start_ns);
    ins.bind(2, end_ns);
    ins.bind(3, fmt::format("write failed: {} ({} interval{} lost)", error, intervals,
                            intervals == 1 ? "" : "s"));
    ins.bind(4, static_cast<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count()));
    ins.exec();
    return {};
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: noting the lost intervals: {}", p_->path, e.what()));
  }
}

result<maintenance_report> writer::maintain(std::int64_t now_ns) {
  if (!p_) {
    return make_error("store writer used after move");
  }
  auto r = p_->maint->run(now_ns, p_->keep);
  p_->wal.after_write(p_->db.getHandle()); // what it wrote, while the -wal is a deleted one
  if (!r) {
    return make_error(fmt::format("{}: maintenance: {}", p_->path, r.err().msg), r.err().errnum);
  }
  if (r->rows_set_aside > 0 && p_->note) {
    // Once per pass that found damage: each row is set aside once, and never fails again.
    p_->note(fmt::format("{}: maintenance set aside {} damaged row{} whose blobs no longer "
                         "decode and went on without them (table damaged_rows, gaps()); the "
                         "first: {}\n",
                         p_->path, r->rows_set_aside, r->rows_set_aside == 1 ? "" : "s",
                         r->damage));
  }
  if (r->threads_deleted > 0) {
    // ids of deleted identities must not be reused from the caches
    p_->threads.clear();
    p_->culprits.clear();
    p_->cgroups.clear();
  }
  return r;
}

result<std::int64_t> writer::add_capture(const capture_row &c) {
  if (!p_) {
    return make_error("store writer used after move");
  }
  try {
    SQLite::Statement ins(p_->db, "INSERT INTO captures(start_ns, end_ns, trigger, reason, "
                                  "annotation_id, file, bytes, events, lossy_cpus, created_ns) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    ins.bind(1, c.start_ns);
    ins.bind(2, c.end_ns);
    ins.bind(3, c.trigger);
    ins.bind(4, c.reason);
    if (c.annotation_id) {
      ins.bind(5, *c.annotation_id);
    }
    ins.bind(6, c.file);
    ins.bind(7, static_cast<std::int64_t>(c.bytes));
    ins.bind(8, static_cast<std::int64_t>(c.events));
    ins.bind(9, c.lossy_cpus);
    ins.bind(10, c.created_ns);
    ins.exec();
    return p_->db.getLastInsertRowid();
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: listing a capture: {}", p_->path, e.what()));
  }
}

result<std::vector<std::string>> writer::prune_captures(std::uint32_t keep,
                                                        std::uint64_t max_bytes) {
  if (!p_) {
    return make_error("store writer used after move");
  }
  try {
    std::vector<std::pair<std::int64_t, std::string>> gone;
    {
      SQLite::Statement sel(p_->db, "SELECT id, file, bytes FROM captures ORDER BY created_ns "
                                    "DESC, id DESC");
      std::uint32_t n = 0;
      std::uint64_t bytes = 0;
      while (sel.executeStep()) {
        const auto b = static_cast<std::uint64_t>(sel.getColumn(2).getInt64());
        ++n;
        bytes += b;
        if (n > 1 && (n > keep || (max_bytes != 0 && bytes > max_bytes))) {
          gone.emplace_back(sel.getColumn(0).getInt64(), sel.getColumn(1).getString());
        }
      }
    }
    std::vector<std::string> files;
    SQLite::Transaction tx(p_->db);
    SQLite::Statement del(p_->db, "DELETE FROM captures WHERE id = ?");
    for (auto &[id, file] : gone) {
      del.bind(1, id);
      del.exec();
      del.reset();
      files.push_back(std::move(file));
    }
    tx.commit();
    return files;
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: pruning captures: {}", p_->path, e.what()));
  }
}

result<std::vector<capture_request>> writer::capture_requests(std::int64_t after_id) {
  if (!p_) {
    return make_error("store writer used after move");
  }
  try {
    SQLite::Statement sel(p_->db,
                          "SELECT id, start_ns, text FROM annotations WHERE id > ? AND "
                          "(',' || replace(tags, ' ', '') || ',') LIKE '%,capture,%' ORDER BY id");
    sel.bind(1, after_id);
    std::vector<capture_request> out;
    while (sel.executeStep()) {
      out.push_back(
          {sel.getColumn(0).getInt64(), sel.getColumn(1).getInt64(), sel.getColumn(2).getString()});
    }
    return out;
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: reading capture requests: {}", p_->path, e.what()));
  }
}

result<std::int64_t> writer::last_annotation_id() {
  if (!p_) {
    return make_error("store writer used after move");
  }
  try {
    SQLite::Statement sel(p_->db, "SELECT coalesce(max(id), 0) FROM annotations");
    sel.executeStep();
    return sel.getColumn(0).getInt64();
  } catch (const std::exception &e) {
    return make_error(fmt::format("{}: reading annotations: {}", p_->path, e.what()));
  }
}

void writer::set_retention(const retention &r) {
  if (p_) {
    p_->keep = r;
  }
}

result<std::pair<std::uint64_t, std::uint64_t>> writer::size() const {
  if (!p_) {
    return make_error("store writer used after move");
  }
  return p_->maint->size();
}

writer::writer(std::unique_ptr<impl> p) : p_(std::move(p)) {}
writer::writer(writer &&) noexcept = default;
writer &writer::operator=(writer &&) noexcept = default;
writer::~writer() = default;

} // namespace rsched::store
