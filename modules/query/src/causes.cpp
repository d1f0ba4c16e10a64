// The causes engine (causes.hpp): blame, inversions, throttling and pressure of windows.
#include "causes.hpp"

#include "rsched/base/flat_map.hpp"
#include "rsched/base/text.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/blame_pack.hpp"
#include "rsched/store/hist_summary.hpp"
#include "rsched/store/records.hpp"

#include "explain_scope.hpp"
#include "sql_functions.hpp"
#include "table_functions.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <sqlite3.h>
#include <tuple>
#include <unordered_map>

namespace rsched::query::detail {

bool recorded_in(sqlite3 *db, const char *table, std::int64_t a, std::int64_t b) {
  if (!has_table(db, table)) {
    return false;
  }
  auto st = sqlite::prepare_stmt(
      db, fmt::format("SELECT 1 FROM {} AS i WHERE {} AND EXISTS (SELECT 1 FROM {} AS x WHERE "
                      "x.interval_id = i.id) LIMIT 1",
                      timeline(db), overlaps(db, "i", a), table));
  if (!st) {
    return true; // unknown: let the callers look
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  return sqlite3_step(st->get()) == SQLITE_ROW;
}

namespace {
// blame_of and blame_by_thread: the victims' blame in intervals overlapping [a, b), per culprit
// and, with `per_thread`, per victim thread (thread.id) too.
result<std::vector<thread_culprit>> blame_rows(sqlite3 *db, const victims &v, std::int64_t a,
                                               std::int64_t b, bool per_thread) {
  std::vector<thread_culprit> out;
  if (!has_table(db, "thread_blame")) {
    return out;
  }
  // One culprit per process (pid) and the comm and cgroup it ran as; per (comm, cgroup) on
  // rollup rows (pid 0). approx_ns from schema 11 on (NULL in older rows: sum() skips them).
  const std::string sql = fmt::format(
      "SELECT c.kind, CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 THEN 0 END, c.comm, "
      "c.cgroup, sum(x.wait_ns), sum(x.waits), sum(x.preempts), {}, {} "
      "FROM {} AS i CROSS JOIN thread_blame AS x ON x.interval_id = i.id "
      "CROSS JOIN thread AS t ON t.id = x.thread_id JOIN culprit AS c ON c.id = x.culprit_id "
      "WHERE {} AND {} "
      "GROUP BY {}c.kind, c.pid, c.comm, c.cgroup",
      has_column(db, "thread_blame", "approx_ns") ? "sum(x.approx_ns)" : "NULL",
      per_thread ? "x.thread_id" : "0", timeline(db), overlaps(db, "i", a), victims_sql(v, 3),
      per_thread ? "x.thread_id, " : "");
  auto st = prepare_window(db, sql, a, b, v);
  if (!st) {
    return st.err();
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt *s = st->get();
    thread_culprit tc;
    culprit_sum &c = tc.culprit;
    c.kind = sqlite3_column_int(s, 0);
    if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
      c.pid = sqlite3_column_int64(s, 1);
    }
    c.comm = sqlite::column_text(s, 2);
    c.cgroup = sqlite::column_text(s, 3);
    c.wait_ns = sqlite3_column_int64(s, 4);
    c.waits = sqlite3_column_int64(s, 5);
    c.preempts = sqlite3_column_int64(s, 6);
    if (sqlite3_column_type(s, 7) != SQLITE_NULL) {
      c.approx_ns = sqlite3_column_int64(s, 7);
    }
    tc.thread_id = sqlite3_column_int64(s, 8);
    out.push_back(std::move(tc));
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return out;
}
} // namespace

result<std::vector<culprit_sum>> blame_of(sqlite3 *db, const victims &v, std::int64_t a,
                                          std::int64_t b) {
  auto rows_ = blame_rows(db, v, a, b, false);
  if (!rows_) {
    return rows_.err();
  }
  std::vector<culprit_sum> out;
  out.reserve(rows_->size());
  for (auto &r : *rows_) {
    out.push_back(std::move(r.culprit));
  }
  std::stable_sort(out.begin(), out.end(), [](const culprit_sum &x, const culprit_sum &y) {
    return x.wait_ns != y.wait_ns ? x.wait_ns > y.wait_ns : x.preempts > y.preempts;
  });
  return out;
}

result<std::vector<thread_culprit>> blame_by_thread(sqlite3 *db, const victims &v, std::int64_t a,
                                                    std::int64_t b) {
  return blame_rows(db, v, a, b, true);
}

namespace {
// `cgroup` and its ancestors below the root, deepest first: "/a/b", "/a" (none for "/").
template <typename F> void for_each_level(const std::string &cgroup, F &&f) {
  for (std::string level = cgroup; level.size() > 1;) {
    f(level);
    const auto slash = level.rfind('/');
    level = slash == 0 || slash == std::string::npos ? std::string("/") : level.substr(0, slash);
  }
}

// The kernel sums a cgroup's throttled time over the runqueues of every CPU it was throttled on
// (`throttled_usec`, v1 `throttled_time`), so it can exceed the interval. A cgroup is throttled
// within at most the enforcement periods it ran out of quota in, each shorter than the interval
// over its periods with runnable tasks: the wall-clock time it was throttled is at most the
// interval times throttled / periods (and the interval). The same in SQL over an interval `i`
// and its cgroup_cpu row `p`.
constexpr std::string_view throttled_wall_sql =
    "min(p.throttled_ns, i.dur_ns, CASE WHEN p.periods > 0 AND p.throttled IS NOT NULL THEN "
    "i.dur_ns * p.throttled / p.periods ELSE i.dur_ns END)";

// pressure_of's answer from the victims' cgroups and `query(path, throttled, some)`, the
// throttled time and PSI "some" share of one cgroup over the window (left unset where none).
template <typename Query>
pressure_sum combine_pressure(const std::set<std::string> &cgroups, Query &&query) {
  pressure_sum p;
  std::set<std::string> levels; // the victims' cgroups and their ancestors below the root
  for (const auto &c : cgroups) {
    std::optional<std::int64_t> thr;
    std::optional<double> some;
    query(c, thr, some);
    if (some && (!p.victim_some_pct || *some > *p.victim_some_pct)) {
      p.victim_some_pct = some;
    }
    for_each_level(c, [&](const std::string &level) { levels.insert(level); });
  }
  for (const auto &l : levels) {
    std::optional<std::int64_t> thr;
    std::optional<double> some;
    query(l, thr, some);
    if (thr && (!p.throttled_ns || *thr > *p.throttled_ns)) {
      p.throttled_ns = thr;
      p.throttled_cgroup = l;
    }
  }
  std::optional<std::int64_t> unused;
  query("/", unused, p.system_some_pct);
  return p;
}
} // namespace

std::int64_t throttled_wall_ns(std::int64_t thr_ns, std::int64_t dur,
                               std::optional<std::pair<std::int64_t, std::int64_t>> periods) {
  std::int64_t cap = std::max<std::int64_t>(dur, 0);
  if (periods && periods->first > 0 && periods->second >= 0) {
    // dur * throttled / periods rounded down, as SQLite's integer division is, without the
    // product: dur = q * periods + r
    const std::int64_t n = periods->first;
    const std::int64_t t = std::min(periods->second, n);
    cap = std::min(cap, cap / n * t + cap % n * t / n);
  }
  return std::min(thr_ns, cap);
}

result<pressure_sum> pressure_of(sqlite3 *db, const victims &v, std::int64_t a, std::int64_t b) {
  if (!has_table(db, "cgroup_cpu")) {
    return pressure_sum{};
  }
  const std::string tl = timeline(db);
  // The victims' cgroups: those of their threads with samples in the window.
  std::set<std::string> cgroups;
  {
    const std::string sql = fmt::format(
        "SELECT DISTINCT t.cgroup FROM {} AS i CROSS JOIN thread_hist AS h ON h.interval_id = "
        "i.id AND h.metric = 1 CROSS JOIN thread AS t ON t.id = h.thread_id "
        "WHERE {} AND {}",
        tl, overlaps(db, "i", a), victims_sql(v, 3));
    auto st = prepare_window(db, sql, a, b, v);
    if (!st) {
      return st.err();
    }
    while (sqlite3_step(st->get()) == SQLITE_ROW) {
      std::string c = sqlite::column_text(st->get(), 0);
      if (!c.empty()) {
        cgroups.insert(std::move(c));
      }
    }
  }
  auto per_cgroup = sqlite::prepare_stmt(
      db, fmt::format("SELECT sum({}), CASE WHEN sum(CASE WHEN p.some_ns IS NULL "
                      "THEN 0 ELSE i.dur_ns END) > 0 THEN 100.0 * sum(p.some_ns) / sum(CASE WHEN "
                      "p.some_ns IS NULL THEN 0 ELSE i.dur_ns END) END "
                      "FROM {} AS i CROSS JOIN cgroup_cpu AS p ON p.interval_id = i.id "
                      "JOIN cgroup AS g ON g.id = p.cgroup_id "
                      "WHERE {} AND g.path = ?3",
                      throttled_wall_sql, tl, overlaps(db, "i", a)));
  if (!per_cgroup) {
    return per_cgroup.err();
  }
  const auto query = [&](const std::string &path, std::optional<std::int64_t> &throttled,
                         std::optional<double> &some) {
    sqlite3_stmt *s = per_cgroup->get();
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    sqlite3_bind_text(s, 3, path.data(), static_cast<int>(path.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(s) == SQLITE_ROW) {
      if (sqlite3_column_type(s, 0) != SQLITE_NULL) {
        throttled = sqlite3_column_int64(s, 0);
      }
      if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
        some = sqlite3_column_double(s, 1);
      }
    }
  };
  return combine_pressure(cgroups, query);
}

namespace {

// A culprit as blame_rows groups it (GROUP BY c.kind, c.pid, c.comm, c.cgroup), ordered as
// SQLite hands the groups back: ascending, text by its bytes (BINARY).
using culprit_group = std::tuple<int, std::int64_t, std::string, std::string>;

// A victim condition causes_of checks itself: an equality on the thread's identity, as
// victim::sql() writes it, or a service's rule (the function its SQL calls). The others (GLOB, a
// cgroup with its descendants) are left to SQL.
bool plain(const victim &v) {
  switch (v.what) {
  case victim::kind::all:
  case victim::kind::tid:
  case victim::kind::pid:
  case victim::kind::service:
    return true;
  case victim::kind::comm:
    return !v.glob;
  case victim::kind::cgroup:
    return !v.glob && !v.descendants;
  }
  return false;
}

struct thread_ident {
  bool known = false; // has a row in `thread` (the joins drop the rows of a thread without one)
  std::int64_t tid = 0, pid = 0;
  std::string comm, cgroup;
};

bool plain_match(const victim &v, const thread_ident &t) {
  switch (v.what) {
  case victim::kind::all:
    return true;
  case victim::kind::tid:
    return t.tid == v.number;
  case victim::kind::pid:
    return t.pid == v.number;
  case victim::kind::comm:
    return t.comm == v.text;
  case victim::kind::cgroup:
    return t.cgroup == v.text;
  case victim::kind::service:
    return v.service != nullptr && v.service->matches(t.comm, t.cgroup);
  }
  return false;
}

// SQLite's sum() of integers: an error, not a wrapped total, on overflow.
bool add_to(std::int64_t &sum, std::int64_t x) {
  return !__builtin_add_overflow(sum, x, &sum);
}

struct blame_sums {
  std::int64_t wait_ns = 0, waits = 0, preempts = 0, approx_ns = 0;
  bool approx = false; // some row's approx_ns was not NULL
};

// One cgroup's rows of cgroup_cpu over a window, as pressure_of's query sums them.
struct cgroup_sums {
  std::optional<std::int64_t> throttled_ns; // sum(throttled_ns): NULL when every row's is
  std::int64_t some_ns = 0;                 // sum(some_ns) of the rows that have it
  std::int64_t some_dur = 0;                // and their intervals' length
};

// Interned strings (cgroup paths): an index per distinct text.
class interned {
public:
  std::uint32_t of(const std::string &s) {
    auto [it, fresh] = index_.try_emplace(s, static_cast<std::uint32_t>(texts_.size()));
    if (fresh) {
      texts_.push_back(s);
    }
    return it->second;
  }
  [[nodiscard]] const std::string &text(std::uint32_t i) const { return texts_[i]; }

private:
  std::unordered_map<std::string, std::uint32_t> index_;
  std::vector<std::string> texts_;
};

} // namespace

namespace {

// The windows' victim conditions: the plain ones checked here, the others by SQL once per
// thread (a column each of the identity query); windows with the same victims share a group.
struct victim_check {
  const victim *v = nullptr; // plain: checked here
  std::size_t sql = 0;       // else: the identity query's column 4 + sql
};
struct victim_group {
  std::vector<victim_check> checks;
  // Victims that are one thread id (tid:N, N > 0): only that thread's rows are needed.
  std::optional<std::int64_t> tid;
};

// Per thread (thread.id), looked up once: its identity and the victim groups it is in.
struct thread_entry {
  thread_ident ident;
  std::uint32_t cgroup = 0;          // interned
  std::vector<std::uint32_t> groups; // ascending
};

// (victim thread, 0 unless per_thread; culprit group) -> sums.
struct key_hash {
  std::size_t operator()(const std::pair<std::int64_t, std::uint32_t> &k) const {
    return std::hash<std::int64_t>()(k.first) * 31 + k.second;
  }
};
using window_sums = base::flat_map<std::pair<std::int64_t, std::uint32_t>, blame_sums, key_hash>;

// Steps `s` to its end, handing each row to `f` (a result<void>); an SQLite error is the error.
template <typename F> result<void> each_step(sqlite3 *db, sqlite3_stmt *s, F &&f) {
  int rc = 0;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    if (auto r = f(s); !r) {
      return r;
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
}

// Resets `s` and binds its ?1 (and ?2 when given).
sqlite3_stmt *rebind(sqlite3_stmt *s, std::int64_t p1, std::optional<std::int64_t> p2 = {}) {
  sqlite3_reset(s);
  sqlite3_bind_int64(s, 1, p1);
  if (p2) {
    sqlite3_bind_int64(s, 2, *p2);
  }
  return s;
}

// Interval `id`'s blob (column 0 of `st`, whose ?1 is the interval): none when it has no row.
// Valid until `st` steps again.
result<std::optional<std::span<const std::uint8_t>>> interval_blob(sqlite3 *db, sqlite3_stmt *st,
                                                                   std::int64_t id) {
  const int rc = sqlite3_step(rebind(st, id));
  using blob = std::optional<std::span<const std::uint8_t>>;
  if (rc == SQLITE_DONE) {
    return blob();
  }
  if (rc != SQLITE_ROW) {
    return make_error(sqlite3_errmsg(db));
  }
  return blob(std::in_place, static_cast<const std::uint8_t *>(sqlite3_column_blob(st, 0)),
              static_cast<std::size_t>(sqlite3_column_bytes(st, 0)));
}

using inversion_sums =
    std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::string>, inverted_wait>;

// The SQL's conditions on a packed entry: wait_ns > 0, policy IN (1, 2, 6), prio IS NOT NULL,
// waiter_policy NOT IN (1, 2, 5, 6) (NULL fails it), waiter_prio < 120.
bool may_be_inversion(const store::blame_entry &e) {
  const auto &[cpu, policy, prio, waiter_policy, waiter_prio] = e.sched;
  return e.wait_ns > 0 && policy && (*policy == 1 || *policy == 2 || *policy == 6) && prio &&
         waiter_policy && *waiter_policy != 1 && *waiter_policy != 2 && *waiter_policy != 5 &&
         *waiter_policy != 6 && waiter_prio && *waiter_prio < 120;
}

// causes_of's one read of the intervals overlapping any of its windows, in stages: plan (the
// intervals, and which windows each overlaps; the victim groups), per interval the blame rows
// (its pack, its rows whole, a light read and seeks, or seeks alone) and the victims' cgroups,
// then the culprits per window and the cgroups' throttling and pressure.
class window_reader {
public:
  window_reader(sqlite3 *db, const std::vector<window_query> &qs, bool blame, bool pressure,
                bool per_thread, const std::unordered_set<std::int64_t> *only,
                inversion_sink *inversions)
      : db_(db), qs_(qs), blame_(blame && has_table(db, "thread_blame")),
        pressure_(pressure && has_table(db, "cgroup_cpu")), per_thread_(per_thread), only_(only),
        inversions_(blame_ && !qs.empty() ? inversions : nullptr), out_(qs.size()),
        sums_(qs.size()), victim_cgroups_(qs.size()) {
    if (only_ != nullptr) {
      for (const std::int64_t id : *only_) {
        only_set_[id] = true; // looked up at every thread of every interval: a flat table
      }
    }
  }

  result<std::vector<window_causes>> run() {
    if (qs_.empty() || (!blame_ && !pressure_)) {
      return std::move(out_);
    }
    if (auto r = plan_intervals(); !r) {
      return r.err();
    }
    plan_victim_groups();
    for (std::size_t k = 0; k < qs_.size(); ++k) {
      if (qs_[k].cgroups) {
        for (const auto &c : *qs_[k].cgroups) {
          victim_cgroups_[k].insert(paths_.of(c));
        }
      } else {
        read_cgroups_ = true;
      }
    }
    if (auto r = prepare(); !r) {
      return r.err();
    }
    for (std::size_t j = 0; j < ivs_.size(); ++j) {
      if (!over_[j].empty()) {
        if (auto r = read_interval(j); !r) {
          return r.err();
        }
      }
    }
    if (blame_) {
      emit_culprits();
    }
    if (inversions_ != nullptr) {
      for (auto &kv : inversion_sums_) {
        inversions_->waits.push_back(std::move(kv.second));
      }
    }
    if (pressure_) {
      if (auto r = read_pressure(); !r) {
        return r.err();
      }
    }
    return std::move(out_);
  }

private:
  // The intervals overlapping any window, and per interval the windows it overlaps (ascending).
  result<void> plan_intervals() {
    std::int64_t lo = std::numeric_limits<std::int64_t>::max();
    std::int64_t hi = std::numeric_limits<std::int64_t>::min();
    for (const auto &q : qs_) {
      lo = std::min(lo, q.a);
      hi = std::max(hi, q.b);
    }
    auto ivs = intervals_in(db_, lo, hi);
    if (!ivs) {
      return ivs.err();
    }
    ivs_ = std::move(*ivs);
    std::int64_t longest = 0;
    for (const auto &iv : ivs_) {
      longest = std::max(longest, iv.dur);
    }
    over_.assign(ivs_.size(), {});
    for (std::size_t k = 0; k < qs_.size(); ++k) {
      const auto &q = qs_[k];
      // An interval overlapping [a, b) starts after a minus its length.
      const std::int64_t from =
          q.a < std::numeric_limits<std::int64_t>::min() + longest ? q.a : q.a - longest;
      auto j = std::partition_point(ivs_.begin(), ivs_.end(),
                                    [&](const interval_info &iv) { return iv.start <= from; });
      for (; j != ivs_.end() && j->start < q.b; ++j) {
        if (j->start + j->dur > q.a) { // overlaps(): start < b AND start + dur > a
          over_[static_cast<std::size_t>(j - ivs_.begin())].push_back(
              static_cast<std::uint32_t>(k));
        }
      }
    }
    return {};
  }

  // The index of `v` among the conditions SQL checks (added when new).
  std::size_t sql_index(const victim &v) {
    for (std::size_t i = 0; i < by_sql_.size(); ++i) {
      const victim &x = by_sql_[i];
      if (x.what == v.what && x.text == v.text && x.glob == v.glob &&
          x.descendants == v.descendants) {
        return i;
      }
    }
    by_sql_.push_back(v);
    return by_sql_.size() - 1;
  }

  // One group per distinct list of victim conditions; each window's group.
  void plan_victim_groups() {
    using signature = std::vector<std::tuple<int, std::string, std::int64_t, bool, bool>>;
    std::map<signature, std::size_t> group_of;
    group_of_window_.resize(qs_.size());
    for (std::size_t k = 0; k < qs_.size(); ++k) {
      signature sig;
      for (const auto &v : qs_[k].who) {
        sig.emplace_back(static_cast<int>(v.what), v.text, v.number, v.glob, v.descendants);
      }
      auto [it, fresh] = group_of.try_emplace(std::move(sig), groups_.size());
      if (fresh) {
        victim_group g;
        for (const auto &v : qs_[k].who) {
          g.checks.push_back(plain(v) ? victim_check{&v, 0} : victim_check{nullptr, sql_index(v)});
          if (v.what == victim::kind::tid && v.number > 0) {
            g.tid = v.number;
          }
        }
        groups_.push_back(std::move(g));
      }
      group_of_window_[k] = static_cast<std::uint32_t>(it->second);
    }
  }

  // Schema v13: the raw tier's rows are packed, one blob per interval (blame_pack.hpp), decoded
  // here straight from thread_blame_pack; the rest (rollups, raw rows written before) are
  // thread_blame_row's. Before v13 every row is thread_blame's.
  result<void> prepare() {
    std::string ident_sql = "SELECT t.tid, t.pid, t.comm, t.cgroup";
    for (std::size_t i = 0; i < by_sql_.size(); ++i) {
      ident_sql += ", (" + by_sql_[i].sql(static_cast<int>(i) + 2) + ")";
    }
    ident_sql += " FROM thread AS t WHERE t.id = ?1";
    if (auto r = prepare_into(ident_st_, ident_sql); !r) {
      return r;
    }
    for (std::size_t i = 0; i < by_sql_.size(); ++i) {
      by_sql_[i].bind(ident_st_.get(), static_cast<int>(i) + 2);
    }
    packed_ = blame_ && has_table(db_, "thread_blame_pack");
    row_table_ = packed_ ? "thread_blame_row" : "thread_blame";
    approx_col_ = blame_ && has_column(db_, "thread_blame", "approx_ns") ? "x.approx_ns" : "NULL";
    const std::string row_sql =
        fmt::format("SELECT x.thread_id, x.culprit_id, x.wait_ns, x.waits, x.preempts, {} "
                    "FROM {} AS x WHERE x.interval_id = ?1",
                    approx_col_, row_table_);
    result<void> r;
    if (packed_) {
      r = prepare_into(pack_st_, "SELECT data FROM thread_blame_pack WHERE interval_id = ?1");
    }
    if (r && blame_) {
      r = prepare_into(blame_st_, row_sql);
      r = r ? prepare_into(seek_st_, row_sql + " AND x.thread_id = ?2") : r;
      r = r ? prepare_into(light_st_, fmt::format("SELECT x.thread_id FROM {} AS x WHERE "
                                                  "x.interval_id = ?1",
                                                  row_table_))
            : r;
      r = r ? prepare_into(culprit_st_, "SELECT kind, pid, comm, cgroup FROM culprit WHERE id = ?1")
            : r;
    }
    r = r ? prepare_into(ids_st_, "SELECT id FROM thread WHERE boot_id = ?1 AND tid = ?2") : r;
    if (r && pressure_) {
      const char *hist = "SELECT h.thread_id FROM thread_hist AS h WHERE h.interval_id = ?1 AND "
                         "h.metric = 1";
      r = prepare_into(hist_st_, hist);
      r = r ? prepare_into(hist_seek_st_, std::string(hist) + " AND h.thread_id = ?2") : r;
      if (r && has_table(db_, "hist_summary")) {
        r = prepare_into(summary_st_,
                         "SELECT data FROM hist_summary WHERE interval_id = ?1 AND metric = 1");
      }
    }
    return r;
  }

  result<void> prepare_into(sqlite::stmt_ptr &st, const std::string &sql) {
    auto s = sqlite::prepare_stmt(db_, sql);
    if (!s) {
      return s.err();
    }
    st = std::move(*s);
    return {};
  }

  // Thread `id`'s identity and victim groups, looked up once.
  result<const thread_entry *> thread_of(std::int64_t id) {
    auto [it, fresh] = threads_.try_emplace(id);
    if (!fresh) {
      return &it->second;
    }
    thread_entry &e = it->second;
    sqlite3_stmt *s = rebind(ident_st_.get(), id);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
      return &e; // no identity: not a victim of any window
    }
    if (rc != SQLITE_ROW) {
      return make_error(sqlite3_errmsg(db_));
    }
    e.ident = {true, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
               sqlite::column_text(s, 2), sqlite::column_text(s, 3)};
    e.cgroup = paths_.of(e.ident.cgroup);
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      const auto &checks = groups_[gi].checks;
      if (std::all_of(checks.begin(), checks.end(), [&](const victim_check &c) {
            return c.v != nullptr ? plain_match(*c.v, e.ident)
                                  : sqlite3_column_int64(s, static_cast<int>(c.sql) + 4) != 0;
          })) {
        e.groups.push_back(static_cast<std::uint32_t>(gi));
      }
    }
    return &e;
  }

  // Culprit `id`'s group (as blame_rows groups culprits), looked up once; none without a row.
  result<std::optional<std::uint32_t>> culprit_group_of(std::int64_t id) {
    // Culprit ids are rowids, mostly small: a vector by id (-2 not looked up, -1 no row) saves
    // a hash lookup per blame entry.
    constexpr std::int64_t dense_limit = 1 << 22;
    if (id >= 0 && id < dense_limit) {
      const auto i = static_cast<std::size_t>(id);
      if (i >= culprit_dense_.size()) {
        culprit_dense_.resize(std::max(i + 1, culprit_dense_.size() * 2), -2);
      }
      if (culprit_dense_[i] == -2) {
        auto g = look_up_culprit(id);
        if (!g) {
          return g.err();
        }
        culprit_dense_[i] = *g ? static_cast<std::int64_t>(**g) : -1;
      }
      return culprit_dense_[i] >= 0
                 ? std::optional<std::uint32_t>(static_cast<std::uint32_t>(culprit_dense_[i]))
                 : std::nullopt;
    }
    auto [it, fresh] = culprit_of_.try_emplace(id);
    if (fresh) {
      auto g = look_up_culprit(id);
      if (!g) {
        return g.err();
      }
      it->second = *g;
    }
    return it->second;
  }

  result<std::optional<std::uint32_t>> look_up_culprit(std::int64_t id) {
    std::optional<std::uint32_t> out;
    sqlite3_stmt *s = rebind(culprit_st_.get(), id);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      culprit_group key{sqlite3_column_int(s, 0), sqlite3_column_int64(s, 1),
                        sqlite::column_text(s, 2), sqlite::column_text(s, 3)};
      auto [g, added] =
          group_index_.try_emplace(std::move(key), static_cast<std::uint32_t>(group_keys_.size()));
      if (added) {
        group_keys_.push_back(&g->first);
      }
      out = g->second;
    } else if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db_));
    }
    return out;
  }

  // The windows of the current interval whose victim thread `t` is: those of its groups.
  void windows_of(const thread_entry &t, std::vector<std::uint32_t> &hits) const {
    hits.clear();
    for (const std::uint32_t g : t.groups) {
      auto it = std::lower_bound(ovg_.begin(), ovg_.end(), std::make_pair(g, std::uint32_t{0}));
      for (; it != ovg_.end() && it->first == g; ++it) {
        hits.push_back(it->second);
      }
    }
  }

  // The ids of the thread rows of boot `boot` with tid `tid` (the writer gives a raw interval's
  // rows identities of its boot; a rollup's have tid 0 and never match), looked up once.
  result<const std::vector<std::int64_t> *> ids_of(const std::string &boot, std::int64_t tid) {
    // Not a structured binding: clang 14 cannot capture one in a lambda.
    const auto found = ids_of_tid_.try_emplace({boot, tid});
    const auto it = found.first;
    if (found.second) {
      sqlite3_stmt *st = ids_st_.get();
      sqlite3_reset(st);
      sqlite3_bind_text(st, 1, boot.data(), static_cast<int>(boot.size()), SQLITE_TRANSIENT);
      sqlite3_bind_int64(st, 2, tid);
      auto r = each_step(db_, st, [&](sqlite3_stmt *s) -> result<void> {
        it->second.push_back(sqlite3_column_int64(s, 0));
        return {};
      });
      if (!r) {
        return r.err();
      }
    }
    return &it->second;
  }

  // Interval j's windows with their groups (ovg_); whether every one of them has one thread id
  // as its victims, and then their thread rows (wanted_): a spike of one thread an hour long,
  // blame('tid:N') of a day, need not read all the others' rows.
  result<bool> plan_interval(std::size_t j) {
    ovg_.clear();
    for (const std::uint32_t k : over_[j]) {
      ovg_.emplace_back(group_of_window_[k], k);
    }
    std::sort(ovg_.begin(), ovg_.end());
    wanted_.clear();
    for (const auto &gk : ovg_) {
      const auto &tid = groups_[gk.first].tid;
      if (!tid) {
        wanted_.clear();
        return false;
      }
      auto ids = ids_of(ivs_[j].boot, *tid);
      if (!ids) {
        return ids.err();
      }
      wanted_.insert(wanted_.end(), (*ids)->begin(), (*ids)->end());
    }
    std::sort(wanted_.begin(), wanted_.end());
    wanted_.erase(std::unique(wanted_.begin(), wanted_.end()), wanted_.end());
    return true;
  }

  result<void> read_interval(std::size_t j) {
    auto seek = plan_interval(j);
    if (!seek) {
      return seek.err();
    }
    bool had_pack = false;
    if (packed_) {
      auto r = take_pack(ivs_[j].id);
      if (!r) {
        return r.err();
      }
      had_pack = *r;
    }
    // The row table for an interval without a pack: a rollup's or one written before v13.
    if (blame_ && !had_pack && inversions_ != nullptr &&
        std::find(over_[j].begin(), over_[j].end(), 0U) != over_[j].end()) {
      inversions_->complete = false; // its rows hold no priorities here
    }
    if (blame_ && !had_pack) {
      if (auto r = *seek ? seek_rows(j) : sparse_ ? light_read(j) : full_read(j); !r) {
        return r;
      }
    }
    return pressure_ && read_cgroups_ ? read_victim_cgroups(j, *seek) : result<void>{};
  }

  // One row: added to the windows of its victim thread. `last` is the thread of the row before
  // (rows come by thread: a thread's windows are found once).
  result<void> add_row(std::optional<std::int64_t> &last, const store::blame_entry &e) {
    ++rows_read_;
    if (last != e.thread_id) {
      last = e.thread_id;
      hits_.clear();
      if (only_ == nullptr || only_set_.find(e.thread_id) != nullptr) {
        auto t = thread_of(e.thread_id);
        if (!t) {
          return t.err();
        }
        windows_of(**t, hits_);
      }
    }
    if (hits_.empty()) {
      return {};
    }
    ++rows_victims_;
    auto g = culprit_group_of(e.culprit_id);
    if (!g) {
      return g.err();
    }
    if (!*g) {
      return {}; // no culprit row: the join drops it
    }
    bool ok = true;
    for (const std::uint32_t k : hits_) {
      blame_sums &b = sums_[k][{per_thread_ ? e.thread_id : 0, **g}];
      ok = ok && add_to(b.wait_ns, e.wait_ns) && add_to(b.waits, e.waits) &&
           add_to(b.preempts, e.preempts) && (!e.approx_ns || add_to(b.approx_ns, *e.approx_ns));
      b.approx = b.approx || e.approx_ns.has_value();
    }
    if (!ok) {
      return make_error("integer overflow");
    }
    // Window 0 is group 0's first window (groups are made in window order) and a thread's
    // windows come by group, then window: when window 0 is among them it is the first.
    if (inversions_ != nullptr && may_be_inversion(e) && hits_.front() == 0) {
      add_inversion(e, *group_keys_[**g]);
    }
    return {};
  }

  // A blame entry of window 0 that may be a priority inversion: summed as inverted_waits sums it
  // when it is one (store::priority_inversion) and its culprit a process.
  void add_inversion(const store::blame_entry &e, const culprit_group &g) {
    const auto &[cpu, policy, prio, waiter_policy, waiter_prio] = e.sched;
    // sqlite3_column_int's conversion, as the SQL path reads them.
    const int by_policy = static_cast<int>(*policy);
    const int by_prio = static_cast<int>(*prio);
    const int w_policy = static_cast<int>(*waiter_policy);
    const int w_prio = static_cast<int>(*waiter_prio);
    if (std::get<0>(g) != 0 || !store::priority_inversion(w_policy, w_prio, by_policy, by_prio)) {
      return;
    }
    const std::int64_t pid = std::get<1>(g);
    const std::string &comm = std::get<2>(g);
    const std::string &cgroup = std::get<3>(g);
    auto [it, fresh] = inversion_sums_.try_emplace(
        {e.thread_id, pid, comm, cgroup},
        inverted_wait{e.thread_id, pid, comm, cgroup, 0, w_policy, w_prio, by_policy, by_prio});
    it->second.wait_ns += e.wait_ns;
    // The latest row's scheduling.
    it->second.policy = w_policy;
    it->second.prio = w_prio;
    it->second.by_policy = by_policy;
    it->second.by_prio = by_prio;
  }

  // Adds the blame rows `s` steps through (by thread, as the primary key hands them back) to
  // the windows of their victim threads.
  result<void> take_rows(sqlite3_stmt *s) {
    std::optional<std::int64_t> last;
    hits_.clear();
    store::blame_entry e;
    return each_step(db_, s, [&](sqlite3_stmt *row) -> result<void> {
      e.thread_id = sqlite3_column_int64(row, 0);
      e.culprit_id = sqlite3_column_int64(row, 1);
      e.wait_ns = sqlite3_column_int64(row, 2);
      e.waits = sqlite3_column_int64(row, 3);
      e.preempts = sqlite3_column_int64(row, 4);
      e.approx_ns = sqlite3_column_type(row, 5) != SQLITE_NULL
                        ? std::optional<std::int64_t>(sqlite3_column_int64(row, 5))
                        : std::nullopt;
      return add_row(last, e);
    });
  }

  // The interval's pack (schema v13), every entry through add_row. True when the interval has
  // a pack: then it has no rows (the writer puts a raw interval's rows in its pack from schema
  // 13; rollups and older raw intervals have rows and no pack).
  result<bool> take_pack(std::int64_t interval_id) {
    auto blob = interval_blob(db_, pack_st_.get(), interval_id);
    if (!blob || !*blob) {
      return blob ? result<bool>(false) : result<bool>(blob.err());
    }
    const auto damaged = [&](const error &e) {
      return make_error(fmt::format("thread_blame_pack interval {}: {}", interval_id, e.msg));
    };
    store::blame_cursor cursor;
    if (auto r = cursor.open(**blob); !r) {
      return damaged(r.err());
    }
    std::optional<std::int64_t> last;
    hits_.clear();
    store::blame_entry e;
    for (;;) {
      auto more = cursor.next(e);
      if (!more) {
        return damaged(more.err());
      }
      if (!*more) {
        return true;
      }
      if (auto r = add_row(last, e); !r) {
        return r.err();
      }
    }
  }

  // The rows of the wanted_ threads of interval j, sought by (interval_id, thread_id).
  result<void> seek_rows(std::size_t j) {
    for (const std::int64_t id : wanted_) {
      if (auto r = take_rows(rebind(seek_st_.get(), ivs_[j].id, id)); !r) {
        return r;
      }
    }
    return {};
  }

  // Every row of interval j; when under 15 % were the victims', the next is a light read.
  result<void> full_read(std::size_t j) {
    rows_read_ = rows_victims_ = 0;
    if (auto r = take_rows(rebind(blame_st_.get(), ivs_[j].id)); !r) {
      return r;
    }
    sparse_ = rows_victims_ * 10 < rows_read_ * 15 / 10;
    return {};
  }

  // Few of the rows are the victims' (blame('postgres') among hundreds of threads): their
  // thread ids from the primary key alone (a light read), then their rows sought; while under
  // 30 % are the victims', the next interval is read so too.
  result<void> light_read(std::size_t j) {
    std::int64_t in_interval = 0;
    std::int64_t of_victims = 0;
    std::optional<std::int64_t> last;
    bool victim = false;
    wanted_.clear();
    auto r = each_step(db_, rebind(light_st_.get(), ivs_[j].id), [&](sqlite3_stmt *s) {
      ++in_interval;
      const std::int64_t thread = sqlite3_column_int64(s, 0);
      if (last != thread) {
        last = thread;
        auto t = thread_of(thread);
        if (!t) {
          return result<void>(t.err());
        }
        windows_of(**t, hits_);
        victim = !hits_.empty();
        if (victim) {
          wanted_.push_back(thread);
        }
      }
      of_victims += victim ? 1 : 0;
      return result<void>{};
    });
    if (!r) {
      return r;
    }
    if (auto s = seek_rows(j); !s) {
      return s;
    }
    sparse_ = of_victims * 10 < in_interval * 3;
    return {};
  }

  // A thread with sched_delay samples in the interval: its cgroup is its windows' victims'.
  result<void> take_thread(std::int64_t id) {
    auto t = thread_of(id);
    if (!t) {
      return t.err();
    }
    if ((*t)->groups.empty() || (*t)->ident.cgroup.empty()) {
      return {};
    }
    windows_of(**t, hits_);
    for (const std::uint32_t k : hits_) {
      if (!qs_[k].cgroups) {
        victim_cgroups_[k].insert((*t)->cgroup);
      }
    }
    return {};
  }

  result<void> take_threads(sqlite3_stmt *s) {
    return each_step(db_, s,
                     [&](sqlite3_stmt *row) { return take_thread(sqlite3_column_int64(row, 0)); });
  }

  // The interval's sched_delay summary (schema v12, raw tier) lists the same threads as its
  // thread_hist rows, without decoding their histograms; one that is missing or does not
  // decode leaves it to the rows.
  result<bool> take_summary(std::int64_t interval_id) {
    if (!summary_st_) {
      return false;
    }
    auto blob = interval_blob(db_, summary_st_.get(), interval_id);
    if (!blob || !*blob) {
      return blob ? result<bool>(false) : result<bool>(blob.err());
    }
    if (!store::decode_summary_into(**blob, summary_)) {
      return false;
    }
    for (const auto &e : summary_.threads) {
      if (auto r = take_thread(e.thread_id); !r) {
        return r.err();
      }
    }
    return true;
  }

  // The victims' cgroups (those of their threads with sched_delay samples in interval j,
  // pressure_of's), per window.
  result<void> read_victim_cgroups(std::size_t j, bool seek) {
    if (seek) {
      for (const std::int64_t id : wanted_) {
        if (auto r = take_threads(rebind(hist_seek_st_.get(), ivs_[j].id, id)); !r) {
          return r;
        }
      }
      return {};
    }
    auto from_summary = take_summary(ivs_[j].id);
    if (!from_summary) {
      return from_summary.err();
    }
    return *from_summary ? result<void>{} : take_threads(rebind(hist_st_.get(), ivs_[j].id));
  }

  // The culprits of each window as blame_rows hands them back (by thread and group), and as
  // blame_of sorts them: by wait and preemptions after that.
  void emit_culprits() {
    for (std::size_t k = 0; k < qs_.size(); ++k) {
      std::vector<std::pair<std::pair<std::int64_t, std::uint32_t>, blame_sums>> list;
      list.reserve(sums_[k].size());
      sums_[k].for_each([&](const auto &key, const blame_sums &b) { list.emplace_back(key, b); });
      sums_[k].clear();
      std::sort(list.begin(), list.end(), [&](const auto &x, const auto &y) {
        return x.first.first != y.first.first
                   ? x.first.first < y.first.first
                   : *group_keys_[x.first.second] < *group_keys_[y.first.second];
      });
      for (const auto &item : list) {
        culprit_sum c = culprit_of(*group_keys_[item.first.second], item.second);
        if (per_thread_) {
          out_[k].by_thread.push_back({item.first.first, std::move(c)});
        } else {
          out_[k].culprits.push_back(std::move(c));
        }
      }
      std::stable_sort(out_[k].culprits.begin(), out_[k].culprits.end(),
                       [](const culprit_sum &x, const culprit_sum &y) {
                         return x.wait_ns != y.wait_ns ? x.wait_ns > y.wait_ns
                                                       : x.preempts > y.preempts;
                       });
    }
  }

  static culprit_sum culprit_of(const culprit_group &g, const blame_sums &b) {
    culprit_sum c;
    c.kind = std::get<0>(g);
    const std::int64_t pid = std::get<1>(g);
    if (c.kind == 0 && pid != 0) { // CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 THEN 0 END
      c.pid = pid;
    } else if (c.kind == 1) {
      c.pid = 0;
    }
    c.comm = std::get<2>(g);
    c.cgroup = std::get<3>(g);
    c.wait_ns = b.wait_ns;
    c.waits = b.waits;
    c.preempts = b.preempts;
    if (b.approx) {
      c.approx_ns = b.approx_ns;
    }
    return c;
  }

  // Pressure: the cgroup_cpu rows of the same intervals, summed per window for the cgroups
  // pressure_of asks about (the victims' cgroups, their ancestors and the root).
  result<void> read_pressure() {
    std::unordered_map<std::int64_t, std::uint32_t> path_of; // cgroup.id
    {
      auto st = sqlite::prepare_stmt(db_, "SELECT id, path FROM cgroup");
      if (!st) {
        return st.err();
      }
      auto r = each_step(db_, st->get(), [&](sqlite3_stmt *s) -> result<void> {
        path_of.emplace(sqlite3_column_int64(s, 0), paths_.of(sqlite::column_text(s, 1)));
        return {};
      });
      if (!r) {
        return r;
      }
    }
    // Per cgroup, the windows that ask about it (ascending) and their sums: a row is added to
    // those of its interval's windows, not looked up in every window's cgroups (explain() asks
    // about each victim cgroup in two windows of its own: hundreds of windows).
    for (std::size_t k = 0; k < qs_.size(); ++k) {
      const auto k32 = static_cast<std::uint32_t>(k);
      ask(paths_.of("/"), k32);
      for (const std::uint32_t c : victim_cgroups_[k]) {
        const std::string path = paths_.text(c);
        for_each_level(path, [&](const std::string &level) { ask(paths_.of(level), k32); });
      }
    }
    auto cpu_st =
        sqlite::prepare_stmt(db_, "SELECT p.cgroup_id, p.throttled_ns, p.some_ns, p.periods, "
                                  "p.throttled FROM cgroup_cpu AS p WHERE p.interval_id = ?1");
    if (!cpu_st) {
      return cpu_st.err();
    }
    std::vector<std::size_t> stamp(qs_.size(), 0); // j + 1 where window k overlaps interval j
    for (std::size_t j = 0; j < ivs_.size(); ++j) {
      if (over_[j].empty()) {
        continue;
      }
      for (const std::uint32_t k : over_[j]) {
        stamp[k] = j + 1;
      }
      auto r = each_step(db_, rebind(cpu_st->get(), ivs_[j].id), [&](sqlite3_stmt *s) {
        const auto p = path_of.find(sqlite3_column_int64(s, 0));
        if (p == path_of.end()) {
          return result<void>{}; // no cgroup row: the join drops it
        }
        const auto a = asked_.find(p->second);
        if (a == asked_.end()) {
          return result<void>{};
        }
        const cgroup_row row = cgroup_row_of(s, ivs_[j].dur);
        for (auto &[k, sums] : a->second) {
          if (stamp[k] == j + 1 && !add_cgroup_row(row, ivs_[j].dur, sums)) {
            return result<void>(make_error("integer overflow"));
          }
        }
        return result<void>{};
      });
      if (!r) {
        return r;
      }
    }
    for (std::size_t k = 0; k < qs_.size(); ++k) {
      out_[k].pressure = window_pressure(static_cast<std::uint32_t>(k));
    }
    return {};
  }

  // Window k asks about cgroup `path` (k ascending per path; asked once).
  void ask(std::uint32_t path, std::uint32_t k) {
    auto &ks = asked_[path];
    if (ks.empty() || ks.back().first != k) {
      ks.emplace_back(k, cgroup_sums{});
    }
  }

  // One cgroup_cpu row: its throttled time (wall clock, throttled_wall_ns) and PSI "some".
  struct cgroup_row {
    std::optional<std::int64_t> throttled_ns, some_ns;
  };
  static cgroup_row cgroup_row_of(sqlite3_stmt *s, std::int64_t dur) {
    cgroup_row r;
    if (sqlite3_column_type(s, 1) != SQLITE_NULL) {
      r.throttled_ns = throttled_wall_ns(
          sqlite3_column_int64(s, 1), dur,
          sqlite3_column_type(s, 3) != SQLITE_NULL && sqlite3_column_type(s, 4) != SQLITE_NULL
              ? std::optional<std::pair<std::int64_t, std::int64_t>>(
                    {sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4)})
              : std::nullopt);
    }
    if (sqlite3_column_type(s, 2) != SQLITE_NULL) {
      r.some_ns = sqlite3_column_int64(s, 2);
    }
    return r;
  }

  // A row of an interval of `dur` ns added to one window's sums of its cgroup; false on
  // overflow.
  static bool add_cgroup_row(const cgroup_row &row, std::int64_t dur, cgroup_sums &c) {
    bool ok = true;
    if (row.throttled_ns) {
      if (!c.throttled_ns) {
        c.throttled_ns = 0;
      }
      ok = add_to(*c.throttled_ns, *row.throttled_ns);
    }
    if (row.some_ns) {
      ok = ok && add_to(c.some_ns, *row.some_ns) && add_to(c.some_dur, dur);
    }
    return ok;
  }

  // Window k's sums of cgroup `path`; none when it did not ask about it.
  const cgroup_sums *sums_of(std::uint32_t path, std::uint32_t k) const {
    const auto a = asked_.find(path);
    if (a == asked_.end()) {
      return nullptr;
    }
    const auto it = std::lower_bound(a->second.begin(), a->second.end(), k,
                                     [](const std::pair<std::uint32_t, cgroup_sums> &x,
                                        std::uint32_t key) { return x.first < key; });
    return it != a->second.end() && it->first == k ? &it->second : nullptr;
  }

  // pressure_of's answer for one window from its cgroups' sums.
  // pressure_of's answer for window k from its cgroups' sums.
  pressure_sum window_pressure(std::uint32_t k) {
    std::set<std::string> cgroups;
    for (const std::uint32_t c : victim_cgroups_[k]) {
      cgroups.insert(paths_.text(c));
    }
    return combine_pressure(cgroups, [&](const std::string &path,
                                         std::optional<std::int64_t> &throttled,
                                         std::optional<double> &some) {
      const cgroup_sums *c = sums_of(paths_.of(path), k);
      if (c == nullptr) {
        return;
      }
      throttled = c->throttled_ns;
      if (c->some_dur > 0) {
        some = 100.0 * static_cast<double>(c->some_ns) / static_cast<double>(c->some_dur);
      }
    });
  }

  sqlite3 *db_;
  const std::vector<window_query> &qs_;
  bool blame_, pressure_, per_thread_;
  const std::unordered_set<std::int64_t> *only_;
  base::flat_map<std::int64_t, bool> only_set_;
  inversion_sink *inversions_;
  inversion_sums inversion_sums_;
  std::vector<window_causes> out_;
  // Plan.
  std::vector<interval_info> ivs_;
  std::vector<std::vector<std::uint32_t>> over_; // per interval: the windows it overlaps
  std::vector<victim> by_sql_;
  std::vector<victim_group> groups_;
  std::vector<std::uint32_t> group_of_window_;
  // Statements.
  bool packed_ = false;
  const char *row_table_ = "thread_blame";
  const char *approx_col_ = "NULL";
  sqlite::stmt_ptr ident_st_, blame_st_, culprit_st_, hist_st_, pack_st_, summary_st_;
  sqlite::stmt_ptr seek_st_, hist_seek_st_, ids_st_, light_st_;
  // Looked up once.
  interned paths_;
  std::unordered_map<std::int64_t, thread_entry> threads_;
  std::map<culprit_group, std::uint32_t> group_index_;
  std::vector<const culprit_group *> group_keys_;
  std::unordered_map<std::int64_t, std::optional<std::uint32_t>> culprit_of_; // culprit.id
  std::vector<std::int64_t> culprit_dense_; // the same for small ids, by id
  std::map<std::pair<std::string, std::int64_t>, std::vector<std::int64_t>> ids_of_tid_;
  // The sums.
  std::vector<window_sums> sums_;
  std::vector<std::set<std::uint32_t>> victim_cgroups_; // interned paths, per window
  // Per cgroup (interned path): the windows that ask about it, ascending, and their sums.
  std::unordered_map<std::uint32_t, std::vector<std::pair<std::uint32_t, cgroup_sums>>> asked_;
  // The interval being read.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ovg_; // (group, window), ascending
  std::vector<std::uint32_t> hits_;
  std::vector<std::int64_t> wanted_; // the thread ids sought in this interval
  store::interval_summary summary_;  // an interval's, its memory reused
  std::int64_t rows_read_ = 0, rows_victims_ = 0;
  // Whether the victims' rows were few in the last interval read whole (or by the light read):
  // then the next is read by the light read and seeks.
  bool sparse_ = false;
  // Some window's victims' cgroups are to be read from the threads with samples.
  bool read_cgroups_ = false;
};

} // namespace

result<std::vector<window_causes>> causes_of(sqlite3 *db, const std::vector<window_query> &qs,
                                             bool blame, bool pressure, bool per_thread,
                                             const std::unordered_set<std::int64_t> *only,
                                             inversion_sink *inversions) {
  return window_reader(db, qs, blame, pressure, per_thread, only, inversions).run();
}

namespace {
// The blame rows of raw intervals overlapping [a, b) that can be priority inversions (what
// store::priority_inversion can accept: a raised fair-class waiter behind a real-time or
// deadline task), with `extra_where` (victims' conditions from ?3 on) and `columns` first.
std::string inversion_rows_sql(sqlite3 *db, std::int64_t a, const std::string &columns,
                               const std::string &extra_where, const std::string &order) {
  return fmt::format("SELECT {}, b.waiter_policy, b.waiter_prio, b.policy, b.prio, b.wait_ns "
                     "FROM intervals AS i CROSS JOIN thread_blame AS "
                     "b ON b.interval_id = i.id CROSS JOIN thread AS t ON t.id = b.thread_id JOIN "
                     "culprit AS c ON c.id = b.culprit_id WHERE i.tier = 0 AND {} AND c.kind = "
                     "0 AND b.wait_ns > 0 AND b.policy IN (1, 2, 6) AND b.waiter_policy NOT IN "
                     "(1, 2, 5, 6) AND b.waiter_prio < 120 AND b.prio IS NOT NULL AND {}{}",
                     columns, overlaps(db, "i", a), extra_where, order);
}
} // namespace

namespace {

// inverted_waits() where the raw tier's blame is packed (schema v13): each raw interval's pack
// decoded here (and its other rows, written before v13, read from thread_blame_row with the same
// conditions), the priority conditions checked on the entry before anything is looked up, and a
// thread's victim check and a culprit's identity looked up once. The thread_blame table read
// every entry of the window through SQL to keep a few.
class inversion_reader {
public:
  inversion_reader(sqlite3 *db, const victims &v, inversion_sums &sums)
      : db_(db), v_(v), sums_(sums) {}

  result<void> run(std::int64_t a, std::int64_t b) {
    auto ivs = sqlite::prepare_stmt(
        db_, fmt::format("SELECT i.id FROM intervals AS i WHERE i.tier = 0 AND {} ORDER BY "
                         "i.start_ns, i.id",
                         overlaps(db_, "i", a)));
    if (!ivs) {
      return ivs.err();
    }
    if (auto r = prepare(); !r) {
      return r;
    }
    sqlite3_bind_int64(ivs->get(), 1, a);
    sqlite3_bind_int64(ivs->get(), 2, b);
    return each_step(db_, ivs->get(), [&](sqlite3_stmt *s) {
      const std::int64_t id = sqlite3_column_int64(s, 0);
      auto r = take_pack(id);
      return r ? take_rows(id) : r;
    });
  }

private:
  result<void> prepare() {
    auto pack =
        sqlite::prepare_stmt(db_, "SELECT data FROM thread_blame_pack WHERE interval_id = ?1");
    auto rows = sqlite::prepare_stmt(
        db_, "SELECT thread_id, culprit_id, wait_ns, policy, prio, waiter_policy, waiter_prio FROM "
             "thread_blame_row WHERE interval_id = ?1 AND wait_ns > 0 AND policy IN (1, 2, 6) AND "
             "waiter_policy NOT IN (1, 2, 5, 6) AND waiter_prio < 120 AND prio IS NOT NULL");
    auto victim_st = sqlite::prepare_stmt(
        db_, fmt::format("SELECT 1 FROM thread AS t WHERE t.id = ?1 AND {}", victims_sql(v_, 2)));
    auto culprit_st =
        sqlite::prepare_stmt(db_, "SELECT kind, pid, comm, cgroup FROM culprit WHERE id = ?1");
    for (auto *st : {&pack, &rows, &victim_st, &culprit_st}) {
      if (!*st) {
        return st->err();
      }
    }
    pack_st_ = std::move(*pack);
    rows_st_ = std::move(*rows);
    victim_st_ = std::move(*victim_st);
    culprit_st_ = std::move(*culprit_st);
    bind_victims(victim_st_.get(), v_, 2);
    return {};
  }

  result<bool> is_victim(std::int64_t id) {
    auto [it, fresh] = victim_of_.try_emplace(id, false);
    if (fresh) {
      const int rc = sqlite3_step(rebind(victim_st_.get(), id));
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db_));
      }
      it->second = rc == SQLITE_ROW;
    }
    return it->second;
  }

  struct culprit_ident {
    bool process = false; // culprit.kind 0
    std::int64_t pid = 0;
    std::string comm, cgroup;
  };

  result<const std::optional<culprit_ident> *> culprit_of(std::int64_t id) {
    auto [it, fresh] = culprits_.try_emplace(id);
    if (fresh) {
      sqlite3_stmt *q = rebind(culprit_st_.get(), id);
      const int rc = sqlite3_step(q);
      if (rc == SQLITE_ROW) {
        it->second = culprit_ident{sqlite3_column_int64(q, 0) == 0, sqlite3_column_int64(q, 1),
                                   sqlite::column_text(q, 2), sqlite::column_text(q, 3)};
      } else if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db_));
      }
    }
    return &it->second;
  }

  // One row that passed the priority conditions (SQL's, then store::priority_inversion's).
  result<void> take(std::int64_t thread, std::int64_t culprit, std::int64_t wait_ns, int by_policy,
                    int by_prio, int policy, int prio) {
    if (!store::priority_inversion(policy, prio, by_policy, by_prio)) {
      return {};
    }
    auto victim = is_victim(thread);
    if (!victim || !*victim) {
      return victim ? result<void>{} : result<void>(victim.err());
    }
    auto c = culprit_of(culprit);
    if (!c) {
      return c.err();
    }
    if (!**c || !(**c)->process) {
      return {};
    }
    const culprit_ident &ci = ***c;
    inverted_wait w{thread, ci.pid, ci.comm, ci.cgroup, 0, policy, prio, by_policy, by_prio};
    auto [it, fresh] = sums_.try_emplace({thread, ci.pid, ci.comm, ci.cgroup}, w);
    it->second.wait_ns += wait_ns;
    // The latest row's scheduling.
    it->second.policy = policy;
    it->second.prio = prio;
    it->second.by_policy = by_policy;
    it->second.by_prio = by_prio;
    return {};
  }

  // Interval `id`'s pack, if it has one.
  result<void> take_pack(std::int64_t id) {
    auto blob = interval_blob(db_, pack_st_.get(), id);
    if (!blob || !*blob) {
      return blob ? result<void>{} : result<void>(blob.err());
    }
    store::blame_cursor cursor;
    auto opened = cursor.open(**blob);
    store::blame_entry e;
    for (;;) {
      auto more = opened ? cursor.next(e) : result<bool>(opened.err());
      if (!more) {
        return make_error(fmt::format("thread_blame_pack interval {}: {}", id, more.err().msg));
      }
      if (!*more) {
        return {};
      }
      if (!may_be_inversion(e)) {
        continue;
      }
      // sqlite3_column_int's conversion, as the SQL path reads them.
      const auto &[cpu, policy, prio, waiter_policy, waiter_prio] = e.sched;
      if (auto r = take(e.thread_id, e.culprit_id, e.wait_ns, static_cast<int>(*policy),
                        static_cast<int>(*prio), static_cast<int>(*waiter_policy),
                        static_cast<int>(*waiter_prio));
          !r) {
        return r;
      }
    }
  }

  // Interval `id`'s rows written before v13 (thread_blame_row).
  result<void> take_rows(std::int64_t id) {
    return each_step(db_, rebind(rows_st_.get(), id), [&](sqlite3_stmt *rs) {
      return take(sqlite3_column_int64(rs, 0), sqlite3_column_int64(rs, 1),
                  sqlite3_column_int64(rs, 2), sqlite3_column_int(rs, 3), sqlite3_column_int(rs, 4),
                  sqlite3_column_int(rs, 5), sqlite3_column_int(rs, 6));
    });
  }

  sqlite3 *db_;
  const victims &v_;
  inversion_sums &sums_;
  sqlite::stmt_ptr pack_st_, rows_st_, victim_st_, culprit_st_;
  std::unordered_map<std::int64_t, bool> victim_of_;
  std::unordered_map<std::int64_t, std::optional<culprit_ident>> culprits_;
};

result<void> inverted_waits_packed(sqlite3 *db, const victims &v, std::int64_t a, std::int64_t b,
                                   inversion_sums &sums) {
  return inversion_reader(db, v, sums).run(a, b);
}

} // namespace

result<std::vector<inverted_wait>> inverted_waits(sqlite3 *db, const victims &v, std::int64_t a,
                                                  std::int64_t b) {
  std::vector<inverted_wait> out;
  if (!has_table(db, "thread_blame") || !has_column(db, "thread_blame", "waiter_prio")) {
    return out;
  }
  if (has_table(db, "thread_blame_pack")) {
    std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::string>, inverted_wait> sums;
    if (auto r = inverted_waits_packed(db, v, a, b, sums); !r) {
      return r.err();
    }
    for (auto &kv : sums) {
      out.push_back(std::move(kv.second));
    }
    return out;
  }
  auto st = prepare_window(
      db, inversion_rows_sql(db, a, "b.thread_id, c.pid, c.comm, c.cgroup", victims_sql(v, 3), ""),
      a, b, v);
  if (!st) {
    return st.err();
  }
  std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::string>, inverted_wait> sums;
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt *s = st->get();
    const int policy = sqlite3_column_int(s, 4);
    const int prio = sqlite3_column_int(s, 5);
    const int by_policy = sqlite3_column_int(s, 6);
    const int by_prio = sqlite3_column_int(s, 7);
    if (!store::priority_inversion(policy, prio, by_policy, by_prio)) {
      continue;
    }
    inverted_wait w{sqlite3_column_int64(s, 0),
                    sqlite3_column_int64(s, 1),
                    sqlite::column_text(s, 2),
                    sqlite::column_text(s, 3),
                    0,
                    policy,
                    prio,
                    by_policy,
                    by_prio};
    auto [it, fresh] = sums.try_emplace({w.thread_id, w.culprit_pid, w.comm, w.cgroup}, w);
    it->second.wait_ns += sqlite3_column_int64(s, 8);
    // The latest row's scheduling.
    it->second.policy = policy;
    it->second.prio = prio;
    it->second.by_policy = by_policy;
    it->second.by_prio = by_prio;
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  for (auto &kv : sums) {
    out.push_back(std::move(kv.second));
  }
  return out;
}

// inversions([start, end, min_wait]): the raw intervals' blame rows that are priority
// inversions (store::priority_inversion), per waiting thread and culprit process, run together
// into episodes: an episode goes on while the pair's next such interval starts within one
// interval length of the previous one's end. Episodes whose summed wait is below min_wait are
// left out. Rollup rows keep no priorities (they are per comm): only raw intervals are read.
} // namespace rsched::query::detail
