// hist_buckets, spikes, compare: latency analytics over the histogram rows.
#include "rsched/base/text.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"

#include "sqlite_util.hpp"
#include "table_functions.hpp"
#include "tvf_blame.hpp"
#include "tvf_window.hpp"
#include "vtab_tiered.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::store::detail {

// ---- hist_buckets --------------------------------------------------------------------------

result<rows> hist_buckets(sqlite3 * /*db*/, const fn_context & /*ctx*/, const args_t &args) {
  auto h = hist_arg(args[0], "hist_buckets");
  if (!h) {
    return h.err();
  }
  rows out;
  if (!*h) {
    return out;
  }
  const auto &hist = **h;
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  auto clamp = [](std::uint64_t v) { return static_cast<std::int64_t>(v > max ? max : v); };
  for (std::size_t s = 0; s < stats::slot_count(hist.kind); ++s) {
    if (hist.slots[s] == 0) {
      continue;
    }
    const stats::bucket b = stats::bucket_bounds(hist.kind, s);
    out.push_back(
        {clamp(b.lo), b.open_ended() ? value{} : value{clamp(b.hi)}, clamp(hist.slots[s])});
  }
  return out;
}

// ---- spikes --------------------------------------------------------------------------------

namespace {

struct metric_source {
  bool cpu = false; // cpu_hist (key: CPU) instead of thread_hist (key: comm)
  std::int64_t id = 1;
};

result<metric_source> metric_of(sqlite3 *db, sqlite3_value *v, const char *fn) {
  const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
  const std::string name = p != nullptr ? p : "";
  if (name == "cpu_sched_delay") {
    return metric_source{true, 1};
  }
  if (name == "cpu_idle") {
    return metric_source{true, 8};
  }
  auto st = prepare_stmt(db, "SELECT id FROM metric WHERE name = ?1 AND name <> 'cpu_idle'");
  if (!st) {
    return st.err();
  }
  sqlite3_bind_text(st->get(), 1, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st->get()) != SQLITE_ROW) {
    return make_error(fmt::format("{}: unknown metric '{}' (sched_delay, cpu_sched_delay, "
                                  "waking_delay, sleep, slice_voluntary, ...)",
                                  fn, name));
  }
  return metric_source{false, sqlite3_column_int64(st->get(), 0)};
}

// One series of per-interval figures (a victim key's, or every thread's merged): what the
// spike detection needs of each interval's merged histogram.
struct series_point {
  std::size_t index;                // into the scanned intervals
  std::optional<std::uint64_t> p99; // none: nothing to rank (an empty histogram)
  std::uint64_t samples = 0;        // the histogram's total count
};
struct scanned {
  std::vector<interval_info> ivs; // intervals with rows, in time order
  std::map<value, std::vector<series_point>> series;
};

// Streams the histogram rows of `m` in intervals overlapping [a, b) of the threads matching
// `vs`, in time order: on_interval(interval_info) before the first row of each interval that
// has one, then on_row(key, histogram) per row, the key being the `key` column of the row's
// thread ("comm", "cgroup" or "pid") or, for a CPU metric, the CPU. Nothing is kept: a day of a
// busy machine is tens of millions of rows. Rows of threads without an identity are skipped.
template <typename OnInterval, typename OnRow>
result<void> scan_rows(sqlite3 *db, metric_source m, std::int64_t a, std::int64_t b,
                       const std::string &key, const victims &vs, OnInterval &&on_interval,
                       OnRow &&on_row) {
  const std::string src = timeline(db);
  const std::string sql =
      m.cpu ? fmt::format("SELECT i.id, i.start_ns, i.dur_ns, i.boot_id, i.flags & 1, c.cpu, "
                          "c.hist FROM {} AS i CROSS JOIN cpu_hist AS c ON c.interval_id = i.id "
                          "AND c.metric = ?3 WHERE {} ORDER BY i.start_ns, i.id",
                          src, overlaps(db, "i", a))
            : fmt::format("SELECT i.id, i.start_ns, i.dur_ns, i.boot_id, i.flags & 1, "
                          "h.thread_id, h.hist FROM {} AS i CROSS JOIN thread_hist AS h "
                          "ON h.interval_id = i.id AND h.metric = ?3{} WHERE {} "
                          "ORDER BY i.start_ns, i.id",
                          src,
                          // The victims' threads chosen in SQL too: a row SQLite hands back
                          // has its histogram read, and a narrow victim skips most of them.
                          vs.empty() ? std::string()
                                     : fmt::format(" JOIN thread AS t ON t.id = h.thread_id "
                                                   "AND {}",
                                                   victims_sql(vs, 4)),
                          overlaps(db, "i", a));
  auto st = prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  sqlite3_bind_int64(st->get(), 3, m.id);
  if (!m.cpu) {
    bind_victims(st->get(), vs, 4);
  }
  // A thread metric's key and victim filter come from the thread's identity, looked up once
  // per thread (a day has tens of millions of rows of a few thousand threads), not joined per
  // row; nullopt: the thread does not match the victims (or has no identity, as a join drops).
  std::unordered_map<std::int64_t, std::optional<value>> key_of;
  stmt_ptr ident;
  if (!m.cpu) {
    auto q = prepare_stmt(db, fmt::format("SELECT t.{} FROM thread AS t WHERE t.id = ?1 AND {}",
                                          key, victims_sql(vs, 2)));
    if (!q) {
      return q.err();
    }
    ident = std::move(*q);
  }
  const auto key_of_thread = [&](std::int64_t thread) -> result<const std::optional<value> *> {
    auto [it, fresh] = key_of.try_emplace(thread);
    if (fresh) {
      sqlite3_stmt *q = ident.get();
      sqlite3_reset(q);
      sqlite3_bind_int64(q, 1, thread);
      bind_victims(q, vs, 2);
      const int r = sqlite3_step(q);
      if (r == SQLITE_ROW) {
        it->second = sqlite3_column_type(q, 0) == SQLITE_INTEGER
                         ? value{std::int64_t{sqlite3_column_int64(q, 0)}}
                         : value{column_text(q, 0)};
      } else if (r != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db));
      }
    }
    return &it->second;
  };
  std::optional<std::int64_t> current; // the interval of the last row passed on
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt *s = st->get();
    const std::int64_t id = sqlite3_column_int64(s, 0);
    value k;
    if (m.cpu) {
      k = std::int64_t{sqlite3_column_int64(s, 5)};
    } else {
      auto tk = key_of_thread(sqlite3_column_int64(s, 5));
      if (!tk) {
        return tk.err();
      }
      if (!**tk) {
        continue; // not one of the victims
      }
      k = ***tk;
    }
    auto h = col_hist(s, 6);
    if (!h) {
      return make_error("stored histogram: " + h.err().msg);
    }
    if (current != id) {
      current = id;
      on_interval(interval_info{id, sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2),
                                column_text(s, 3), sqlite3_column_int64(s, 4) != 0});
    }
    if (auto r = on_row(std::move(k), *h); !r) {
      return r.err();
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
}

// The rows of scan_rows() as series: per interval, every row merged (`all`) or merged per key,
// reduced to its p99 and sample count as the interval ends (a few numbers per interval and key
// are kept, not the rows' histograms).
result<scanned> scan_series(sqlite3 *db, metric_source m, std::int64_t a, std::int64_t b,
                            const std::string &key, const victims &vs, bool all, double p) {
  scanned out;
  std::map<value, stats::histogram> per_key; // the current interval's
  std::optional<stats::histogram> merged;    // the current interval's; none before its 1st row
  const auto point = [p](std::size_t index, const stats::histogram &h) {
    series_point pt{index, std::nullopt, h.total()};
    if (auto r = stats::percentile(h, p)) {
      pt.p99 = r->value;
    }
    return pt;
  };
  const auto flush = [&] {
    if (!merged) {
      return;
    }
    const std::size_t index = out.ivs.size() - 1;
    if (all) {
      out.series[value{}].push_back(point(index, *merged));
    }
    for (auto &[k, h] : per_key) {
      out.series[k].push_back(point(index, h));
    }
    per_key.clear();
    merged.reset();
  };
  auto r = scan_rows(
      db, m, a, b, key, vs,
      [&](interval_info &&iv) {
        flush();
        out.ivs.push_back(std::move(iv));
      },
      [&](value &&k, const stats::histogram &h) -> result<void> {
        if (!merged) {
          merged = stats::histogram{h.kind, {}};
        }
        // Every row of an interval is of one layout.
        if (merged->kind != h.kind) {
          return make_error("cannot merge histograms of different layouts");
        }
        if (all) {
          (void)stats::merge_into(*merged, h);
          return {};
        }
        auto [it, fresh] = per_key.try_emplace(std::move(k), stats::histogram{h.kind, {}});
        return stats::merge_into(it->second, h);
      });
  if (!r) {
    return r.err();
  }
  flush();
  return out;
}

// A run of a series that spans an interval: its samples above `threshold` in the rows of its
// key (every row for `all`) are counted per comm (CPU for a CPU metric) into contrib[run].
struct run_need {
  value key;
  std::size_t run;
  std::uint64_t threshold;
  bool operator<(const run_need &o) const { return key < o.key; }
};

// For each interval of `needs` (a position in `ivs`, so in time order as the old per-run sums
// were added; its runs sorted by key), its rows of the threads matching
// `vs` read once, whatever the number of runs that span it.
result<void> add_above(sqlite3 *db, metric_source m, const std::string &key, const victims &vs,
                       bool all, const std::vector<interval_info> &ivs,
                       const std::map<std::size_t, std::vector<run_need>> &needs,
                       std::vector<std::map<value, double>> &contrib) {
  const std::string sql =
      m.cpu ? std::string("SELECT c.cpu, '', c.hist FROM cpu_hist AS c WHERE c.interval_id = ?1 "
                          "AND c.metric = ?2")
            : fmt::format("SELECT t.{}, t.comm, h.hist FROM thread_hist AS h JOIN thread AS t ON "
                          "t.id = h.thread_id WHERE h.interval_id = ?1 AND h.metric = ?2 AND {}",
                          key, victims_sql(vs, 3));
  auto st = prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_stmt *s = st->get();
  for (const auto &[at, runs] : needs) {
    const std::int64_t id = ivs[at].id;
    sqlite3_reset(s);
    sqlite3_bind_int64(s, 1, id);
    sqlite3_bind_int64(s, 2, m.id);
    bind_victims(s, vs, 3);
    int rc = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      value k;
      if (sqlite3_column_type(s, 0) == SQLITE_INTEGER) {
        k = std::int64_t{sqlite3_column_int64(s, 0)};
      } else {
        k = column_text(s, 0);
      }
      auto lo = runs.begin();
      auto hi = runs.end();
      if (!all) {
        const run_need probe{k, 0, 0};
        std::tie(lo, hi) = std::equal_range(runs.begin(), runs.end(), probe);
      }
      if (lo == hi) {
        continue;
      }
      auto h = col_hist(s, 2);
      if (!h) {
        return make_error("stored histogram: " + h.err().msg);
      }
      const value who = m.cpu ? k : value{column_text(s, 1)};
      for (auto it = lo; it != hi; ++it) {
        contrib[it->run][who] += count_above(*h, it->threshold);
      }
    }
    if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db));
    }
  }
  return {};
}

std::string key_text(const value &k) {
  if (const auto *i = std::get_if<std::int64_t>(&k)) {
    return fmt::format("cpu {}", *i);
  }
  return std::get<std::string>(k);
}

constexpr std::size_t baseline_intervals = 60;
constexpr double spike_p = 99.0;

} // namespace

namespace {

// spikes' threshold: a number (ns), a duration text ('5ms') or a multiple of the baseline ('3x').
struct threshold_arg {
  std::optional<double> multiple;
  std::int64_t absolute = 0;
};

result<threshold_arg> parse_threshold(sqlite3_value *v) {
  threshold_arg t;
  if (sqlite3_value_type(v) == SQLITE_TEXT) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(v));
    std::string txt = p != nullptr ? p : "";
    while (!txt.empty() && txt.back() == ' ') {
      txt.pop_back();
    }
    if (!txt.empty() && (txt.back() == 'x' || txt.back() == 'X')) {
      char *end = nullptr;
      const std::string num = txt.substr(0, txt.size() - 1);
      const double f = std::strtod(num.c_str(), &end);
      if (num.empty() || end != num.c_str() + num.size() || !std::isfinite(f) || f <= 0) {
        return make_error(fmt::format("spikes: invalid threshold '{}' (a multiple like '3x', "
                                      "ns, or a duration like '5ms')",
                                      text::escape_for_terminal(txt)));
      }
      t.multiple = f;
      return t;
    }
  }
  auto d = duration_arg(v, "spikes: threshold");
  if (!d) {
    return d.err();
  }
  t.absolute = *d;
  return t;
}

struct spike_run {
  std::size_t first, last; // into the series
  std::uint64_t peak;
  std::size_t peak_at;
  std::uint64_t threshold;
};

// Runs of consecutive intervals of one series whose p99 is above the threshold.
std::vector<spike_run> detect(const std::vector<interval_info> &ivs,
                              const std::vector<series_point> &pts, const threshold_arg &thr,
                              std::int64_t window_start, std::uint64_t min_samples) {
  struct over_t {
    std::size_t at; // into pts
    std::uint64_t p99;
    std::uint64_t threshold;
  };
  // The p99s of the previous (at most baseline_intervals) points: in order (`history`, a ring
  // once full) and sorted (`sorted`), so the median is read, not selected, at each point.
  std::vector<std::uint64_t> history;
  std::vector<std::uint64_t> sorted;
  std::size_t oldest = 0; // into history, once it holds baseline_intervals points
  std::vector<over_t> over;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    const auto &pt = pts[i];
    if (!pt.p99) {
      continue;
    }
    const std::uint64_t p99 = *pt.p99;
    // Every interval with samples is part of the baseline; one with fewer than min_samples is
    // not judged itself.
    const bool judged = pt.samples >= min_samples;
    std::optional<std::uint64_t> t;
    if (thr.multiple) {
      if (!sorted.empty()) {
        t = static_cast<std::uint64_t>(static_cast<double>(sorted[sorted.size() / 2]) *
                                       *thr.multiple);
      }
    } else {
      t = thr.absolute < 0 ? 0 : static_cast<std::uint64_t>(thr.absolute);
    }
    if (history.size() < baseline_intervals) {
      history.push_back(p99);
    } else {
      const std::uint64_t gone = history[oldest];
      sorted.erase(std::lower_bound(sorted.begin(), sorted.end(), gone));
      history[oldest] = p99;
      oldest = (oldest + 1) % baseline_intervals;
    }
    sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), p99), p99);
    const auto &iv = ivs[pt.index];
    if (!judged || iv.start + iv.dur <= window_start || !t) {
      continue;
    }
    if (p99 > *t) {
      over.push_back({i, p99, *t});
    }
  }
  std::vector<spike_run> runs;
  std::size_t k = 0;
  while (k < over.size()) {
    // A run: consecutive intervals of the series (no interval of the history in between, same
    // boot, no gap) above the threshold.
    std::size_t e = k;
    while (e + 1 < over.size() && pts[over[e + 1].at].index == pts[over[e].at].index + 1) {
      const auto &p = ivs[pts[over[e].at].index];
      const auto &n = ivs[pts[over[e + 1].at].index];
      if (p.boot != n.boot || n.start - p.end() > p.dur / 2) {
        break;
      }
      ++e;
    }
    spike_run r{over[k].at, over[e].at, over[k].p99, over[k].at, over[k].threshold};
    for (std::size_t j = k; j <= e; ++j) {
      if (over[j].p99 > r.peak) {
        r.peak = over[j].p99;
        r.peak_at = over[j].at;
        r.threshold = over[j].threshold;
      }
    }
    runs.push_back(r);
    k = e + 1;
  }
  return runs;
}

std::string top_text(const std::vector<std::pair<value, double>> &ranked) {
  std::string top;
  std::size_t shown = 0;
  for (const auto &[key, n] : ranked) {
    const auto count = static_cast<long long>(std::llround(n));
    if (shown == 3 || count <= 0) {
      break;
    }
    top += fmt::format("{}{} ({})", shown == 0 ? "" : ", ", key_text(key), count);
    ++shown;
  }
  return top;
}

} // namespace

result<rows> spikes_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto m = metric_of(db, args[0], "spikes");
  if (!m) {
    return m.err();
  }
  auto thr = parse_threshold(args[1]);
  if (!thr) {
    return thr.err();
  }
  auto w = window_args(db, ctx, args, 2, 3, "spikes");
  if (!w) {
    return w.err();
  }
  // victim: which threads (thread metrics); by: one series per comm (default), cgroup, pid or
  // CPU (CPU metrics), or 'all' merged; min_samples: an interval of a series with fewer samples
  // is not judged (a comm that woke twice has no meaningful p99).
  std::optional<std::string_view> victim_text;
  if (args[4] != nullptr && sqlite3_value_type(args[4]) != SQLITE_NULL) {
    victim_text = std::string_view(reinterpret_cast<const char *>(sqlite3_value_text(args[4])),
                                   static_cast<std::size_t>(sqlite3_value_bytes(args[4])));
  }
  auto vic = parse_victim(victim_text, "spikes");
  if (!vic) {
    return vic.err();
  }
  if (m->cpu && vic->what != victim::kind::all) {
    return make_error("spikes: a victim selects threads; CPU metrics have none (use a thread "
                      "metric, or by 'cpu')");
  }
  std::string by = m->cpu ? "cpu" : "comm";
  if (args[5] != nullptr && sqlite3_value_type(args[5]) != SQLITE_NULL) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(args[5]));
    by = p != nullptr ? p : "";
  }
  const bool all = by == "all";
  if (!all && (m->cpu ? by != "cpu" : (by != "comm" && by != "cgroup" && by != "pid"))) {
    return make_error(fmt::format(
        "spikes: cannot split {} by '{}' ({})", m->cpu ? "a CPU metric" : "a thread metric",
        text::escape_for_terminal(by), m->cpu ? "cpu or all" : "comm, cgroup, pid or all"));
  }
  std::uint64_t min_samples = all ? 1 : 10;
  if (args[6] != nullptr && sqlite3_value_type(args[6]) != SQLITE_NULL) {
    const std::int64_t n = sqlite3_value_int64(args[6]);
    if (sqlite3_value_type(args[6]) != SQLITE_INTEGER || n < 1) {
      return make_error("spikes: min_samples must be a whole number >= 1");
    }
    min_samples = static_cast<std::uint64_t>(n);
  }
  // Look back far enough for the baseline of the first intervals in the window.
  std::int64_t lookback = 0;
  if (thr->multiple) {
    lookback = longest_raw_interval(db) * std::int64_t{baseline_intervals + 1};
  }
  const std::int64_t from = w->first > std::numeric_limits<std::int64_t>::min() + lookback
                                ? w->first - lookback
                                : w->first;
  const std::string key_col = all || m->cpu ? "comm" : by;
  victims vs;
  if (vic->what != victim::kind::all) {
    vs.push_back(*vic);
  }
  auto data = scan_series(db, *m, from, w->second, key_col, vs, all, spike_p);
  if (!data) {
    return data.err();
  }
  const auto &ivs = data->ivs;
  struct out_row {
    std::int64_t start;
    value key;
    row r;
  };
  std::vector<out_row> outs;
  // The causes read blame and pressure rows: skipped (empty) where none were recorded.
  const bool any_blame = !m->cpu && m->id == 1 && recorded_in(db, "thread_blame", from, w->second);
  const bool any_pressure = recorded_in(db, "cgroup_cpu", from, w->second);
  // Which comms (CPUs for a CPU metric) had the samples above the threshold: the intervals of
  // the runs read again, each once (the scan kept no rows).
  struct found {
    const value *key;
    const std::vector<series_point> *pts;
    spike_run run;
  };
  std::vector<found> runs;
  std::map<std::size_t, std::vector<run_need>> needs;
  for (auto &[key, pts] : data->series) {
    for (auto &run : detect(ivs, pts, *thr, w->first, min_samples)) {
      for (std::size_t j = run.first; j <= run.last; ++j) {
        needs[pts[j].index].push_back({key, runs.size(), run.threshold});
      }
      runs.push_back({&key, &pts, run});
    }
  }
  for (auto &[at, list] : needs) {
    std::stable_sort(list.begin(), list.end());
  }
  std::vector<std::map<value, double>> contrib(runs.size());
  if (auto r = add_above(db, *m, key_col, vs, all, ivs, needs, contrib); !r) {
    return r.err();
  }
  needs.clear();
  for (std::size_t ri = 0; ri < runs.size(); ++ri) {
    const value &key = *runs[ri].key;
    const auto &pts = *runs[ri].pts;
    const spike_run &run = runs[ri].run;
    std::vector<std::pair<value, double>> ranked(contrib[ri].begin(), contrib[ri].end());
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto &x, const auto &y) { return x.second > y.second; });
    const auto &first = ivs[pts[run.first].index];
    const auto &last = ivs[pts[run.last].index];
    // The likely cause: who ran while these threads waited (scheduling delay), the
    // throttling of their cgroups and the CPU pressure over the run.
    victims who = vs;
    if (!all && !m->cpu) {
      victim k;
      if (by == "pid") {
        k.what = victim::kind::pid;
        k.number = std::get<std::int64_t>(key);
      } else {
        k.what = by == "comm" ? victim::kind::comm : victim::kind::cgroup;
        k.text = std::get<std::string>(key);
        k.descendants = false;
      }
      who.push_back(std::move(k));
    }
    std::vector<culprit_sum> culprits;
    if (any_blame) {
      auto c = blame_of(db, who, first.start, last.end());
      if (!c) {
        return c.err();
      }
      culprits = std::move(*c);
    }
    auto p = any_pressure ? pressure_of(db, who, first.start, last.end())
                          : result<pressure_sum>(pressure_sum{});
    if (!p) {
      return p.err();
    }
    value victim_v =
        all ? value{vic->what == victim::kind::all ? std::string("all") : vic->describe()} : key;
    outs.push_back({first.start,
                    key,
                    {first.start, last.end() - first.start, last.end(),
                     static_cast<std::int64_t>(run.peak), ivs[pts[run.peak_at].index].start,
                     top_text(ranked), static_cast<std::int64_t>(run.threshold),
                     std::move(victim_v), cause_text(culprits, *p)}});
  }
  std::stable_sort(outs.begin(), outs.end(), [](const out_row &x, const out_row &y) {
    return x.start != y.start ? x.start < y.start : x.key < y.key;
  });
  rows out;
  for (auto &o : outs) {
    out.push_back(std::move(o.r));
  }
  return out;
}

// ---- compare -------------------------------------------------------------------------------

namespace {

// Adds the histograms of `m` per key of the intervals of `src` (a tier's rows of `intervals`,
// or the timeline) that start in [from, to) into `out`.
result<void> add_starting_in(sqlite3 *db, metric_source m, int tier, std::int64_t from,
                             std::int64_t to, const std::string &key,
                             std::map<value, stats::histogram> &out) {
  const std::string src = tier == 0 ? timeline(db) : "intervals";
  const std::string in_tier = tier == 0 ? "" : fmt::format(" AND i.tier = {}", tier);
  const std::string sql =
      m.cpu ? fmt::format("SELECT c.cpu, c.hist FROM {} AS i CROSS JOIN cpu_hist AS c ON "
                          "c.interval_id = i.id AND c.metric = ?3 WHERE i.start_ns >= ?1 AND "
                          "i.start_ns < ?2{}",
                          src, in_tier)
            : fmt::format("SELECT t.{}, h.hist FROM {} AS i CROSS JOIN thread_hist AS h ON "
                          "h.interval_id = i.id AND h.metric = ?3 JOIN thread AS t ON t.id = "
                          "h.thread_id WHERE i.start_ns >= ?1 AND i.start_ns < ?2{}",
                          key, src, in_tier);
  auto st = prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, from);
  sqlite3_bind_int64(st->get(), 2, to);
  sqlite3_bind_int64(st->get(), 3, m.id);
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    auto h = col_hist(st->get(), 1);
    if (!h) {
      return make_error("stored histogram: " + h.err().msg);
    }
    value k;
    if (sqlite3_column_type(st->get(), 0) == SQLITE_INTEGER) {
      k = std::int64_t{sqlite3_column_int64(st->get(), 0)};
    } else {
      k = column_text(st->get(), 0);
    }
    auto [it, fresh] = out.try_emplace(std::move(k), stats::histogram{h->kind, {}});
    if (auto r = stats::merge_into(it->second, *h); !r) {
      return r.err();
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
}

// compare's side: per key, the merged histogram of the intervals overlapping [a, b). The whole
// minutes inside the window are planned as the routed views plan them (vtab_tiered.hpp): whole
// hours and minutes from the rollups where exact, the rest from the timeline by start time;
// the ragged ends keep the timeline's overlap rule (an interval that starts before the first whole
// minute and reaches into the window counts; one that starts in the whole minutes is theirs).
result<std::map<value, stats::histogram>> window_hists(sqlite3 *db, const fn_context &ctx,
                                                       metric_source m, std::int64_t a,
                                                       std::int64_t b, const std::string &key) {
  std::map<value, stats::histogram> out;
  const auto add_scanned = [&](std::int64_t x, std::int64_t y,
                               std::optional<std::int64_t> from) -> result<void> {
    bool skip = false; // an interval that started inside the whole minutes: read there
    return scan_rows(
        db, m, x, y, key, victims{},
        [&](const interval_info &iv) { skip = from && iv.start < *from; },
        [&](value &&k, const stats::histogram &h) -> result<void> {
          if (skip) {
            return {};
          }
          auto [it, fresh] = out.try_emplace(std::move(k), stats::histogram{h.kind, {}});
          return stats::merge_into(it->second, h);
        });
  };
  const auto ceil_min = [](std::int64_t v) {
    const std::int64_t f = v / minute_ns * minute_ns;
    return f < v ? f + minute_ns : f;
  };
  std::optional<std::vector<tier_segment>> plan;
  const std::int64_t a2 =
      a > std::numeric_limits<std::int64_t>::max() - minute_ns ? a : ceil_min(a);
  const std::int64_t b2 = b < 0 ? b : b / minute_ns * minute_ns;
  if (ctx.tier_routing && a2 < b2) {
    auto p = plan_window(db, a2, b2);
    if (!p) {
      return p.err();
    }
    plan = std::move(*p);
  }
  if (!plan) {
    if (auto r = add_scanned(a, b, std::nullopt); !r) {
      return r.err();
    }
    return out;
  }
  if (auto r = add_scanned(a, a2, std::nullopt); !r) {
    return r.err();
  }
  for (const auto &s : *plan) {
    if (auto r = add_starting_in(db, m, s.tier, s.from, s.to, key, out); !r) {
      return r.err();
    }
  }
  if (b2 < b) {
    if (auto r = add_scanned(b2, b, b2); !r) {
      return r.err();
    }
  }
  return out;
}

} // namespace

result<rows> compare_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  auto wa = window_args(db, ctx, args, 0, 1, "compare");
  if (!wa) {
    return wa.err();
  }
  auto wb = window_args(db, ctx, args, 2, 3, "compare");
  if (!wb) {
    return wb.err();
  }
  std::string by = "comm";
  if (args[4] != nullptr) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(args[4]));
    by = p != nullptr ? p : "";
  }
  metric_source m{false, 1};
  if (by == "cpu") {
    m.cpu = true;
  } else if (by != "comm" && by != "cgroup") {
    return make_error(fmt::format("compare: cannot group by '{}' (comm, cgroup or cpu)", by));
  }
  struct side {
    stats::histogram a{stats::layout::latency, {}};
    stats::histogram b{stats::layout::latency, {}};
  };
  std::map<value, side> keys;
  for (int which = 0; which < 2; ++which) {
    const auto &w = which == 0 ? *wa : *wb;
    auto data = window_hists(db, ctx, m, w.first, w.second, m.cpu ? "comm" : by);
    if (!data) {
      return data.err();
    }
    for (const auto &[k, h] : *data) {
      auto &s = keys[k];
      if (auto r = stats::merge_into(which == 0 ? s.a : s.b, h); !r) {
        return r.err();
      }
    }
  }
  auto pct = [](const stats::histogram &h, double p) -> value {
    const auto r = stats::percentile(h, p);
    return r ? value{static_cast<std::int64_t>(r->value)} : value{};
  };
  struct out_row {
    row r;
    double excess;
    std::int64_t d;
  };
  std::vector<out_row> tmp;
  for (const auto &[key, s] : keys) {
    const auto a99 = stats::percentile(s.a, 99);
    const auto b99 = stats::percentile(s.b, 99);
    const auto av = a99 ? static_cast<std::int64_t>(a99->value) : 0;
    const auto bv = b99 ? static_cast<std::int64_t>(b99->value) : 0;
    const std::int64_t d = bv - av;
    const value ratio =
        a99 && b99 && av > 0 ? value{static_cast<double>(bv) / static_cast<double>(av)} : value{};
    // Excess: B's samples in buckets entirely above A's p99 (all of B when A had none), minus
    // the 1 % expected above a p99 when nothing changed. It ranks by how much delay changed,
    // so a key with one unlucky sample does not outrank one whose every sample got worse.
    double above = 0;
    for (std::size_t slot = 0; slot < stats::slot_count(s.b.kind); ++slot) {
      if (s.b.slots[slot] != 0 &&
          (!a99 || stats::bucket_bounds(s.b.kind, slot).lo > a99->bounds.hi)) {
        above += static_cast<double>(s.b.slots[slot]);
      }
    }
    const double excess = std::max(0.0, above - 0.01 * static_cast<double>(s.b.total()));
    tmp.push_back(
        {{key, static_cast<std::int64_t>(s.a.total()), pct(s.a, 50), pct(s.a, 99),
          static_cast<std::int64_t>(s.b.total()), pct(s.b, 50), pct(s.b, 99), d, ratio, excess},
         excess,
         d});
  }
  std::stable_sort(tmp.begin(), tmp.end(), [](const out_row &x, const out_row &y) {
    return x.excess != y.excess ? x.excess > y.excess : x.d > y.d;
  });
  rows out;
  for (auto &t : tmp) {
    out.push_back(std::move(t.r));
  }
  return out;
}

} // namespace rsched::store::detail
