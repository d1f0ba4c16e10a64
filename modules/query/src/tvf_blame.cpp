// blame(victim, [start, end]) and what spikes() takes from it: the victim pattern, the blame,
// throttling and pressure of a window, and the one-line cause.
#include "tvf_blame.hpp"

#include "rsched/base/text.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/store/records.hpp"

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

namespace {
std::optional<std::string_view> text_arg(sqlite3_value *v) {
  if (v == nullptr || sqlite3_value_type(v) == SQLITE_NULL) {
    return std::nullopt;
  }
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  return std::string_view(p != nullptr ? p : "", static_cast<std::size_t>(sqlite3_value_bytes(v)));
}

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

namespace {

value opt_value(const auto &o) {
  value v;
  if (o) {
    v = *o;
  }
  return v;
}

// The culprits' own CPU time: their threads' time slices (slice group), per process on raw
// rows and per (comm, cgroup) on rollups; and their cgroup's CPU usage (pressure group). Each
// summed once per (comm, cgroup, pid) and per cgroup over the window, not once per culprit
// (each of those re-read all the window's rows).
struct culprit_cpu {
  struct key {
    std::string comm, cgroup;
    std::int64_t pid;
    bool operator<(const key &o) const {
      return std::tie(comm, cgroup, pid) < std::tie(o.comm, o.cgroup, o.pid);
    }
  };
  std::map<key, std::int64_t> slices_of;
  std::map<std::string, std::optional<std::int64_t>> usage_of;
};

// Each row of `sql` over the window [a, b) (?1, ?2) to `on_row`.
template <typename F>
result<void> window_rows(sqlite3 *db, const std::string &sql, std::int64_t a, std::int64_t b,
                         F &&on_row) {
  auto st = prepare_window(db, sql, a, b, {});
  if (!st) {
    return st.err();
  }
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    on_row(st->get());
  }
  return rc == SQLITE_DONE ? result<void>{} : result<void>(make_error(sqlite3_errmsg(db)));
}

result<culprit_cpu> read_culprit_cpu(sqlite3 *db, std::int64_t a, std::int64_t b, bool want_cpu,
                                     bool want_usage) {
  culprit_cpu out;
  if (want_cpu && has_table(db, "thread_hist")) {
    if (auto r = window_rows(
            db,
            fmt::format("SELECT t.comm, t.cgroup, t.pid, sum(h.total) FROM {} AS i CROSS JOIN "
                        "thread_hist AS h ON h.interval_id = i.id AND h.metric IN (3, 4) CROSS "
                        "JOIN thread AS t ON t.id = h.thread_id WHERE {} GROUP BY t.comm, "
                        "t.cgroup, t.pid",
                        timeline(db), overlaps(db, "i", a)),
            a, b,
            [&](sqlite3_stmt *q) {
              out.slices_of[{sqlite::column_text(q, 0), sqlite::column_text(q, 1),
                             sqlite3_column_int64(q, 2)}] = sqlite3_column_int64(q, 3);
            });
        !r) {
      return r.err();
    }
  }
  if (want_usage && has_table(db, "cgroup_cpu")) {
    if (auto r = window_rows(
            db,
            fmt::format("SELECT g.path, sum(p.usage_ns) FROM {} AS i CROSS JOIN cgroup_cpu AS p "
                        "ON p.interval_id = i.id JOIN cgroup AS g ON g.id = p.cgroup_id WHERE {} "
                        "GROUP BY g.path",
                        timeline(db), overlaps(db, "i", a)),
            a, b,
            [&](sqlite3_stmt *q) {
              auto &u = out.usage_of[sqlite::column_text(q, 0)];
              if (sqlite3_column_type(q, 1) != SQLITE_NULL) {
                u = sqlite3_column_int64(q, 1);
              }
            });
        !r) {
      return r.err();
    }
  }
  return out;
}

// A culprit process's CPU time (its threads under that comm and cgroup; a rollup culprit, no
// pid: all) and its cgroup's usage; NULL for pseudo-culprits.
std::pair<value, value> cpu_of(const culprit_sum &c, const culprit_cpu &cpu) {
  std::pair<value, value> out;
  if (c.kind != 0) {
    return out;
  }
  std::optional<std::int64_t> sum;
  const auto lo =
      cpu.slices_of.lower_bound({c.comm, c.cgroup, std::numeric_limits<std::int64_t>::min()});
  for (auto it = lo;
       it != cpu.slices_of.end() && it->first.comm == c.comm && it->first.cgroup == c.cgroup;
       ++it) {
    if (!c.pid || it->first.pid == *c.pid) {
      sum = sum.value_or(0) + it->second;
    }
  }
  out.first = opt_value(sum);
  if (!c.cgroup.empty()) {
    if (auto u = cpu.usage_of.find(c.cgroup); u != cpu.usage_of.end()) {
      out.second = opt_value(u->second);
    }
  }
  return out;
}

// One row of blame(): the culprit, its share of the victims' `total` wait, its CPU, and the
// window's pressure.
row blame_row(const culprit_sum &c, std::int64_t total, const pressure_sum &p,
              std::pair<value, value> cpu) {
  // Built step by step: GCC 12 reports a false -Wmaybe-uninitialized on std::variant
  // temporaries in conditional expressions.
  row r;
  r.reserve(14);
  r.push_back(opt_value(c.pid));
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
  r.push_back(std::move(cpu.first));
  r.push_back(std::move(cpu.second));
  r.emplace_back(total);
  r.push_back(opt_value(p.throttled_ns));
  r.push_back(opt_value(p.victim_some_pct));
  r.push_back(opt_value(p.system_some_pct));
  r.push_back(opt_value(c.approx_ns));
  return r;
}

} // namespace

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
  const bool want_pressure = ctx.wants(10) || ctx.wants(11) || ctx.wants(12);
  // The victims' blame and pressure from one read of the window's rows (causes_of: the same
  // answers as blame_of and pressure_of).
  auto causes = causes_of(db, {window_query{{*v}, w->first, w->second}}, true, want_pressure);
  if (!causes) {
    return causes.err();
  }
  const window_causes &wc = causes->front();
  std::int64_t total = 0;
  for (const auto &c : wc.culprits) {
    total += c.wait_ns;
  }
  auto cpu = read_culprit_cpu(db, w->first, w->second, ctx.wants(7), ctx.wants(8));
  if (!cpu) {
    return cpu.err();
  }
  rows out;
  for (const auto &c : wc.culprits) {
    out.push_back(blame_row(c, total, wc.pressure, cpu_of(c, *cpu)));
  }
  return out;
}

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
