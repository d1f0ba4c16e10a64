// The catalogue of rsched's table-valued functions (eponymous virtual tables): names, result
// columns, arguments, bodies (table_functions.hpp), registered through the adapter of vtab.hpp.
// Names follow the views (docs/SCHEMA.md, "Names"): a row that stands for a span of time starts
// with ts and dur; other instants end in _ts. gaps, coverage and spikes had start_ns, end_ns and
// duration_ns until schema 7: those still work as hidden aliases.
#include "table_functions.hpp"

#include "rsched/base/timefmt.hpp"
#include "rsched/sqlite/statement.hpp"

#include "tvf_window.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace rsched::query::detail {

namespace {

// ---- Over several hosts (reader::open_hosts) ----
//
// Every function that reads the database runs on each host's own connection, exactly as on a
// single database (baselines, windows and blame stay within the host), and its rows get the
// host's name in front. They then come in the order the function promises, across hosts.

std::int64_t int_at(const row &r, std::size_t i) {
  const auto *v = i < r.size() ? std::get_if<std::int64_t>(&r[i]) : nullptr;
  return v != nullptr ? *v : 0;
}

double real_at(const row &r, std::size_t i) {
  const auto *v = i < r.size() ? std::get_if<double>(&r[i]) : nullptr;
  return v != nullptr ? *v : 0.0;
}

// The hosts' rows with the host's name in front, host by host in the order they were given
// (coverage: one row per host; blame: each host's culprits, most wait first).
result<rows> by_host(std::vector<host_rows> &runs) {
  rows out;
  for (auto &run : runs) {
    for (auto &r : run.data) {
      row with;
      with.reserve(r.size() + 1);
      with.emplace_back(run.host->name);
      std::move(r.begin(), r.end(), std::back_inserter(with));
      out.push_back(std::move(with));
    }
  }
  return out;
}

// In time order (gaps, spikes): by ts (column 1 after the host), hosts in their order at the same
// ts, each host's own order (spikes: by victim) kept.
result<rows> by_time(std::vector<host_rows> &runs) {
  auto out = by_host(runs);
  if (out) {
    std::stable_sort(out->begin(), out->end(),
                     [](const row &a, const row &b) { return int_at(a, 1) < int_at(b, 1); });
  }
  return out;
}

// compare: every host's keys ranked together by excess, then d_p99_ns ("what changed most,
// anywhere").
result<rows> by_excess(std::vector<host_rows> &runs) {
  auto out = by_host(runs);
  if (out) {
    std::stable_sort(out->begin(), out->end(), [](const row &a, const row &b) {
      const double ea = real_at(a, 10);
      const double eb = real_at(b, 10);
      return ea != eb ? ea > eb : int_at(a, 8) > int_at(b, 8);
    });
  }
  return out;
}

// during, around: one column, for `ts IN during(...)`, so no host column: the starts of every
// host's intervals that overlap the window, each once. A view row of host H at ts = s is then
// selected when some host has an interval starting at s in the window: right unless H itself has
// an interval starting at s that does not overlap the window (a start before it, a shorter
// interval: rollup tiers of different retention). That case is refused instead of answered.
merge_t union_of_starts(const char *fn) {
  return [fn](std::vector<host_rows> &runs) -> result<rows> {
    std::set<std::int64_t> all;
    std::vector<std::set<std::int64_t>> own(runs.size());
    std::optional<std::pair<std::int64_t, std::int64_t>> window;
    for (std::size_t i = 0; i < runs.size(); ++i) {
      for (const auto &r : runs[i].data) {
        own[i].insert(int_at(r, 0));
      }
      all.insert(own[i].begin(), own[i].end());
      if (runs[i].window) {
        window = runs[i].window;
      }
    }
    for (const std::int64_t s : all) {
      if (!window || s >= window->first) {
        break; // an interval starting inside the window overlaps it, on every host
      }
      for (std::size_t i = 0; i < runs.size(); ++i) {
        if (own[i].count(s) != 0) {
          continue;
        }
        sqlite3 *db = runs[i].host->db;
        auto st = sqlite::prepare_stmt(
            db, fmt::format("SELECT 1 FROM {} WHERE start_ns = ?1 LIMIT 1", timeline(db)));
        if (!st) {
          return st.err();
        }
        sqlite3_bind_int64(st->get(), 1, s);
        if (sqlite3_step(st->get()) == SQLITE_ROW) {
          const auto &z = runs[i].host->ctx->zone;
          return make_error(fmt::format(
              "{0}: over several hosts ts IN {0}(...) matches starts only, and host {1}'s "
              "interval starting at {2} ends before the window while another host's overlaps it; "
              "select this window with ts >= t(...) AND ts < t(...) instead",
              fn, runs[i].host->name, timefmt::format_time(s, z)));
        }
      }
    }
    rows out;
    for (const std::int64_t s : all) {
      out.push_back({s});
    }
    return out;
  };
}

std::vector<tvf> &definitions() {
  static std::vector<tvf> defs = {
      {"hist_buckets", {"lo_ns", "hi_ns", "count"}, {"hist"}, 1, hist_buckets},
      {"during", {"ts"}, {"start_time", "end_time"}, 2, during_fn},
      {"around", {"ts"}, {"at_time", "half_width"}, 2, around_fn},
      {"gaps",
       {"ts", "dur", "end_ts", "reason"},
       {"start_time", "end_time"},
       0,
       gaps_fn,
       {{"start_ns", 0}, {"end_ns", 2}, {"duration_ns", 1}}},
      {"coverage",
       {"ts", "dur", "end_ts", "covered_ns", "coverage_pct", "gaps"},
       {"start_time", "end_time"},
       0,
       coverage_fn,
       {{"start_ns", 0}, {"end_ns", 2}}},
      {"spikes",
       {"ts", "dur", "end_ts", "peak_ns", "peak_ts", "top_comms", "threshold_ns", "victim", "cause",
        "tid", "threads"},
       {"metric", "threshold", "start_time", "end_time", "victim_pattern", "by", "min_samples",
        "gap"},
       2,
       spikes_fn,
       {{"start_ns", 0}, {"end_ns", 2}, {"duration_ns", 1}}},
      {"compare",
       {"key", "a_count", "a_p50_ns", "a_p99_ns", "b_count", "b_p50_ns", "b_p99_ns", "d_p99_ns",
        "ratio_p99", "excess"},
       {"a_start", "a_end", "b_start", "b_end", "by"},
       4,
       compare_fn},
      {"blame",
       {"by_pid", "by_comm", "by_cgroup", "wait_ns", "share_pct", "waits", "preempts", "cpu_ns",
        "cgroup_cpu_ns", "victim_wait_ns", "victim_throttled_ns", "victim_pressure_pct",
        "cpu_pressure_pct", "approx_ns"},
       {"victim", "start_time", "end_time"},
       0,
       blame_fn},
      {"inversions",
       {"ts", "dur", "end_ts", "tid", "pid", "comm", "policy", "prio", "by_pid", "by_comm",
        "by_policy", "by_prio", "cpu", "wait_ns", "waits", "intervals"},
       {"start_time", "end_time", "min_wait"},
       0,
       inversions_fn},
      {"explain",
       {"victim_rank",   "victim_tid",      "victim_pid",        "victim_comm",
        "victim_cgroup", "baseline_p99_ns", "window_p99_ns",     "wait_ns",
        "expected_ns",   "excess_ns",       "cause_rank",        "cause",
        "culprit_pid",   "culprit_comm",    "culprit_cgroup",    "via",
        "share_pct",     "measure_ns",      "baseline_ns",       "measure_pct",
        "baseline_pct",  "measure_count",   "baseline_count",    "summary",
        "victim_class",  "victims_rule",    "baseline_start_ns", "baseline_end_ns",
        "held_ns",       "blocked_ns",      "late_excess_ns"},
       {"start_or_id", "end_time", "victim"},
       1,
       explain_fn},
      {"why",
       {"hop", "subject", "part", "state", "by_pid", "by_comm", "by_cgroup", "ns", "share_pct",
        "count", "summary", "bytes"},
       {"victim", "start_time", "end_time"},
       1,
       why_fn},
  };
  static const bool modes_set = [] {
    for (auto &d : defs) {
      const std::string name = d.name;
      if (name == "during" || name == "around") {
        d.merge = union_of_starts(d.name);
      } else if (name == "gaps" || name == "spikes" || name == "inversions") {
        d.merge = by_time;
        d.host_column = true;
      } else if (name == "compare") {
        d.merge = by_excess;
        d.host_column = true;
      } else if (name != "hist_buckets") { // coverage, blame, explain, and any added later
        d.merge = by_host;
        d.host_column = true;
      }
    }
    return true;
  }();
  (void)modes_set;
  return defs;
}

} // namespace

result<void> register_table_functions(sqlite3 *db, fn_context *ctx) {
  return register_vtabs(db, ctx, definitions());
}

} // namespace rsched::query::detail
