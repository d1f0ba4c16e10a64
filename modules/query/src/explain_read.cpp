// explain_read.hpp: the reads of a period explain() and why() stand on.
#include "explain_read.hpp"

#include "rsched/base/flat_map.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/store/hist_pack.hpp"
#include "rsched/store/row_pack.hpp"

#include "tvf_window.hpp"

#include <fmt/format.h>

#include <span>
#include <sqlite3.h>
#include <tuple>
#include <unordered_set>

namespace rsched::query::detail {

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

namespace {

// One thread_hist row of sched_delay counted into its thread's stats: its wait summed, its
// histogram added into the thread's as it decodes (not decoded, then merged: two passes over
// 600 bytes for a few buckets), with merge_into's layout check.
result<void> add_delay_row(thread_stats &t, std::int64_t total,
                           std::span<const std::uint8_t> blob) {
  t.wait_ns += total;
  t.any = true;
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

// Runs `st` again with ?1 = interval `id`: its first step's code (SQLITE_ROW, SQLITE_DONE, an
// error).
int step_interval(sqlite3_stmt *st, std::int64_t id) {
  sqlite3_reset(st);
  sqlite3_bind_int64(st, 1, id);
  return sqlite3_step(st);
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
    int rc = step_interval(ps, iv.id);
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
    for (rc = step_interval(rs, iv.id); rc == SQLITE_ROW; rc = sqlite3_step(rs)) {
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

} // namespace

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
  // Every thread's (no victims): no identity to join per row.
  auto r = each_row(
      db,
      vs.empty() ? fmt::format("SELECT m.thread_id, sum(m.count) FROM {} AS i CROSS JOIN "
                               "thread_migration AS m ON m.interval_id = i.id WHERE {} GROUP BY "
                               "m.thread_id",
                               timeline(db), overlaps(db, "i", p.a))
                 : fmt::format("SELECT m.thread_id, sum(m.count) FROM {} AS i CROSS JOIN "
                               "thread_migration AS m ON m.interval_id = i.id CROSS JOIN thread "
                               "AS t ON t.id = m.thread_id WHERE {} AND {} GROUP BY m.thread_id",
                               timeline(db), overlaps(db, "i", p.a), victims_sql(vs, 3)),
      p.a, p.b, vs,
      [&](sqlite3_stmt *s) { out[sqlite3_column_int64(s, 0)] = sqlite3_column_int64(s, 1); });
  if (!r) {
    return make_error("explain: " + r.err().msg);
  }
  return out;
}

// Every process's (pid, comm, cgroup) I/O in a period; none before schema 20.
result<std::vector<io_sum>> io_by_process(sqlite3 *db, const period &p) {
  std::vector<io_sum> out;
  if (!has_table(db, "thread_io")) {
    return out;
  }
  auto r = each_row(
      db,
      fmt::format("SELECT t.pid, t.comm, t.cgroup, sum(x.read_bytes), sum(x.write_bytes) FROM {} "
                  "AS i CROSS JOIN thread_io AS x ON x.interval_id = i.id CROSS JOIN thread AS t "
                  "ON t.id = x.thread_id WHERE {} GROUP BY t.pid, t.comm, t.cgroup",
                  timeline(db), overlaps(db, "i", p.a)),
      p.a, p.b, {}, [&](sqlite3_stmt *s) {
        out.push_back({sqlite3_column_int64(s, 0), sqlite::column_text(s, 1),
                       sqlite::column_text(s, 2), sqlite3_column_int64(s, 3),
                       sqlite3_column_int64(s, 4)});
      });
  if (!r) {
    return make_error("explain: " + r.err().msg);
  }
  return out;
}

class sleep_reader::impl {
public:
  impl(sqlite3 *db, const victims &vs) : db_(db), vs_(vs) {}

  result<void> read(const period &p, std::unordered_map<std::int64_t, thread_stats> &stats,
                    wakers_map &wakers) {
    if (!has_table(db_, "thread_wakeup") || !recorded_in(db_, "thread_wakeup", p.a, p.b)) {
      return {};
    }
    sums_.clear();
    auto r = has_table(db_, "thread_wakeup_pack") ? read_packed(p) : read_sql(p);
    if (!r) {
      return make_error("explain: " + r.err().msg);
    }
    return add_to(stats, wakers);
  }

private:
  struct waker_info {
    int kind = 0;
    std::optional<std::int64_t> pid;
    std::string comm, cgroup;
  };
  // (thread, waker, state) -> sleep
  using key = std::tuple<std::int64_t, std::int64_t, int>;
  struct key_hash {
    std::size_t operator()(const key &k) const noexcept {
      const auto [t, w, st] = k;
      constexpr std::uint64_t mix = 0x9E3779B97F4A7C15U;
      const std::uint64_t h = (static_cast<std::uint64_t>(t) * mix) ^
                              (static_cast<std::uint64_t>(w) << 2U) ^
                              static_cast<std::uint64_t>(st);
      return std::hash<std::uint64_t>{}(h);
    }
  };

  // Sums one row (a thread that is no victim is left out when its identity is looked up).
  void add(std::int64_t thread, std::int64_t waker, std::int64_t state, std::int64_t sleep) {
    sums_[{thread, waker, static_cast<int>(state)}] += sleep;
  }

  result<void> read_packed(const period &p) {
    auto ivs = intervals_in(db_, p.a, p.b);
    if (!ivs) {
      return ivs.err();
    }
    auto pack = sqlite::prepare_stmt(db_, "SELECT data FROM thread_wakeup_pack WHERE "
                                          "interval_id = ?1");
    auto row_st = sqlite::prepare_stmt(db_, "SELECT thread_id, waker_id, state, sleep_ns FROM "
                                            "thread_wakeup_row WHERE interval_id = ?1");
    if (!pack || !row_st) {
      return !pack ? pack.err() : row_st.err();
    }
    std::vector<std::int64_t> cells;
    for (const auto &iv : *ivs) {
      sqlite3_stmt *ps = pack->get();
      int rc = step_interval(ps, iv.id);
      if (rc == SQLITE_ROW) {
        // (thread_id, waker_id, state, sleep_ns, count)
        if (auto u = store::unpack_rows(column_blob(ps, 0), 5, cells); !u) {
          return make_error(fmt::format("thread_wakeup_pack interval {}: {}", iv.id, u.err().msg));
        }
        for (std::size_t i = 0; i + 5 <= cells.size(); i += 5) {
          add(cells[i], cells[i + 1], cells[i + 2], cells[i + 3]);
        }
      } else if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db_));
      }
      sqlite3_stmt *rs = row_st->get();
      for (rc = step_interval(rs, iv.id); rc == SQLITE_ROW; rc = sqlite3_step(rs)) {
        add(sqlite3_column_int64(rs, 0), sqlite3_column_int64(rs, 1), sqlite3_column_int64(rs, 2),
            sqlite3_column_int64(rs, 3));
      }
      if (rc != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db_));
      }
    }
    return {};
  }

  result<void> read_sql(const period &p) {
    return each_row(db_,
                    fmt::format("SELECT w.thread_id, w.waker_id, w.state, sum(w.sleep_ns) FROM {} "
                                "AS i CROSS JOIN thread_wakeup AS w ON w.interval_id = i.id WHERE "
                                "{} GROUP BY w.thread_id, w.waker_id, w.state",
                                timeline(db_), overlaps(db_, "i", p.a)),
                    p.a, p.b, {}, [&](sqlite3_stmt *s) {
                      add(sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
                          sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3));
                    });
  }

  // The thread's stats in `stats` when it is a victim (its identity read the first time), else
  // nullptr.
  result<thread_stats *> victim(std::int64_t id,
                                std::unordered_map<std::int64_t, thread_stats> &stats) {
    if (auto it = stats.find(id); it != stats.end()) {
      return &it->second; // read with its delay: a victim
    }
    auto [known, fresh] = not_victims_.insert(id);
    if (!fresh) {
      return nullptr;
    }
    if (!ident_) {
      auto st = sqlite::prepare_stmt(
          db_, fmt::format("SELECT t.tid, t.pid, t.comm, t.cgroup FROM thread AS t WHERE t.id = "
                           "?1 AND {}",
                           victims_sql(vs_, 2)));
      if (!st) {
        return st.err();
      }
      ident_ = std::move(*st);
    }
    sqlite3_stmt *q = ident_.get();
    sqlite3_reset(q);
    bind_victims(q, vs_, 2);
    sqlite3_bind_int64(q, 1, id);
    const int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
      return nullptr;
    }
    if (rc != SQLITE_ROW) {
      return make_error(sqlite3_errmsg(db_));
    }
    not_victims_.erase(known);
    thread_stats &t = stats[id];
    t.tid = sqlite3_column_int64(q, 0);
    t.pid = sqlite3_column_int64(q, 1);
    t.comm = sqlite::column_text(q, 2);
    t.cgroup = sqlite::column_text(q, 3);
    return &t;
  }

  result<const waker_info *> waker(std::int64_t id) {
    if (auto it = wakers_.find(id); it != wakers_.end()) {
      return &it->second;
    }
    if (!culprit_) {
      auto st = sqlite::prepare_stmt(db_, "SELECT kind, CASE kind WHEN 0 THEN nullif(pid, 0) WHEN "
                                          "1 THEN 0 END, comm, cgroup FROM culprit WHERE id = ?1");
      if (!st) {
        return st.err();
      }
      culprit_ = std::move(*st);
    }
    sqlite3_stmt *q = culprit_.get();
    sqlite3_reset(q);
    sqlite3_bind_int64(q, 1, id);
    waker_info w;
    if (const int rc = sqlite3_step(q); rc == SQLITE_ROW) {
      w.kind = sqlite3_column_int(q, 0);
      if (sqlite3_column_type(q, 1) != SQLITE_NULL) {
        w.pid = sqlite3_column_int64(q, 1);
      }
      w.comm = sqlite::column_text(q, 2);
      w.cgroup = sqlite::column_text(q, 3);
    } else if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db_));
    } else {
      return nullptr; // no culprit row: the SQL join would drop the row
    }
    return &wakers_.emplace(id, std::move(w)).first->second;
  }

  // The period's sums into the victims' stats (held: not D, ended by a process; blocked: D) and
  // their wakers.
  result<void> add_to(std::unordered_map<std::int64_t, thread_stats> &stats, wakers_map &out) {
    result<void> r;
    sums_.for_each([&](const key &k, std::int64_t sleep) {
      if (r) {
        r = add_one(k, sleep, stats, out);
      }
    });
    return r;
  }

  // One (thread, waker, state) sum into the thread's stats and wakers, when it is a victim's.
  result<void> add_one(const key &k, std::int64_t sleep,
                       std::unordered_map<std::int64_t, thread_stats> &stats, wakers_map &out) {
    const auto &[thread, waker_id, state] = k;
    auto t = victim(thread, stats);
    if (!t) {
      return t.err();
    }
    auto w = waker(waker_id);
    if (!w) {
      return w.err();
    }
    if (*t == nullptr || *w == nullptr) {
      return {};
    }
    thread_stats &ts = **t;
    const waker_info &wi = **w;
    ts.any = true;
    if (state == 1) {
      ts.blocked_ns += sleep;
    } else if (wi.kind == 0) {
      ts.held_ns += sleep;
    }
    out[thread].push_back({wi.kind, wi.pid, wi.comm, wi.cgroup, state, sleep});
    return {};
  }

  sqlite3 *db_;
  const victims &vs_;
  base::flat_map<key, std::int64_t, key_hash> sums_;
  std::unordered_set<std::int64_t> not_victims_;
  std::unordered_map<std::int64_t, waker_info> wakers_;
  sqlite::stmt_ptr ident_, culprit_;
};

sleep_reader::sleep_reader(sqlite3 *db, const victims &vs)
    : impl_(std::make_unique<impl>(db, vs)) {}
sleep_reader::~sleep_reader() = default;
result<void> sleep_reader::read(const period &p, thread_stats_map &stats, wakers_map &wakers) {
  return impl_->read(p, stats, wakers);
}

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
    // The cgroup's own pressure in each period, whichever of its threads ran then.
    qs.push_back({{v}, window.a, window.b, std::vector<std::string>{c}});
    qs.push_back({{v}, baseline.a, baseline.b, std::vector<std::string>{c}});
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

} // namespace rsched::query::detail
