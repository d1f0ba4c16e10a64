// explain(annotation_id) and explain(start, end [, victims]): from an incident's window to the
// threads that did worst against their own baseline and, for each, the causes the history
// holds, ranked by the share of the thread's extra wait they explain (docs/SQL.md, "explain").
#include "rsched/base/text.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/hist_pack.hpp"

#include "sql_functions.hpp"
#include "table_functions.hpp"
#include "tvf_blame.hpp"
#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sqlite3.h>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace rsched::query::detail {

namespace {

// The baseline: the period just before the window's first interval, as long as the window but
// at least this.
constexpr std::int64_t min_baseline_ns = 5LL * 60 * 1'000'000'000;
// Evidence that is not a share of the wait (migrations, pressure) is reported when it stands out:
// migrations at least twice the baseline rate's and at least this many more; PSI "some" at least
// this many percentage points above the baseline's.
constexpr double min_extra_migrations = 10.0;
constexpr double min_pressure_rise_pct = 10.0;
// The wakeup group's evidence: the waker whose ended sleep of the victim grew most, when it grew
// by at least this share of the window and to at least twice its baseline rate's.
constexpr double min_sleep_rise_share = 0.10;

struct thread_stats {
  std::int64_t tid = 0, pid = 0;
  std::string comm, cgroup;
  std::int64_t wait_ns = 0;
  std::optional<stats::histogram> hist;
};

struct period {
  std::int64_t a = 0, b = 0;
  std::int64_t recorded_ns = 0; // the summed length of the intervals overlapping [a, b)
};

result<period> period_of(sqlite3 *db, std::int64_t a, std::int64_t b) {
  period p{a, b, 0};
  auto ivs = intervals_in(db, a, b);
  if (!ivs) {
    return ivs.err();
  }
  for (const auto &iv : *ivs) {
    p.recorded_ns += iv.dur;
  }
  return p;
}

// One thread_hist row of sched_delay counted into its thread's stats: its wait summed, its
// histogram added into the thread's as it decodes (not decoded, then merged: two passes over
// 600 bytes for a few buckets), with merge_into's layout check.
result<void> add_delay_row(thread_stats &t, std::int64_t total,
                           std::span<const std::uint8_t> blob) {
  t.wait_ns += total;
  if (!blob.empty() && stats::valid_layout(blob[0])) {
    const auto kind = stats::coarse_layout(static_cast<stats::layout>(blob[0]));
    if (!t.hist) {
      t.hist = stats::histogram{kind, {}};
    } else if (t.hist->kind != kind) {
      return make_error("explain: cannot merge histograms of different layouts");
    }
  }
  auto &into = t.hist;
  if (auto r = stats::for_each_bucket(blob,
                                      [&into](std::size_t slot, std::uint64_t n) -> result<void> {
                                        into->slots[slot] += n;
                                        return {};
                                      });
      !r) {
    return make_error("explain: stored histogram: " + r.err().msg);
  }
  return {};
}

std::span<const std::uint8_t> column_blob(sqlite3_stmt *s, int i) {
  return {static_cast<const std::uint8_t *>(sqlite3_column_blob(s, i)),
          static_cast<std::size_t>(sqlite3_column_bytes(s, i))};
}

// delay_by_thread() where the raw tier is packed (schema v8): per interval of the period its
// sched_delay pack decoded here and its other rows (rollups, raw rows written before) read from
// thread_hist_row, as the thread_hist table reads them; each thread's identity and whether it
// is a victim looked up once, not joined per row (an hour is ~700 K rows of a few thousand
// threads).
result<void> delay_by_thread_packed(sqlite3 *db, const victims &vs, const period &p,
                                    std::unordered_map<std::int64_t, thread_stats> &out) {
  auto ivs = intervals_in(db, p.a, p.b);
  if (!ivs) {
    return ivs.err();
  }
  auto ident = sqlite::prepare_stmt(
      db, fmt::format("SELECT t.tid, t.pid, t.comm, t.cgroup FROM thread AS t WHERE t.id = ?1 "
                      "AND {}",
                      victims_sql(vs, 2)));
  auto pack = sqlite::prepare_stmt(
      db, "SELECT data FROM thread_hist_pack WHERE interval_id = ?1 AND metric = 1");
  auto rows = sqlite::prepare_stmt(
      db, "SELECT thread_id, total, hist FROM thread_hist_row WHERE interval_id = ?1 AND "
          "metric = 1");
  if (!ident || !pack || !rows) {
    return !ident ? ident.err() : !pack ? pack.err() : rows.err();
  }
  bind_victims(ident->get(), vs, 2);
  // Per thread id: its stats in `out` if it is a victim, else nullptr.
  std::unordered_map<std::int64_t, thread_stats *> victim_of;
  const auto stats_of = [&](std::int64_t id) -> result<thread_stats *> {
    auto [it, fresh] = victim_of.try_emplace(id, nullptr);
    if (!fresh) {
      return it->second;
    }
    sqlite3_stmt *q = ident->get();
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, id);
    const int rc = sqlite3_step(q);
    if (rc == SQLITE_ROW) {
      auto [at, added] = out.try_emplace(id);
      if (added) {
        at->second.tid = sqlite3_column_int64(q, 0);
        at->second.pid = sqlite3_column_int64(q, 1);
        at->second.comm = sqlite::column_text(q, 2);
        at->second.cgroup = sqlite::column_text(q, 3);
      }
      it->second = &at->second;
    } else if (rc != SQLITE_DONE) {
      return make_error(std::string("explain: ") + sqlite3_errmsg(db));
    }
    return it->second;
  };
  store::pack_entry e;
  for (const auto &iv : *ivs) {
    sqlite3_stmt *ps = pack->get();
    sqlite3_reset(ps);
    sqlite3_bind_int64(ps, 1, iv.id);
    int rc = sqlite3_step(ps);
    if (rc == SQLITE_ROW) {
      store::pack_reader r(column_blob(ps, 0));
      while (r.next(e)) {
        auto t = stats_of(e.thread_id);
        if (!t) {
          return t.err();
        }
        if (*t != nullptr) {
          if (auto x = add_delay_row(**t, e.total, e.hist); !x) {
            return x.err();
          }
        }
      }
      if (!r.err().empty()) {
        return make_error(fmt::format("thread_hist_pack interval {} metric 1: {}", iv.id, r.err()));
      }
    } else if (rc != SQLITE_DONE) {
      return make_error(std::string("explain: ") + sqlite3_errmsg(db));
    }
    sqlite3_stmt *rs = rows->get();
    sqlite3_reset(rs);
    sqlite3_bind_int64(rs, 1, iv.id);
    while ((rc = sqlite3_step(rs)) == SQLITE_ROW) {
      auto t = stats_of(sqlite3_column_int64(rs, 0));
      if (!t) {
        return t.err();
      }
      if (*t != nullptr) {
        if (auto x = add_delay_row(**t, sqlite3_column_int64(rs, 1), column_blob(rs, 2)); !x) {
          return x.err();
        }
      }
    }
    if (rc != SQLITE_DONE) {
      return make_error(std::string("explain: ") + sqlite3_errmsg(db));
    }
  }
  return {};
}

// sched_delay (metric 1) per thread (thread.id) of the victims in the intervals overlapping the
// period: its summed wait and merged histogram.
result<void> delay_by_thread(sqlite3 *db, const victims &vs, const period &p,
                             std::unordered_map<std::int64_t, thread_stats> &out) {
  if (has_table(db, "thread_hist_pack")) {
    return delay_by_thread_packed(db, vs, p, out);
  }
  auto st = sqlite::prepare_stmt(
      db, fmt::format("SELECT h.thread_id, t.tid, t.pid, t.comm, t.cgroup, h.total, h.hist "
                      "FROM {} AS i CROSS JOIN thread_hist AS h ON h.interval_id = i.id AND "
                      "h.metric = 1 CROSS JOIN thread AS t ON t.id = h.thread_id WHERE {} AND {}",
                      timeline(db), overlaps(db, "i", p.a), victims_sql(vs, 3)));
  if (!st) {
    return st.err();
  }
  sqlite3_stmt *s = st->get();
  sqlite3_bind_int64(s, 1, p.a);
  sqlite3_bind_int64(s, 2, p.b);
  bind_victims(s, vs, 3);
  int rc = 0;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    auto [it, fresh] = out.try_emplace(sqlite3_column_int64(s, 0));
    auto &t = it->second;
    if (fresh) { // an identity's columns are the same in every row
      t.tid = sqlite3_column_int64(s, 1);
      t.pid = sqlite3_column_int64(s, 2);
      t.comm = sqlite::column_text(s, 3);
      t.cgroup = sqlite::column_text(s, 4);
    }
    if (auto x = add_delay_row(t, sqlite3_column_int64(s, 5), column_blob(s, 6)); !x) {
      return x.err();
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(std::string("explain: ") + sqlite3_errmsg(db));
  }
  return {};
}

// Migrations per thread (thread.id) of the victims in the period; empty where not recorded.
result<std::unordered_map<std::int64_t, std::int64_t>>
migrations_by_thread(sqlite3 *db, const victims &vs, const period &p) {
  std::unordered_map<std::int64_t, std::int64_t> out;
  if (!recorded_in(db, "thread_migration", p.a, p.b)) {
    return out;
  }
  auto r = each_row(
      db,
      fmt::format("SELECT m.thread_id, sum(m.count) FROM {} AS i CROSS JOIN thread_migration AS "
                  "m ON m.interval_id = i.id CROSS JOIN thread AS t ON t.id = m.thread_id WHERE "
                  "{} AND {} GROUP BY m.thread_id",
                  timeline(db), overlaps(db, "i", p.a), victims_sql(vs, 3)),
      p.a, p.b, vs,
      [&](sqlite3_stmt *s) { out[sqlite3_column_int64(s, 0)] = sqlite3_column_int64(s, 1); });
  if (!r) {
    return make_error("explain: " + r.err().msg);
  }
  return out;
}

// One waker of one thread (wakeup group, schema v15): culprit.kind (0 process, 1 <idle>,
// 3 <other>, 4-6 <hardirq>/<softirq>/<timer>), pid (NULL on rollups, 0 for <idle>), comm,
// cgroup, and the sleep of the thread it ended in the period.
struct waker_sum {
  int kind = 0;
  std::optional<std::int64_t> pid;
  std::string comm, cgroup;
  std::int64_t sleep_ns = 0;
};

// The wakers of the ranked victims' threads (thread.id) in the period; empty where not
// recorded. Only those threads' rows are read (thread_wakeup is keyed by interval, then
// thread): the other threads' wakeups of a long baseline are never looked at.
result<std::unordered_map<std::int64_t, std::vector<waker_sum>>>
wakers_by_thread(sqlite3 *db, const victims &vs, const period &p,
                 const std::unordered_set<std::int64_t> &ranked) {
  std::unordered_map<std::int64_t, std::vector<waker_sum>> out;
  if (ranked.empty() || !has_table(db, "thread_wakeup") ||
      !recorded_in(db, "thread_wakeup", p.a, p.b)) {
    return out;
  }
  std::string ids;
  for (const std::int64_t id : ranked) {
    ids += (ids.empty() ? "" : ",") + std::to_string(id);
  }
  auto r = each_row(
      db,
      fmt::format("SELECT w.thread_id, c.kind, CASE c.kind WHEN 0 THEN nullif(c.pid, 0) WHEN 1 "
                  "THEN 0 END, c.comm, c.cgroup, sum(w.sleep_ns) FROM {} AS i CROSS JOIN "
                  "thread_wakeup AS w ON w.interval_id = i.id CROSS JOIN thread AS t ON t.id = "
                  "w.thread_id JOIN culprit AS c ON c.id = w.waker_id WHERE {} AND w.thread_id IN "
                  "({}) AND {} GROUP BY w.thread_id, c.kind, c.pid, c.comm, c.cgroup",
                  timeline(db), overlaps(db, "i", p.a), ids, victims_sql(vs, 3)),
      p.a, p.b, vs, [&](sqlite3_stmt *s) {
        waker_sum w;
        w.kind = sqlite3_column_int(s, 1);
        if (sqlite3_column_type(s, 2) != SQLITE_NULL) {
          w.pid = sqlite3_column_int64(s, 2);
        }
        w.comm = sqlite::column_text(s, 3);
        w.cgroup = sqlite::column_text(s, 4);
        w.sleep_ns = sqlite3_column_int64(s, 5);
        out[sqlite3_column_int64(s, 0)].push_back(std::move(w));
      });
  if (!r) {
    return make_error("explain: " + r.err().msg);
  }
  return out;
}

std::optional<std::int64_t> p99(const std::optional<stats::histogram> &h) {
  if (!h) {
    return std::nullopt;
  }
  auto r = stats::percentile(*h, 99.0);
  if (!r) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(r->value);
}

// A culprit process's identity: pid (NULL on rollup rows, 0 for <idle>), comm, cgroup.
using culprit_key = std::tuple<int, std::int64_t, std::string, std::string>;
culprit_key key_of(const culprit_sum &c) {
  return {c.kind, c.pid.value_or(-1), c.comm, c.cgroup};
}

std::string culprit_name(const culprit_sum &c) {
  std::string name = text::escape_for_terminal(c.comm);
  if (c.kind == 0 && c.pid && *c.pid > 0) {
    name += fmt::format("[{}]", *c.pid);
  }
  return name;
}

const char *policy_name(int policy) {
  switch (policy) {
  case 1:
    return "SCHED_FIFO";
  case 2:
    return "SCHED_RR";
  case 6:
    return "SCHED_DEADLINE";
  default:
    return "fair";
  }
}

// One cause of one victim.
struct cause_row {
  std::string kind;
  std::optional<std::int64_t> pid;
  std::optional<std::string> comm, cgroup;
  std::optional<double> share; // percent of the victim's excess wait; NULL for evidence
  double measure = 0, measure_baseline = 0;
  std::string summary;
  int order = 0; // 0: a share of the wait; 1: migrations; 2: pressure; 3: a waker (after them)
};

struct victim_row {
  std::int64_t thread_id = 0;
  const thread_stats *w = nullptr;
  const thread_stats *base = nullptr; // nullptr: no delay in the baseline
  std::int64_t expected_ns = 0;
  std::int64_t excess_ns = 0;
};

// The pressure of each victim cgroup (pressure_of of the cgroup alone) in the window and in the
// baseline, all from one read of the two periods' rows (not two reads per cgroup).
result<std::map<std::string, std::pair<pressure_sum, pressure_sum>>>
pressure_by_cgroup(sqlite3 *db, const std::set<std::string> &cgroups, const period &window,
                   const period &baseline) {
  std::map<std::string, std::pair<pressure_sum, pressure_sum>> out;
  std::vector<window_query> qs;
  for (const auto &c : cgroups) {
    victim v;
    v.what = victim::kind::cgroup;
    v.text = c;
    v.descendants = false;
    qs.push_back({{v}, window.a, window.b});
    qs.push_back({{v}, baseline.a, baseline.b});
  }
  auto causes = causes_of(db, qs, false, true);
  if (!causes) {
    return causes.err();
  }
  std::size_t k = 0;
  for (const auto &c : cgroups) {
    out.emplace(
        c, std::make_pair(std::move((*causes)[k].pressure), std::move((*causes)[k + 1].pressure)));
    k += 2;
  }
  return out;
}

result<std::pair<std::int64_t, std::int64_t>> annotation_window(sqlite3 *db, sqlite3_value *v) {
  if (sqlite3_value_type(v) != SQLITE_INTEGER) {
    return make_error("explain: explain(ANNOTATION_ID) takes an annotation's id (an integer), "
                      "explain(start, end [, victims]) a window");
  }
  const std::int64_t id = sqlite3_value_int64(v);
  auto st = sqlite::prepare_stmt(db, "SELECT start_ns, end_ns FROM annotations WHERE id = ?1");
  if (!st) {
    return make_error("explain: this database has no annotations table");
  }
  sqlite3_bind_int64(st->get(), 1, id);
  if (sqlite3_step(st->get()) != SQLITE_ROW) {
    return make_error(
        fmt::format("explain: no annotation {} (SELECT id, text FROM annotations)", id));
  }
  const std::int64_t a = sqlite3_column_int64(st->get(), 0);
  // A point in time: the interval that holds it.
  const std::int64_t b =
      sqlite3_column_type(st->get(), 1) == SQLITE_NULL ? a + 1 : sqlite3_column_int64(st->get(), 1);
  if (b <= a) {
    return make_error(fmt::format("explain: annotation {} ends before it starts", id));
  }
  return std::make_pair(a, b);
}

} // namespace

result<rows> explain_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  const auto given = [&](std::size_t i) {
    return i < args.size() && args[i] != nullptr && sqlite3_value_type(args[i]) != SQLITE_NULL;
  };
  std::pair<std::int64_t, std::int64_t> w;
  victims vs;
  if (!given(1) && !given(2)) {
    if (!given(0)) {
      return make_error("explain: give an annotation id, or a window: explain(ANNOTATION_ID) or "
                        "explain(start, end [, victims])");
    }
    auto aw = annotation_window(db, args[0]);
    if (!aw) {
      return aw.err();
    }
    w = *aw;
    ctx.window_named = true;
    ctx.name_window(w.first, w.second);
  } else {
    if (!given(0) || !given(1)) {
      return make_error("explain: a window needs both start and end: explain(start, end [, "
                        "victims])");
    }
    auto ww = window_args(db, ctx, args, 0, 1, "explain");
    if (!ww) {
      return ww.err();
    }
    w = *ww;
    if (w.second <= w.first) {
      return make_error("explain: the window ends before it starts");
    }
    if (given(2)) {
      const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(args[2]));
      auto v =
          parse_victim(std::string_view(p != nullptr ? p : "",
                                        static_cast<std::size_t>(sqlite3_value_bytes(args[2]))),
                       "explain");
      if (!v) {
        return v.err();
      }
      vs.push_back(std::move(*v));
    }
  }
  // The window and the baseline before its first interval.
  auto window = period_of(db, w.first, w.second);
  if (!window) {
    return window.err();
  }
  std::int64_t first = w.first;
  if (auto ivs = intervals_in(db, w.first, w.second); ivs && !ivs->empty()) {
    first = ivs->front().start;
  }
  const std::int64_t len = std::max(w.second - w.first, min_baseline_ns);
  auto baseline = period_of(db, first - len, first);
  if (!baseline) {
    return baseline.err();
  }
  std::unordered_map<std::int64_t, thread_stats> in_window, in_baseline;
  if (auto r = delay_by_thread(db, vs, *window, in_window); !r) {
    return r.err();
  }
  if (auto r = delay_by_thread(db, vs, *baseline, in_baseline); !r) {
    return r.err();
  }
  // The baseline rate over the window's recorded time; with no recorded baseline, nothing is
  // expected (every wait is extra).
  const long double scale_ld = baseline->recorded_ns > 0
                                   ? static_cast<long double>(window->recorded_ns) /
                                         static_cast<long double>(baseline->recorded_ns)
                                   : 0.0L;
  const double scale = static_cast<double>(scale_ld);
  // What a baseline amount comes to over the window's time, in whole ns.
  const auto at_baseline_rate = [&](std::int64_t x) {
    return static_cast<std::int64_t>(std::llround(static_cast<long double>(x) * scale_ld));
  };
  std::vector<victim_row> victims_ranked;
  for (const auto &[id, t] : in_window) {
    victim_row v;
    v.thread_id = id;
    v.w = &t;
    auto it = in_baseline.find(id);
    if (it != in_baseline.end()) {
      v.base = &it->second;
      v.expected_ns = at_baseline_rate(it->second.wait_ns);
    }
    v.excess_ns = t.wait_ns - v.expected_ns;
    if (v.excess_ns > 0) {
      victims_ranked.push_back(v);
    }
  }
  std::sort(victims_ranked.begin(), victims_ranked.end(),
            [](const victim_row &x, const victim_row &y) {
              return x.excess_ns != y.excess_ns ? x.excess_ns > y.excess_ns : x.w->tid < y.w->tid;
            });
  // The evidence, per thread.
  // blame_by_thread of the window and of the baseline, from one read of both.
  // Of the ranked threads only: the others' culprits are never read.
  std::unordered_set<std::int64_t> ranked;
  for (const auto &v : victims_ranked) {
    ranked.insert(v.thread_id);
  }
  auto blame = causes_of(db, {{vs, window->a, window->b}, {vs, baseline->a, baseline->b}}, true,
                         false, true, &ranked);
  if (!blame) {
    return blame.err();
  }
  std::unordered_map<std::int64_t, std::vector<const culprit_sum *>> culprits_w;
  for (const auto &tc : (*blame)[0].by_thread) {
    culprits_w[tc.thread_id].push_back(&tc.culprit);
  }
  std::map<std::pair<std::int64_t, culprit_key>, std::int64_t> wait_b;
  for (const auto &tc : (*blame)[1].by_thread) {
    wait_b[{tc.thread_id, key_of(tc.culprit)}] += tc.culprit.wait_ns;
  }
  auto inverted = inverted_waits(db, vs, window->a, window->b);
  if (!inverted) {
    return inverted.err();
  }
  std::map<std::pair<std::int64_t, culprit_key>, const inverted_wait *> inv;
  for (const auto &x : *inverted) {
    inv[{x.thread_id, culprit_key{0, x.culprit_pid, x.comm, x.cgroup}}] = &x;
  }
  auto mig_w = migrations_by_thread(db, vs, *window);
  if (!mig_w) {
    return mig_w.err();
  }
  auto mig_b = migrations_by_thread(db, vs, *baseline);
  if (!mig_b) {
    return mig_b.err();
  }
  std::set<std::string> victim_cgroups;
  for (const auto &v : victims_ranked) {
    if (!v.w->cgroup.empty()) {
      victim_cgroups.insert(v.w->cgroup);
    }
  }
  auto pressures = pressure_by_cgroup(db, victim_cgroups, *window, *baseline);
  if (!pressures) {
    return pressures.err();
  }
  auto wake_w = wakers_by_thread(db, vs, *window, ranked);
  if (!wake_w) {
    return wake_w.err();
  }
  auto wake_b = wakers_by_thread(db, vs, *baseline, ranked);
  if (!wake_b) {
    return wake_b.err();
  }

  rows out;
  std::int64_t rank = 0;
  for (const auto &v : victims_ranked) {
    ++rank;
    const thread_stats &t = *v.w;
    std::vector<cause_row> causes;
    // CPU culprits: the culprit's wait in the window beyond its baseline rate's, over the
    // victim's excess, or over the sum of every culprit's (<idle> and the others too) positive
    // difference where that is larger (other culprits' waits fell): shares add up to 100 at most.
    const auto extra_of = [&](const culprit_sum &c) {
      auto bi = wait_b.find({v.thread_id, key_of(c)});
      const std::int64_t expected = bi != wait_b.end() ? at_baseline_rate(bi->second) : 0;
      return std::make_pair(c.wait_ns - expected, expected);
    };
    std::int64_t denominator = v.excess_ns;
    {
      std::int64_t positive = 0;
      for (const culprit_sum *c : culprits_w[v.thread_id]) {
        positive += std::max<std::int64_t>(0, extra_of(*c).first);
      }
      denominator = std::max(denominator, positive);
    }
    for (const culprit_sum *c : culprits_w[v.thread_id]) {
      if (c->kind != 0) {
        continue; // <idle>, <unknown>, <other>: no culprit to name
      }
      const auto [extra, expected] = extra_of(*c);
      if (extra <= 0) {
        continue;
      }
      cause_row r;
      r.pid = c->pid;
      r.comm = c->comm;
      r.cgroup = c->cgroup;
      r.share = 100.0 * static_cast<double>(extra) / static_cast<double>(denominator);
      r.measure = static_cast<double>(c->wait_ns);
      r.measure_baseline = static_cast<double>(expected);
      const auto ii =
          c->pid ? inv.find({v.thread_id, culprit_key{0, *c->pid, c->comm, c->cgroup}}) : inv.end();
      if (ii != inv.end() && 2 * ii->second->wait_ns >= c->wait_ns) {
        const inverted_wait &x = *ii->second;
        r.kind = "inversion";
        r.summary = fmt::format("{} ({} {}) ran ahead of it at nice {}: {:.0f}% of the extra wait",
                                culprit_name(*c), policy_name(x.by_policy),
                                x.by_policy == 6 ? 0 : 99 - x.by_prio, x.prio - 120, *r.share);
      } else {
        r.kind = "cpu";
        r.summary = fmt::format("{} ran while it waited: {:.0f}% of the extra wait",
                                culprit_name(*c), *r.share);
      }
      causes.push_back(std::move(r));
    }
    // Throttling and pressure of its cgroup (and, for throttling, the ancestors).
    if (!t.cgroup.empty()) {
      const auto &[pw, pb] = pressures->at(t.cgroup);
      if (pw.throttled_ns && *pw.throttled_ns > 0) {
        const std::int64_t expected = pb.throttled_ns && pb.throttled_cgroup == pw.throttled_cgroup
                                          ? at_baseline_rate(*pb.throttled_ns)
                                          : 0;
        const std::int64_t extra = *pw.throttled_ns - expected;
        if (extra > 0) {
          cause_row r;
          r.kind = "throttle";
          r.cgroup = pw.throttled_cgroup;
          r.share = std::min(100.0,
                             100.0 * static_cast<double>(extra) / static_cast<double>(v.excess_ns));
          r.measure = static_cast<double>(*pw.throttled_ns);
          r.measure_baseline = static_cast<double>(expected);
          r.summary = fmt::format("{} was throttled {} ({} at its baseline rate): up to {:.0f}% "
                                  "of the extra wait",
                                  text::escape_for_terminal(pw.throttled_cgroup),
                                  text::format_duration_ns(r.measure),
                                  text::format_duration_ns(r.measure_baseline), *r.share);
          causes.push_back(std::move(r));
        }
      }
      // PSI "some" of its cgroup, else of the system.
      const bool own = pw.victim_some_pct.has_value();
      const auto now = own ? pw.victim_some_pct : pw.system_some_pct;
      const auto before = own ? pb.victim_some_pct : pb.system_some_pct;
      if (now && *now - before.value_or(0.0) >= min_pressure_rise_pct) {
        cause_row r;
        r.kind = "pressure";
        r.cgroup = own ? t.cgroup : std::string("/");
        r.measure = std::min(*now, 100.0);
        r.measure_baseline = std::min(before.value_or(0.0), 100.0);
        r.order = 2;
        r.summary = fmt::format("CPU pressure {:.0f}% in {} ({:.0f}% before)", r.measure,
                                text::escape_for_terminal(*r.cgroup), r.measure_baseline);
        causes.push_back(std::move(r));
      }
    }
    // Migrations against its baseline rate.
    if (auto mi = mig_w->find(v.thread_id); mi != mig_w->end()) {
      auto bi = mig_b->find(v.thread_id);
      const double expected = bi != mig_b->end() ? static_cast<double>(bi->second) * scale : 0.0;
      const auto n = static_cast<double>(mi->second);
      if (n >= 2 * expected && n - expected >= min_extra_migrations) {
        cause_row r;
        r.kind = "migration";
        r.measure = n;
        r.measure_baseline = expected;
        r.order = 1;
        r.summary = fmt::format("migrated {:.0f} times ({:.0f} at its baseline rate)", n, expected);
        causes.push_back(std::move(r));
      }
    }
    // Who woke it (wakeup group): the waker whose ended sleep grew most over its baseline
    // rate's, when by a tenth of the window at least and to twice that rate: it waited on that
    // waker more than it used to. Evidence, not a share of the scheduling delay; why() of the
    // thread goes one hop further (the waker's own wait).
    if (auto wi = wake_w->find(v.thread_id); wi != wake_w->end()) {
      const auto bi = wake_b->find(v.thread_id);
      const waker_sum *best = nullptr;
      std::int64_t best_extra = 0, best_expected = 0;
      for (const waker_sum &x : wi->second) {
        if (x.kind == 3) {
          continue; // <other>: no waker to name
        }
        std::int64_t before = 0;
        if (bi != wake_b->end()) {
          for (const waker_sum &y : bi->second) {
            if (y.kind == x.kind && y.pid == x.pid && y.comm == x.comm && y.cgroup == x.cgroup) {
              before += y.sleep_ns;
            }
          }
        }
        const std::int64_t expected = at_baseline_rate(before);
        const std::int64_t extra = x.sleep_ns - expected;
        if (extra > best_extra && x.sleep_ns >= 2 * expected) {
          best = &x;
          best_extra = extra;
          best_expected = expected;
        }
      }
      if (best != nullptr && window->recorded_ns > 0 &&
          static_cast<double>(best_extra) >=
              min_sleep_rise_share * static_cast<double>(window->recorded_ns)) {
        cause_row r;
        r.kind = "wakeup";
        if (best->kind == 0) {
          r.pid = best->pid;
          r.comm = best->comm;
          r.cgroup = best->cgroup;
        } else {
          r.comm = best->comm; // <idle>, <hardirq>, <softirq>, <timer>
        }
        r.measure = static_cast<double>(best->sleep_ns);
        r.measure_baseline = static_cast<double>(best_expected);
        r.order = 3;
        const std::string who =
            best->pid && *best->pid != 0
                ? fmt::format("{}[{}]", text::escape_for_terminal(best->comm), *best->pid)
                : text::escape_for_terminal(best->comm);
        r.summary = fmt::format(
            "slept {} until {} woke it ({:.0f}% of the window; {} at its baseline rate): see why()",
            text::format_duration_ns(r.measure), who,
            100.0 * r.measure / static_cast<double>(window->recorded_ns),
            text::format_duration_ns(r.measure_baseline));
        causes.push_back(std::move(r));
      }
    }
    std::stable_sort(causes.begin(), causes.end(), [](const cause_row &x, const cause_row &y) {
      if (x.order != y.order) {
        return x.order < y.order;
      }
      return x.share.value_or(0.0) != y.share.value_or(0.0)
                 ? x.share.value_or(0.0) > y.share.value_or(0.0)
                 : x.measure > y.measure;
    });
    const auto opt_int = [](const std::optional<std::int64_t> &o) {
      value x;
      if (o) {
        x = *o;
      }
      return x;
    };
    const auto opt_text = [](const std::optional<std::string> &o) {
      value x;
      if (o) {
        x = *o;
      }
      return x;
    };
    const auto victim_part = [&] {
      row r;
      r.reserve(21);
      r.emplace_back(rank);
      r.emplace_back(t.tid);
      r.emplace_back(t.pid);
      r.emplace_back(t.comm);
      r.emplace_back(t.cgroup);
      r.push_back(opt_int(v.base != nullptr ? p99(v.base->hist) : std::nullopt));
      r.push_back(opt_int(p99(t.hist)));
      r.emplace_back(t.wait_ns);
      r.emplace_back(v.expected_ns);
      r.emplace_back(v.excess_ns);
      return r;
    };
    if (causes.empty()) {
      row r = victim_part();
      for (int i = 0; i < 8; ++i) {
        r.emplace_back();
      }
      r.emplace_back(std::string("no recorded cause"));
      out.push_back(std::move(r));
      continue;
    }
    std::int64_t cause_rank = 0;
    for (auto &c : causes) {
      row r = victim_part();
      r.emplace_back(++cause_rank);
      r.emplace_back(c.kind);
      r.push_back(opt_int(c.pid));
      r.push_back(opt_text(c.comm));
      r.push_back(opt_text(c.cgroup));
      if (c.share) {
        r.emplace_back(*c.share);
      } else {
        r.emplace_back();
      }
      r.emplace_back(c.measure);
      r.emplace_back(c.measure_baseline);
      r.emplace_back(std::move(c.summary));
      out.push_back(std::move(r));
    }
  }
  return out;
}

} // namespace rsched::query::detail
