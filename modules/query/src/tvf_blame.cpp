// blame(victim, [start, end]) and what spikes() takes from it: the victim pattern, the blame,
// throttling and pressure of a window, and the one-line cause.
#include "tvf_blame.hpp"

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
#include <charconv>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sqlite3.h>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::query::detail {

bool has_table(sqlite3 *db, const char *name) {
  auto st =
      sqlite::prepare_stmt(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1");
  if (!st) {
    return false;
  }
  sqlite3_bind_text(st->get(), 1, name, -1, SQLITE_STATIC);
  return sqlite3_step(st->get()) == SQLITE_ROW;
}

bool has_column(sqlite3 *db, const char *table, const char *column) {
  auto st = sqlite::prepare_stmt(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2");
  if (!st) {
    return false;
  }
  sqlite3_bind_text(st->get(), 1, table, -1, SQLITE_STATIC);
  sqlite3_bind_text(st->get(), 2, column, -1, SQLITE_STATIC);
  return sqlite3_step(st->get()) == SQLITE_ROW;
}

namespace {

bool has_glob(std::string_view s) {
  return s.find_first_of("*?[") != std::string_view::npos;
}

std::optional<std::string_view> text_arg(sqlite3_value *v) {
  if (v == nullptr || sqlite3_value_type(v) == SQLITE_NULL) {
    return std::nullopt;
  }
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  return std::string_view(p != nullptr ? p : "", static_cast<std::size_t>(sqlite3_value_bytes(v)));
}

// Prepares `sql`, whose ?1 and ?2 are a window [a, b) and ?3... the conditions of `vs`.
result<sqlite::stmt_ptr> prepare_window(sqlite3 *db, const std::string &sql, std::int64_t a,
                                        std::int64_t b, const victims &vs) {
  auto st = sqlite::prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  bind_victims(st->get(), vs, 3);
  return st;
}

} // namespace

result<void> each_row(sqlite3 *db, const std::string &sql, std::int64_t a, std::int64_t b,
                      const victims &vs, const std::function<void(sqlite3_stmt *)> &on_row) {
  auto st = prepare_window(db, sql, a, b, vs);
  if (!st) {
    return st.err();
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    on_row(st->get());
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
}

std::string victim::sql(int param) const {
  switch (what) {
  case kind::all:
    return "1";
  case kind::comm:
    return fmt::format("t.comm {} ?{}", glob ? "GLOB" : "=", param);
  case kind::cgroup:
    // A cgroup without wildcards takes its descendants too.
    if (!glob && !descendants) {
      return fmt::format("t.cgroup = ?{}", param);
    }
    return glob ? fmt::format("t.cgroup GLOB ?{}", param)
                : fmt::format("(t.cgroup = ?{0} OR substr(t.cgroup, 1, length(?{0}) + 1) = "
                              "?{0} || '/')",
                              param);
  case kind::pid:
    return fmt::format("t.pid = ?{}", param);
  case kind::tid:
    return fmt::format("t.tid = ?{}", param);
  case kind::service:
    return fmt::format("{}(?{}, t.comm, t.cgroup)", in_service_function, param);
  }
  return "1";
}

void victim::bind(sqlite3_stmt *st, int param) const {
  switch (what) {
  case kind::all:
    break;
  case kind::comm:
  case kind::cgroup:
    sqlite3_bind_text(st, param, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
    break;
  case kind::pid:
  case kind::tid:
    sqlite3_bind_int64(st, param, number);
    break;
  case kind::service:
    // A pointer only rsched_in_service reads (SQLite's pointer passing: SQL cannot forge one).
    sqlite3_bind_pointer(st, param, const_cast<service_rule *>(service.get()),
                         service_rule_pointer_type, nullptr);
    break;
  }
}

bool victim::matches(std::string_view comm, std::string_view cgroup) const {
  const auto glob_match = [](const std::string &pattern, std::string_view s) {
    return sqlite3_strglob(pattern.c_str(), std::string(s).c_str()) == 0;
  };
  switch (what) {
  case kind::all:
    return true;
  case kind::comm:
    return glob ? glob_match(text, comm) : comm == text;
  case kind::cgroup:
    if (glob) {
      return glob_match(text, cgroup);
    }
    // sql(): the cgroup, or (descendants) a path under it
    return cgroup == text || (descendants && cgroup.size() > text.size() &&
                              cgroup.starts_with(text) && cgroup[text.size()] == '/');
  case kind::pid:
  case kind::tid:
    return false;
  case kind::service:
    return service != nullptr && service->matches(comm, cgroup);
  }
  return false;
}

std::string victim::describe() const {
  switch (what) {
  case kind::all:
    return "all threads";
  case kind::comm:
    return "comm " + text;
  case kind::cgroup:
    return "cgroup " + text;
  case kind::pid:
    return fmt::format("pid {}", number);
  case kind::tid:
    return fmt::format("tid {}", number);
  case kind::service:
    return service ? service->describe() : std::string("no service");
  }
  return {};
}

std::string victims_sql(const victims &vs, int first) {
  std::string out = "1";
  for (std::size_t i = 0; i < vs.size(); ++i) {
    out += " AND " + vs[i].sql(first + static_cast<int>(i));
  }
  return out;
}

void bind_victims(sqlite3_stmt *st, const victims &vs, int first) {
  for (std::size_t i = 0; i < vs.size(); ++i) {
    vs[i].bind(st, first + static_cast<int>(i));
  }
}

result<victim> parse_victim(std::optional<std::string_view> in, const char *fn) {
  victim v;
  if (!in || in->empty()) {
    return v;
  }
  std::string_view s = *in;
  const auto prefixed = [&](std::string_view p) {
    if (s.substr(0, p.size()) == p) {
      s.remove_prefix(p.size());
      return true;
    }
    return false;
  };
  if (prefixed("pid:") || prefixed("tid:")) {
    v.what = in->substr(0, 4) == "pid:" ? victim::kind::pid : victim::kind::tid;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v.number);
    if (ec != std::errc() || p != s.data() + s.size() || v.number <= 0) {
      return make_error(
          fmt::format("{}: '{}' needs a process or thread id", fn, text::escape_for_terminal(*in)));
    }
    return v;
  }
  if (prefixed("cgroup:")) {
    v.what = victim::kind::cgroup;
    while (s.size() > 1 && s.back() == '/') {
      s.remove_suffix(1);
    }
  } else {
    (void)prefixed("comm:");
    v.what = victim::kind::comm;
  }
  if (s.empty()) {
    return make_error(
        fmt::format("{}: empty victim pattern '{}' (a comm, comm:GLOB, cgroup:PATH, pid:N or "
                    "tid:N)",
                    fn, text::escape_for_terminal(*in)));
  }
  v.text = std::string(s);
  v.glob = has_glob(s);
  return v;
}

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

result<std::vector<window_causes>> causes_of(sqlite3 *db, const std::vector<window_query> &qs,
                                             bool blame, bool pressure, bool per_thread,
                                             const std::unordered_set<std::int64_t> *only) {
  std::vector<window_causes> out(qs.size());
  blame = blame && has_table(db, "thread_blame");
  pressure = pressure && has_table(db, "cgroup_cpu");
  if (qs.empty() || (!blame && !pressure)) {
    return out;
  }
  // The intervals overlapping any window, and per interval the windows it overlaps (ascending).
  std::int64_t lo = std::numeric_limits<std::int64_t>::max();
  std::int64_t hi = std::numeric_limits<std::int64_t>::min();
  for (const auto &q : qs) {
    lo = std::min(lo, q.a);
    hi = std::max(hi, q.b);
  }
  auto ivs = intervals_in(db, lo, hi);
  if (!ivs) {
    return ivs.err();
  }
  std::int64_t longest = 0;
  for (const auto &iv : *ivs) {
    longest = std::max(longest, iv.dur);
  }
  std::vector<std::vector<std::uint32_t>> over(ivs->size());
  for (std::size_t k = 0; k < qs.size(); ++k) {
    const auto &q = qs[k];
    // An interval overlapping [a, b) starts after a minus its length.
    const std::int64_t from =
        q.a < std::numeric_limits<std::int64_t>::min() + longest ? q.a : q.a - longest;
    auto j = std::partition_point(ivs->begin(), ivs->end(),
                                  [&](const interval_info &iv) { return iv.start <= from; });
    for (; j != ivs->end() && j->start < q.b; ++j) {
      if (j->start + j->dur > q.a) { // overlaps(): start < b AND start + dur > a
        over[static_cast<std::size_t>(j - ivs->begin())].push_back(static_cast<std::uint32_t>(k));
      }
    }
  }
  // The windows' victim conditions: the plain ones checked here, the others by SQL once per
  // thread (a column each of the identity query); windows with the same victims share a group.
  std::vector<victim> by_sql;
  const auto sql_index = [&](const victim &v) {
    for (std::size_t i = 0; i < by_sql.size(); ++i) {
      const victim &x = by_sql[i];
      if (x.what == v.what && x.text == v.text && x.glob == v.glob &&
          x.descendants == v.descendants) {
        return i;
      }
    }
    by_sql.push_back(v);
    return by_sql.size() - 1;
  };
  struct check {
    const victim *v; // plain: checked here
    std::size_t sql; // else: the identity query's column 4 + sql
  };
  struct victim_group {
    std::vector<check> checks;
  };
  std::vector<victim_group> groups;
  std::vector<std::uint32_t> group_of_window(qs.size());
  {
    std::map<std::vector<std::tuple<int, std::string, std::int64_t, bool, bool>>, std::size_t>
        group_of;
    for (std::size_t k = 0; k < qs.size(); ++k) {
      std::vector<std::tuple<int, std::string, std::int64_t, bool, bool>> sig;
      for (const auto &v : qs[k].who) {
        sig.emplace_back(static_cast<int>(v.what), v.text, v.number, v.glob, v.descendants);
      }
      auto [it, fresh] = group_of.try_emplace(std::move(sig), groups.size());
      if (fresh) {
        victim_group g;
        for (const auto &v : qs[k].who) {
          g.checks.push_back(plain(v) ? check{&v, 0} : check{nullptr, sql_index(v)});
        }
        groups.push_back(std::move(g));
      }
      group_of_window[k] = static_cast<std::uint32_t>(it->second);
    }
  }
  std::string ident_sql = "SELECT t.tid, t.pid, t.comm, t.cgroup";
  for (std::size_t i = 0; i < by_sql.size(); ++i) {
    ident_sql += ", (" + by_sql[i].sql(static_cast<int>(i) + 2) + ")";
  }
  ident_sql += " FROM thread AS t WHERE t.id = ?1";
  auto ident_st = sqlite::prepare_stmt(db, ident_sql);
  if (!ident_st) {
    return ident_st.err();
  }
  for (std::size_t i = 0; i < by_sql.size(); ++i) {
    by_sql[i].bind(ident_st->get(), static_cast<int>(i) + 2);
  }
  // Per thread (thread.id), looked up once: its identity and the victim groups it is in.
  struct thread_entry {
    thread_ident ident;
    std::uint32_t cgroup = 0;          // interned
    std::vector<std::uint32_t> groups; // ascending
  };
  interned paths;
  std::unordered_map<std::int64_t, thread_entry> threads;
  const auto thread_of = [&](std::int64_t id) -> result<const thread_entry *> {
    auto [it, fresh] = threads.try_emplace(id);
    if (!fresh) {
      return &it->second;
    }
    thread_entry &e = it->second;
    sqlite3_stmt *s = ident_st->get();
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, id);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
      return &e; // no identity: not a victim of any window
    }
    if (rc != SQLITE_ROW) {
      return make_error(sqlite3_errmsg(db));
    }
    e.ident = {true, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
               sqlite::column_text(s, 2), sqlite::column_text(s, 3)};
    e.cgroup = paths.of(e.ident.cgroup);
    for (std::size_t gi = 0; gi < groups.size(); ++gi) {
      const auto &checks = groups[gi].checks;
      if (std::all_of(checks.begin(), checks.end(), [&](const check &c) {
            return c.v != nullptr ? plain_match(*c.v, e.ident)
                                  : sqlite3_column_int64(s, static_cast<int>(c.sql) + 4) != 0;
          })) {
        e.groups.push_back(static_cast<std::uint32_t>(gi));
      }
    }
    return &e;
  };
  // The blame rows, per window and culprit group; the victims' cgroups (those of their threads
  // with sched_delay samples in the window, pressure_of's), per window.
  std::map<culprit_group, std::uint32_t> group_index;
  std::vector<const culprit_group *> group_keys;
  std::unordered_map<std::int64_t, std::optional<std::uint32_t>> culprit_of; // culprit.id
  // Per window: (victim thread, 0 unless per_thread; culprit group) -> sums.
  struct key_hash {
    std::size_t operator()(const std::pair<std::int64_t, std::uint32_t> &k) const {
      return std::hash<std::int64_t>()(k.first) * 31 + k.second;
    }
  };
  std::vector<std::unordered_map<std::pair<std::int64_t, std::uint32_t>, blame_sums, key_hash>>
      sums(qs.size());
  std::vector<std::set<std::uint32_t>> victim_cgroups(qs.size());
  sqlite::stmt_ptr blame_st, culprit_st, hist_st, pack_st, summary_st;
  store::interval_summary summary; // an interval's, its memory reused
  // Schema v13: the raw tier's rows are packed, one blob per interval (blame_pack.hpp), decoded
  // here straight from thread_blame_pack; the rest (rollups, raw rows written before) are
  // thread_blame_row's. Before v13 every row is thread_blame's.
  const bool packed = blame && has_table(db, "thread_blame_pack");
  const char *row_table = packed ? "thread_blame_row" : "thread_blame";
  const char *approx_col =
      blame && has_column(db, "thread_blame", "approx_ns") ? "x.approx_ns" : "NULL";
  if (packed) {
    auto st = sqlite::prepare_stmt(db, "SELECT data FROM thread_blame_pack WHERE interval_id = ?1");
    if (!st) {
      return st.err();
    }
    pack_st = std::move(*st);
  }
  if (blame) {
    auto st = sqlite::prepare_stmt(
        db, fmt::format("SELECT x.thread_id, x.culprit_id, x.wait_ns, x.waits, x.preempts, {} "
                        "FROM {} AS x WHERE x.interval_id = ?1",
                        approx_col, row_table));
    auto cst =
        sqlite::prepare_stmt(db, "SELECT kind, pid, comm, cgroup FROM culprit WHERE id = ?1");
    if (!st || !cst) {
      return !st ? st.err() : cst.err();
    }
    blame_st = std::move(*st);
    culprit_st = std::move(*cst);
  }
  if (pressure) {
    auto st = sqlite::prepare_stmt(
        db, "SELECT h.thread_id FROM thread_hist AS h WHERE h.interval_id = ?1 AND h.metric = 1");
    if (!st) {
      return st.err();
    }
    hist_st = std::move(*st);
    if (has_table(db, "hist_summary")) {
      auto sst = sqlite::prepare_stmt(
          db, "SELECT data FROM hist_summary WHERE interval_id = ?1 AND metric = 1");
      if (!sst) {
        return sst.err();
      }
      summary_st = std::move(*sst);
    }
  }
  const auto culprit_group_of = [&](std::int64_t id) -> result<std::optional<std::uint32_t>> {
    auto [it, fresh] = culprit_of.try_emplace(id);
    if (fresh) {
      sqlite3_stmt *s = culprit_st.get();
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, id);
      const int rc = sqlite3_step(s);
      if (rc == SQLITE_ROW) {
        culprit_group key{sqlite3_column_int(s, 0), sqlite3_column_int64(s, 1),
                          sqlite::column_text(s, 2), sqlite::column_text(s, 3)};
        auto [g, added] =
            group_index.try_emplace(std::move(key), static_cast<std::uint32_t>(group_keys.size()));
        if (added) {
          group_keys.push_back(&g->first);
        }
        it->second = g->second;
      } else if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db));
      }
    }
    return it->second;
  };
  std::vector<std::pair<std::uint32_t, std::uint32_t>> ovg; // (group, window), ascending
  // The windows of interval j whose victim thread `t` is: those of its groups.
  const auto windows_of = [&](const thread_entry &t, std::vector<std::uint32_t> &hits) {
    hits.clear();
    for (const std::uint32_t g : t.groups) {
      auto it = std::lower_bound(ovg.begin(), ovg.end(), std::make_pair(g, std::uint32_t{0}));
      for (; it != ovg.end() && it->first == g; ++it) {
        hits.push_back(it->second);
      }
    }
  };
  // A window whose victims are one thread id (tid:N, N > 0) needs only that thread's rows: in
  // an interval whose windows all have one, its identities' rows are sought by
  // (interval_id, thread_id) instead of reading every row of the interval (a spike of one
  // thread an hour long, blame('tid:N') of a day: all the others' rows, read for nothing).
  // Its identities: the thread rows of the interval's boot with that tid (the writer gives a
  // raw interval's rows identities of its boot; a rollup's have tid 0 and never match).
  std::vector<std::optional<std::int64_t>> tid_of_group(groups.size());
  for (std::size_t gi = 0; gi < groups.size(); ++gi) {
    for (const check &c : groups[gi].checks) {
      if (c.v != nullptr && c.v->what == victim::kind::tid && c.v->number > 0) {
        tid_of_group[gi] = c.v->number;
      }
    }
  }
  sqlite::stmt_ptr seek_st, hist_seek_st, ids_st, light_st;
  std::map<std::pair<std::string, std::int64_t>, std::vector<std::int64_t>> ids_of_tid;
  const auto ids_of = [&](const std::string &boot,
                          std::int64_t tid) -> result<const std::vector<std::int64_t> *> {
    auto [it, fresh] = ids_of_tid.try_emplace({boot, tid});
    if (fresh) {
      if (!ids_st) {
        auto st = sqlite::prepare_stmt(db, "SELECT id FROM thread WHERE boot_id = ?1 AND tid = ?2");
        if (!st) {
          return st.err();
        }
        ids_st = std::move(*st);
      }
      sqlite3_stmt *st = ids_st.get();
      sqlite3_reset(st);
      sqlite3_bind_text(st, 1, boot.data(), static_cast<int>(boot.size()), SQLITE_TRANSIENT);
      sqlite3_bind_int64(st, 2, tid);
      int rc = 0;
      while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        it->second.push_back(sqlite3_column_int64(st, 0));
      }
      if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db));
      }
    }
    return &it->second;
  };
  std::vector<std::uint32_t> hits;
  // Adds the blame rows `s` steps through (by thread, as the primary key hands them back) to
  // the windows of their victim threads.
  std::int64_t rows_read = 0;    // by take_rows: rows
  std::int64_t rows_victims = 0; // and those of victim threads
  // One row: added to the windows of its victim thread. `last` is the thread of the row before
  // (rows come by thread: a thread's windows are found once).
  const auto add_row = [&](std::optional<std::int64_t> &last, std::int64_t thread,
                           std::int64_t culprit, std::int64_t wait, std::int64_t waits,
                           std::int64_t preempts, bool has_approx,
                           std::int64_t approx) -> result<void> {
    ++rows_read;
    if (last != thread) {
      last = thread;
      auto t = thread_of(thread);
      if (!t) {
        return t.err();
      }
      windows_of(**t, hits);
      if (only != nullptr && !only->contains(thread)) {
        hits.clear();
      }
    }
    if (hits.empty()) {
      return {};
    }
    ++rows_victims;
    auto g = culprit_group_of(culprit);
    if (!g) {
      return g.err();
    }
    if (!*g) {
      return {}; // no culprit row: the join drops it
    }
    bool ok = true;
    for (const std::uint32_t k : hits) {
      blame_sums &b = sums[k][{per_thread ? thread : 0, **g}];
      ok = ok && add_to(b.wait_ns, wait) && add_to(b.waits, waits) &&
           add_to(b.preempts, preempts) && (!has_approx || add_to(b.approx_ns, approx));
      b.approx = b.approx || has_approx;
    }
    if (!ok) {
      return make_error("integer overflow");
    }
    return {};
  };
  const auto take_rows = [&](sqlite3_stmt *s) -> result<void> {
    std::optional<std::int64_t> last;
    hits.clear();
    int rc = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      if (auto r = add_row(last, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
                           sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3),
                           sqlite3_column_int64(s, 4), sqlite3_column_type(s, 5) != SQLITE_NULL,
                           sqlite3_column_int64(s, 5));
          !r) {
        return r;
      }
    }
    if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
    return {};
  };
  // The interval's pack (schema v13), every entry through add_row.
  std::vector<store::blame_entry> entries;
  // True when the interval has a pack: then it has no rows (the writer puts a raw interval's
  // rows in its pack from schema 13; rollups and older raw intervals have rows and no pack).
  const auto take_pack = [&](std::int64_t interval_id) -> result<bool> {
    sqlite3_stmt *s = pack_st.get();
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, interval_id);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_DONE) {
      return false;
    }
    if (rc != SQLITE_ROW) {
      return make_error(sqlite3_errmsg(db));
    }
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(s, 0));
    const auto n = static_cast<std::size_t>(sqlite3_column_bytes(s, 0));
    if (auto r = store::unpack_blame(std::span<const std::uint8_t>(p, n), entries); !r) {
      return make_error(fmt::format("thread_blame_pack interval {}: {}", interval_id, r.err().msg));
    }
    std::optional<std::int64_t> last;
    hits.clear();
    for (const auto &e : entries) {
      if (auto r = add_row(last, e.thread_id, e.culprit_id, e.wait_ns, e.waits, e.preempts,
                           e.approx_ns.has_value(), e.approx_ns.value_or(0));
          !r) {
        return r.err();
      }
    }
    return true;
  };
  std::vector<std::int64_t> wanted; // the thread ids sought in this interval
  // The rows of the `wanted` threads of interval j, sought by (interval_id, thread_id).
  const auto seek_rows = [&](std::size_t j) -> result<void> {
    if (!seek_st) {
      auto st = sqlite::prepare_stmt(
          db, fmt::format("SELECT x.thread_id, x.culprit_id, x.wait_ns, x.waits, x.preempts, "
                          "{} FROM {} AS x WHERE x.interval_id = ?1 AND x.thread_id = ?2",
                          approx_col, row_table));
      if (!st) {
        return st.err();
      }
      seek_st = std::move(*st);
    }
    for (const std::int64_t id : wanted) {
      sqlite3_stmt *s = seek_st.get();
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, (*ivs)[j].id);
      sqlite3_bind_int64(s, 2, id);
      if (auto r = take_rows(s); !r) {
        return r.err();
      }
    }
    return {};
  };
  // Whether the victims' rows were few in the last interval read whole (or by the light read):
  // then the next is read by the light read and seeks.
  bool sparse = false;
  for (std::size_t j = 0; j < ivs->size(); ++j) {
    const auto &ov = over[j];
    if (ov.empty()) {
      continue;
    }
    ovg.clear();
    for (const std::uint32_t k : ov) {
      ovg.emplace_back(group_of_window[k], k);
    }
    std::sort(ovg.begin(), ovg.end());
    bool seek = true;
    wanted.clear();
    for (const auto &[g, k] : ovg) {
      if (!tid_of_group[g]) {
        seek = false;
        break;
      }
      auto ids = ids_of((*ivs)[j].boot, *tid_of_group[g]);
      if (!ids) {
        return ids.err();
      }
      wanted.insert(wanted.end(), (*ids)->begin(), (*ids)->end());
    }
    if (seek) {
      std::sort(wanted.begin(), wanted.end());
      wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    }
    bool had_pack = false;
    if (packed) {
      auto r = take_pack((*ivs)[j].id);
      if (!r) {
        return r.err();
      }
      had_pack = *r;
    }
    // The row table for an interval without a pack: a rollup's or one written before v13.
    const bool from_rows = blame && !had_pack;
    if (from_rows && seek) {
      if (auto r = seek_rows(j); !r) {
        return r.err();
      }
    } else if (from_rows && sparse) {
      // Few of the rows are the victims' (blame('postgres') among hundreds of threads): their
      // thread ids from the primary key alone (a light read), then their rows sought.
      if (!light_st) {
        auto st = sqlite::prepare_stmt(
            db, fmt::format("SELECT x.thread_id FROM {} AS x WHERE x.interval_id = ?1", row_table));
        if (!st) {
          return st.err();
        }
        light_st = std::move(*st);
      }
      sqlite3_stmt *s = light_st.get();
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, (*ivs)[j].id);
      std::int64_t in_interval = 0;
      std::int64_t of_victims = 0;
      std::optional<std::int64_t> last;
      bool victim = false;
      wanted.clear();
      int rc = 0;
      while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        ++in_interval;
        const std::int64_t thread = sqlite3_column_int64(s, 0);
        if (last != thread) {
          last = thread;
          auto t = thread_of(thread);
          if (!t) {
            return t.err();
          }
          windows_of(**t, hits);
          victim = !hits.empty();
          if (victim) {
            wanted.push_back(thread);
          }
        }
        of_victims += victim ? 1 : 0;
      }
      if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db));
      }
      if (auto r = seek_rows(j); !r) {
        return r.err();
      }
      sparse = of_victims * 10 < in_interval * 3; // under 30 %: stays
    } else if (from_rows) {
      sqlite3_stmt *s = blame_st.get();
      sqlite3_reset(s);
      sqlite3_bind_int64(s, 1, (*ivs)[j].id);
      rows_read = rows_victims = 0;
      if (auto r = take_rows(s); !r) {
        return r.err();
      }
      sparse = rows_victims * 10 < rows_read * 15 / 10; // under 15 %: the light read next
    }
    if (pressure) {
      // The victims' cgroups: those of the threads with sched_delay samples in the interval.
      const auto take_thread = [&](std::int64_t id) -> result<void> {
        auto t = thread_of(id);
        if (!t) {
          return t.err();
        }
        if ((*t)->groups.empty() || (*t)->ident.cgroup.empty()) {
          return {};
        }
        windows_of(**t, hits);
        for (const std::uint32_t k : hits) {
          victim_cgroups[k].insert((*t)->cgroup);
        }
        return {};
      };
      const auto take_threads = [&](sqlite3_stmt *s) -> result<void> {
        int rc = 0;
        while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
          if (auto r = take_thread(sqlite3_column_int64(s, 0)); !r) {
            return r;
          }
        }
        if (rc != SQLITE_DONE) {
          return make_error(sqlite3_errmsg(db));
        }
        return {};
      };
      // The interval's sched_delay summary (schema v12, raw tier) lists the same threads as its
      // thread_hist rows, without decoding their histograms; one that is missing or does not
      // decode leaves it to the rows.
      const auto take_summary = [&]() -> result<bool> {
        if (!summary_st) {
          return false;
        }
        sqlite3_stmt *s = summary_st.get();
        sqlite3_reset(s);
        sqlite3_bind_int64(s, 1, (*ivs)[j].id);
        const int rc = sqlite3_step(s);
        if (rc == SQLITE_DONE) {
          return false;
        }
        if (rc != SQLITE_ROW) {
          return make_error(sqlite3_errmsg(db));
        }
        const std::span<const std::uint8_t> blob(
            static_cast<const std::uint8_t *>(sqlite3_column_blob(s, 0)),
            static_cast<std::size_t>(sqlite3_column_bytes(s, 0)));
        if (!store::decode_summary_into(blob, summary)) {
          return false;
        }
        for (const auto &e : summary.threads) {
          if (auto r = take_thread(e.thread_id); !r) {
            return r.err();
          }
        }
        return true;
      };
      if (seek) {
        if (!hist_seek_st) {
          auto st =
              sqlite::prepare_stmt(db, "SELECT h.thread_id FROM thread_hist AS h WHERE "
                                       "h.interval_id = ?1 AND h.metric = 1 AND h.thread_id = ?2");
          if (!st) {
            return st.err();
          }
          hist_seek_st = std::move(*st);
        }
        for (const std::int64_t id : wanted) {
          sqlite3_stmt *s = hist_seek_st.get();
          sqlite3_reset(s);
          sqlite3_bind_int64(s, 1, (*ivs)[j].id);
          sqlite3_bind_int64(s, 2, id);
          if (auto r = take_threads(s); !r) {
            return r.err();
          }
        }
      } else {
        auto from_summary = take_summary();
        if (!from_summary) {
          return from_summary.err();
        }
        if (!*from_summary) {
          sqlite3_stmt *s = hist_st.get();
          sqlite3_reset(s);
          sqlite3_bind_int64(s, 1, (*ivs)[j].id);
          if (auto r = take_threads(s); !r) {
            return r.err();
          }
        }
      }
    }
  }
  // The culprits of each window as blame_rows hands them back (by thread and group), and as
  // blame_of sorts them: by wait and preemptions after that.
  for (std::size_t k = 0; k < qs.size() && blame; ++k) {
    std::vector<std::pair<std::pair<std::int64_t, std::uint32_t>, blame_sums>> list(sums[k].begin(),
                                                                                    sums[k].end());
    sums[k].clear();
    std::sort(list.begin(), list.end(), [&](const auto &x, const auto &y) {
      return x.first.first != y.first.first
                 ? x.first.first < y.first.first
                 : *group_keys[x.first.second] < *group_keys[y.first.second];
    });
    for (const auto &[tk, b] : list) {
      const auto &[kind, pid, comm, cgroup] = *group_keys[tk.second];
      culprit_sum c;
      c.kind = kind;
      if (kind == 0 && pid != 0) { // CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 THEN 0 END
        c.pid = pid;
      } else if (kind == 1) {
        c.pid = 0;
      }
      c.comm = comm;
      c.cgroup = cgroup;
      c.wait_ns = b.wait_ns;
      c.waits = b.waits;
      c.preempts = b.preempts;
      if (b.approx) {
        c.approx_ns = b.approx_ns;
      }
      if (per_thread) {
        out[k].by_thread.push_back({tk.first, std::move(c)});
      } else {
        out[k].culprits.push_back(std::move(c));
      }
    }
    std::stable_sort(out[k].culprits.begin(), out[k].culprits.end(),
                     [](const culprit_sum &x, const culprit_sum &y) {
                       return x.wait_ns != y.wait_ns ? x.wait_ns > y.wait_ns
                                                     : x.preempts > y.preempts;
                     });
  }
  if (!pressure) {
    return out;
  }
  // Pressure: the cgroup_cpu rows of the same intervals, summed per window for the cgroups
  // pressure_of asks about (the victims' cgroups, their ancestors and the root).
  std::unordered_map<std::int64_t, std::uint32_t> path_of; // cgroup.id
  {
    auto st = sqlite::prepare_stmt(db, "SELECT id, path FROM cgroup");
    if (!st) {
      return st.err();
    }
    int rc = 0;
    while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
      path_of.emplace(sqlite3_column_int64(st->get(), 0),
                      paths.of(sqlite::column_text(st->get(), 1)));
    }
    if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
  }
  std::vector<std::unordered_map<std::uint32_t, cgroup_sums>> cg(qs.size());
  for (std::size_t k = 0; k < qs.size(); ++k) {
    cg[k].try_emplace(paths.of("/"));
    for (const std::uint32_t c : victim_cgroups[k]) {
      const std::string path = paths.text(c);
      for_each_level(path, [&](const std::string &level) { cg[k].try_emplace(paths.of(level)); });
    }
  }
  auto cpu_st =
      sqlite::prepare_stmt(db, "SELECT p.cgroup_id, p.throttled_ns, p.some_ns, p.periods, "
                               "p.throttled FROM cgroup_cpu AS p WHERE p.interval_id = ?1");
  if (!cpu_st) {
    return cpu_st.err();
  }
  for (std::size_t j = 0; j < ivs->size(); ++j) {
    if (over[j].empty()) {
      continue;
    }
    sqlite3_stmt *s = cpu_st->get();
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, (*ivs)[j].id);
    const std::int64_t dur = (*ivs)[j].dur;
    int rc = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const auto p = path_of.find(sqlite3_column_int64(s, 0));
      if (p == path_of.end()) {
        continue; // no cgroup row: the join drops it
      }
      const bool thr = sqlite3_column_type(s, 1) != SQLITE_NULL;
      const bool some = sqlite3_column_type(s, 2) != SQLITE_NULL;
      const std::int64_t thr_ns = throttled_wall_ns(
          sqlite3_column_int64(s, 1), dur,
          sqlite3_column_type(s, 3) != SQLITE_NULL && sqlite3_column_type(s, 4) != SQLITE_NULL
              ? std::optional<std::pair<std::int64_t, std::int64_t>>(
                    {sqlite3_column_int64(s, 3), sqlite3_column_int64(s, 4)})
              : std::nullopt);
      const std::int64_t some_ns = sqlite3_column_int64(s, 2);
      for (const std::uint32_t k : over[j]) {
        auto it = cg[k].find(p->second);
        if (it == cg[k].end()) {
          continue;
        }
        cgroup_sums &c = it->second;
        bool ok = true;
        if (thr) {
          if (!c.throttled_ns) {
            c.throttled_ns = 0;
          }
          ok = add_to(*c.throttled_ns, thr_ns);
        }
        if (some) {
          ok = ok && add_to(c.some_ns, some_ns) && add_to(c.some_dur, dur);
        }
        if (!ok) {
          return make_error("integer overflow");
        }
      }
    }
    if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
  }
  for (std::size_t k = 0; k < qs.size(); ++k) {
    std::set<std::string> cgroups;
    for (const std::uint32_t c : victim_cgroups[k]) {
      cgroups.insert(paths.text(c));
    }
    out[k].pressure = combine_pressure(cgroups, [&](const std::string &path,
                                                    std::optional<std::int64_t> &throttled,
                                                    std::optional<double> &some) {
      const auto it = cg[k].find(paths.of(path));
      if (it == cg[k].end()) {
        return;
      }
      throttled = it->second.throttled_ns;
      if (it->second.some_dur > 0) {
        some = 100.0 * static_cast<double>(it->second.some_ns) /
               static_cast<double>(it->second.some_dur);
      }
    });
  }
  return out;
}

namespace {
// A culprit as cause_text names it: a process comm[pid], anything else by its name.
std::string culprit_name(const culprit_sum &c) {
  std::string name = c.comm;
  if (c.kind == 0 && c.pid && *c.pid > 0) {
    name += fmt::format("[{}]", *c.pid);
  }
  return name;
}
} // namespace

std::string cause_text(const std::vector<culprit_sum> &culprits, const pressure_sum &p) {
  std::int64_t total = 0;
  for (const auto &c : culprits) {
    total += c.wait_ns;
  }
  std::string out;
  if (total > 0) {
    std::size_t shown = 0;
    for (const auto &c : culprits) {
      if (shown == 2 || c.wait_ns <= 0) {
        break;
      }
      const double pct = 100.0 * static_cast<double>(c.wait_ns) / static_cast<double>(total);
      if (shown > 0 && pct < 5.0) {
        break;
      }
      out += fmt::format("{}{} {:.0f}%{}", shown == 0 ? "" : ", ", culprit_name(c), pct,
                         shown == 0 ? " of the wait" : "");
      ++shown;
    }
  }
  if (p.throttled_ns && *p.throttled_ns > 0) {
    out += fmt::format("{}throttled {} ({})", out.empty() ? "" : "; ",
                       text::format_duration_ns(static_cast<double>(*p.throttled_ns)),
                       p.throttled_cgroup);
  }
  if (p.system_some_pct) {
    // PSI "some" is a share of wall time: at most 100 %. Recordings before the PSI deltas were
    // scaled to their interval (rschedd's pressure_feed) can have a little more.
    out += fmt::format("{}CPU pressure {:.0f}%", out.empty() ? "" : "; ",
                       std::min(*p.system_some_pct, 100.0));
  }
  return out;
}

result<rows> blame_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto v = parse_victim(text_arg(args[0]), "blame");
  if (!v) {
    return v.err();
  }
  auto w = window_args(db, ctx, args, 1, 2, "blame");
  if (!w) {
    return w.err();
  }
  if (!has_table(db, "thread_blame")) {
    return make_error("blame: this database has no blame tables (recorded before schema 5; "
                      "rschedd -g blame records them)");
  }
  // Only what the statement reads (the report's tables read the first seven columns): the
  // culprits' own CPU time and their cgroups' usage (cpu_ns, cgroup_cpu_ns: a read of every
  // thread's slices and every cgroup of the window) and the pressure columns cost reads of
  // their own.
  const bool want_cpu = ctx.wants(7);
  const bool want_usage = ctx.wants(8);
  const bool want_pressure = ctx.wants(10) || ctx.wants(11) || ctx.wants(12);
  // The victims' blame and pressure from one read of the window's rows (causes_of: the same
  // answers as blame_of and pressure_of).
  auto causes = causes_of(db, {window_query{{*v}, w->first, w->second}}, true, want_pressure);
  if (!causes) {
    return causes.err();
  }
  const std::vector<culprit_sum> *culprits = &causes->front().culprits;
  const pressure_sum *p = &causes->front().pressure;
  std::int64_t total = 0;
  for (const auto &c : *culprits) {
    total += c.wait_ns;
  }
  // The culprits' own CPU time: their threads' time slices (slice group), per process on raw
  // rows and per (comm, cgroup) on rollups; and their cgroup's CPU usage (pressure group). Each
  // summed once per (comm, cgroup, pid) and per cgroup over the window, not once per culprit
  // (each of those re-read all the window's rows).
  struct cpu_key {
    std::string comm, cgroup;
    std::int64_t pid;
    bool operator<(const cpu_key &o) const {
      return std::tie(comm, cgroup, pid) < std::tie(o.comm, o.cgroup, o.pid);
    }
  };
  std::map<cpu_key, std::int64_t> slices_of;
  std::map<std::string, std::optional<std::int64_t>> usage_of;
  // Each row of `sql` over the window ([?1, ?2)) to `on_row`.
  const auto each_row = [&](const std::string &sql, const auto &on_row) -> result<void> {
    auto st = prepare_window(db, sql, w->first, w->second, {});
    if (!st) {
      return st.err();
    }
    int rc = 0;
    while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
      on_row(st->get());
    }
    return rc == SQLITE_DONE ? result<void>{} : result<void>(make_error(sqlite3_errmsg(db)));
  };
  if (want_cpu && has_table(db, "thread_hist")) {
    if (auto r = each_row(
            fmt::format("SELECT t.comm, t.cgroup, t.pid, sum(h.total) FROM {} AS i CROSS JOIN "
                        "thread_hist AS h ON h.interval_id = i.id AND h.metric IN (3, 4) CROSS "
                        "JOIN thread AS t ON t.id = h.thread_id WHERE {} GROUP BY t.comm, "
                        "t.cgroup, t.pid",
                        timeline(db), overlaps(db, "i", w->first)),
            [&](sqlite3_stmt *q) {
              slices_of[{sqlite::column_text(q, 0), sqlite::column_text(q, 1),
                         sqlite3_column_int64(q, 2)}] = sqlite3_column_int64(q, 3);
            });
        !r) {
      return r.err();
    }
  }
  if (want_usage && has_table(db, "cgroup_cpu")) {
    if (auto r = each_row(
            fmt::format("SELECT g.path, sum(p.usage_ns) FROM {} AS i CROSS JOIN cgroup_cpu AS p "
                        "ON p.interval_id = i.id JOIN cgroup AS g ON g.id = p.cgroup_id WHERE {} "
                        "GROUP BY g.path",
                        timeline(db), overlaps(db, "i", w->first)),
            [&](sqlite3_stmt *q) {
              auto &u = usage_of[sqlite::column_text(q, 0)];
              if (sqlite3_column_type(q, 1) != SQLITE_NULL) {
                u = sqlite3_column_int64(q, 1);
              }
            });
        !r) {
      return r.err();
    }
  }
  const auto opt = [](const auto &o) {
    value out_v;
    if (o) {
      out_v = *o;
    }
    return out_v;
  };
  rows out;
  for (const auto &c : *culprits) {
    value cpu_ns;
    value cgroup_cpu_ns;
    if (c.kind == 0) {
      // A process: its threads under that comm and cgroup; a rollup culprit (no pid): all.
      std::optional<std::int64_t> sum;
      const auto lo =
          slices_of.lower_bound({c.comm, c.cgroup, std::numeric_limits<std::int64_t>::min()});
      for (auto it = lo;
           it != slices_of.end() && it->first.comm == c.comm && it->first.cgroup == c.cgroup;
           ++it) {
        if (!c.pid || it->first.pid == *c.pid) {
          sum = sum.value_or(0) + it->second;
        }
      }
      cpu_ns = opt(sum);
      if (!c.cgroup.empty()) {
        if (auto u = usage_of.find(c.cgroup); u != usage_of.end()) {
          cgroup_cpu_ns = opt(u->second);
        }
      }
    }
    // Built step by step: GCC 12 reports a false -Wmaybe-uninitialized on std::variant
    // temporaries in conditional expressions.
    row r;
    r.reserve(14);
    r.push_back(opt(c.pid));
    r.emplace_back(c.comm);
    r.emplace_back(c.cgroup);
    r.emplace_back(c.wait_ns);
    if (total > 0) {
      r.emplace_back(100.0 * static_cast<double>(c.wait_ns) / static_cast<double>(total));
    } else {
      r.emplace_back();
    }
    r.emplace_back(c.waits);
    r.emplace_back(c.preempts);
    r.push_back(std::move(cpu_ns));
    r.push_back(std::move(cgroup_cpu_ns));
    r.emplace_back(total);
    r.push_back(opt(p->throttled_ns));
    r.push_back(opt(p->victim_some_pct));
    r.push_back(opt(p->system_some_pct));
    r.push_back(opt(c.approx_ns));
    out.push_back(std::move(r));
  }
  return out;
}

} // namespace rsched::query::detail

namespace rsched::query::detail {

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
result<void> inverted_waits_packed(
    sqlite3 *db, const victims &v, std::int64_t a, std::int64_t b,
    std::map<std::tuple<std::int64_t, std::int64_t, std::string, std::string>, inverted_wait>
        &sums) {
  auto ivs = sqlite::prepare_stmt(
      db, fmt::format("SELECT i.id FROM intervals AS i WHERE i.tier = 0 AND {} ORDER BY "
                      "i.start_ns, i.id",
                      overlaps(db, "i", a)));
  auto pack = sqlite::prepare_stmt(db, "SELECT data FROM thread_blame_pack WHERE interval_id = ?1");
  auto rows = sqlite::prepare_stmt(
      db, "SELECT thread_id, culprit_id, wait_ns, policy, prio, waiter_policy, waiter_prio FROM "
          "thread_blame_row WHERE interval_id = ?1 AND wait_ns > 0 AND policy IN (1, 2, 6) AND "
          "waiter_policy NOT IN (1, 2, 5, 6) AND waiter_prio < 120 AND prio IS NOT NULL");
  auto victim_st = sqlite::prepare_stmt(
      db, fmt::format("SELECT 1 FROM thread AS t WHERE t.id = ?1 AND {}", victims_sql(v, 2)));
  auto culprit_st =
      sqlite::prepare_stmt(db, "SELECT kind, pid, comm, cgroup FROM culprit WHERE id = ?1");
  for (auto *st : {&ivs, &pack, &rows, &victim_st, &culprit_st}) {
    if (!*st) {
      return st->err();
    }
  }
  sqlite3_bind_int64(ivs->get(), 1, a);
  sqlite3_bind_int64(ivs->get(), 2, b);
  bind_victims(victim_st->get(), v, 2);
  std::unordered_map<std::int64_t, bool> victim_of;
  const auto is_victim = [&](std::int64_t id) -> result<bool> {
    auto [it, fresh] = victim_of.try_emplace(id, false);
    if (fresh) {
      sqlite3_stmt *q = victim_st->get();
      sqlite3_reset(q);
      sqlite3_bind_int64(q, 1, id);
      const int rc = sqlite3_step(q);
      if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db));
      }
      it->second = rc == SQLITE_ROW;
    }
    return it->second;
  };
  struct culprit_ident {
    bool process = false; // culprit.kind 0
    std::int64_t pid = 0;
    std::string comm, cgroup;
  };
  std::unordered_map<std::int64_t, std::optional<culprit_ident>> culprits;
  const auto culprit_of = [&](std::int64_t id) -> result<const std::optional<culprit_ident> *> {
    auto [it, fresh] = culprits.try_emplace(id);
    if (fresh) {
      sqlite3_stmt *q = culprit_st->get();
      sqlite3_reset(q);
      sqlite3_bind_int64(q, 1, id);
      const int rc = sqlite3_step(q);
      if (rc == SQLITE_ROW) {
        it->second = culprit_ident{sqlite3_column_int64(q, 0) == 0, sqlite3_column_int64(q, 1),
                                   sqlite::column_text(q, 2), sqlite::column_text(q, 3)};
      } else if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db));
      }
    }
    return &it->second;
  };
  // One row that passed the priority conditions (SQL's, then store::priority_inversion's).
  const auto take = [&](std::int64_t thread, std::int64_t culprit, std::int64_t wait_ns,
                        int by_policy, int by_prio, int policy, int prio) -> result<void> {
    if (!store::priority_inversion(policy, prio, by_policy, by_prio)) {
      return {};
    }
    auto victim = is_victim(thread);
    if (!victim) {
      return victim.err();
    }
    if (!*victim) {
      return {};
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
    auto [it, fresh] = sums.try_emplace({thread, ci.pid, ci.comm, ci.cgroup}, w);
    it->second.wait_ns += wait_ns;
    // The latest row's scheduling.
    it->second.policy = policy;
    it->second.prio = prio;
    it->second.by_policy = by_policy;
    it->second.by_prio = by_prio;
    return {};
  };
  std::vector<store::blame_entry> entries;
  int rc = 0;
  while ((rc = sqlite3_step(ivs->get())) == SQLITE_ROW) {
    const std::int64_t id = sqlite3_column_int64(ivs->get(), 0);
    sqlite3_stmt *ps = pack->get();
    sqlite3_reset(ps);
    sqlite3_bind_int64(ps, 1, id);
    int prc = sqlite3_step(ps);
    if (prc == SQLITE_ROW) {
      const std::span<const std::uint8_t> blob(
          static_cast<const std::uint8_t *>(sqlite3_column_blob(ps, 0)),
          static_cast<std::size_t>(sqlite3_column_bytes(ps, 0)));
      if (auto r = store::unpack_blame(blob, entries); !r) {
        return make_error(fmt::format("thread_blame_pack interval {}: {}", id, r.err().msg));
      }
      for (const auto &e : entries) {
        // The SQL's conditions: wait_ns > 0, policy IN (1, 2, 6), prio IS NOT NULL,
        // waiter_policy NOT IN (1, 2, 5, 6) (NULL fails it), waiter_prio < 120.
        const auto &[cpu, policy, prio, waiter_policy, waiter_prio] = e.sched;
        if (e.wait_ns <= 0 || !policy || (*policy != 1 && *policy != 2 && *policy != 6) || !prio ||
            !waiter_policy || *waiter_policy == 1 || *waiter_policy == 2 || *waiter_policy == 5 ||
            *waiter_policy == 6 || !waiter_prio || *waiter_prio >= 120) {
          continue;
        }
        // sqlite3_column_int's conversion, as the SQL path reads them.
        if (auto r = take(e.thread_id, e.culprit_id, e.wait_ns, static_cast<int>(*policy),
                          static_cast<int>(*prio), static_cast<int>(*waiter_policy),
                          static_cast<int>(*waiter_prio));
            !r) {
          return r;
        }
      }
    } else if (prc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
    sqlite3_stmt *rs = rows->get();
    sqlite3_reset(rs);
    sqlite3_bind_int64(rs, 1, id);
    while ((prc = sqlite3_step(rs)) == SQLITE_ROW) {
      if (auto r =
              take(sqlite3_column_int64(rs, 0), sqlite3_column_int64(rs, 1),
                   sqlite3_column_int64(rs, 2), sqlite3_column_int(rs, 3),
                   sqlite3_column_int(rs, 4), sqlite3_column_int(rs, 5), sqlite3_column_int(rs, 6));
          !r) {
        return r;
      }
    }
    if (prc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
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
result<rows> inversions_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto w = window_args(db, ctx, args, 0, 1, "inversions");
  if (!w) {
    return w.err();
  }
  std::int64_t min_wait = 0;
  if (args.size() > 2 && args[2] != nullptr && sqlite3_value_type(args[2]) != SQLITE_NULL) {
    auto d = duration_arg(args[2], "inversions: min_wait");
    if (!d) {
      return d.err();
    }
    min_wait = *d;
  }
  if (!has_table(db, "thread_blame") || !has_column(db, "thread_blame", "waiter_prio")) {
    return make_error("inversions: this database has no scheduling priorities in its blame "
                      "(recorded before schema 9; rschedd -g blame records them)");
  }
  auto st = sqlite::prepare_stmt(
      db, fmt::format("SELECT i.start_ns, i.dur_ns, b.thread_id, b.culprit_id, t.tid, t.pid, "
                      "t.comm, b.waiter_policy, b.waiter_prio, c.pid, c.comm, b.policy, b.prio, "
                      "b.cpu, b.wait_ns, b.waits FROM intervals AS i CROSS JOIN thread_blame AS "
                      "b ON b.interval_id = i.id CROSS JOIN thread AS t ON t.id = b.thread_id JOIN "
                      "culprit AS c ON c.id = b.culprit_id WHERE i.tier = 0 AND {} AND c.kind = "
                      "0 AND b.wait_ns > 0 "
                      // only what store::priority_inversion can accept: a raised fair-class waiter
                      // behind a real-time or deadline task (the sort is then of those alone)
                      "AND b.policy IN (1, 2, 6) AND b.waiter_policy NOT IN (1, 2, 5, 6) AND "
                      "b.waiter_prio < 120 AND b.prio IS NOT NULL "
                      "ORDER BY b.thread_id, b.culprit_id, i.start_ns",
                      overlaps(db, "i", w->first)));
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, w->first);
  sqlite3_bind_int64(st->get(), 2, w->second);
  struct episode {
    std::int64_t thread = 0, culprit = 0, start = 0, end = 0, gap = 0;
    std::int64_t wait_ns = 0, waits = 0, intervals = 0;
    row ident; // tid, pid, comm, policy, prio, by_pid, by_comm, by_policy, by_prio, cpu
  };
  std::vector<episode> done;
  std::optional<episode> cur;
  const auto close = [&] {
    if (cur && cur->wait_ns >= min_wait) {
      done.push_back(std::move(*cur));
    }
    cur.reset();
  };
  const auto text = [](sqlite3_stmt *s, int i) {
    const auto *p = static_cast<const char *>(sqlite3_column_blob(s, i));
    return std::string(p != nullptr ? p : "", static_cast<std::size_t>(sqlite3_column_bytes(s, i)));
  };
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt *s = st->get();
    const auto i64 = [s](int i) { return sqlite3_column_int64(s, i); };
    const int policy = static_cast<int>(i64(7));
    const int prio = static_cast<int>(i64(8));
    const int by_policy = static_cast<int>(i64(11));
    const int by_prio = static_cast<int>(i64(12));
    if (!store::priority_inversion(policy, prio, by_policy, by_prio)) {
      continue;
    }
    const std::int64_t start = i64(0);
    const std::int64_t dur = i64(1);
    const bool same =
        cur && cur->thread == i64(2) && cur->culprit == i64(3) && start <= cur->end + cur->gap;
    if (!same) {
      close();
      cur = episode{i64(2), i64(3), start, start, 0, 0, 0, 0, {}};
    }
    cur->end = start + dur;
    cur->gap = dur;
    cur->wait_ns += i64(14);
    cur->waits += i64(15);
    ++cur->intervals;
    // The latest interval's identity and scheduling (a thread renamed in the episode shows
    // its latest name).
    cur->ident = {i64(4),
                  i64(5),
                  text(s, 6),
                  std::int64_t{policy},
                  std::int64_t{prio},
                  i64(9),
                  text(s, 10),
                  std::int64_t{by_policy},
                  std::int64_t{by_prio},
                  sqlite3_column_type(s, 13) == SQLITE_NULL ? value{} : value{i64(13)}};
  }
  if (rc != SQLITE_DONE) {
    return make_error(std::string("inversions: ") + sqlite3_errmsg(db));
  }
  close();
  std::stable_sort(done.begin(), done.end(), [](const episode &a, const episode &b) {
    return a.start != b.start ? a.start < b.start : a.wait_ns > b.wait_ns;
  });
  rows out;
  out.reserve(done.size());
  for (auto &e : done) {
    row r{e.start, e.end - e.start, e.end};
    std::move(e.ident.begin(), e.ident.end(), std::back_inserter(r));
    r.emplace_back(e.wait_ns);
    r.emplace_back(e.waits);
    r.emplace_back(e.intervals);
    out.push_back(std::move(r));
  }
  return out;
}

} // namespace rsched::query::detail
