// hist_buckets, spikes, compare: latency analytics over the histogram rows.
#include "rsched/base/text.hpp"
#include "rsched/sqlite/statement.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/stats/percentile.hpp"
#include "rsched/store/hist_functions.hpp"
#include "rsched/store/hist_summary.hpp"

#include "table_functions.hpp"
#include "tvf_blame.hpp"
#include "tvf_window.hpp"
#include "vtab_tiered.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rsched::query::detail {

// ---- hist_buckets --------------------------------------------------------------------------

result<rows> hist_buckets(sqlite3 * /*db*/, const fn_context & /*ctx*/, const args_t &args) {
  auto h = store::hist_arg(args[0], "hist_buckets");
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
  auto st =
      sqlite::prepare_stmt(db, "SELECT id FROM metric WHERE name = ?1 AND name <> 'cpu_idle'");
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

// A thread metric's key and victim filter come from the thread's identity, looked up once per
// thread (a day has tens of millions of rows of a few thousand threads), not joined per row:
// the `key` column of the thread ("comm", "cgroup" or "pid"), nullopt when the thread does not
// match the victims (or has no identity, as a join drops).
class thread_keys {
public:
  static result<thread_keys> make(sqlite3 *db, const std::string &key, const victims &vs) {
    auto q =
        sqlite::prepare_stmt(db, fmt::format("SELECT t.{} FROM thread AS t WHERE t.id = ?1 AND {}",
                                             key, victims_sql(vs, 2)));
    if (!q) {
      return q.err();
    }
    thread_keys k;
    k.db_ = db;
    k.vs_ = vs;
    k.ident_ = std::move(*q);
    return k;
  }
  result<const std::optional<value> *> of(std::int64_t thread) {
    auto [it, fresh] = key_of_.try_emplace(thread);
    if (fresh) {
      sqlite3_stmt *q = ident_.get();
      sqlite3_reset(q);
      sqlite3_bind_int64(q, 1, thread);
      bind_victims(q, vs_, 2);
      const int r = sqlite3_step(q);
      if (r == SQLITE_ROW) {
        it->second = sqlite3_column_type(q, 0) == SQLITE_INTEGER
                         ? value{std::int64_t{sqlite3_column_int64(q, 0)}}
                         : value{sqlite::column_text(q, 0)};
      } else if (r != SQLITE_DONE) {
        return make_error(sqlite3_errmsg(db_));
      }
    }
    return &it->second;
  }

private:
  sqlite3 *db_ = nullptr;
  victims vs_;
  sqlite::stmt_ptr ident_;
  std::unordered_map<std::int64_t, std::optional<value>> key_of_;
};

using blob_view = std::span<const std::uint8_t>;

// Streams the histogram rows of `m` in intervals overlapping [a, b) of the threads matching
// `vs`, in time order: on_interval(interval_info) before the first row of each interval that
// has one, then on_row(key, histogram) per row, the key being the `key` column of the row's
// thread ("comm", "cgroup" or "pid") or, for a CPU metric, the CPU, and `thread` the row's
// thread (its thread.id; the CPU for a CPU metric). An on_row that takes a blob_view in place of
// the histogram gets the stored blob undecoded. Nothing is kept: a day of a busy machine is
// tens of millions of rows. Rows of threads without an identity are skipped.
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
                                     : fmt::format(" CROSS JOIN thread AS t ON t.id = h.thread_id "
                                                   "AND {}",
                                                   victims_sql(vs, 4)),
                          overlaps(db, "i", a));
  auto st = sqlite::prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, a);
  sqlite3_bind_int64(st->get(), 2, b);
  sqlite3_bind_int64(st->get(), 3, m.id);
  if (!m.cpu) {
    bind_victims(st->get(), vs, 4);
  }
  std::optional<thread_keys> keys;
  if (!m.cpu) {
    auto k = thread_keys::make(db, key, vs);
    if (!k) {
      return k.err();
    }
    keys = std::move(*k);
  }
  std::optional<std::int64_t> current; // the interval of the last row passed on
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    sqlite3_stmt *s = st->get();
    const std::int64_t id = sqlite3_column_int64(s, 0);
    value k;
    const std::int64_t thread = sqlite3_column_int64(s, 5);
    if (m.cpu) {
      k = std::int64_t{thread};
    } else {
      auto tk = keys->of(thread);
      if (!tk) {
        return tk.err();
      }
      if (!**tk) {
        continue; // not one of the victims
      }
      k = ***tk;
    }
    if (current != id) {
      current = id;
      on_interval(interval_info{id, sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2),
                                sqlite::column_text(s, 3), sqlite3_column_int64(s, 4) != 0});
    }
    if constexpr (std::is_invocable_v<OnRow &, value &&, std::int64_t, blob_view>) {
      // the stored blob as it is (compare reads layout 5 at its own precision)
      const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(s, 6));
      const blob_view bytes(p, static_cast<std::size_t>(sqlite3_column_bytes(s, 6)));
      if (auto r = on_row(std::move(k), thread, bytes); !r) {
        return r.err();
      }
    } else {
      auto h = col_hist(s, 6);
      if (!h) {
        return make_error("stored histogram: " + h.err().msg);
      }
      if (auto r = on_row(std::move(k), thread, *h); !r) {
        return r.err();
      }
    }
  }
  if (rc != SQLITE_DONE) {
    return make_error(sqlite3_errmsg(db));
  }
  return {};
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
            : fmt::format(
                  "SELECT t.{}, t.comm, h.hist FROM thread_hist AS h CROSS JOIN thread AS t ON "
                  "t.id = h.thread_id WHERE h.interval_id = ?1 AND h.metric = ?2 AND {}",
                  key, victims_sql(vs, 3));
  auto st = sqlite::prepare_stmt(db, sql);
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
        k = sqlite::column_text(s, 0);
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
      const value who = m.cpu ? k : value{sqlite::column_text(s, 1)};
      for (auto it = lo; it != hi; ++it) {
        contrib[it->run][who] += store::count_above(*h, it->threshold);
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
static_assert(spike_p == store::summary_p, "spikes() reads the summaries' p99");
// Runs above the threshold at most this far apart are one incident (spikes' `gap`).
constexpr std::int64_t default_gap = 10'000'000'000;

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

// spikes' rules for one call: the threshold, where the window starts (intervals before it are
// the baseline's and an incident's beginning, not shown), the samples an interval needs to be
// judged, and the gap that still joins two runs into one incident.
struct spike_rules {
  threshold_arg thr;
  std::int64_t window_start = 0;
  std::uint64_t min_samples = 1;
  std::int64_t gap = 0;
};

struct spike_run {
  std::size_t first, last; // into the scanned intervals
  std::uint64_t peak;
  std::size_t peak_at; // into the scanned intervals
  std::uint64_t threshold;
};

// An incident that has lasted this many intervals is the series' new level (relative
// thresholds): its last baseline_intervals intervals become the baseline and it ends there.
constexpr std::size_t adopt_intervals = 5 * baseline_intervals;

// The incidents of one series, fed its intervals in time order. An incident starts at an
// interval whose p99 is above the threshold; it goes on while intervals are above the stay
// level (half way from the baseline to the threshold; half an absolute threshold), across
// stretches below it no longer than the gap. While it runs
// the threshold is the one it started with, and its intervals are kept out of the baseline (a
// '3x' baseline that took them in would rise with the incident and lose it half way).
class incident_finder {
public:
  void add(const std::vector<interval_info> &ivs, std::size_t at, std::uint64_t p99,
           std::uint64_t samples, const spike_rules &r, std::vector<spike_run> &out) {
    const interval_info &iv = ivs[at];
    if (open_) {
      const interval_info &le = ivs[last_];
      const bool other_boot =
          le.boot_no != 0 && iv.boot_no != 0 ? le.boot_no != iv.boot_no : le.boot != iv.boot;
      if (other_boot || iv.start - le.end() > std::max(r.gap, le.dur / 2)) {
        close(out);
      }
    }
    // An interval with fewer than min_samples is not judged: it neither starts nor carries an
    // incident.
    const bool judged = samples >= r.min_samples;
    const bool shown = iv.end() > r.window_start;
    if (!open_) {
      std::optional<std::uint64_t> t;
      if (r.thr.multiple) {
        if (n_ != 0) {
          t = static_cast<std::uint64_t>(static_cast<double>(sorted_[n_ / 2]) * *r.thr.multiple);
        }
      } else {
        t = r.thr.absolute < 0 ? 0 : static_cast<std::uint64_t>(r.thr.absolute);
      }
      if (t && judged && p99 > *t) {
        open_ = true;
        threshold_ = *t;
        // The stay level: half way from the baseline to the threshold ('3x': 2x the baseline),
        // half the threshold for an absolute one.
        stay_ = r.thr.multiple ? sorted_[n_ / 2] + (*t - sorted_[n_ / 2]) / 2 : *t / 2;
        held_ = 0;
        recent_.clear();
        recent_oldest_ = 0;
        hold(at, p99, shown);
        return;
      }
      remember(p99);
      return;
    }
    if (p99 <= stay_) {
      remember(p99); // a dip: the series' own level
      return;
    }
    if (!judged) {
      return; // above the stay level on too few samples: neither the incident's nor the baseline's
    }
    hold(at, p99, shown);
    if (r.thr.multiple && held_ >= adopt_intervals) {
      adopt();
      close(out);
    }
  }
  void finish(std::vector<spike_run> &out) { close(out); }

private:
  // The p99 into the baseline: the previous (at most baseline_intervals) p99s outside
  // incidents, in order (`history_`, a ring once full) and sorted (`sorted_`), so the median is
  // read, not selected. Both are inside the finder (a day has tens of thousands of series, fed
  // 17 M times: each pointer followed to a separate allocation was a cache miss per feed).
  void remember(std::uint64_t p99) {
    if (n_ < baseline_intervals) {
      history_[n_] = p99;
      const auto *at = std::upper_bound(sorted_.data(), sorted_.data() + n_, p99);
      const auto i = static_cast<std::size_t>(at - sorted_.data());
      std::memmove(sorted_.data() + i + 1, sorted_.data() + i, (n_ - i) * sizeof(std::uint64_t));
      sorted_[i] = p99;
      ++n_;
      return;
    }
    const std::uint64_t gone = history_[oldest_];
    history_[oldest_] = p99;
    oldest_ = (oldest_ + 1) % baseline_intervals;
    if (p99 == gone) {
      return;
    }
    // The value that leaves replaced by the one that comes, the ones between shifted by one
    // place toward it (one pass, not an erase and an insert). The search is branch-free: a
    // series' p99s jump about, and a mispredicted branch per halving was most of the cost.
    std::uint64_t *v = sorted_.data();
    const std::size_t n = n_;
    std::size_t at = 0; // lower bound of `gone`: the first element not less than it
    for (std::size_t len = n; len > 1;) {
      const std::size_t half = len / 2;
      at = v[at + half - 1] < gone ? at + half : at;
      len -= half;
    }
    at += v[at] < gone ? 1 : 0;
    // Where p99 goes: the first element greater than it (upper bound, branch-free as above);
    // the ones between move by one place with one memmove, not one compare and branch each.
    std::size_t ub = 0;
    for (std::size_t len = n; len > 1;) {
      const std::size_t half = len / 2;
      ub = v[ub + half - 1] <= p99 ? ub + half : ub;
      len -= half;
    }
    ub += v[ub] <= p99 ? 1 : 0;
    if (p99 > gone) { // v[at] (gone) leaves; v(at, ub) move down; p99 at ub - 1
      std::memmove(v + at, v + at + 1, (ub - at - 1) * sizeof *v);
      v[ub - 1] = p99;
    } else { // p99 < gone: v[ub, at) move up over gone; p99 at ub
      std::memmove(v + ub + 1, v + ub, (at - ub) * sizeof *v);
      v[ub] = p99;
    }
  }
  void hold(std::size_t at, std::uint64_t p99, bool shown) {
    last_ = at;
    ++held_;
    if (recent_.size() < baseline_intervals) {
      recent_.push_back(p99);
    } else {
      recent_[recent_oldest_] = p99;
      recent_oldest_ = (recent_oldest_ + 1) % baseline_intervals;
    }
    if (!shown) {
      return;
    }
    if (!run_) {
      run_ = spike_run{at, at, p99, at, threshold_};
    } else {
      run_->last = at;
      if (p99 > run_->peak) {
        run_->peak = p99;
        run_->peak_at = at;
      }
    }
  }
  // The incident's last intervals become the baseline, oldest first.
  void adopt() {
    const auto first = static_cast<std::ptrdiff_t>(recent_oldest_);
    auto out = std::copy(recent_.begin() + first, recent_.end(), history_.begin());
    std::copy(recent_.begin(), recent_.begin() + first, out);
    n_ = recent_.size();
    oldest_ = 0;
    sorted_ = history_;
    std::sort(sorted_.begin(), sorted_.begin() + static_cast<std::ptrdiff_t>(n_));
  }
  void close(std::vector<spike_run> &out) {
    if (run_) {
      out.push_back(*run_);
    }
    run_.reset();
    open_ = false;
  }

  std::array<std::uint64_t, baseline_intervals> history_;
  std::array<std::uint64_t, baseline_intervals> sorted_;
  std::size_t n_ = 0;      // points in history_ and sorted_
  std::size_t oldest_ = 0; // into history_, once it holds baseline_intervals points
  bool open_ = false;
  std::uint64_t threshold_ = 0;       // the open incident's
  std::uint64_t stay_ = 0;            // and its stay level
  std::size_t last_ = 0;              // its last interval above the stay level
  std::size_t held_ = 0;              // its intervals kept out of the baseline
  std::vector<std::uint64_t> recent_; // the last baseline_intervals of them, a ring
  std::size_t recent_oldest_ = 0;
  std::optional<spike_run> run_; // its part in the window
};

// What the scan found: the intervals with rows, in time order, and the incidents per series
// key (a comm, cgroup, pid or CPU; value{} for every row merged) and, per thread (thread.id),
// the thread's key and incidents.
struct spike_scan {
  std::vector<interval_info> ivs;
  std::map<value, std::vector<spike_run>> by_key;
  std::map<std::int64_t, std::pair<value, std::vector<spike_run>>> by_thread;
};

// What scan_spikes() gathers as it reads: the intervals, the current interval's rows merged per
// series, and each series' incident_finder, fed the series' p99 and sample count as an interval
// ends (a few numbers per series are kept, not the rows' histograms nor a series' history).
class spike_series {
public:
  spike_series(const spike_rules &rules, bool all, bool per_thread)
      : rules_(rules), all_(all), per_thread_(per_thread) {}

  // What the scan has found so far (scan_summaries() adds to it directly).
  spike_scan &out() { return out_; }
  // The finder of a series key's series.
  incident_finder &key_finder(const value &k) { return key_finders_[k]; }
  // The finder of a thread's series.
  incident_finder &thread_finder(std::int64_t thread) { return thread_finders_[thread]; }

  // Feeds interval `at` (into out.ivs) of a series.
  void feed_p99(incident_finder &f, std::size_t at, std::uint64_t p99, std::uint64_t samples,
                std::vector<spike_run> &runs) {
    f.add(out_.ivs, at, p99, samples, rules_, runs);
  }

  // Ends the current interval (its merged rows fed) and starts `iv`, its boot numbered.
  void on_interval(interval_info &&iv) {
    flush();
    const bool same_boot = !out_.ivs.empty() && out_.ivs.back().boot == iv.boot;
    iv.boot_no = out_.ivs.empty() ? 1 : out_.ivs.back().boot_no + (same_boot ? 0 : 1);
    out_.ivs.push_back(std::move(iv));
  }

  // Merges a row of the current interval into its series (all merged, per key, per thread).
  result<void> on_row(value &&k, std::int64_t thread, const stats::histogram &h) {
    if (!merged_) {
      merged_ = stats::histogram{h.kind, {}};
    }
    // Every row of an interval is of one layout.
    if (merged_->kind != h.kind) {
      return make_error("cannot merge histograms of different layouts");
    }
    if (all_) {
      (void)stats::merge_into(*merged_, h);
      return {};
    }
    if (per_thread_) {
      auto [it, fresh] = per_thr_.try_emplace(thread, k, stats::histogram{h.kind, {}});
      if (auto mr = stats::merge_into(it->second.second, h); !mr) {
        return mr.err();
      }
    }
    auto [it, fresh] = per_key_.try_emplace(std::move(k), stats::histogram{h.kind, {}});
    return stats::merge_into(it->second, h);
  }

  // The scan's end: the last interval fed, every finder finished; series without incidents
  // dropped.
  spike_scan finish() {
    flush();
    for (auto &[k, f] : key_finders_) {
      f.finish(out_.by_key[k]);
    }
    for (auto &[t, f] : thread_finders_) {
      f.finish(out_.by_thread[t].second);
    }
    // Series without incidents are dropped.
    std::erase_if(out_.by_key, [](const auto &kv) { return kv.second.empty(); });
    std::erase_if(out_.by_thread, [](const auto &kv) { return kv.second.second.empty(); });
    return std::move(out_);
  }

private:
  // Feeds a series the p99 and count of its merged rows of the current interval.
  void feed(incident_finder &f, const stats::histogram &h, std::vector<spike_run> &runs) {
    if (auto r = stats::percentile(h, spike_p)) {
      feed_p99(f, out_.ivs.size() - 1, r->value, h.total(), runs);
    }
  }
  // Feeds every series of the current interval its merged rows, and forgets them.
  void flush() {
    if (!merged_) {
      return;
    }
    if (all_) {
      feed(key_finders_[value{}], *merged_, out_.by_key[value{}]);
    }
    for (auto &[k, h] : per_key_) {
      feed(key_finders_[k], h, out_.by_key[k]);
    }
    for (auto &[t, kh] : per_thr_) {
      auto &slot = out_.by_thread[t];
      slot.first = kh.first;
      feed(thread_finders_[t], kh.second, slot.second);
    }
    per_key_.clear();
    per_thr_.clear();
    merged_.reset();
  }

  const spike_rules &rules_;
  bool all_;
  bool per_thread_;
  spike_scan out_;
  std::map<value, incident_finder> key_finders_;
  std::unordered_map<std::int64_t, incident_finder> thread_finders_;
  std::map<value, stats::histogram> per_key_; // the current interval's
  std::unordered_map<std::int64_t, std::pair<value, stats::histogram>> per_thr_;
  std::optional<stats::histogram> merged_; // the current interval's; none before its 1st row
};

// Per thread id: its key (comm) and whether it is one of the victims, and where its series
// and its comm's series (as the first thread of the comm in an interval) are fed, looked up
// once (a day is tens of millions of entries of a few thousand threads; std::map and
// std::unordered_map nodes stay where they are).
struct thread_ref {
  const value *key = nullptr;
  bool victim = false;
  bool seen = false;
  std::uint32_t series = 0; // into the feeder's series, once `slot` is set
  std::pair<value, std::vector<spike_run>> *slot = nullptr;
  incident_finder *finder = nullptr;
  bool keyed = false;           // key_series is set
  std::uint32_t key_series = 0; // into the feeder's series: its key's series
};

// By thread id: a window's ids are mostly a dense range (rowids given as threads are first
// seen), so a table indexed from the first id seen, grown as needed, unless an id lies too
// far from it (a months-old thread beside today's); those in a hash map. A day is 17 M
// lookups.
class thread_refs {
public:
  explicit thread_refs(thread_keys &keys) : keys_(keys) {}

  // The thread's entry, its key and whether it is a victim looked up when first seen; valid
  // until the next call (the table grows).
  result<thread_ref *> of(std::int64_t thread) {
    if (near_base_ < 0) {
      near_base_ = std::max<std::int64_t>(0, thread - 4096);
    }
    thread_ref *ref = nullptr;
    bool fresh = false;
    const std::int64_t at = thread - near_base_;
    if (at >= 0 && at < near_max) {
      const auto i = static_cast<std::size_t>(at);
      if (i >= near_.size()) {
        near_.resize(std::max(i + 1, near_.size() * 2));
      }
      ref = &near_[i];
      fresh = !ref->seen;
      ref->seen = true;
    } else {
      auto [it, added] = far_.try_emplace(thread);
      ref = &it->second;
      fresh = added;
    }
    if (fresh) {
      auto tk = keys_.of(thread);
      if (!tk) {
        return tk.err();
      }
      ref->victim = (*tk)->has_value();
      ref->key = ref->victim ? &***tk : nullptr;
    }
    return ref;
  }

private:
  static constexpr std::int64_t near_max = std::int64_t{1} << 22;
  thread_keys &keys_;
  std::unordered_map<std::int64_t, thread_ref> far_;
  std::vector<thread_ref> near_; // `key` set once looked up (a victim's) or `seen`
  std::int64_t near_base_ = -1;
};

// 16 bytes a feed (the batches are streamed through memory): the series' index with, in its
// top bit, whether the interval is judged (samples >= min_samples, all the finder asks of
// the count).
struct pending_feed {
  std::uint64_t p99 = 0;
  std::uint32_t at = 0;     // into out.ivs
  std::uint32_t series = 0; // | judged_bit
};
constexpr std::uint32_t judged_bit = std::uint32_t{1} << 31;
using series_ref = std::pair<incident_finder *, std::vector<spike_run> *>;

// The feeder thread's side of batch_feeder: its copies of the intervals and series it was told
// of, and one batch of feeds, made series by series.
struct feeder_state {
  std::vector<interval_info> ivs; // out.ivs as far as handed over
  std::vector<series_ref> series; // the series as far as handed over
  std::vector<pending_feed> feeds;
  std::vector<pending_feed> by_series;
  std::vector<std::size_t> starts;
  std::exception_ptr failed;
  // Makes `feeds` in series order (a stable counting sort keeps each one's time order).
  void run(const spike_rules &r) {
    try {
      starts.assign(series.size() + 1, 0);
      for (const auto &f : feeds) {
        ++starts[(f.series & ~judged_bit) + 1];
      }
      for (std::size_t i = 1; i < starts.size(); ++i) {
        starts[i] += starts[i - 1];
      }
      by_series.resize(feeds.size());
      for (const auto &f : feeds) {
        by_series[starts[f.series & ~judged_bit]++] = f;
      }
      for (const auto &f : by_series) {
        auto &[finder, runs] = series[f.series & ~judged_bit];
        // A judged interval's count is min_samples or more; any such count gives add() the
        // same answer, as 0 does for one that is not.
        finder->add(ivs, f.at, f.p99, (f.series & judged_bit) != 0 ? r.min_samples : 0, r, *runs);
      }
    } catch (...) {
      failed = std::current_exception();
    }
  }
};

// Per-thread feeds are not made as they are read but gathered, up to pending_max of them, and
// handed to a second thread that makes them series by series (a stable counting sort by series
// keeps each one's time order) while this one reads on: a day feeds tens of thousands of
// finders 17 M times, about half the scan's work, and fed in the order read every feed was a
// cache miss on its finder. Series are independent, so the incidents are the same. The feeder
// has its own copies of the intervals and series it was told of (this thread appends to
// out.ivs and series_of as it reads) and touches only the finders and runs of its series;
// it is joined before an interval read from its rows (those feed at once, on this thread)
// and at the end.
class batch_feeder {
public:
  batch_feeder(const std::vector<interval_info> &ivs, const spike_rules &rules)
      : ivs_(ivs), rules_(rules), pending_max_(std::max<std::size_t>(1, spike_feed_batch)) {
    pending_.reserve(pending_max_);
  }
  batch_feeder(const batch_feeder &) = delete;
  batch_feeder &operator=(const batch_feeder &) = delete;
  // Joins the feeder however the scan ends (an error return included).
  ~batch_feeder() {
    if (feeding_.joinable()) {
      feeding_.join();
    }
  }

  // A new series (its finder and runs): its number for push().
  std::uint32_t add_series(incident_finder *f, std::vector<spike_run> *runs) {
    const auto n = static_cast<std::uint32_t>(series_of_.size());
    series_of_.emplace_back(f, runs);
    return n;
  }
  [[nodiscard]] std::size_t series_count() const { return series_of_.size(); }

  // Gathers one feed; a full batch is handed to the feeder thread.
  void push(const pending_feed &f) {
    pending_.push_back(f);
    if (pending_.size() == pending_max_) {
      hand_off();
    }
  }

  // Hands the gathered feeds (with the intervals and series new since the last batch) to the
  // feeder thread, once it has made the previous batch.
  void hand_off() {
    if (pending_.empty()) {
      return;
    }
    join();
    feeder_.ivs.insert(feeder_.ivs.end(), ivs_.begin() + std::ssize(feeder_.ivs), ivs_.end());
    feeder_.series.insert(feeder_.series.end(), series_of_.begin() + std::ssize(feeder_.series),
                          series_of_.end());
    std::swap(feeder_.feeds, pending_);
    pending_.clear();
    feeding_ = std::thread([this] { feeder_.run(rules_); });
  }

  // Waits for the feeder thread to make its batch; rethrows what it threw.
  void join() {
    if (feeding_.joinable()) {
      feeding_.join();
    }
    if (feeder_.failed) {
      std::rethrow_exception(std::exchange(feeder_.failed, nullptr));
    }
  }

private:
  const std::vector<interval_info> &ivs_; // out.ivs
  const spike_rules &rules_;
  const std::size_t pending_max_;
  std::vector<series_ref> series_of_;
  std::vector<pending_feed> pending_;
  feeder_state feeder_;
  std::thread feeding_;
};

// The reading of scan_summaries(): the timeline's intervals in [a, b) with their summaries
// (`intervals`), and the rows of an interval without one (`rows_of`).
struct summary_statements {
  sqlite::stmt_ptr intervals;
  sqlite::stmt_ptr rows_of;
};

// Prepares summary_statements, for ?1 bound to `a` (overlaps()).
result<summary_statements> prepare_summary_statements(sqlite3 *db, std::int64_t a) {
  auto st = sqlite::prepare_stmt(
      db, fmt::format("SELECT i.id, i.start_ns, i.dur_ns, i.boot_id, i.flags & 1, s.data FROM {} "
                      "AS i LEFT JOIN hist_summary AS s ON s.interval_id = i.id AND s.metric = "
                      "?3 WHERE {} ORDER BY i.start_ns, i.id",
                      timeline(db), overlaps(db, "i", a)));
  if (!st) {
    return st.err();
  }
  auto rows_of = sqlite::prepare_stmt(db, "SELECT h.thread_id, h.hist FROM thread_hist AS h WHERE "
                                          "h.interval_id = ?1 AND h.metric = ?2");
  if (!rows_of) {
    return rows_of.err();
  }
  return summary_statements{std::move(*st), std::move(*rows_of)};
}

// One pass of scan_summaries() over the timeline: each interval read from its summary, its
// per-thread and per-comm entries fed through the batch_feeder, or from its rows where it has
// none.
class summary_scan {
public:
  summary_scan(sqlite3 *db, metric_source m, bool all, bool per_thread, thread_keys keys,
               summary_statements statements, spike_series &series, const spike_rules &rules)
      : db_(db), m_(m), all_(all), per_thread_(per_thread), min_samples_(rules.min_samples),
        keys_(std::move(keys)), refs_(keys_), st_(std::move(statements)), series_(series),
        out_(series.out()), feeder_(out_.ivs, rules) {}

  // Reads the intervals overlapping [a, b), the feeds all made before it returns.
  result<void> run(std::int64_t a, std::int64_t b) {
    sqlite3_stmt *s = st_.intervals.get();
    sqlite3_bind_int64(s, 1, a);
    sqlite3_bind_int64(s, 2, b);
    sqlite3_bind_int64(s, 3, m_.id);
    int rc = 0;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      interval_info iv{sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
                       sqlite3_column_int64(s, 2), sqlite::column_text(s, 3),
                       sqlite3_column_int64(s, 4) != 0};
      const store::interval_summary *sum = summary_of(s);
      if (sum == nullptr) {
        if (auto r = read_rows(iv); !r) {
          return r.err();
        }
        continue;
      }
      auto shown = feed_threads(*sum, iv);
      if (!shown) {
        return shown.err();
      }
      if (!*shown) {
        continue;
      }
      if (all_) {
        if (sum->all && sum->all->samples > 0) {
          series_.feed_p99(series_.key_finder(value{}), out_.ivs.size() - 1, sum->all->p99,
                           sum->all->samples, out_.by_key[value{}]);
        }
        continue;
      }
      if (auto r = feed_comms(*sum); !r) {
        return r.err();
      }
    }
    if (rc != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db_));
    }
    feeder_.hand_off();
    feeder_.join();
    return {};
  }

private:
  // The interval's summary, decoded (its memory reused), or null: without one (or with one
  // that does not decode: the rows still answer) its rows are read instead.
  store::interval_summary *summary_of(sqlite3_stmt *s) {
    if (sqlite3_column_type(s, 5) == SQLITE_NULL) {
      return nullptr;
    }
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(s, 5));
    if (store::decode_summary_into(
            std::span<const std::uint8_t>(p, static_cast<std::size_t>(sqlite3_column_bytes(s, 5))),
            decoded_)) {
      return &decoded_;
    }
    return nullptr;
  }

  // An interval without a summary: its rows of the victims passed on as scan_rows() does, after
  // the feeder's batches (these feed at once, on this thread).
  result<void> read_rows(const interval_info &iv) {
    feeder_.hand_off();
    feeder_.join();
    bool shown = false; // the interval has rows of the victims: passed on
    sqlite3_stmt *r = st_.rows_of.get();
    sqlite3_reset(r);
    sqlite3_bind_int64(r, 1, iv.id);
    sqlite3_bind_int64(r, 2, m_.id);
    int rr = 0;
    while ((rr = sqlite3_step(r)) == SQLITE_ROW) {
      const std::int64_t thread = sqlite3_column_int64(r, 0);
      auto tk = keys_.of(thread);
      if (!tk) {
        return tk.err();
      }
      if (!**tk) {
        continue;
      }
      auto h = col_hist(r, 1);
      if (!h) {
        return make_error("stored histogram: " + h.err().msg);
      }
      if (!shown) {
        series_.on_interval(interval_info(iv));
        shown = true;
      }
      if (auto x = series_.on_row(value(***tk), thread, *h); !x) {
        return x.err();
      }
    }
    if (rr != SQLITE_DONE) {
      return make_error(sqlite3_errmsg(db_));
    }
    return {};
  }

  // The summary's per-thread entries: the interval passed on at the first of the victims'
  // (true: it has some), and with per_thread each one's p99 gathered for its thread's series.
  result<bool> feed_threads(const store::interval_summary &sum, const interval_info &iv) {
    bool shown = false;
    for (const auto &e : sum.threads) {
      auto ref = refs_.of(e.thread_id);
      if (!ref) {
        return ref.err();
      }
      if (!(*ref)->victim) {
        continue;
      }
      if (!shown) {
        series_.on_interval(interval_info(iv));
        shown = true;
      }
      if (per_thread_) {
        thread_ref &t = **ref;
        if (t.slot == nullptr) {
          t.slot = &out_.by_thread[e.thread_id];
          t.slot->first = *t.key;
          t.finder = &series_.thread_finder(e.thread_id);
          t.series = feeder_.add_series(t.finder, &t.slot->second);
        }
        if (e.samples > 0) {
          feeder_.push({e.p99, static_cast<std::uint32_t>(out_.ivs.size() - 1),
                        t.series | (e.samples >= min_samples_ ? judged_bit : 0)});
        }
      }
    }
    return shown;
  }

  // The summary's per-comm entries of the victims gathered for their key's series.
  result<void> feed_comms(const store::interval_summary &sum) {
    for (const auto &c : sum.comms) {
      auto ref = refs_.of(c.thread_id);
      if (!ref) {
        return ref.err();
      }
      thread_ref &t = **ref;
      if (!t.victim || c.samples == 0) {
        continue;
      }
      if (!t.keyed) {
        // One series per key, however many threads lead its comm over time (a finder fed
        // under two series numbers would lose its time order in the counting sort).
        incident_finder *f = &series_.key_finder(*t.key);
        auto [it, fresh] =
            key_series_.try_emplace(f, static_cast<std::uint32_t>(feeder_.series_count()));
        if (fresh) {
          feeder_.add_series(f, &out_.by_key[*t.key]);
        }
        t.key_series = it->second;
        t.keyed = true;
      }
      feeder_.push({c.p99, static_cast<std::uint32_t>(out_.ivs.size() - 1),
                    t.key_series | (c.samples >= min_samples_ ? judged_bit : 0)});
    }
    return {};
  }

  sqlite3 *db_;
  metric_source m_;
  bool all_;
  bool per_thread_;
  std::uint64_t min_samples_;
  thread_keys keys_;
  thread_refs refs_;
  summary_statements st_;
  spike_series &series_;
  spike_scan &out_; // series_.out()
  std::unordered_map<const incident_finder *, std::uint32_t> key_series_;
  store::interval_summary decoded_; // each interval's, its memory reused
  batch_feeder feeder_;             // last: joined before the rest is destroyed
};

// scan_rows() for summaries_serve() cases: per interval of the timeline in [a, b), its summary
// (hist_summary) fed straight to the finders, the same p99s and counts scan_spikes would
// compute from its rows; an interval without one (a rollup, or written before schema 12)
// passed on row by row as scan_rows() does.
result<void> scan_summaries(sqlite3 *db, metric_source m, std::int64_t a, std::int64_t b,
                            const victims &vs, bool all, bool per_thread, const spike_rules &rules,
                            spike_series &series) {
  auto keys = thread_keys::make(db, "comm", vs);
  if (!keys) {
    return keys.err();
  }
  auto st = prepare_summary_statements(db, a);
  if (!st) {
    return st.err();
  }
  summary_scan scan(db, m, all, per_thread, std::move(*keys), std::move(*st), series, rules);
  return scan.run(a, b);
}

// Where the summaries of hist_summary.hpp can stand for the histograms: sched_delay, split per
// thread, per comm or all merged, of every thread or of comms by name (a comm's summary merges
// all its threads; a victim that takes some of them, by pid, cgroup or tid, needs the rows).
bool summaries_serve(sqlite3 *db, metric_source m, const victims &vs, bool all, bool per_thread,
                     const std::string &key) {
  if (m.cpu || m.id != store::summary_metric || (!all && !per_thread && key != "comm")) {
    return false;
  }
  for (const auto &v : vs) {
    if (all || v.what != victim::kind::comm) {
      return false;
    }
  }
  return has_table(db, "hist_summary");
}

// Reads the rows of scan_rows() once: per interval, every row merged (`all`) or merged per key,
// and with `per_thread` each thread's rows too, each reduced to its p99 and sample count as the
// interval ends and fed to its series' incident_finder (a few numbers per series are kept, not
// the rows' histograms nor a series' history). Intervals with a summary (schema v12, raw tier)
// are read from it instead, where summaries_serve(): the same p99s and counts, without
// decoding a histogram.
result<spike_scan> scan_spikes(sqlite3 *db, metric_source m, std::int64_t a, std::int64_t b,
                               const std::string &key, const victims &vs, bool all, bool per_thread,
                               const spike_rules &rules) {
  spike_series series(rules, all, per_thread);
  if (summaries_serve(db, m, vs, all, per_thread, key)) {
    if (auto r = scan_summaries(db, m, a, b, vs, all, per_thread, rules, series); !r) {
      return r.err();
    }
  } else if (auto r = scan_rows(
                 db, m, a, b, key, vs,
                 [&series](interval_info &&iv) { series.on_interval(std::move(iv)); },
                 [&series](value &&k, std::int64_t thread, const stats::histogram &h) {
                   return series.on_row(std::move(k), thread, h);
                 });
             !r) {
    return r.err();
  }
  return series.finish();
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

// spikes' arguments, read and checked: the metric, the window, the victim, the split and the
// rules; and from them what the scan reads (the key column, the victim's threads).
struct spike_call {
  metric_source m;
  std::pair<std::int64_t, std::int64_t> w; // the window [first, second)
  victim vic;
  std::string by;
  bool all = false;
  bool per_thread = false;
  spike_rules rules;
  std::string key_col;
  victims vs;
};

// Reads spikes' `by` (args[5]) for metric `m`, checked.
result<std::string> spike_split(sqlite3_value *arg, const metric_source &m) {
  // by: per thread within the victims, an incident per comm of the threads that stalled
  // (default), or one series per comm, cgroup or pid, per CPU (CPU metrics), or 'all' merged.
  std::string by = m.cpu ? "cpu" : "tid";
  if (arg != nullptr && sqlite3_value_type(arg) != SQLITE_NULL) {
    const auto *p = reinterpret_cast<const char *>(sqlite3_value_text(arg));
    by = p != nullptr ? p : "";
  }
  if (by != "all" &&
      (m.cpu ? by != "cpu" : (by != "tid" && by != "comm" && by != "cgroup" && by != "pid"))) {
    return make_error(fmt::format(
        "spikes: cannot split {} by '{}' ({})", m.cpu ? "a CPU metric" : "a thread metric",
        text::escape_for_terminal(by), m.cpu ? "cpu or all" : "tid, comm, cgroup, pid or all"));
  }
  return by;
}

// Reads spikes' min_samples (args[6]) and gap (args[7]) into `rules`, where given.
result<void> spike_limits(const args_t &args, spike_rules &rules) {
  if (args[6] != nullptr && sqlite3_value_type(args[6]) != SQLITE_NULL) {
    const std::int64_t n = sqlite3_value_int64(args[6]);
    if (sqlite3_value_type(args[6]) != SQLITE_INTEGER || n < 1) {
      return make_error("spikes: min_samples must be a whole number >= 1");
    }
    rules.min_samples = static_cast<std::uint64_t>(n);
  }
  // gap: runs above the threshold this close are one incident.
  if (args[7] != nullptr && sqlite3_value_type(args[7]) != SQLITE_NULL) {
    auto g = duration_arg(args[7], "spikes: gap");
    if (!g) {
      return g.err();
    }
    if (*g < 0) {
      return make_error("spikes: gap must be a duration >= 0 (like '10s')");
    }
    rules.gap = *g;
  }
  return {};
}

// Reads and checks spikes' arguments, in their order (the first error is the one reported).
result<spike_call> spike_args(sqlite3 *db, const fn_context &ctx, const args_t &args) {
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
  // victim: which threads (thread metrics); min_samples: an interval of a series with fewer
  // samples is not judged (a comm that woke twice has no meaningful p99).
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
  auto by = spike_split(args[5], *m);
  if (!by) {
    return by.err();
  }
  spike_call c;
  c.m = *m;
  c.w = *w;
  c.vic = std::move(*vic);
  c.by = std::move(*by);
  c.all = c.by == "all";
  c.per_thread = c.by == "tid";
  c.rules = spike_rules{*thr, w->first, c.all ? 1U : 10U, default_gap};
  if (auto r = spike_limits(args, c.rules); !r) {
    return r.err();
  }
  c.key_col = c.all || c.m.cpu || c.per_thread ? "comm" : c.by;
  if (c.vic.what != victim::kind::all) {
    c.vs.push_back(c.vic);
  }
  return c;
}

// Where the scan starts: far enough back for the baseline of the first intervals in the window.
std::int64_t spike_scan_from(sqlite3 *db, const spike_call &c) {
  std::int64_t lookback = 0;
  if (c.rules.thr.multiple) {
    lookback = longest_raw_interval(db) * std::int64_t{baseline_intervals + 1};
  }
  return c.w.first > std::numeric_limits<std::int64_t>::min() + lookback ? c.w.first - lookback
                                                                         : c.w.first;
}

// One incident: a series' run, or per thread the joined runs of a comm's threads.
struct spike_incident {
  value key;
  spike_run run;
  std::vector<std::int64_t> threads; // per thread: the threads above the threshold, sorted
};

// An incident of one thread is that thread's (its samples, its blame); of several, the comm's.
bool alone(const spike_incident &in, bool per_thread) {
  return per_thread && in.threads.size() == 1;
}

// Per thread: the runs of a comm's threads and of the comm merged (sorted by key, then start)
// joined where they overlap or are within the gap, one incident of the comm.
std::vector<spike_incident> join_incidents(std::vector<spike_incident> incidents,
                                           const std::vector<interval_info> &ivs,
                                           std::int64_t gap) {
  std::vector<spike_incident> joined;
  for (auto &in : incidents) {
    if (!joined.empty() && joined.back().key == in.key) {
      spike_incident &cur = joined.back();
      const interval_info &le = ivs[cur.run.last];
      const interval_info &nx = ivs[in.run.first];
      if (in.run.first <= cur.run.last ||
          (le.boot == nx.boot && nx.start - le.end() <= std::max(gap, le.dur / 2))) {
        cur.run.last = std::max(cur.run.last, in.run.last);
        if (in.run.peak > cur.run.peak) {
          cur.run.peak = in.run.peak;
          cur.run.peak_at = in.run.peak_at;
          cur.run.threshold = in.run.threshold;
        }
        for (auto t : in.threads) {
          if (std::find(cur.threads.begin(), cur.threads.end(), t) == cur.threads.end()) {
            cur.threads.push_back(t);
          }
        }
        continue;
      }
    }
    joined.push_back(std::move(in));
  }
  return joined;
}

// The incidents: each series' runs; per thread, the runs of a comm's threads and of the comm
// merged, joined where they overlap or are within the gap, one incident of the comm.
std::vector<spike_incident> incidents_of(const spike_scan &data, bool per_thread,
                                         std::int64_t gap) {
  std::vector<spike_incident> incidents;
  for (const auto &[key, list] : data.by_key) {
    for (const auto &run : list) {
      incidents.push_back({key, run, {}});
    }
  }
  if (per_thread) {
    for (const auto &[thread, kr] : data.by_thread) {
      for (const auto &run : kr.second) {
        incidents.push_back({kr.first, run, {thread}});
      }
    }
    std::stable_sort(incidents.begin(), incidents.end(),
                     [](const spike_incident &x, const spike_incident &y) {
                       return x.key != y.key ? x.key < y.key : x.run.first < y.run.first;
                     });
    incidents = join_incidents(std::move(incidents), data.ivs, gap);
  }
  return incidents;
}

// Which comms (CPUs for a CPU metric) had the samples above the threshold, per incident: the
// intervals of the incidents read again, each once (the scan kept no rows); a thread's incident
// counts its own rows (by thread.id), a series' those of its key. Not when top_comms is not
// read (NULL).
result<std::vector<std::map<value, double>>>
incident_contrib(sqlite3 *db, const spike_call &c, bool want_top,
                 const std::vector<interval_info> &ivs,
                 const std::vector<spike_incident> &incidents) {
  std::map<std::size_t, std::vector<run_need>> needs;
  std::map<std::size_t, std::vector<run_need>> thread_needs;
  for (std::size_t i = 0; want_top && i < incidents.size(); ++i) {
    const auto &in = incidents[i];
    for (std::size_t j = in.run.first; j <= in.run.last; ++j) {
      if (alone(in, c.per_thread)) {
        thread_needs[j].push_back({value{in.threads.front()}, i, in.run.threshold});
      } else {
        needs[j].push_back({in.key, i, in.run.threshold});
      }
    }
  }
  for (auto *n : {&needs, &thread_needs}) {
    for (auto &[at, list] : *n) {
      std::stable_sort(list.begin(), list.end());
    }
  }
  std::vector<std::map<value, double>> contrib(incidents.size());
  if (auto r = add_above(db, c.m, c.key_col, c.vs, c.all, ivs, needs, contrib); !r) {
    return r.err();
  }
  if (auto r = add_above(db, c.m, "id", c.vs, false, ivs, thread_needs, contrib); !r) {
    return r.err();
  }
  return contrib;
}

// The incidents' threads and windows for causes_of(): the tid of a thread's incident (NULL for
// others), and the victims and time of each incident.
struct incident_scope {
  std::vector<value> tids;
  std::vector<window_query> windows;
};

// Reads each incident's incident_scope.
result<incident_scope> incident_scopes(sqlite3 *db, const spike_call &c,
                                       const std::vector<interval_info> &ivs,
                                       const std::vector<spike_incident> &incidents) {
  auto tid_st = sqlite::prepare_stmt(db, "SELECT tid FROM thread WHERE id = ?1");
  if (!tid_st) {
    return tid_st.err();
  }
  incident_scope out{std::vector<value>(incidents.size()),
                     std::vector<window_query>(incidents.size())};
  for (std::size_t ri = 0; ri < incidents.size(); ++ri) {
    const value &key = incidents[ri].key;
    const spike_run &run = incidents[ri].run;
    value &tid = out.tids[ri];
    if (alone(incidents[ri], c.per_thread)) {
      sqlite3_stmt *q = tid_st->get();
      sqlite3_reset(q);
      sqlite3_bind_int64(q, 1, incidents[ri].threads.front());
      if (sqlite3_step(q) == SQLITE_ROW) {
        tid = std::int64_t{sqlite3_column_int64(q, 0)};
      }
    }
    victims who = c.vs;
    if (!c.all && !c.m.cpu) {
      victim k;
      if (const auto *t = std::get_if<std::int64_t>(&tid)) {
        k.what = victim::kind::tid;
        k.number = *t;
      } else if (c.by == "pid") {
        k.what = victim::kind::pid;
        k.number = std::get<std::int64_t>(key);
      } else {
        k.what = c.by == "cgroup" ? victim::kind::cgroup : victim::kind::comm;
        k.text = std::get<std::string>(key);
        k.descendants = false;
      }
      who.push_back(std::move(k));
    }
    out.windows[ri] = {std::move(who), ivs[run.first].start, ivs[run.last].end()};
  }
  return out;
}

// The victim column of an incident of series `key`.
value victim_of(const spike_call &c, const value &key) {
  value victim_v =
      c.all ? value{c.vic.what == victim::kind::all ? std::string("all") : c.vic.describe()} : key;
  if (!c.all && c.vic.what == victim::kind::tid) {
    // One thread asked for: name it, with the series' key (its comm, cgroup or pid).
    std::string of;
    if (const auto *k = std::get_if<std::string>(&key)) {
      of = " (" + *k + ")";
    } else if (const auto *n = std::get_if<std::int64_t>(&key)) {
      of = fmt::format(" (pid {})", *n);
    }
    victim_v = c.vic.describe() + of;
  }
  return victim_v;
}

// What spikes() shows of an incident, cause and top_comms where asked for (`causes` null: not).
row spike_row(const spike_call &c, const std::vector<interval_info> &ivs, const spike_incident &in,
              const std::map<value, double> &contrib, bool want_top, const window_causes *causes,
              value &&tid) {
  const value &key = in.key;
  const spike_run &run = in.run;
  std::vector<std::pair<value, double>> ranked(contrib.begin(), contrib.end());
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto &x, const auto &y) { return x.second > y.second; });
  const auto &first = ivs[run.first];
  const auto &last = ivs[run.last];
  return {first.start,
          last.end() - first.start,
          last.end(),
          static_cast<std::int64_t>(run.peak),
          ivs[run.peak_at].start,
          want_top ? value{top_text(ranked)} : value{},
          static_cast<std::int64_t>(run.threshold),
          victim_of(c, key),
          causes != nullptr ? value{cause_text(causes->culprits, causes->pressure)} : value{},
          std::move(tid),
          c.per_thread ? value{static_cast<std::int64_t>(in.threads.size())} : value{}};
}

} // namespace

result<rows> spikes_fn(sqlite3 *db, const fn_context &ctx, const args_t &args) {
  // peak_ns is a percentile at layout 1's precision (hist_summary keeps layout 1's buckets).
  ++store::answered_precision().coarse;
  // Columns 5 (top_comms) and 8 (cause) read the incidents' rows again: only when asked for.
  const bool want_top = ctx.wants(5);
  const bool want_cause = ctx.wants(8);
  auto call = spike_args(db, ctx, args);
  if (!call) {
    return call.err();
  }
  const spike_call &c = *call;
  const std::int64_t from = spike_scan_from(db, c);
  auto data = scan_spikes(db, c.m, from, c.w.second, c.key_col, c.vs, c.all, c.per_thread, c.rules);
  if (!data) {
    return data.err();
  }
  const auto &ivs = data->ivs;
  const std::vector<spike_incident> incidents = incidents_of(*data, c.per_thread, c.rules.gap);
  // The causes read blame and pressure rows: skipped (empty) where none were recorded.
  const bool any_blame =
      !c.m.cpu && c.m.id == 1 && recorded_in(db, "thread_blame", from, c.w.second);
  const bool any_pressure = recorded_in(db, "cgroup_cpu", from, c.w.second);
  auto contrib = incident_contrib(db, c, want_top, ivs, incidents);
  if (!contrib) {
    return contrib.err();
  }
  // The likely cause of each incident: who ran while its threads waited (scheduling delay), the
  // throttling of their cgroups and the CPU pressure over it; for every incident from one read
  // of the rows of their windows (they overlap: one read each re-read them).
  auto scope = incident_scopes(db, c, ivs, incidents);
  if (!scope) {
    return scope.err();
  }
  // cause not read: left NULL, the blame and pressure rows not read.
  auto causes = want_cause ? causes_of(db, scope->windows, any_blame, any_pressure)
                           : result<std::vector<window_causes>>(std::vector<window_causes>{});
  if (!causes) {
    return causes.err();
  }
  scope->windows.clear();
  struct out_row {
    std::int64_t start;
    value key;
    row r;
  };
  std::vector<out_row> outs;
  for (std::size_t ri = 0; ri < incidents.size(); ++ri) {
    const spike_incident &in = incidents[ri];
    outs.push_back({ivs[in.run.first].start, in.key,
                    spike_row(c, ivs, in, (*contrib)[ri], want_top,
                              want_cause ? &(*causes)[ri] : nullptr, std::move(scope->tids[ri]))});
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

// A latency histogram at the finest precision its rows allow: layout 5 while every row added is
// layout 5 (a recording since issue 36), else layout 1, the layout 5 rows coarsened into it
// exactly (every layout 1 bucket is a union of layout 5 ones).
struct precise_hist {
  stats::histogram coarse{stats::layout::latency, {}};
  stats::fine_histogram fine;
  bool all_fine = true;

  result<void> add(blob_view b) {
    if (!b.empty() && b[0] == static_cast<std::uint8_t>(stats::layout::latency_fine)) {
      auto f = stats::decode_fine(b);
      if (!f) {
        return make_error("stored histogram: " + f.err().msg);
      }
      stats::merge_into(fine, *f);
      return stats::merge_into(coarse, *f);
    }
    auto h = stats::decode(b);
    if (!h) {
      return make_error("stored histogram: " + h.err().msg);
    }
    all_fine = false;
    return stats::merge_into(coarse, *h);
  }
  void add(const precise_hist &o) {
    stats::merge_into(fine, o.fine);
    all_fine = all_fine && o.all_fine;
    (void)stats::merge_into(coarse, o.coarse); // both layout 1
  }
  [[nodiscard]] bool is_fine() const { return all_fine && fine.total() > 0; }
  [[nodiscard]] std::uint64_t total() const { return coarse.total(); }
  [[nodiscard]] std::optional<stats::percentile_result> percentile(double p) const {
    return is_fine() ? stats::percentile(fine, p) : stats::percentile(coarse, p);
  }
  // Samples in buckets whose lower bound is above `ns`, at this histogram's precision.
  [[nodiscard]] double above(std::uint64_t ns) const {
    double n = 0;
    const auto count = [&](const auto &h) {
      for (std::size_t slot = 0; slot < stats::slot_count(h.kind); ++slot) {
        if (h.slots[slot] != 0 && stats::bucket_bounds(h.kind, slot).lo > ns) {
          n += static_cast<double>(h.slots[slot]);
        }
      }
    };
    if (is_fine()) {
      count(fine);
    } else {
      count(coarse);
    }
    return n;
  }
};

// Adds the histograms of `m` per key of the intervals of `src` (a tier's rows of `intervals`,
// or the timeline) that start in [from, to) into `out`.
result<void> add_starting_in(sqlite3 *db, metric_source m, int tier, std::int64_t from,
                             std::int64_t to, const std::string &key,
                             std::map<value, precise_hist> &out) {
  const std::string src = tier == 0 ? timeline(db) : "intervals";
  const std::string in_tier = tier == 0 ? "" : fmt::format(" AND i.tier = {}", tier);
  const std::string sql =
      m.cpu ? fmt::format("SELECT c.cpu, c.hist FROM {} AS i CROSS JOIN cpu_hist AS c ON "
                          "c.interval_id = i.id AND c.metric = ?3 WHERE i.start_ns >= ?1 AND "
                          "i.start_ns < ?2{}",
                          src, in_tier)
            : fmt::format("SELECT t.{}, h.hist FROM {} AS i CROSS JOIN thread_hist AS h ON "
                          "h.interval_id = i.id AND h.metric = ?3 CROSS JOIN thread AS t ON t.id = "
                          "h.thread_id WHERE i.start_ns >= ?1 AND i.start_ns < ?2{}",
                          key, src, in_tier);
  auto st = sqlite::prepare_stmt(db, sql);
  if (!st) {
    return st.err();
  }
  sqlite3_bind_int64(st->get(), 1, from);
  sqlite3_bind_int64(st->get(), 2, to);
  sqlite3_bind_int64(st->get(), 3, m.id);
  int rc = 0;
  while ((rc = sqlite3_step(st->get())) == SQLITE_ROW) {
    value k;
    if (sqlite3_column_type(st->get(), 0) == SQLITE_INTEGER) {
      k = std::int64_t{sqlite3_column_int64(st->get(), 0)};
    } else {
      k = sqlite::column_text(st->get(), 0);
    }
    const auto *p = static_cast<const std::uint8_t *>(sqlite3_column_blob(st->get(), 1));
    const blob_view bytes(p, static_cast<std::size_t>(sqlite3_column_bytes(st->get(), 1)));
    if (auto r = out[std::move(k)].add(bytes); !r) {
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
result<std::map<value, precise_hist>> window_hists(sqlite3 *db, const fn_context &ctx,
                                                   metric_source m, std::int64_t a, std::int64_t b,
                                                   const std::string &key) {
  std::map<value, precise_hist> out;
  const auto add_scanned = [&](std::int64_t x, std::int64_t y,
                               std::optional<std::int64_t> from) -> result<void> {
    bool skip = false; // an interval that started inside the whole minutes: read there
    return scan_rows(
        db, m, x, y, key, victims{},
        [&](const interval_info &iv) { skip = from && iv.start < *from; },
        [&](value &&k, std::int64_t /*thread*/, blob_view h) -> result<void> {
          if (skip) {
            return {};
          }
          return out[std::move(k)].add(h);
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
  // Each side at layout 5's precision where all its rows are layout 5, else layout 1's.
  struct side {
    precise_hist a;
    precise_hist b;
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
      (which == 0 ? s.a : s.b).add(h);
    }
  }
  // A percentile printed, counted at the precision it has (store::answered_precision).
  auto pct = [](const precise_hist &h, double p) -> value {
    const auto r = h.percentile(p);
    if (!r) {
      return value{};
    }
    ++(h.is_fine() ? store::answered_precision().fine : store::answered_precision().coarse);
    return value{static_cast<std::int64_t>(r->value)};
  };
  struct out_row {
    row r;
    double excess;
    std::int64_t d;
  };
  std::vector<out_row> tmp;
  for (const auto &[key, s] : keys) {
    const auto a99 = s.a.percentile(99);
    const auto b99 = s.b.percentile(99);
    const auto av = a99 ? static_cast<std::int64_t>(a99->value) : 0;
    const auto bv = b99 ? static_cast<std::int64_t>(b99->value) : 0;
    const std::int64_t d = bv - av;
    const value ratio =
        a99 && b99 && av > 0 ? value{static_cast<double>(bv) / static_cast<double>(av)} : value{};
    // Excess: B's samples in buckets entirely above A's p99 (all of B when A had none), minus
    // the 1 % expected above a p99 when nothing changed. It ranks by how much delay changed,
    // so a key with one unlucky sample does not outrank one whose every sample got worse.
    const double above = a99 ? s.b.above(a99->bounds.hi) : static_cast<double>(s.b.total());
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

} // namespace rsched::query::detail
