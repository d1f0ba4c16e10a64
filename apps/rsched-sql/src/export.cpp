// export openmetrics|perfetto (export.hpp): the history read through SQL, streamed series by
// series into rsched::openmetrics, or into a Chrome JSON trace for Perfetto.
#include "rsched/sql_shell/export.hpp"

#include "rsched/base/text.hpp"
#include "rsched/openmetrics/openmetrics.hpp"
#include "rsched/sql_shell/output.hpp"
#include "rsched/stats/encoding.hpp"
#include "rsched/stats/histogram.hpp"

#include "sql_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <utility>

namespace rsched::sql_shell {

namespace {

using detail::has_object;
using detail::int_of;
using detail::placeholders;
using detail::query;
namespace om = openmetrics;

constexpr double ns_per_s = 1e9;

struct interval {
  std::int64_t start;
  std::int64_t end;
};

// One histogram row of a series: the interval it belongs to, its blob and its sum (ns).
struct hist_row {
  std::int64_t ts;
  std::vector<std::uint8_t> blob;
  std::int64_t total_ns;
};

class exporter {
public:
  exporter(std::ostream &out, std::vector<interval> intervals)
      : w_(out, om::format::openmetrics), iv_(std::move(intervals)) {}

  om::writer &writer() { return w_; }
  [[nodiscard]] const export_stats &stats() const { return stats_; }

  // Emits one histogram series: zeros at the first interval's start, then the running totals at
  // the end of every interval (rows at or after an interval's start and before its end count
  // in it).
  result<void> histogram_series(const om::labels &l, const std::vector<hist_row> &rows) {
    const auto edges = om::latency_edges_ns();
    stats::histogram cum{stats::layout::latency, {}};
    double sum_ns = 0;
    w_.histogram(l, edges, om::cumulative_counts(cum, edges), 0, iv_.front().start);
    std::size_t r = 0;
    for (const interval &i : iv_) {
      while (r < rows.size() && rows[r].ts < i.end) {
        auto h = stats::decode(rows[r].blob);
        if (!h) {
          return make_error("export: " + h.err().msg);
        }
        if (auto m = stats::merge_into(cum, *h); !m) {
          return make_error("export: " + m.err().msg);
        }
        sum_ns += static_cast<double>(rows[r].total_ns);
        ++r;
      }
      w_.histogram(l, edges, om::cumulative_counts(cum, edges), sum_ns / ns_per_s, i.end);
    }
    ++stats_.series;
    stats_.points += iv_.size() + 1;
    return {};
  }

  // A counter series from per-interval deltas keyed by interval start.
  void counter_series(const om::labels &l, const std::vector<std::pair<std::int64_t, double>> &d) {
    double cum = 0;
    w_.counter(l, 0, iv_.front().start);
    std::size_t r = 0;
    for (const interval &i : iv_) {
      while (r < d.size() && d[r].first < i.end) {
        cum += d[r].second;
        ++r;
      }
      w_.counter(l, cum, i.end);
    }
    ++stats_.series;
    stats_.points += iv_.size() + 1;
  }

private:
  om::writer w_;
  std::vector<interval> iv_;
  export_stats stats_;
};

std::vector<std::uint8_t> blob_of(const query::value &v) {
  if (const auto *b = std::get_if<std::vector<std::uint8_t>>(&v)) {
    return *b;
  }
  return {};
}

std::string text_of(const query::value &v) {
  if (const auto *s = std::get_if<std::string>(&v)) {
    return *s;
  }
  if (const auto i = int_of(v)) {
    return fmt::format("{}", *i);
  }
  return {};
}

// Streams `sql` (columns: key, ts, hist, total_ns; ordered by key, ts; `params` bound to ?1, ?2,
// ...) and emits one histogram series per key, labelled `label`.
result<void> histogram_family(query::reader &db, exporter &x, const std::string &sql,
                              const std::vector<query::value> &params, const std::string &label) {
  std::string key;
  bool have = false;
  std::vector<hist_row> rows;
  result<void> failed;
  auto flush = [&]() {
    if (have && failed) {
      failed = x.histogram_series({{label, key}}, rows);
    }
    rows.clear();
  };
  query::result_sink sink;
  sink.on_row = [&](const std::vector<query::value> &v) {
    std::string k = text_of(v[0]);
    if (!have || k != key) {
      flush();
      key = std::move(k);
      have = true;
    }
    rows.push_back({int_of(v[1]).value_or(0), blob_of(v[2]), int_of(v[3]).value_or(0)});
  };
  if (auto r = db.exec(sql, params, sink); !r) {
    return r;
  }
  flush();
  return failed;
}

// The recorded intervals starting in [from, to), in order (timeline: raw where kept, else the
// finest rollup; a file older than schema 3 has only raw intervals); an error when there is none.
result<std::vector<interval>> recorded(query::reader &db, std::int64_t from, std::int64_t to) {
  const std::string src = has_object(db, "timeline") ? "timeline" : "intervals";
  auto ivs = query(db,
                   "SELECT start_ns, start_ns + dur_ns FROM " + src +
                       " WHERE start_ns >= ?1 AND start_ns < ?2 ORDER BY start_ns",
                   {from, to});
  if (!ivs) {
    return ivs.err();
  }
  std::vector<interval> out;
  for (const auto &r : ivs->rows) {
    const auto s = int_of(r[0]);
    const auto e = int_of(r[1]);
    if (s && e && (out.empty() || *s >= out.back().end)) {
      out.push_back({*s, *e});
    }
  }
  if (out.empty()) {
    return make_error("export: the window holds no recorded interval");
  }
  return out;
}

// The condition on a view's rows: the window, ?1 (from) and ?2 (to), and --where when given.
// --where is SQL by design (a condition on sched_delay's columns), not a value: spliced as it is,
// into statements the reader runs read-only (detail::has_sql_parameter).
std::string rows_in(const std::string &where) {
  const std::string window = "ts >= ?1 AND ts < ?2";
  return where.empty() ? window : window + " AND (" + where + ")";
}

// The first column of `sql`'s rows as texts (the values the statements after it bind).
result<std::vector<std::string>> texts_of(query::reader &db, const std::string &sql,
                                          const std::vector<query::value> &params) {
  auto r = query(db, sql, params);
  if (!r) {
    return r.err();
  }
  std::vector<std::string> out;
  for (const auto &row : r->rows) {
    out.push_back(text_of(row[0]));
  }
  return out;
}

// --where, checked where it is spliced: SQL without parameters (detail::has_sql_parameter).
result<void> check_where(const export_args &a) {
  if (detail::has_sql_parameter(a.where)) {
    return make_error(std::string("export: ") + detail::where_parameter_error, EINVAL);
  }
  return {};
}

} // namespace

result<export_stats> write_openmetrics(query::reader &db, const export_args &a, std::int64_t from,
                                       std::int64_t to, std::ostream &out) {
  if (auto w = check_where(a); !w) {
    return w.err();
  }
  auto intervals = recorded(db, from, to);
  if (!intervals) {
    return intervals.err();
  }
  exporter x(out, std::move(*intervals));
  const std::vector<query::value> span = {from, to}; // ?1, ?2 of window and cond
  const std::string window = rows_in("");

  x.writer().begin("rsched_cpu_sched_delay_seconds", om::metric_type::histogram,
                   "Scheduling delay (wakeup to switch-in) per CPU, cumulative from the start "
                   "of the export window.",
                   "seconds");
  if (auto r = histogram_family(db, x,
                                "SELECT cpu, ts, hist, total_ns FROM cpu_sched_delay WHERE " +
                                    window + " ORDER BY cpu, ts",
                                span, "cpu");
      !r) {
    return r.err();
  }

  const std::string cond = rows_in(a.where);
  auto names = texts_of(db,
                        "SELECT cgroup FROM sched_delay WHERE " + cond +
                            " GROUP BY cgroup ORDER BY sum(count) DESC, cgroup LIMIT ?3",
                        {from, to, static_cast<std::int64_t>(a.top)});
  if (!names) {
    return names.err();
  }
  // Cgroup paths start with '/', so "other" never names a real one. The names kept are values
  // (?3, ...), after the window's.
  std::vector<query::value> params = span;
  const std::string group = names->empty()
                                ? std::string("'other'")
                                : "CASE WHEN cgroup IN (" + placeholders(params, *names) +
                                      ") THEN cgroup ELSE 'other' END";
  x.writer().begin("rsched_cgroup_sched_delay_seconds", om::metric_type::histogram,
                   "Scheduling delay per cgroup (the busiest by samples; the rest as "
                   "cgroup=\"other\"), cumulative from the start of the export window.",
                   "seconds");
  if (auto r = histogram_family(
          db, x,
          "SELECT " + group + " AS g, ts, hist_merge(hist), sum(total_ns) FROM sched_delay WHERE " +
              cond + " GROUP BY g, ts ORDER BY g, ts",
          params, "cgroup");
      !r) {
    return r.err();
  }

  // rschedd's own health, per raw interval.
  if (has_object(db, "health")) {
    auto h = query(db,
                   "SELECT ts, dur, collect_ns, write_ns, drops FROM health WHERE " + window +
                       " ORDER BY ts",
                   span);
    if (!h) {
      return h.err();
    }
    struct counter_def {
      const char *name;
      const char *help;
      int column; // -1: one per interval
      double scale;
    };
    static constexpr counter_def counters[] = {
        {"rsched_intervals", "Intervals rschedd recorded.", -1, 1},
        {"rsched_recorded_seconds", "Time covered by recorded intervals.", 1, 1 / ns_per_s},
        {"rsched_collect_seconds", "Time rschedd spent reading the BPF maps.", 2, 1 / ns_per_s},
        {"rsched_write_seconds", "Time rschedd spent writing the database.", 3, 1 / ns_per_s},
        {"rsched_drops", "Events the BPF programs could not record.", 4, 1},
    };
    for (const counter_def &c : counters) {
      std::vector<std::pair<std::int64_t, double>> d;
      for (const auto &r : h->rows) {
        const double v =
            c.column < 0
                ? 1.0
                : static_cast<double>(int_of(r[static_cast<std::size_t>(c.column)]).value_or(0)) *
                      c.scale;
        d.emplace_back(int_of(r[0]).value_or(0), v);
      }
      x.writer().begin(c.name, om::metric_type::counter, c.help, c.scale == 1 ? "" : "seconds");
      x.counter_series({}, d);
    }
  }
  x.writer().finish();
  out.flush();
  if (!out) {
    return make_error("export: error writing the output");
  }
  return x.stats();
}

// ---- perfetto -----------------------------------------------------------------------------------

namespace {

// A Chrome JSON trace (the "JSON trace format" ui.perfetto.dev and chrome://tracing open), one
// event per line. Names and texts as every rsched JSON has them (rsched/base/text.hpp): invalid
// UTF-8 as U+FFFD, the exact bytes then in a "<key>_hex" member beside the string ("name_hex" of
// an event, "source_hex" in its args); the viewers ignore members they do not know.
class trace {
public:
  explicit trace(std::ostream &out) : out_(&out) {
    *out_ << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  }

  // Names process `pid` (a group of tracks in the UI) and sorts it.
  void process(int pid, std::string_view name) {
    begin();
    line_ += fmt::format("{{\"ph\":\"M\",\"pid\":{},\"tid\":0,\"name\":\"process_name\","
                         "\"args\":{{",
                         pid);
    text::append_json_text_member(line_, "name", name);
    line_ += "}}";
    end();
    begin();
    line_ += fmt::format("{{\"ph\":\"M\",\"pid\":{0},\"tid\":0,\"name\":\"process_sort_index\","
                         "\"args\":{{\"sort_index\":{0}}}}}",
                         pid);
    end();
  }

  // A counter track `name` of process `pid`: one series per arg, values held until the next.
  void counter(int pid, std::string_view name, std::int64_t ts_ns,
               const std::vector<std::pair<const char *, double>> &args) {
    begin();
    line_ += fmt::format("{{\"ph\":\"C\",\"pid\":{},\"tid\":0,\"ts\":{},", pid, us(ts_ns));
    text::append_json_text_member(line_, "name", name);
    line_ += ",\"args\":{";
    bool first = true;
    for (const auto &[key, v] : args) {
      if (std::isfinite(v)) { // JSON has no NaN: a value that is not one is left out
        line_ += fmt::format("{}\"{}\":{}", first ? "" : ",", key, v);
        first = false;
      }
    }
    line_ += "}}";
    end();
  }

  // A slice [ts, ts + dur) on thread `tid` of process `pid`, with text arguments.
  void slice(int pid, int tid, std::string_view name, std::int64_t ts_ns, std::int64_t dur_ns,
             const std::vector<std::pair<const char *, std::string>> &args) {
    begin();
    line_ += fmt::format("{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},", pid, tid,
                         us(ts_ns), us(std::max<std::int64_t>(dur_ns, 0)));
    text::append_json_text_member(line_, "name", name);
    line_ += ",\"args\":{";
    for (std::size_t i = 0; i < args.size(); ++i) {
      line_ += i == 0 ? "" : ",";
      text::append_json_text_member(line_, args[i].first, args[i].second);
    }
    line_ += "}}";
    end();
  }

  void finish() { *out_ << "\n]}\n"; }
  [[nodiscard]] std::size_t events() const { return events_; }

private:
  // µs with the ns as decimals, written exactly (a reader parsing doubles keeps about 0.25 µs
  // at today's epoch).
  static std::string us(std::int64_t ns) {
    const char *sign = ns < 0 ? "-" : "";
    const auto a = ns < 0 ? -static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
    return fmt::format("{}{}.{:03}", sign, a / 1000, a % 1000);
  }
  void begin() {
    line_.clear();
    if (events_ != 0) {
      line_ += ",\n";
    }
  }
  void end() {
    *out_ << line_;
    ++events_;
  }

  std::ostream *out_;
  std::string line_;
  std::size_t events_ = 0;
};

double real_of(const query::value &v) {
  if (const auto *d = std::get_if<double>(&v)) {
    return *d;
  }
  if (const auto i = int_of(v)) {
    return static_cast<double>(*i);
  }
  return std::nan("");
}

constexpr double ns_per_ms = 1e6;

// Streams `sql` (columns: key, ts, p50, p99, max in ns; `params` bound to ?1, ?2, ...) into one
// counter track per key.
result<void> delay_tracks(query::reader &db, trace &t, int pid, const std::string &sql,
                          const std::vector<query::value> &params, const std::string &prefix) {
  query::result_sink sink;
  sink.on_row = [&](const std::vector<query::value> &v) {
    t.counter(pid, prefix + text_of(v[0]), int_of(v[1]).value_or(0),
              {{"p50_ms", real_of(v[2]) / ns_per_ms},
               {"p99_ms", real_of(v[3]) / ns_per_ms},
               {"max_ms", real_of(v[4]) / ns_per_ms}});
  };
  return db.exec(sql, params, sink);
}

} // namespace

result<export_stats> write_perfetto(query::reader &db, const export_args &a, std::int64_t from,
                                    std::int64_t to, std::ostream &out) {
  if (auto w = check_where(a); !w) {
    return w.err();
  }
  if (auto iv = recorded(db, from, to); !iv) {
    return iv.err();
  }
  const std::vector<query::value> span = {from, to}; // ?1, ?2 of window and cond
  const std::string window = rows_in("");
  const std::string cond = rows_in(a.where);
  // The worst comms: the highest p99 over the window among those with 20 samples or more.
  auto names = texts_of(db,
                        "SELECT comm FROM sched_delay WHERE " + cond +
                            " GROUP BY comm HAVING sum(count) >= 20 ORDER BY "
                            "hist_percentile(hist, 99) DESC, comm LIMIT ?3",
                        {from, to, static_cast<std::int64_t>(a.top)});
  if (!names) {
    return names.err();
  }
  trace t(out);
  enum : int { cpus = 1, comms = 2, marks = 3, spikes = 4, gaps = 5 };
  t.process(cpus, "rsched: scheduling delay per CPU");
  t.process(comms, "rsched: scheduling delay of the worst comms");
  t.process(marks, "rsched: annotations");
  t.process(spikes, "rsched: spikes (p99 above 3x its baseline)");
  t.process(gaps, "rsched: not recorded");
  if (auto r = delay_tracks(db, t, cpus,
                            "SELECT cpu, ts, hist_pct(hist, 50), hist_pct(hist, 99), "
                            "hist_max(hist) FROM cpu_sched_delay WHERE " +
                                window + " ORDER BY cpu, ts",
                            span, "cpu ");
      !r) {
    return r.err();
  }
  if (!names->empty()) {
    std::vector<query::value> params = span; // the comms are values: ?3, ...
    const std::string in = placeholders(params, *names);
    if (auto r = delay_tracks(db, t, comms,
                              "SELECT comm, ts, hist_pct(m, 50), hist_pct(m, 99), hist_max(m) FROM "
                              "(SELECT comm, ts, hist_merge(hist) AS m FROM sched_delay WHERE " +
                                  cond + " AND comm IN (" + in +
                                  ") GROUP BY comm, ts) ORDER BY comm, ts",
                              params, "");
        !r) {
      return r.err();
    }
  }
  auto m = query(db,
                 "SELECT start_ns, coalesce(end_ns, start_ns), text, source, tags FROM annotations "
                 "WHERE start_ns < ?2 AND coalesce(end_ns, start_ns) >= ?1 ORDER BY start_ns, id",
                 span);
  if (!m) {
    return m.err();
  }
  for (const auto &r : m->rows) {
    const auto s = int_of(r[0]).value_or(0);
    t.slice(marks, 1, text_of(r[2]), s, int_of(r[1]).value_or(s) - s,
            {{"source", text_of(r[3])}, {"tags", text_of(r[4])}});
  }
  auto sp = query(
      db, "SELECT ts, dur, victim, peak_ns, cause FROM spikes('sched_delay', '3x', ?1, ?2)", span);
  if (!sp) {
    return sp.err();
  }
  for (const auto &r : sp->rows) {
    t.slice(spikes, 1, text_of(r[2]), int_of(r[0]).value_or(0), int_of(r[1]).value_or(0),
            {{"peak_p99", text::format_duration_ns(real_of(r[3]))}, {"cause", text_of(r[4])}});
  }
  auto g = query(db, "SELECT ts, dur, reason FROM gaps(?1, ?2)", span);
  if (!g) {
    return g.err();
  }
  for (const auto &r : g->rows) {
    t.slice(gaps, 1, text_of(r[2]), int_of(r[0]).value_or(0), int_of(r[1]).value_or(0), {});
  }
  t.finish();
  out.flush();
  if (!out) {
    return make_error("export: error writing the output");
  }
  return export_stats{5, t.events()}; // the five track groups
}

} // namespace rsched::sql_shell
