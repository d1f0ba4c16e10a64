#include "maintenance.hpp"

#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"

#include "damage.hpp"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <span>
#include <sqlite3.h>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::store::detail {

namespace {

// A bound parameter or a result column: an integer or a text (GCC 12 warns falsely about
// std::variant<int64_t, std::string> under -O2, hence the plain struct).
struct arg {
  bool text = false;
  std::int64_t i = 0;
  std::string t;
  arg(std::int64_t v) : i(v) {} // NOLINT(google-explicit-constructor): used in brace lists
  arg(std::string v) : text(true), t(std::move(v)) {} // NOLINT(google-explicit-constructor)
};

// The tables whose rows belong to one interval (interval_id first in their primary key).
constexpr const char *fact_tables[] = {
    "thread_hist_row",    "thread_hist_pack",    "cpu_hist",
    "thread_migration",   "thread_perf",         "thread_perf_event",
    "counter_time",       "schedstat_cpu_delta", "schedstat_domain_delta",
    "thread_blame_row",   "thread_blame_pack",   "cgroup_cpu",
    "hist_summary",       "thread_wakeup_row",   "thread_wakeup_pack",
    "thread_blocked_row", "thread_blocked_pack", "thread_io",
};

// The tables whose rows name a thread identity (thread_id), with the intervals `{0}` selects.
constexpr const char *thread_refs =
    "SELECT thread_id FROM thread_hist WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_migration WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_perf WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_perf_event WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_blame WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_wakeup WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_blocked WHERE interval_id IN ({0}) UNION "
    "SELECT thread_id FROM thread_io WHERE interval_id IN ({0})";

// intervals.groups of a rollup: the bitwise OR of its sources' groups (SQLite has no bit_or
// aggregate; the groups use the low 16 bits).
std::string groups_or() {
  std::string s;
  for (int bit = 0; bit < 16; ++bit) {
    s += fmt::format("{}max(groups & {})", bit == 0 ? "" : " | ", 1 << bit);
  }
  return s;
}

// The source intervals of a rollup bucket: ?2 source tier, ?3 boot, ?4 bucket start, ?5 end,
// ?6 flags bit 2 (4: the intervals written late into it, after it was built; 0: the others).
constexpr const char *src_ids = "SELECT id FROM intervals WHERE tier = ?2 AND boot_id = ?3 AND "
                                "start_ns >= ?4 AND start_ns < ?5 AND flags & 4 = ?6";

// Rollups keep one row per (comm, cgroup), not per thread: a month of history answers "p99 of
// postgres" exactly without growing with every short-lived thread. Each (comm, cgroup) has one
// identity in `thread` with boot_id '', tid, pid and start_time_ns 0, shared by every bucket.
// `g` is that identity of the source row's thread `t`.
constexpr const char *group_join =
    "JOIN thread AS t ON t.id = x.thread_id JOIN thread AS g ON g.boot_id = '' AND g.tid = 0 "
    "AND g.start_time_ns = 0 AND g.comm = t.comm AND g.cgroup = t.cgroup";

// Stands for the thread_hist rollup in the list below (done in C++: rollup_thread_hist).
constexpr const char *native_thread_hist = "-- thread_hist";
// How the thread_blame, thread_wakeup and thread_blocked merges below start (replaced by the
// writer's sums when it has them).
constexpr std::string_view blame_merge = "INSERT INTO thread_blame_row(";
constexpr std::string_view wakeup_merge = "INSERT INTO thread_wakeup_row(";
constexpr std::string_view blocked_merge = "INSERT INTO thread_blocked_row(";

// The statement that adds the thread ids of `table`'s source rows to temp.rollup_threads, and
// the one that collects the culprit ids of thread_blame's (both read from the writer's sums
// instead when it has them).
std::string collect_threads_sql(std::string_view table) {
  return fmt::format("INSERT OR IGNORE INTO temp.rollup_threads(id) SELECT thread_id FROM {} "
                     "WHERE interval_id IN ({})",
                     table, src_ids);
}
std::string collect_culprits_sql() {
  return fmt::format("INSERT OR IGNORE INTO temp.rollup_culprits(id) SELECT culprit_id FROM "
                     "thread_blame WHERE interval_id IN ({})",
                     src_ids);
}

std::string collect_wakers_sql() {
  return fmt::format("INSERT OR IGNORE INTO temp.rollup_culprits(id) SELECT waker_id FROM "
                     "thread_wakeup WHERE interval_id IN ({})",
                     src_ids);
}

// Per fact table: how a bucket's rows are merged (?1 is the new interval id). The first
// statement creates the missing group identities.
std::vector<std::string> rollup_statements() {
  const std::string in = fmt::format("x.interval_id IN ({})", src_ids);
  // The bucket's threads, collected once (the union over the fact tables took 0.3 s per use
  // at 10,000 threads a second, and the statements below used it three times).
  const std::string thread_tables = "SELECT id FROM temp.rollup_threads";
  // The bucket's culprits, collected once too.
  const std::string culprits = "SELECT id FROM temp.rollup_culprits";
  std::vector<std::string> collect = {
      "CREATE TEMP TABLE IF NOT EXISTS rollup_threads(id INTEGER PRIMARY KEY)",
      "DELETE FROM temp.rollup_threads",
      "CREATE TEMP TABLE IF NOT EXISTS rollup_culprits(id INTEGER PRIMARY KEY)",
      "DELETE FROM temp.rollup_culprits"};
  for (const char *t :
       {"thread_hist", "thread_migration", "thread_perf", "thread_perf_event", "thread_blame"}) {
    collect.push_back(collect_threads_sql(t));
  }
  collect.push_back(collect_culprits_sql());
  // The wakeup group's sleepers and wakers (statements of their own: the writer's sums, which
  // replace the ones above, do not hold them).
  collect.push_back(collect_threads_sql("thread_wakeup"));
  collect.push_back(collect_threads_sql("thread_blocked"));
  collect.push_back(collect_threads_sql("thread_io"));
  collect.push_back(collect_wakers_sql());
  std::vector<std::string> merge = {
      fmt::format("INSERT OR IGNORE INTO thread(boot_id, tid, pid, start_time_ns, comm, cgroup, "
                  "last_ns) SELECT '', 0, 0, 0, comm, cgroup, ?4 FROM thread WHERE id IN ({}) "
                  "GROUP BY comm, cgroup",
                  thread_tables),
      // Newest bucket with data of every thread in it (thread identities are deleted once no
      // row refers to them any more) and of every group identity.
      fmt::format("UPDATE thread SET last_ns = ?4 WHERE last_ns < ?4 AND (id IN ({0}) OR "
                  "(boot_id = '' AND tid = 0 AND start_time_ns = 0 AND (comm, cgroup) IN "
                  "(SELECT comm, cgroup FROM thread WHERE id IN ({0}))))",
                  thread_tables),
      // thread_hist: rollup_thread_hist(), the same rows as
      //   INSERT INTO thread_hist_row(...) SELECT ?1, x.metric, g.id, sum(x.count), sum(x.total),
      //   hist_merge(x.hist) FROM thread_hist AS x <group_join> WHERE <in> GROUP BY x.metric, g.id
      // without sorting every source row by group in SQL (1.2 s a minute at 10,000 threads).
      native_thread_hist,
      fmt::format("INSERT INTO cpu_hist(interval_id, metric, cpu, count, total, hist) "
                  "SELECT ?1, metric, cpu, sum(count), sum(total), hist_merge(hist) "
                  "FROM cpu_hist AS x WHERE {} GROUP BY metric, cpu",
                  in),
      fmt::format("INSERT INTO thread_migration(interval_id, thread_id, count, cross_ccx, "
                  "cross_numa) SELECT ?1, g.id, sum(x.count), sum(x.cross_ccx), "
                  "sum(x.cross_numa) FROM thread_migration AS x {} WHERE {} GROUP BY g.id",
                  group_join, in),
      fmt::format("INSERT INTO thread_io(interval_id, thread_id, read_bytes, write_bytes) "
                  "SELECT ?1, g.id, sum(x.read_bytes), sum(x.write_bytes) FROM thread_io AS x {} "
                  "WHERE {} GROUP BY g.id",
                  group_join, in),
      fmt::format("INSERT INTO thread_perf(interval_id, thread_id, user_cycles, kernel_cycles, "
                  "user_instructions, kernel_instructions) SELECT ?1, g.id, "
                  "sum(x.user_cycles), sum(x.kernel_cycles), sum(x.user_instructions), "
                  "sum(x.kernel_instructions) FROM thread_perf AS x {} WHERE {} GROUP BY g.id",
                  group_join, in),
      fmt::format("INSERT INTO thread_perf_event(interval_id, event_id, thread_id, value, "
                  "rate_hist) SELECT ?1, x.event_id, g.id, sum(x.value), "
                  "hist_merge(x.rate_hist) FROM thread_perf_event AS x {} WHERE {} "
                  "GROUP BY x.event_id, g.id",
                  group_join, in),
      fmt::format("INSERT INTO counter_time(interval_id, cpu, counter, enabled_ns, running_ns) "
                  "SELECT ?1, cpu, counter, sum(enabled_ns), sum(running_ns) "
                  "FROM counter_time AS x WHERE {} GROUP BY cpu, counter",
                  in),
      fmt::format("INSERT INTO schedstat_cpu_delta(interval_id, field_id, cpu, delta) "
                  "SELECT ?1, field_id, cpu, sum(delta) FROM schedstat_cpu_delta AS x WHERE {} "
                  "GROUP BY field_id, cpu HAVING sum(delta) <> 0",
                  in),
      fmt::format("INSERT INTO schedstat_domain_delta(interval_id, field_id, domain_id, delta) "
                  "SELECT ?1, field_id, domain_id, sum(delta) FROM schedstat_domain_delta AS x "
                  "WHERE {} GROUP BY field_id, domain_id HAVING sum(delta) <> 0",
                  in),
      // Blame per (comm, cgroup) of the waiting thread and (comm, cgroup) of the culprit: the
      // culprits' rollup identities first (boot_id '', pid 0; pseudo-culprits are their own).
      fmt::format("INSERT OR IGNORE INTO culprit(boot_id, pid, comm, cgroup, kind, last_ns) "
                  "SELECT '', 0, comm, cgroup, kind, ?4 FROM culprit WHERE kind = 0 AND id IN "
                  "({}) GROUP BY comm, cgroup",
                  culprits),
      fmt::format("UPDATE culprit SET last_ns = ?4 WHERE last_ns < ?4 AND (id IN ({0}) OR "
                  "(boot_id = '' AND pid = 0 AND kind = 0 AND (comm, cgroup) IN "
                  "(SELECT comm, cgroup FROM culprit WHERE id IN ({0}))))",
                  culprits),
      // approx_ns (v11): NULL in older rows, which sum() skips (nothing was estimated then).
      fmt::format(
          "INSERT INTO thread_blame_row(interval_id, thread_id, culprit_id, wait_ns, "
          "waits, preempts, approx_ns) SELECT ?1, g.id, r.id, sum(x.wait_ns), sum(x.waits), "
          "sum(x.preempts), sum(x.approx_ns) FROM thread_blame AS x {} "
          "JOIN culprit AS c ON c.id = x.culprit_id JOIN culprit AS r ON "
          "r.boot_id = '' AND r.pid = 0 AND r.comm = c.comm AND r.cgroup = c.cgroup AND "
          "r.kind = c.kind WHERE {} GROUP BY g.id, r.id",
          group_join, in),
      // Wakeups per (comm, cgroup) of the sleeper and (comm, cgroup) of the waker, by state.
      fmt::format("INSERT INTO thread_wakeup_row(interval_id, thread_id, waker_id, state, "
                  "sleep_ns, "
                  "count) SELECT ?1, g.id, r.id, x.state, sum(x.sleep_ns), sum(x.count) FROM "
                  "thread_wakeup AS x {} JOIN culprit AS c ON c.id = x.waker_id JOIN culprit AS "
                  "r ON r.boot_id = '' AND r.pid = 0 AND r.comm = c.comm AND r.cgroup = c.cgroup "
                  "AND r.kind = c.kind WHERE {} GROUP BY g.id, r.id, x.state",
                  group_join, in),
      // D sleeps per (comm, cgroup) of the thread and stack (a boot's stack rows serve its
      // rollups too).
      fmt::format("INSERT INTO thread_blocked_row(interval_id, thread_id, stack_id, sleep_ns, "
                  "count) "
                  "SELECT ?1, g.id, x.stack_id, sum(x.sleep_ns), sum(x.count) FROM "
                  "thread_blocked AS x {} WHERE {} GROUP BY g.id, x.stack_id",
                  group_join, in),
      fmt::format("UPDATE cgroup SET last_ns = ?4 WHERE last_ns < ?4 AND id IN (SELECT cgroup_id "
                  "FROM cgroup_cpu WHERE interval_id IN ({}))",
                  src_ids),
      fmt::format("INSERT INTO cgroup_cpu(interval_id, cgroup_id, some_ns, full_ns, usage_ns, "
                  "periods, throttled, throttled_ns) SELECT ?1, cgroup_id, sum(some_ns), "
                  "sum(full_ns), sum(usage_ns), sum(periods), sum(throttled), sum(throttled_ns) "
                  "FROM cgroup_cpu AS x WHERE {} GROUP BY cgroup_id",
                  in),
  };
  collect.insert(collect.end(), merge.begin(), merge.end());
  return collect;
}

} // namespace

struct maintenance::impl {
  impl(sqlite3 *d, maintenance_budget b) : db(d), budget(b) {}
  sqlite3 *db;
  maintenance_budget budget;
  std::map<std::string, sqlite::stmt_ptr> cache; // prepared statements by SQL text
  std::vector<std::string> rollups = rollup_statements();
  std::optional<std::int64_t> gc_horizon; // horizon of the last thread collection
  bucket_sums sums{minute_ns};
  // The collection statements the sums replace: the thread ids of thread_hist (the sums hold
  // those of thread_hist, thread_blame, thread_wakeup and thread_blocked: the other three
  // statements are then skipped) and the culprit ids of thread_blame (with thread_wakeup's
  // wakers: that statement is skipped too).
  const std::string collect_hist = collect_threads_sql("thread_hist");
  const std::set<std::string, std::less<>> collected_with_hist = {
      collect_threads_sql("thread_blame"), collect_threads_sql("thread_wakeup"),
      collect_threads_sql("thread_blocked"), collect_wakers_sql()};
  const std::string collect_culprit_ids = collect_culprits_sql();
  int from_sums = 0;       // 1-minute buckets merged from `sums` in this run
  std::int64_t run_ns = 0; // this run's time (damaged_rows.found_ns)
  damage_found damage;     // rows set aside in this run
  // The last bucket (tier, start) whose failure no damaged row explained, and when: not
  // searched again for 10 minutes while it keeps failing (a full disk must not cost a decode of
  // every source row per call).
  std::optional<std::pair<int, std::int64_t>> searched_clean;
  std::int64_t searched_ns = 0;

  result<sqlite3_stmt *> prepare(const std::string &sql) {
    if (auto it = cache.find(sql); it != cache.end()) {
      sqlite3_reset(it->second.get());
      sqlite3_clear_bindings(it->second.get());
      return it->second.get();
    }
    sqlite3_stmt *raw = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &raw, nullptr) != SQLITE_OK) {
      return make_error(sqlite3_errmsg(db));
    }
    return cache.emplace(sql, sqlite::stmt_ptr(raw)).first->second.get();
  }

  // Binds args[from..] to ?(from + 1).. of `s` (texts without a copy: they must outlive it).
  static void bind_args(sqlite3_stmt *s, const std::vector<arg> &args, std::size_t from) {
    for (std::size_t i = from; i < args.size(); ++i) {
      const int idx = static_cast<int>(i) + 1;
      if (!args[i].text) {
        sqlite3_bind_int64(s, idx, args[i].i);
      } else {
        const auto &t = args[i].t;
        sqlite3_bind_text(s, idx, t.data(), static_cast<int>(t.size()), SQLITE_STATIC);
      }
    }
  }

  // Steps `s` to its end, calling fn() (a result<void>) on each row; `s` is reset after, also
  // on an error of SQLite or of fn.
  template <typename Fn> result<void> each_row(sqlite3_stmt *s, Fn &&fn) {
    for (;;) {
      const int rc = sqlite3_step(s);
      if (rc == SQLITE_DONE) {
        break;
      }
      if (rc != SQLITE_ROW) {
        std::string msg = sqlite3_errmsg(db);
        sqlite3_reset(s);
        return make_error(std::move(msg), sqlite3_system_errno(db));
      }
      if (result<void> r = fn(); !r) {
        sqlite3_reset(s);
        return r;
      }
    }
    sqlite3_reset(s);
    return {};
  }

  // Runs `sql` with `args` bound to ?1.. and returns every row's first column (NULL = nullopt).
  result<std::vector<std::optional<arg>>> query(const std::string &sql,
                                                const std::vector<arg> &args = {}) {
    auto st = prepare(sql);
    if (!st) {
      return st.err();
    }
    sqlite3_stmt *s = *st;
    bind_args(s, args, 0);
    std::vector<std::optional<arg>> out;
    auto r = each_row(s, [&]() -> result<void> {
      if (sqlite3_column_count(s) == 0) {
        return {};
      }
      switch (sqlite3_column_type(s, 0)) {
      case SQLITE_NULL:
        out.emplace_back(std::nullopt);
        break;
      case SQLITE_TEXT:
        out.emplace_back(arg(std::string(reinterpret_cast<const char *>(sqlite3_column_text(s, 0)),
                                         static_cast<std::size_t>(sqlite3_column_bytes(s, 0)))));
        break;
      default:
        out.emplace_back(arg(std::int64_t{sqlite3_column_int64(s, 0)}));
      }
      return {};
    });
    if (!r) {
      return r.err();
    }
    return out;
  }

  result<void> run(const std::string &sql, const std::vector<arg> &args = {}) {
    auto r = query(sql, args);
    if (!r) {
      return r.err();
    }
    return {};
  }

  // The first column of the first row as an integer; nullopt for no row or NULL.
  result<std::optional<std::int64_t>> scalar(const std::string &sql,
                                             const std::vector<arg> &args = {}) {
    auto r = query(sql, args);
    if (!r) {
      return r.err();
    }
    if (r->empty() || !(*r)[0]) {
      return std::optional<std::int64_t>{};
    }
    if (!(*r)[0]->text) {
      return std::optional<std::int64_t>{(*r)[0]->i};
    }
    return std::optional<std::int64_t>{};
  }

  // Runs `body` in one IMMEDIATE transaction; rolls back on error.
  template <typename Body> result<void> transaction(Body body) {
    if (auto r = run("BEGIN IMMEDIATE"); !r) {
      return r;
    }
    auto r = body();
    if (r) {
      r = run("COMMIT");
    }
    if (!r && sqlite3_get_autocommit(db) == 0) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    return r;
  }

  // The thread_hist rows of a rollup bucket (args: ?1 new interval id, ?2..?5 as src_ids):
  // each source row's histogram added straight into its (metric, (comm, cgroup) identity) sum
  // as it is read (the thread's identity looked up once), then written in key order.
  result<void> rollup_thread_hist(const std::vector<arg> &args) {
    auto st = prepare(fmt::format("SELECT metric, thread_id, count, total, hist FROM thread_hist "
                                  "WHERE interval_id IN ({})",
                                  src_ids));
    if (!st) {
      return st.err();
    }
    sqlite3_stmt *s = *st;
    bind_args(s, args, 1); // ?2..?6: the source intervals
    // Each thread's (comm, cgroup) identity, created by the first rollup statement: the
    // statements' own join, for one thread.
    static const std::string group_of_thread =
        fmt::format("SELECT g.id FROM (SELECT ?1 AS thread_id) AS x {}", group_join);
    std::unordered_map<std::int64_t, std::optional<std::int64_t>> group_of;
    std::map<std::pair<std::int64_t, std::int64_t>, hist_sum> per_group; // (metric, group id)
    std::pair<std::int64_t, std::optional<std::int64_t>> last{-1, std::nullopt};
    auto read = each_row(s, [&]() -> result<void> {
      if (const int type = sqlite3_column_type(s, 4); type == SQLITE_NULL) {
        return {};                      // hist_merge skips NULL (the column is NOT NULL)
      } else if (type != SQLITE_BLOB) { // damage hist_merge fails on, to be set aside
        return make_error("hist_merge: hist must be a BLOB or NULL");
      }
      const std::int64_t thread = sqlite3_column_int64(s, 1);
      if (thread != last.first) { // a pack's entries are one thread each, rows come by thread
        auto [g, fresh] = group_of.try_emplace(thread);
        if (fresh) {
          auto id = scalar(group_of_thread, {thread});
          if (!id) {
            return id.err();
          }
          g->second = *id;
        }
        last = {thread, g->second};
      }
      if (!last.second) {
        return {}; // no identity: the join drops the row
      }
      const auto *blob = static_cast<const std::uint8_t *>(sqlite3_column_blob(s, 4));
      const auto bytes = static_cast<std::size_t>(sqlite3_column_bytes(s, 4));
      hist_sum &m = per_group[{sqlite3_column_int64(s, 0), *last.second}];
      return m.add(sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3),
                   std::span<const std::uint8_t>(blob, bytes));
    });
    if (!read) {
      return read;
    }
    const std::string insert = "INSERT INTO thread_hist_row(interval_id, metric, thread_id, count, "
                               "total, hist) VALUES(?1, ?2, ?3, ?4, ?5, ?6)";
    for (const auto &[key, m] : per_group) {
      if (auto r = insert_hist_row(insert, args[0].i, key.first, key.second, m); !r) {
        return r;
      }
    }
    return {};
  }

  // The merges the writer's sums replace (bucket_sums.hpp).
  enum class from_sums_merge : std::uint8_t { hist, blame, wakeup, blocked };
  static std::optional<from_sums_merge> merged_from_sums(std::string_view sql) {
    if (sql == native_thread_hist) {
      return from_sums_merge::hist;
    }
    if (sql.starts_with(blame_merge)) {
      return from_sums_merge::blame;
    }
    if (sql.starts_with(wakeup_merge)) {
      return from_sums_merge::wakeup;
    }
    if (sql.starts_with(blocked_merge)) {
      return from_sums_merge::blocked;
    }
    return std::nullopt;
  }

  // The rows of one merge of 1-minute bucket `id` from the writer's sums: those
  // rollup_thread_hist or the statement would write, with the group identities the statements
  // before them created (a group without one: the statement's joins drop its rows).
  // The rollup identities of a bucket's groups and culprits, looked up once for its merges
  // (the statements that create them run before the first merge that needs each).
  struct sum_ids {
    std::optional<std::vector<std::optional<std::int64_t>>> groups, culprits;
  };

  result<void> rollup_from_sums(const bucket_sums::bucket &sum, std::int64_t id,
                                from_sums_merge merge, sum_ids &ids) {
    if (!ids.groups) {
      auto g = rollup_ids(sum.groups.size(), [&](std::size_t i) {
        return scalar("SELECT id FROM thread WHERE boot_id = '' AND tid = 0 AND start_time_ns = "
                      "0 AND comm = ?1 AND cgroup = ?2",
                      {sum.groups[i].first, sum.groups[i].second});
      });
      if (!g) {
        return g.err();
      }
      ids.groups = std::move(*g);
    }
    const auto &gid = ids.groups;
    switch (merge) {
    case from_sums_merge::hist:
      return hists_from_sums(sum, id, *gid);
    case from_sums_merge::blocked:
      return rows_from_sums(sum.blocked, *gid, nullptr,
                            "INSERT INTO thread_blocked_row(interval_id, thread_id, stack_id, "
                            "sleep_ns, count) VALUES(?1, ?2, ?3, ?4, ?5)",
                            [&](const auto &key, std::int64_t g, std::int64_t, const auto &v) {
                              return std::vector<arg>{id, g, key.second, v.sleep_ns, v.count};
                            });
    case from_sums_merge::blame:
    case from_sums_merge::wakeup:
      break;
    }
    if (!ids.culprits) {
      auto c = rollup_ids(sum.culprits.size(), [&](std::size_t i) {
        const auto &k = sum.culprits[i];
        return scalar("SELECT id FROM culprit WHERE boot_id = '' AND pid = 0 AND comm = ?1 AND "
                      "cgroup = ?2 AND kind = ?3",
                      {k.comm, k.cgroup, std::int64_t{k.kind}});
      });
      if (!c) {
        return c.err();
      }
      ids.culprits = std::move(*c);
    }
    const auto &cid = ids.culprits;
    if (merge == from_sums_merge::blame) {
      return rows_from_sums(sum.blame, *gid, &*cid,
                            "INSERT INTO thread_blame_row(interval_id, thread_id, culprit_id, "
                            "wait_ns, waits, preempts, approx_ns) VALUES(?1, ?2, ?3, ?4, ?5, ?6, "
                            "?7)",
                            [&](const auto &, std::int64_t g, std::int64_t c, const auto &v) {
                              return std::vector<arg>{id,      g,          c,          v.wait_ns,
                                                      v.waits, v.preempts, v.approx_ns};
                            });
    }
    return rows_from_sums(sum.wakeup, *gid, &*cid,
                          "INSERT INTO thread_wakeup_row(interval_id, thread_id, waker_id, state, "
                          "sleep_ns, count) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
                          [&](const auto &key, std::int64_t g, std::int64_t c, const auto &v) {
                            return std::vector<arg>{id,         g,      c, std::get<2>(key),
                                                    v.sleep_ns, v.count};
                          });
  }

  // The rollup identity of each of n groups or culprits (`lookup(i)`, a scalar query).
  template <typename Lookup>
  result<std::vector<std::optional<std::int64_t>>> rollup_ids(std::size_t n, Lookup &&lookup) {
    std::vector<std::optional<std::int64_t>> ids(n);
    for (std::size_t i = 0; i < n; ++i) {
      auto r = lookup(i);
      if (!r) {
        return r.err();
      }
      ids[i] = *r;
    }
    return ids;
  }

  // Inserts one row per sum of `by_key` (keyed by group index first, then, with `cid`, by culprit
  // index) whose identities exist, in the order of those identities (`args(key, group id,
  // culprit id, sum)` binds the row).
  template <typename Sums, typename Args>
  result<void> rows_from_sums(const Sums &by_key,
                              const std::vector<std::optional<std::int64_t>> &gid,
                              const std::vector<std::optional<std::int64_t>> *cid,
                              const std::string &insert, Args &&args) {
    using key_type = typename Sums::key_type;
    std::vector<std::vector<arg>> rows;
    for (const auto &[key, v] : by_key) {
      const auto &g = gid[std::get<0>(key)];
      if (!g) {
        continue;
      }
      std::int64_t c = 0;
      if constexpr (std::is_same_v<std::tuple_element_t<1, key_type>, std::uint32_t>) {
        if (cid != nullptr) { // the second key is a culprit index
          const auto &ci = (*cid)[std::get<1>(key)];
          if (!ci) {
            continue;
          }
          c = *ci;
        }
      }
      rows.push_back(args(key, *g, c, v));
    }
    // In key order of the table (its primary key after interval_id): fewer page splits.
    std::sort(rows.begin(), rows.end(), [](const std::vector<arg> &a, const std::vector<arg> &b) {
      for (std::size_t i = 1; i < a.size(); ++i) {
        if (a[i].i != b[i].i) {
          return a[i].i < b[i].i;
        }
      }
      return false;
    });
    for (const auto &r : rows) {
      if (auto ok = run(insert, r); !ok) {
        return ok;
      }
    }
    return {};
  }

  result<void> hists_from_sums(const bucket_sums::bucket &sum, std::int64_t id,
                               const std::vector<std::optional<std::int64_t>> &gid) {
    std::map<std::pair<std::int64_t, std::int64_t>, const bucket_sums::hist_sum *> rows;
    for (const auto &[key, v] : sum.hists) {
      if (gid[key.second]) {
        rows.emplace(std::pair{std::int64_t{key.first}, *gid[key.second]}, &v);
      }
    }
    const std::string insert = "INSERT INTO thread_hist_row(interval_id, metric, thread_id, count, "
                               "total, hist) VALUES(?1, ?2, ?3, ?4, ?5, ?6)";
    for (const auto &[key, m] : rows) {
      if (auto r = insert_hist_row(insert, id, key.first, key.second, *m); !r) {
        return r;
      }
    }
    return {};
  }

  result<void> insert_hist_row(const std::string &insert, std::int64_t id, std::int64_t metric,
                               std::int64_t group, const hist_sum &m) {
    const auto blob = m.encoded();
    auto ins = prepare(insert);
    if (!ins) {
      return ins.err();
    }
    sqlite3_stmt *i = *ins;
    sqlite3_bind_int64(i, 1, id);
    sqlite3_bind_int64(i, 2, metric);
    sqlite3_bind_int64(i, 3, group);
    sqlite3_bind_int64(i, 4, m.count);
    sqlite3_bind_int64(i, 5, m.total);
    sqlite3_bind_blob(i, 6, blob.data(), static_cast<int>(blob.size()), SQLITE_STATIC);
    const int rc = sqlite3_step(i);
    sqlite3_reset(i);
    if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db), sqlite3_system_errno(db));
    }
    return {};
  }

  // Inserts every id of `ids` (a map's keys) with `insert` (?1 = the id).
  template <typename Map> result<void> ids_from_sums(const std::string &insert, const Map &ids) {
    for (const auto &[i, unused] : ids) {
      (void)unused;
      if (auto r = run(insert, {i}); !r) {
        return r;
      }
    }
    return {};
  }

  // tiers.built_ns of tier k: every bucket before it has been rolled up.
  result<std::int64_t> built_ns(int k) {
    auto b = scalar("SELECT built_ns FROM tiers WHERE tier = ?1", {std::int64_t{k}});
    if (!b) {
      return b.err();
    }
    return b->value_or(0);
  }

  // Writes rollup bucket [b, b + w) of tier k from tier k - 1, one interval per boot, and
  // advances tiers.built_ns. Runs inside build_step's transaction (a crash leaves the bucket
  // wholly built or not at all; an unbuilt bucket is built again by the next call).
  result<void> build_bucket(int k, std::int64_t b, std::int64_t w) {
    auto boots = query("SELECT DISTINCT boot_id FROM intervals WHERE tier = ?1 AND "
                       "start_ns >= ?2 AND start_ns < ?3",
                       {std::int64_t{k - 1}, b, b + w});
    if (!boots) {
      return boots.err();
    }
    for (const auto &row : *boots) {
      if (!row || !row->text) {
        continue;
      }
      if (auto r = build_boot_bucket(k, b, w, row->t, false); !r) {
        return r;
      }
    }
    if (k == 1) {
      sums.drop_before(b + w);
    }
    return run("UPDATE tiers SET built_ns = ?2 WHERE tier = ?1 AND built_ns < ?2",
               {std::int64_t{k}, b + w});
  }

  // Writes boot `boot`'s interval of rollup bucket [b, b + w) of tier k: from its intervals of
  // tier k - 1 written in time (late false), or from those written late, after the bucket was
  // built (late true: a second interval of the bucket, so that the tier holds them too). A
  // rollup interval that is itself late for tier k + 1 is marked so (flags bit 2).
  result<void> build_boot_bucket(int k, std::int64_t b, std::int64_t w, const std::string &boot,
                                 bool late) {
    const std::int64_t src = k - 1;
    const std::int64_t late_bit = late ? 4 : 0;
    const std::string ins =
        fmt::format("INSERT INTO intervals(start_ns, dur_ns, boot_id, flags, drops_task_state, "
                    "drops_graveyard, drops_stale_tid, drops_no_rq, discarded_too_long, groups, "
                    "drops_perf_read, tier, collect_ns, write_ns, maint_ns, cpu_ns, rss_bytes, "
                    "bpf_run_ns, bpf_run_cnt, delay_clock, drops_segment, scx_state, "
                    "scx_ops, scx_enable_seq, unseen_events) "
                    "SELECT ?4, sum(dur_ns), ?3, CASE WHEN ?4 < (SELECT built_ns FROM tiers "
                    "WHERE tier = ?1 + 1) THEN 4 ELSE 0 END, sum(drops_task_state), "
                    "sum(drops_graveyard), "
                    "sum(drops_stale_tid), sum(drops_no_rq), sum(discarded_too_long), {}, "
                    "sum(drops_perf_read), ?1, sum(collect_ns), sum(write_ns), sum(maint_ns), "
                    "sum(cpu_ns), max(rss_bytes), sum(bpf_run_ns), sum(bpf_run_cnt), "
                    // one clock, or 'mixed' when the bucket's intervals that recorded
                    // latency used two (an old interval's unknown clock counts as one)
                    "CASE WHEN count(DISTINCT CASE WHEN groups & 1 THEN "
                    "coalesce(delay_clock, '') END) > 1 THEN 'mixed' "
                    "ELSE max(delay_clock) END, sum(drops_segment), "
                    // sched_ext: the one state and scheduler of the sources, or 'mixed'
                    "CASE WHEN count(DISTINCT coalesce(scx_state, '')) > 1 THEN 'mixed' "
                    "ELSE max(scx_state) END, "
                    "CASE WHEN count(DISTINCT coalesce(scx_ops, '')) > 1 THEN 'mixed' "
                    "ELSE max(scx_ops) END, max(scx_enable_seq), sum(unseen_events) "
                    "FROM intervals WHERE tier = ?2 AND boot_id = ?3 AND start_ns >= ?4 AND "
                    "start_ns < ?5 AND flags & 4 = ?6",
                    groups_or());
    if (auto r = run(ins, {std::int64_t{k}, src, boot, b, b + w, late_bit}); !r) {
      return r;
    }
    const std::int64_t id = sqlite3_last_insert_rowid(db);
    // The writer's sums, when they hold exactly this bucket's intervals.
    const bucket_sums::bucket *sum = nullptr;
    if (k == 1 && !late) {
      auto ids = query("SELECT id FROM intervals WHERE tier = 0 AND boot_id = ?1 AND "
                       "start_ns >= ?2 AND start_ns < ?3 ORDER BY id",
                       {boot, b, b + w});
      if (!ids) {
        return ids.err();
      }
      std::vector<std::int64_t> raw_ids;
      for (const auto &i : *ids) {
        raw_ids.push_back(i && !i->text ? i->i : -1);
      }
      sum = sums.exact(b, boot, raw_ids);
      from_sums += sum != nullptr ? 1 : 0;
    }
    sum_ids ids;
    for (const auto &sql : rollups) {
      result<void> r;
      if (sum != nullptr && sql == collect_hist) { // thread_hist's and thread_blame's
        r = ids_from_sums("INSERT OR IGNORE INTO temp.rollup_threads(id) VALUES(?1)",
                          sum->thread_ids());
      } else if (sum != nullptr && collected_with_hist.contains(sql)) {
        // collected with collect_hist's and collect_culprit_ids'
      } else if (sum != nullptr && sql == collect_culprit_ids) {
        r = ids_from_sums("INSERT OR IGNORE INTO temp.rollup_culprits(id) VALUES(?1)",
                          sum->culprit_ids());
      } else if (const auto from = sum != nullptr ? merged_from_sums(sql) : std::nullopt) {
        r = rollup_from_sums(*sum, id, *from, ids);
      } else if (sql == native_thread_hist) {
        r = rollup_thread_hist({id, src, boot, b, b + w, late_bit});
      } else {
        r = run(sql, {id, src, boot, b, b + w, late_bit});
      }
      if (!r) {
        return r;
      }
    }
    return {};
  }

  // One step of tier k's rollup (bucket width w), in one IMMEDIATE transaction that reads the
  // tier's state itself: everything that decides what is written (tiers.built_ns, the limit,
  // the next source row) is read under the write lock, so a second writer on the same file (one
  // that bypassed the writer lock) can never build a bucket twice. Builds the next complete
  // bucket (true), or, when none is left, raises built_ns over a gap up to the limit (false).
  // A bucket of tier 1 is complete once a raw interval starts after it; one of tier 2 once
  // tier 1 is built past it. `bucket` is set to the start of the bucket it tried to build.
  result<bool> build_step_once(int k, std::int64_t w, std::optional<std::int64_t> &bucket) {
    bool built = false;
    auto r = transaction([&]() -> result<void> {
      auto st = built_ns(k);
      if (!st) {
        return st.err();
      }
      std::int64_t limit = 0;
      if (k == 1) {
        auto newest = scalar("SELECT max(start_ns) FROM intervals WHERE tier = 0");
        if (!newest) {
          return newest.err();
        }
        if (!*newest) {
          return {};
        }
        limit = floor_to(**newest, w);
      } else {
        auto below = built_ns(k - 1);
        if (!below) {
          return below.err();
        }
        limit = floor_to(*below, w);
      }
      auto next = scalar("SELECT min(start_ns) FROM intervals WHERE tier = ?1 AND start_ns >= ?2",
                         {std::int64_t{k - 1}, *st});
      if (!next) {
        return next.err();
      }
      if (!*next || floor_to(**next, w) >= limit) {
        // Nothing left to build before the limit (a gap up to it): the tier is complete to
        // there, and the next tier may build the buckets that end before it.
        if (*st < limit) {
          return run("UPDATE tiers SET built_ns = ?2 WHERE tier = ?1 AND built_ns < ?2",
                     {std::int64_t{k}, limit});
        }
        return {};
      }
      bucket = floor_to(**next, w);
      if (auto b = build_bucket(k, *bucket, w); !b) {
        return b;
      }
      built = true;
      return {};
    });
    if (!r) {
      return r.err();
    }
    return built;
  }

  // The oldest bucket of tier k (width w) with intervals of tier k - 1 written late into it
  // (flags bit 2, through the partial indexes intervals_late and intervals_late_1m): its boot
  // and start, or nullopt.
  result<std::optional<std::pair<std::string, std::int64_t>>> oldest_late(int k, std::int64_t w) {
    using out_t = std::optional<std::pair<std::string, std::int64_t>>;
    const std::string where =
        k == 1 ? "tier = 0 AND flags & 4 <> 0" : "tier = 1 AND flags & 4 <> 0";
    auto start = scalar(fmt::format("SELECT min(start_ns) FROM intervals WHERE {}", where));
    if (!start) {
      return start.err();
    }
    if (!*start) {
      return out_t{};
    }
    auto boot = query(
        fmt::format("SELECT boot_id FROM intervals WHERE {} AND start_ns = ?1", where), {**start});
    if (!boot) {
      return boot.err();
    }
    if (boot->empty() || !(*boot)[0] || !(*boot)[0]->text) {
      return out_t{};
    }
    return out_t{std::pair{(*boot)[0]->t, floor_to(**start, w)}};
  }

  // Whether no more intervals can be written late into bucket [b, b + w) of `boot`: a raw
  // interval written after its latest late one starts past the bucket or is another boot's
  // (the recorder moved on, or the machine rebooted), and for the hour tier, no raw interval
  // of the bucket waits for its minute's late rollup.
  result<bool> late_bucket_done(int k, const std::string &boot, std::int64_t b, std::int64_t w) {
    const std::string where =
        k == 1 ? "tier = 0 AND flags & 4 <> 0" : "tier = 1 AND flags & 4 <> 0";
    auto last = scalar(fmt::format("SELECT max(id) FROM intervals WHERE {} AND start_ns >= ?1 AND "
                                   "start_ns < ?2 AND boot_id = ?3",
                                   where),
                       {b, b + w, boot});
    if (!last) {
      return last.err();
    }
    // By rowid from the latest late one on (the unary + keeps SQLite off the other indexes).
    auto after = scalar("SELECT 1 FROM intervals WHERE id > ?1 AND +tier = 0 AND "
                        "(+start_ns >= ?2 OR boot_id <> ?3) LIMIT 1",
                        {last->value_or(INT64_MAX), b + w, boot});
    if (!after) {
      return after.err();
    }
    if (!*after) {
      return false;
    }
    if (k == 1) {
      return true;
    }
    auto waiting = scalar("SELECT 1 FROM intervals WHERE tier = 0 AND flags & 4 <> 0 AND "
                          "start_ns >= ?1 AND start_ns < ?2 AND boot_id = ?3 LIMIT 1",
                          {b, b + w, boot});
    if (!waiting) {
      return waiting.err();
    }
    return !*waiting;
  }

  // One step of the late rollups of tier k (width w), in one IMMEDIATE transaction: the oldest
  // late bucket, once done (late_bucket_done), becomes a second interval of the bucket
  // (build_boot_bucket); its sources lose the mark, and those retention already passed (before
  // their tier's cutoff, kept only for this) are deleted with the same commit. true: built.
  // `bucket` is set to the start of the bucket it tried to build.
  result<bool> build_late_step_once(int k, std::int64_t w, std::optional<std::int64_t> &bucket) {
    bool built = false;
    auto r = transaction([&]() -> result<void> {
      auto late = oldest_late(k, w);
      if (!late) {
        return late.err();
      }
      if (!*late) {
        return {};
      }
      const auto &[boot, b] = **late;
      auto done = late_bucket_done(k, boot, b, w);
      if (!done) {
        return done.err();
      }
      if (!*done) {
        return {};
      }
      bucket = b;
      if (auto x = build_boot_bucket(k, b, w, boot, true); !x) {
        return x;
      }
      const std::string sources =
          "SELECT id FROM intervals WHERE tier = ?1 AND boot_id = ?2 AND start_ns >= ?3 AND "
          "start_ns < ?4 AND flags & 4 <> 0";
      const std::string passed =
          sources + " AND start_ns < (SELECT cutoff_ns FROM tiers WHERE tier = ?1)";
      const std::vector<arg> args = {std::int64_t{k - 1}, boot, b, b + w};
      for (const char *t : fact_tables) {
        if (auto d = run(fmt::format("DELETE FROM {} WHERE interval_id IN ({})", t, passed), args);
            !d) {
          return d;
        }
      }
      if (auto d = run(fmt::format("DELETE FROM intervals WHERE id IN ({})", passed), args); !d) {
        return d;
      }
      built = true;
      return run(fmt::format("UPDATE intervals SET flags = flags & ~4 WHERE id IN ({})", sources),
                 args);
    });
    if (!r) {
      return r.err();
    }
    return built;
  }

  // A step (build_step_once or build_late_step_once); when its bucket fails, the rows of its
  // sources that no longer decode are set aside (damage.hpp) and it is tried again, so that one
  // damaged blob never stops the rollups (nor the retention that waits for them). A failure no
  // damaged row explains is returned as it was.
  template <typename Once> result<bool> retrying(int k, std::int64_t w, Once once) {
    for (int attempt = 0;; ++attempt) {
      std::optional<std::int64_t> bucket;
      auto r = once(bucket);
      if (r || !bucket || attempt == 2 ||
          (searched_clean == std::pair{k, *bucket} && run_ns - searched_ns < 10 * minute_ns)) {
        return r;
      }
      auto n = set_aside(k - 1, *bucket, *bucket + w);
      if (!n) {
        return make_error(
            fmt::format("{} (looking for damaged rows: {})", r.err().msg, n.err().msg),
            r.err().errnum);
      }
      if (*n == 0) {
        searched_clean = std::pair{k, *bucket};
        searched_ns = run_ns;
        return r;
      }
    }
  }
  result<bool> build_step(int k, std::int64_t w) {
    return retrying(k, w, [&](auto &b) { return build_step_once(k, w, b); });
  }
  result<bool> build_late_step(int k, std::int64_t w) {
    return retrying(k, w, [&](auto &b) { return build_late_step_once(k, w, b); });
  }

  // Moves the rows of tier `tier`'s intervals in [a, b) that do not decode into damaged_rows,
  // in one transaction; returns how many.
  result<std::int64_t> set_aside(int tier, std::int64_t a, std::int64_t b) {
    damage_found found;
    auto r = transaction([&]() -> result<void> {
      auto f = set_aside_damage(db, tier, a, b, run_ns);
      if (!f) {
        return f.err();
      }
      found = std::move(*f);
      return {};
    });
    if (!r) {
      return r.err();
    }
    if (damage.rows == 0) {
      damage.first = std::move(found.first);
    }
    damage.rows += found.rows;
    return found.rows;
  }

  // Builds up to budget.buckets complete buckets of tier k (width w), or of its late rollups.
  result<int> build(int k, std::int64_t w, bool late) {
    int n = 0;
    while (n < budget.buckets) {
      auto one = late ? build_late_step(k, w) : build_step(k, w);
      if (!one) {
        return one.err();
      }
      if (!*one) {
        break;
      }
      ++n;
    }
    return n;
  }

  // Deletes every row of tier k that starts before `to` (with its data) and raises the tier's
  // cutoff to `to`. Runs inside trim's transaction: the views switch from the deleted rows to
  // the rollup that covers them at the same commit. Adds the number of intervals deleted to n.
  result<void> delete_tier(int k, std::int64_t to, std::int64_t &n) {
    for (const char *t : fact_tables) {
      // Not an interval written late and not rolled up yet (flags bit 2): build_late_step
      // deletes it once its bucket holds it.
      const std::string sql = fmt::format("DELETE FROM {} WHERE interval_id IN (SELECT id FROM "
                                          "intervals WHERE tier = ?1 AND start_ns < ?2 AND "
                                          "flags & 4 = 0)",
                                          t);
      if (auto d = run(sql, {std::int64_t{k}, to}); !d) {
        return d;
      }
    }
    if (auto d = run("DELETE FROM intervals WHERE tier = ?1 AND start_ns < ?2 AND flags & 4 = 0",
                     {std::int64_t{k}, to});
        !d) {
      return d;
    }
    n += sqlite3_changes(db);
    return run("UPDATE tiers SET cutoff_ns = ?2 WHERE tier = ?1 AND cutoff_ns < ?2",
               {std::int64_t{k}, to});
  }

  // Thread identities no row can refer to any more. A thread's own identity is used by raw rows
  // only: it goes once its newest bucket (last_ns, kept up to date by the 1-minute rollups) is
  // an hour older than the oldest raw interval and no raw interval that is not rolled up yet
  // refers to it. A (comm, cgroup) group identity is used by the rollups: it goes once its
  // newest bucket is an hour older than the oldest interval of any tier. Runs when deletions
  // have moved the oldest raw interval on by an hour since the last run (it scans the thread
  // table).
  result<std::int64_t> collect_threads() {
    std::int64_t n = 0;
    std::optional<std::int64_t> ran; // the horizon of this run, when it ran
    auto r = transaction([&]() -> result<void> {
      // Read under the write lock, with the deletions: a stale oldest row or built_ns could
      // only keep more, but nothing that decides what is deleted is read outside.
      auto oldest_raw = scalar("SELECT min(start_ns) FROM intervals WHERE tier = 0");
      if (!oldest_raw) {
        return oldest_raw.err();
      }
      auto oldest = scalar("SELECT min(start_ns) FROM intervals");
      if (!oldest) {
        return oldest.err();
      }
      const std::int64_t horizon = oldest_raw->value_or(INT64_MAX - hour_ns) - hour_ns;
      const std::int64_t group_horizon = oldest->value_or(INT64_MAX - hour_ns) - hour_ns;
      if (gc_horizon && horizon < *gc_horizon + hour_ns) {
        return {};
      }
      auto st = built_ns(1);
      if (!st) {
        return st.err();
      }
      const std::string tail = "SELECT id FROM intervals WHERE tier = 0 AND start_ns >= ?2";
      const std::string threads =
          fmt::format("DELETE FROM thread WHERE boot_id <> '' AND last_ns < ?1 AND id NOT IN ({})",
                      fmt::format(fmt::runtime(thread_refs), tail));
      if (auto d = run(threads, {horizon, *st - minute_ns}); !d) {
        return d;
      }
      n = sqlite3_changes(db);
      if (auto d = run("DELETE FROM thread WHERE boot_id = '' AND tid = 0 AND last_ns < ?1",
                       {group_horizon});
          !d) {
        return d;
      }
      n += sqlite3_changes(db);
      // Culprits and cgroups the same way (the pseudo-culprits stay).
      const std::string culprits = fmt::format(
          "DELETE FROM culprit WHERE boot_id <> '' AND last_ns < ?1 AND id NOT IN (SELECT "
          "culprit_id FROM thread_blame WHERE interval_id IN ({0}) UNION SELECT waker_id FROM "
          "thread_wakeup WHERE interval_id IN ({0}))",
          tail);
      if (auto d = run(culprits, {horizon, *st - minute_ns}); !d) {
        return d;
      }
      n += sqlite3_changes(db);
      if (auto d = run("DELETE FROM culprit WHERE boot_id = '' AND kind = 0 AND last_ns < ?1",
                       {group_horizon});
          !d) {
        return d;
      }
      n += sqlite3_changes(db);
      const std::string cgroups =
          fmt::format("DELETE FROM cgroup WHERE last_ns < ?1 AND id NOT IN (SELECT cgroup_id FROM "
                      "cgroup_cpu WHERE interval_id IN ({}))",
                      tail);
      if (auto d = run(cgroups, {group_horizon, *st - minute_ns}); !d) {
        return d;
      }
      n += sqlite3_changes(db);
      ran = horizon;
      return {};
    });
    if (!r) {
      return r.err();
    }
    if (ran) {
      gc_horizon = ran;
    }
    return n;
  }

  struct span {
    std::int64_t oldest = 0;
    std::int64_t newest = 0;
  };
  result<std::optional<span>> extent(int k) {
    // Not counting intervals written late that wait for their rollup (retention keeps them).
    auto lo = scalar("SELECT min(start_ns) FROM intervals WHERE tier = ?1 AND flags & 4 = 0",
                     {std::int64_t{k}});
    auto hi = scalar("SELECT max(start_ns) FROM intervals WHERE tier = ?1", {std::int64_t{k}});
    if (!lo) {
      return lo.err();
    }
    if (!hi) {
      return hi.err();
    }
    if (!*lo || !*hi) {
      return std::optional<span>{};
    }
    return std::optional<span>{span{**lo, **hi}};
  }

  // Tier k deletes whole buckets of the next tier (raw: minutes; 1 m: hours; 1 h: hours), never
  // past what the next tier has rolled up, at most `batch` of it per call.
  static constexpr std::int64_t step(int k) { return k == 0 ? minute_ns : hour_ns; }
  [[nodiscard]] std::int64_t batch(int k) const {
    return k == 0 ? budget.raw_span_ns : k == 1 ? budget.minute_span_ns : budget.hour_span_ns;
  }

  // Deletes the oldest batch of tier k, up to the target `target_of(extent of tier k)` returns
  // (aligned down; nullopt when nothing is due), never past what tier k + 1 has rolled up.
  // Returns the number of intervals deleted. The extent, the next tier's built_ns and the
  // deletion are one IMMEDIATE transaction, so that nothing read outside it decides what is
  // deleted (a second writer on the file cannot make it delete rows not rolled up yet).
  template <typename Target> result<std::int64_t> trim(int k, Target target_of) {
    std::int64_t n = 0;
    auto r = transaction([&]() -> result<void> {
      auto ext = extent(k);
      if (!ext) {
        return ext.err();
      }
      if (!*ext) {
        return {};
      }
      const std::optional<std::int64_t> want = target_of(**ext);
      if (!want) {
        return {};
      }
      std::int64_t target = floor_to(*want, step(k));
      if (k < 2) {
        auto next = built_ns(k + 1);
        if (!next) {
          return next.err();
        }
        target = std::min(target, *next);
      }
      if ((*ext)->oldest >= target) {
        return {};
      }
      const std::int64_t to = std::min(target, floor_to((*ext)->oldest, step(k)) + batch(k));
      return delete_tier(k, to, n);
    });
    if (!r) {
      return r.err();
    }
    return n;
  }

  result<std::pair<std::uint64_t, std::uint64_t>> size() {
    auto pages = scalar("PRAGMA page_count");
    auto free = scalar("PRAGMA freelist_count");
    auto psize = scalar("PRAGMA page_size");
    if (!pages || !free || !psize) {
      return make_error(sqlite3_errmsg(db));
    }
    const auto ps = static_cast<std::uint64_t>(psize->value_or(4096));
    const auto total = static_cast<std::uint64_t>(pages->value_or(0));
    const auto unused = static_cast<std::uint64_t>(free->value_or(0));
    return std::make_pair((total - std::min(total, unused)) * ps, total * ps);
  }

  // Over the size limit: the finest tier gives up its oldest batch first, down to a floor that
  // keeps recent detail (raw: 1 hour, 1 m: 1 day), then the next; the 1-hour tier last.
  result<std::int64_t> shrink() {
    const std::int64_t floors[] = {hour_ns, 24 * hour_ns, 24 * hour_ns};
    for (int k = 0; k < 3; ++k) {
      auto n = trim(k, [&](const span &e) -> std::optional<std::int64_t> {
        if (e.newest - e.oldest <= floors[k]) {
          return std::nullopt;
        }
        return e.newest - floors[k];
      });
      if (!n) {
        return n;
      }
      if (*n > 0) {
        return n;
      }
    }
    return std::int64_t{0};
  }

  result<maintenance_report> run_all(std::int64_t now, const retention &keep) {
    maintenance_report rep;
    from_sums = 0;
    run_ns = now;
    damage = {};
    for (const auto &[k, w] : {std::pair{1, minute_ns}, std::pair{2, hour_ns}}) {
      auto n = build(k, w, false);
      if (!n) {
        return n.err();
      }
      rep.buckets_built += *n;
      auto late = build(k, w, true);
      if (!late) {
        return late.err();
      }
      rep.late_buckets_built += *late;
    }
    rep.buckets_from_sums = from_sums;
    rep.rows_set_aside = damage.rows;
    rep.damage = damage.first;
    const std::int64_t keeps[] = {keep.keep_raw_ns, keep.keep_1m_ns, keep.keep_1h_ns};
    bool deleted = false;
    for (int k = 0; k < 3; ++k) {
      if (keeps[k] <= 0) {
        continue;
      }
      const std::int64_t target = now - keeps[k];
      auto n = trim(k, [&](const span &) { return std::optional<std::int64_t>{target}; });
      if (!n) {
        return n.err();
      }
      rep.rows_deleted += *n;
      deleted = deleted || *n > 0;
    }
    if (keep.max_bytes > 0) {
      auto sz = size();
      if (!sz) {
        return sz.err();
      }
      if (sz->first > keep.max_bytes) {
        rep.over_size = true;
        auto n = shrink();
        if (!n) {
          return n.err();
        }
        rep.rows_deleted += *n;
        deleted = deleted || *n > 0;
      }
    }
    if (deleted) {
      auto n = collect_threads();
      if (!n) {
        return n.err();
      }
      rep.threads_deleted = *n;
    }
    // Give freed pages back to the file system, a bounded number per call.
    auto before = scalar("PRAGMA freelist_count");
    if (!before) {
      return before.err();
    }
    if (before->value_or(0) > 0) {
      if (auto r = run(fmt::format("PRAGMA incremental_vacuum({})", budget.vacuum_pages)); !r) {
        return r.err();
      }
      auto after = scalar("PRAGMA freelist_count");
      if (!after) {
        return after.err();
      }
      rep.pages_freed = before->value_or(0) - after->value_or(0);
    }
    return rep;
  }
};

maintenance::maintenance(sqlite3 *db, maintenance_budget b) : p_(std::make_unique<impl>(db, b)) {}
maintenance::~maintenance() = default;

result<maintenance_report> maintenance::run(std::int64_t now_ns, const retention &keep) {
  return p_->run_all(now_ns, keep);
}

bucket_sums &maintenance::sums() {
  return p_->sums;
}

result<std::pair<std::uint64_t, std::uint64_t>> maintenance::size() const {
  return p_->size();
}

} // namespace rsched::store::detail
