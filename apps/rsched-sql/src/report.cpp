// report (pictures.hpp): one self-contained HTML page for a window, to attach to a postmortem.
// No scripts, fonts or images from anywhere: inline CSS and inline SVG.
#include "rsched/base/text.hpp"
#include "rsched/sql_shell/output.hpp"
#include "rsched/sql_shell/pictures.hpp"
#include "rsched/stats/percentile.hpp"

#include "sql_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <future>
#include <limits>
#include <map>
#include <optional>
#include <system_error>

namespace rsched::sql_shell {

namespace {

using detail::has_object;
using detail::int_of;
using detail::query;

using charts::xml_text;

std::string text_of(const query::value &v) {
  if (const auto *s = std::get_if<std::string>(&v)) {
    return *s;
  }
  if (const auto *i = std::get_if<std::int64_t>(&v)) {
    return std::to_string(*i);
  }
  if (const auto *d = std::get_if<double>(&v)) {
    return fmt::format("{:.4g}", *d);
  }
  return "";
}

std::string dur_of(const query::value &v) {
  const auto i = int_of(v);
  return i ? text::format_duration_ns(static_cast<double>(*i)) : std::string("–");
}

// spikes()' peak_ns as the bucket that holds it, the precision it has (layout 1's: the
// summaries spikes() reads keep layout 1's buckets), as the shell prints it: not "15.0 ms".
std::string peak_of(const query::value &v) {
  const auto i = int_of(v);
  return i ? format_percentile_ns(static_cast<double>(*i)) : std::string("–");
}

constexpr const char *css = R"(
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 24px 32px;
       color: #1d1d1d; max-width: 1180px; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 34px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.meta { color: #555; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #666; font-size: 12px; }
.bad { color: #a40000; }
figure { margin: 10px 0 18px 0; }
figcaption { color: #555; font-size: 12px; margin-top: 2px; }
)";

// How many characters of an annotation's text the report shows in its table (the text read,
// up to mark_text_chars, is the cell's tooltip when longer).
constexpr std::size_t shown_chars = 200;

// `s` cut to `n` characters (a UTF-8 lead byte with its continuation bytes, or any other byte),
// "..." appended; nullopt when it is not longer.
std::optional<std::string> shortened(const std::string &s, std::size_t n) {
  std::size_t i = 0;
  for (std::size_t c = 0; c < n && i < s.size(); ++c) {
    if (static_cast<unsigned char>(s[i++]) >= 0xC0) {
      while (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) {
        ++i;
      }
    }
  }
  if (i >= s.size()) {
    return std::nullopt;
  }
  return s.substr(0, i) + "...";
}

std::string table_html(const std::vector<std::string> &head,
                       const std::vector<std::vector<std::pair<std::string, bool>>> &rows) {
  std::string out = "<table><tr>";
  for (const auto &h : head) {
    out += "<th>" + xml_text(h) + "</th>";
  }
  out += "</tr>\n";
  for (const auto &r : rows) {
    out += "<tr>";
    for (const auto &[cell, num] : r) {
      out += std::string(num ? "<td class=\"num\">" : "<td>") + xml_text(cell) + "</td>";
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

// A file path as a file:// URL: every byte but unreserved ones and '/' percent-encoded (a path
// is bytes: quotes, spaces, '#', non-UTF-8 in a name stay data).
std::string file_url(const std::string &path) {
  std::string out = "file://";
  for (const char ch : path) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~' || c == '/') {
      out += ch;
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// A row of a query's result, and the cells of a table_html() table (text, right-aligned).
using row = std::vector<query::value>;
using table_rows = std::vector<std::vector<std::pair<std::string, bool>>>;

// ---- the window --------------------------------------------------------------------------

// The report's window, as every stage reads it.
struct report_window {
  std::int64_t from = 0;
  std::int64_t to = 0;
  std::int64_t step = 1;
  std::string where;              // --where, as written
  std::vector<query::value> span; // ?1, ?2: the window
  std::string window;             // its rows of sched_delay: ts in ?1 to ?2, and --where
  std::string threads;            // SELECT tid, comm of those rows
  mark_list marks;                // its annotations, read once
  heatmap_args base;              // the heatmap of all threads (the others start from it)
  heatmap_plan main_plan;         // its plan, with `base` as its arguments
};

// Reads the window (as the heatmap of all threads resolves it) and its annotations.
result<report_window> read_window(query::reader &db, const report_args &a) {
  report_window w;
  w.where = a.where;
  w.base.from = a.from;
  w.base.to = a.to;
  w.base.where = a.where;
  // The window, as the heatmap reads it; the other pictures take it (and its step) from there.
  auto main_plan = plan_heatmap(db, w.base, svg_columns);
  if (!main_plan) {
    return main_plan.err();
  }
  w.from = main_plan->from;
  w.to = main_plan->to;
  w.step = main_plan->step;
  w.base.from_ns = w.from;
  w.base.to_ns = w.to;
  w.base.step_ns = w.step;
  // Every statement of the report binds its window's start and end as ?1 and ?2 (`span` for the
  // report's window). --where is SQL by design (a condition on sched_delay's columns), not a
  // value: spliced as written into statements the reader runs read-only; plan_heatmap above
  // has refused one with parameters (detail::has_sql_parameter).
  w.span = {w.from, w.to};
  const std::string cond = a.where.empty() ? std::string() : " AND (" + a.where + ")";
  w.window = "ts >= ?1 AND ts < ?2" + cond;
  // A thread by (tid, comm), not by tid alone: a tid is reused, and the rollup tiers keep one
  // identity per (comm, cgroup) with tid 0. The threads of the statement's window, ?1 to ?2.
  w.threads = "SELECT tid, comm FROM sched_delay WHERE " + w.window;

  // The annotations of the window, read once, bounded (load_marks): drawn on the timeline and
  // every heatmap, listed below.
  auto marks = load_marks(db, w.from, w.to);
  if (!marks) {
    return marks.err();
  }
  // Each band's label starts with its annotation's id ("#3 deploy ..."), as its row in the
  // table and its section ("Annotation 3") name it: a label cut short or left out for want of
  // room still says which.
  for (std::size_t k = 0; k < marks->marks.size() && k < marks->ids.size(); ++k) {
    marks->marks[k].number = marks->ids[k];
  }
  w.marks = std::move(*marks);
  w.base.marks = w.marks;
  main_plan->args = w.base;
  w.main_plan = std::move(*main_plan);
  return w;
}

// The heatmaps of all threads, the worst comms (when some have 20 samples) and the busiest
// cgroups, with the arguments each is drawn with.
struct report_maps {
  bool any_worst = false;
  heatmap_args worst;                                      // the worst comms'
  heatmap_args cgroups;                                    // the busiest cgroups'
  std::vector<std::vector<charts::heatmap>> maps;          // all, [worst,] cgroups
  std::vector<std::optional<stats::histogram>> per_column; // all threads', merged per column
};

// Reads the report's heatmaps, and the timeline's histograms with them.
result<report_maps> read_heatmaps(query::reader &db, const report_window &w) {
  // The heatmaps of all threads, the worst comms and the busiest cgroups, and the timeline's
  // p50 and p99 per column, from one read of the window's histograms (load_heatmaps): each
  // read alone decoded every histogram of the window again.
  auto worst =
      query(db,
            "SELECT comm, hist_percentile(hist, 99) AS p99 FROM sched_delay WHERE " + w.window +
                " GROUP BY comm HAVING sum(count) >= 20 ORDER BY p99 DESC LIMIT 4",
            w.span);
  if (!worst) {
    return worst.err();
  }
  report_maps m;
  std::vector<heatmap_plan> plans = {w.main_plan};
  m.worst = w.base;
  m.any_worst = !worst->rows.empty();
  if (m.any_worst) {
    for (const auto &r : worst->rows) {
      m.worst.comms.push_back(text_of(r[0])); // values, bound by load_heatmaps
    }
    m.worst.by = "comm";
    m.worst.top = 4;
    auto p = plan_heatmap(db, m.worst, svg_columns);
    if (!p) {
      return p.err();
    }
    plans.push_back(std::move(*p));
  }
  m.cgroups = w.base;
  m.cgroups.by = "cgroup";
  m.cgroups.top = 4;
  auto p = plan_heatmap(db, m.cgroups, svg_columns);
  if (!p) {
    return p.err();
  }
  plans.push_back(std::move(*p));
  auto maps = load_heatmaps(db, plans, &m.per_column);
  if (!maps) {
    return maps.err();
  }
  m.maps = std::move(*maps);
  return m;
}

// read_heatmaps on a second connection (reader::twin) in a thread of its own; no future (the
// caller reads them itself) where there is none: parallel reads off, an in-memory database,
// several hosts.
std::future<result<report_maps>> read_heatmaps_aside(query::reader &db, const report_window &w) {
  if (!db.parallel()) {
    return {};
  }
  auto twin = db.twin();
  if (!twin) {
    return {};
  }
  try {
    return std::async(std::launch::async,
                      [t = std::move(*twin), &w]() mutable { return read_heatmaps(t, w); });
  } catch (const std::system_error &) {
    return {}; // no thread to be had: read in turn
  }
}

// ---- the page's head and the window's numbers ----------------------------------------------

// The document's head, the host and the window.
std::string page_head(query::reader &db, const report_window &w) {
  const timefmt::zone &zone = db.zone();
  std::string html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                     "<title>rsched report</title><style>";
  html += css;
  html += "</style></head><body>\n";
  std::string host;
  if (auto m = query(db, "SELECT value FROM meta WHERE key = 'hostname'"); m && !m->rows.empty()) {
    host = text_of(m->rows[0][0]);
  }
  html += fmt::format("<h1>Scheduling delay report{}</h1>\n",
                      host.empty() ? std::string() : " · " + xml_text(host));
  html += fmt::format("<p class=\"meta\">{} – {} ({}){}</p>\n",
                      xml_text(timefmt::format_time(w.from, zone)),
                      xml_text(timefmt::format_time(w.to, zone)),
                      xml_text(text::format_duration_ns(static_cast<double>(w.to - w.from))),
                      w.where.empty() ? std::string() : " · threads where " + xml_text(w.where));
  return html;
}

// Coverage and gaps.
std::string coverage_html(query::reader &db, const report_window &w) {
  const timefmt::zone &zone = db.zone();
  std::string html = "<h2>Coverage</h2>\n";
  if (auto c = query(db, "SELECT covered_ns, coverage_pct FROM coverage(?1, ?2)", w.span);
      c && !c->rows.empty()) {
    html += fmt::format(
        "<p>{} of the window recorded ({:.1f} %).</p>\n", xml_text(dur_of(c->rows[0][0])),
        std::get_if<double>(&c->rows[0][1]) != nullptr ? *std::get_if<double>(&c->rows[0][1])
                                                       : 0.0);
  }
  if (auto g = query(db, "SELECT ts, end_ts, dur, reason FROM gaps(?1, ?2)", w.span);
      g && !g->rows.empty()) {
    table_rows rows;
    for (const auto &r : g->rows) {
      rows.push_back({{timefmt::format_time(int_of(r[0]).value_or(0), zone), false},
                      {timefmt::format_time(int_of(r[1]).value_or(0), zone), false},
                      {dur_of(r[2]), true},
                      {text_of(r[3]), false}});
    }
    html += table_html({"gap from", "to", "length", "reason"}, rows);
  } else {
    html += "<p class=\"note\">No gaps.</p>\n";
  }
  return html;
}

// Headline percentiles with their error bound.
std::string percentiles_html(query::reader &db, const report_window &w) {
  std::string html = "<h2>Scheduling delay</h2>\n";
  if (auto p = query(db,
                     "SELECT sum(count), hist_percentile(hist, 50), "
                     "hist_percentile_error(hist, 50), hist_percentile(hist, 90), "
                     "hist_percentile_error(hist, 90), hist_percentile(hist, 99), "
                     "hist_percentile_error(hist, 99), hist_percentile(hist, 99.9), "
                     "hist_percentile_error(hist, 99.9), hist_max(hist_merge(hist)) FROM "
                     "sched_delay WHERE " +
                         w.window,
                     w.span);
      p && !p->rows.empty()) {
    const auto &r = p->rows[0];
    const auto pm = [&](std::size_t v, std::size_t e) {
      return dur_of(r[v]) + " ± " + dur_of(r[e]);
    };
    html += table_html({"samples", "p50", "p90", "p99", "p99.9", "max (bucket top)"},
                       {{{text_of(r[0]), true},
                         {pm(1, 2), true},
                         {pm(3, 4), true},
                         {pm(5, 6), true},
                         {pm(7, 8), true},
                         {dur_of(r[9]), true}}});
    html += "<p class=\"note\">A percentile lies within its bucket: ± is the bucket's width (the "
            "error bound, docs/SQL.md).</p>\n";
  }
  return html;
}

// ---- spikes ----------------------------------------------------------------------------------

// How many spikes the report numbers (on the timeline and in its table).
constexpr std::size_t shown_spikes = 12;

// The window's spikes (spikes('sched_delay', '3x')), worst first.
struct spike_list {
  std::vector<row> all;   // every one: the sections'
  std::vector<row> shown; // the worst 12, the report's numbering
};

// Reads the spikes, per comm, with their cause; they also mark the timeline.
spike_list read_spikes(query::reader &db, const report_window &w) {
  // --where narrows them to its threads: a one-thread spike by its tid, a comm's by its comm
  // (as the spike's victim names it).
  const std::string narrow = w.where.empty()
                                 ? std::string()
                                 : " WHERE CASE WHEN tid IS NULL THEN victim IN (SELECT comm FROM "
                                   "sched_delay WHERE " +
                                       w.window + ") ELSE (tid, victim) IN (" + w.threads + ") END";
  // Column 6 (spikes' top_comms) is not shown: NULL in its place, so that spikes() does not
  // read every incident's histograms again for it.
  spike_list s;
  if (auto q = query(db,
                     "SELECT ts, end_ts, dur, peak_ns, victim, cause, NULL, tid FROM "
                     "spikes('sched_delay', '3x', ?1, ?2)" +
                         narrow + " ORDER BY peak_ns DESC, ts",
                     w.span);
      q) {
    s.all = std::move(q->rows);
    s.shown.assign(s.all.begin(), s.all.begin() + static_cast<std::ptrdiff_t>(
                                                      std::min(s.all.size(), shown_spikes)));
  }
  return s;
}

// A spike of one thread (spikes' tid) is that thread's: named and blamed as the thread.
std::string victim_text(const row &s) {
  const auto tid = int_of(s[7]);
  return tid ? fmt::format("{} (tid {})", text_of(s[4]), *tid) : text_of(s[4]);
}

std::string victim_arg(const row &s) {
  const auto tid = int_of(s[7]);
  return tid ? fmt::format("tid:{}", *tid) : text_of(s[4]);
}

// ---- the timeline and the heatmap of all threads -------------------------------------------

// A percentile of a merged column as hist_percentile() gives it: NULL for an empty one.
query::value percentile_value(const stats::histogram &h, double p) {
  const auto r = stats::percentile(h, p);
  if (!r) {
    return std::monostate{};
  }
  constexpr auto max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  return static_cast<std::int64_t>(r->value > max ? max : r->value);
}

// The p99 timeline with annotations and spikes.
result<charts::series_chart> timeline_chart(query::reader &db, const report_window &w,
                                            const report_maps &m, const spike_list &spikes) {
  plot_args pa;
  pa.title =
      "p50 and p99 scheduling delay per " + text::format_duration_ns(static_cast<double>(w.step));
  pa.log = true;
  pa.marks = w.marks;
  // What SELECT bucket(ts, step) AS t, hist_percentile(hist, 50) AS p50_ns,
  // hist_percentile(hist, 99) AS p99_ns ... GROUP BY 1 ORDER BY 1 gives, from the columns
  // merged by the heatmaps' read.
  std::vector<row> rows;
  const std::int64_t col0 = w.from - (((w.from % w.step) + w.step) % w.step);
  for (std::size_t i = 0; i < m.per_column.size(); ++i) {
    if (m.per_column[i]) {
      rows.push_back({col0 + static_cast<std::int64_t>(i) * w.step,
                      percentile_value(*m.per_column[i], 50),
                      percentile_value(*m.per_column[i], 99)});
    }
  }
  auto c = plot_of_rows(db, pa, {"t", "p50_ns", "p99_ns"}, rows);
  if (!c) {
    return c.err();
  }
  charts::series_chart tl = std::move(*c);
  for (std::size_t i = 0; i < spikes.shown.size(); ++i) {
    const auto &s = spikes.shown[i];
    tl.marks.push_back({int_of(s[0]).value_or(0), int_of(s[1]).value_or(0),
                        fmt::format("#{} {}", i + 1, victim_text(s)), true});
  }
  std::stable_sort(tl.marks.begin(), tl.marks.end(),
                   [](const charts::span &x, const charts::span &y) { return x.start < y.start; });
  return tl;
}

// The timeline and the heatmap of every sample, as figures.
result<std::string> pictures_html(query::reader &db, const report_window &w, const report_maps &m,
                                  const spike_list &spikes) {
  auto tl = timeline_chart(db, w, m, spikes);
  if (!tl) {
    return tl.err();
  }
  charts::svg_options so;
  so.zone = db.zone();
  std::string html = "<figure>" + charts::to_svg(*tl, so) +
                     "<figcaption>Log scale. Bands: annotations (solid blue) and spikes (dashed "
                     "orange, numbered as in the tables); hatched: not recorded."
                     "</figcaption></figure>\n";
  html += "<figure>" + heatmap_svg(m.maps.front(), w.base, db.zone()) +
          "<figcaption>Every sample of the window: time across, delay up (log2 rows), colour "
          "for how many.</figcaption></figure>\n";
  return html;
}

// The table of the window's annotations, and how to list those it leaves out.
std::string annotations_html(const report_window &w, const timefmt::zone &zone) {
  if (w.marks.marks.empty()) {
    return {};
  }
  std::string html = "<h2>Annotations</h2>\n<table><tr><th>#</th><th>from</th><th>until</th>"
                     "<th>text</th></tr>\n";
  for (const auto &m : w.marks.marks) {
    const auto cut = shortened(m.text, shown_chars);
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{}</td>{}{}</td></tr>\n",
                        m.number != 0 ? fmt::format("#{}", m.number) : std::string(),
                        xml_text(timefmt::format_time(m.start, zone)),
                        m.end != m.start ? xml_text(timefmt::format_time(m.end, zone))
                                         : std::string("–"),
                        cut ? "<td title=\"" + xml_text(m.text) + "\">" : std::string("<td>"),
                        xml_text(cut ? *cut : m.text));
  }
  html += "</table>\n";
  const auto shown = static_cast<std::int64_t>(w.marks.marks.size());
  if (w.marks.total > shown) {
    html += fmt::format(
        "<p class=\"note\">{} more not shown: {} annotations overlap the window, the table "
        "and the pictures have {} of them (those not imported first, then the longest, then "
        "the earliest). All of them: <code>SELECT * FROM annotations WHERE start_ns &lt; {} "
        "AND coalesce(end_ns, start_ns) &gt;= {}</code></p>\n",
        w.marks.total - shown, w.marks.total, shown, w.to, w.from);
  }
  return html;
}

// ---- one section per annotation ---------------------------------------------------------

// An annotation's incident: its id, its window and its heading.
struct incident {
  std::int64_t id = 0;
  std::int64_t from = 0;
  std::int64_t to = 0;
  bool range = false;             // a range annotation; else a point in time, 5 minutes either side
  std::string text;               // read bounded: a heading, not the whole text
  std::vector<query::value> span; // ?1, ?2: its window
};

// Which of the tables the sections read the database has: looked up once, not per annotation.
struct recorded_tables {
  bool captures = false;
  bool throttling = false;
  bool pressure = false;
  bool wakeups = false;
};

// A thread explain() names: its tid (as text, and as explain gave it) and its comm.
struct thread_ref {
  std::string tid;
  std::string comm;
  query::value tid_value;
};

// The incident of a row of annotations (id, start_ns, end_ns, text): a range annotation's
// window is its range; a point in time's, the 5 minutes either side (as the annotation_delay
// view).
incident incident_of(const row &r) {
  constexpr std::int64_t margin = 5LL * 60 * 1'000'000'000;
  incident inc;
  inc.id = int_of(r[0]).value_or(0);
  const std::int64_t s0 = int_of(r[1]).value_or(0);
  const auto e0 = int_of(r[2]);
  inc.range = e0 && *e0 > s0;
  inc.from = inc.range ? s0 : s0 - margin;
  inc.to = inc.range ? *e0 : s0 + margin;
  inc.text = text_of(r[3]);
  inc.span = {inc.from, inc.to};
  return inc;
}

// The section's heading: the annotation's id and text, and its window.
std::string section_head(const incident &inc, const timefmt::zone &zone) {
  const auto cut = shortened(inc.text, shown_chars);
  std::string html = fmt::format("<section id=\"annotation-{}\"><h2>Annotation {}: {}</h2>\n",
                                 inc.id, inc.id, xml_text(cut ? *cut : inc.text));
  html += fmt::format("<p class=\"meta\">{} – {}{}</p>\n",
                      xml_text(timefmt::format_time(inc.from, zone)),
                      xml_text(timefmt::format_time(inc.to, zone)),
                      inc.range ? "" : " (5 minutes either side of a point in time)");
  return html;
}

// Reads explain()'s rows of the incident: the threads that did worst against their own
// baseline, and why; none when it has none.
std::vector<row> explain_rows(query::reader &db, const report_window &w, const incident &inc) {
  // The 5 worst threads (of --where's threads), 3 causes each. An incident with a window and
  // no --where: explain(id), whose victims are the service its tags name (?1 the id);
  // otherwise explain over the window (?1, ?2).
  const bool by_id = w.where.empty() && inc.range;
  const std::vector<query::value> explain_args =
      by_id ? std::vector<query::value>{inc.id} : inc.span;
  auto ex = query(db,
                  std::string("SELECT victim_rank, victim_tid, victim_comm, late_excess_ns, "
                              "cause, share_pct, summary, victims_rule, via, cause_rank FROM ") +
                      (by_id ? "explain(?1)" : "explain(?1, ?2)") +
                      " WHERE (cause_rank <= 3 OR cause_rank IS NULL)" +
                      (w.where.empty() ? std::string(" AND victim_rank <= 5")
                                       : " AND (victim_tid, victim_comm) IN (" + w.threads + ")"),
                  explain_args);
  if (!ex) {
    return {};
  }
  std::vector<std::string> ranks; // the victims kept, in explain's order
  std::erase_if(ex->rows, [&](const row &v) {
    const std::string rank = text_of(v[0]);
    if (std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
      return false;
    }
    if (ranks.size() == 5) {
      return true;
    }
    ranks.push_back(rank);
    return false;
  });
  return std::move(ex->rows);
}

// The lead line and explain()'s table: the victims, their causes and the paths to them.
std::string victims_html(const std::vector<row> &ex) {
  table_rows rows;
  for (const auto &v : ex) {
    const auto *share = std::get_if<double>(&v[5]);
    rows.push_back({{text_of(v[0]), true},
                    {fmt::format("{} (tid {})", text_of(v[2]), text_of(v[1])), false},
                    {dur_of(v[3]), true},
                    {text_of(v[4]), false},
                    {text_of(v[8]), false},
                    {share != nullptr ? fmt::format("{:.1f} %", *share) : "", true},
                    {text_of(v[6]), false}});
  }
  // The lead: whom the page was about, and the root culprit of its worst thread's first
  // cause with the path to it.
  const auto &lead = ex.front();
  std::string html = fmt::format("<p class=\"lead\">Victims: {}.", xml_text(text_of(lead[7])));
  if (const auto *share = std::get_if<double>(&lead[5]);
      share != nullptr && std::holds_alternative<std::string>(lead[8])) {
    html += fmt::format(" Root culprit of its worst thread: <b>{}</b> ({}, {:.0f} % of its "
                        "extra time).",
                        xml_text(text_of(lead[8])), xml_text(text_of(lead[4])), *share);
  }
  html += "</p>\n";
  html += "<p class=\"note\">Who did worst against their own baseline, and why "
          "(explain(), docs/SQL.md): extra time is the lateness (runnable, held and "
          "blocked) beyond the baseline rate's; the path runs from the victim to the root "
          "culprit.</p>\n";
  html += table_html({"rank", "victim", "extra time", "cause", "path", "share", "summary"}, rows);
  return html;
}

// The worst three threads of explain()'s rows, in its order.
std::vector<thread_ref> worst_threads(const std::vector<row> &ex) {
  std::vector<thread_ref> who;
  for (const auto &v : ex) {
    thread_ref t{text_of(v[1]), text_of(v[2]), v[1]};
    const bool seen = std::any_of(who.begin(), who.end(), [&](const thread_ref &o) {
      return o.tid == t.tid && o.comm == t.comm;
    });
    if (who.size() < 3 && !seen) {
      who.push_back(std::move(t));
    }
  }
  return who;
}

// A timeline of the worst three: each one's p99 from as long before the window as it lasts
// (their baseline) to half as long after it.
std::string worst_threads_plot(query::reader &db, const incident &inc,
                               const std::vector<thread_ref> &who) {
  const std::int64_t len = inc.to - inc.from;
  const std::int64_t pa0 = inc.from - len;
  const std::int64_t pa1 = inc.to + len / 2;
  constexpr std::int64_t second = 1'000'000'000;
  const std::int64_t pstep = std::max(second, (pa1 - pa0) / 100 / second * second);
  // ?1, ?2: the plot's span; ?3 its step; then each thread's tid and comm.
  plot_args vp;
  vp.params = {pa0, pa1, pstep};
  std::string cols;
  std::string any;
  for (std::size_t k = 0; k < who.size(); ++k) {
    vp.params.push_back(who[k].tid_value);
    vp.params.emplace_back(who[k].comm);
    const std::string one = "tid = ?" + std::to_string(vp.params.size() - 1) + " AND comm = ?" +
                            std::to_string(vp.params.size());
    cols += ", hist_percentile(hist, 99) FILTER (WHERE " + one + ") AS v" + std::to_string(k);
    any += (any.empty() ? "(" : " OR (") + one + ")";
  }
  vp.sql = "SELECT bucket(ts, ?3) AS t";
  vp.sql.append(cols).append(" FROM sched_delay WHERE ts >= ?1 AND ts < ?2 AND (");
  vp.sql.append(any).append(") GROUP BY 1 ORDER BY 1");
  vp.title = "p99 scheduling delay of the worst threads, per " +
             text::format_duration_ns(static_cast<double>(pstep));
  vp.log = true;
  // Its own band only, named by number (the heading holds the text): the report's 200
  // annotations drawn in every section's chart would be most of a page of many.
  mark_list own;
  own.marks.push_back({inc.from, inc.to, fmt::format("Annotation {}", inc.id), false, 0});
  own.total = 1;
  vp.marks = std::move(own);
  auto vc = load_plot(db, vp);
  if (!vc || vc->x.empty()) {
    return {};
  }
  for (std::size_t k = 0; k < who.size() && k < vc->names.size(); ++k) {
    vc->names[k] = fmt::format("{} (tid {})", who[k].comm, who[k].tid);
  }
  vc->durations = true;
  charts::svg_options vo;
  vo.zone = db.zone();
  return "<figure>" + charts::to_svg(*vc, vo) +
         "<figcaption>The worst threads' p99 before, during and after the window "
         "(log scale).</figcaption></figure>\n";
}

// The sleeping side of the same threads, where the wakeup group was recorded: their time
// running, runnable (who ran), sleeping (who woke them) and blocked (where), and one hop
// further (why(), docs/SQL.md).
std::string why_html(query::reader &db, const incident &inc, const std::vector<thread_ref> &who) {
  auto recorded = query(db, "SELECT 1 FROM wakeups WHERE ts >= ?1 AND ts < ?2 LIMIT 1", inc.span);
  if (!recorded || recorded->rows.empty()) {
    return {};
  }
  table_rows wrows;
  for (const auto &t : who) {
    if (auto wy = query(db, "SELECT summary FROM why(?3, ?1, ?2) LIMIT 1",
                        {inc.from, inc.to, "tid:" + t.tid});
        wy && !wy->rows.empty()) {
      wrows.push_back(
          {{fmt::format("{} (tid {})", t.comm, t.tid), false}, {text_of(wy->rows[0][0]), false}});
    }
  }
  if (wrows.empty()) {
    return {};
  }
  return "<p class=\"note\">The whole wait of the worst threads: running, runnable (who ran), "
         "sleeping (who woke them), blocked (where), and the waker's own time one hop further "
         "(why(), docs/SQL.md):</p>\n" +
         table_html({"thread", "where its time went"}, wrows);
}

// explain(): the threads that did worst against their own baseline, and why; the worst
// three's timeline and (where wakeups were recorded) their whole wait.
std::string explain_html(query::reader &db, const report_window &w, const incident &inc,
                         bool wakeups) {
  const std::vector<row> ex = explain_rows(db, w, inc);
  if (ex.empty()) {
    return {};
  }
  std::string html = victims_html(ex);
  const std::vector<thread_ref> who = worst_threads(ex);
  html += worst_threads_plot(db, inc, who);
  if (wakeups) {
    html += why_html(db, inc, who);
  }
  return html;
}

// The flight recorder's captures of this window: the seconds around it as a trace.
std::string capture_links_html(query::reader &db, const incident &inc) {
  auto cp = query(db,
                  "SELECT id, trigger FROM captures WHERE start_ns < ?2 AND end_ns >= ?1 "
                  "ORDER BY start_ns, id LIMIT 20",
                  inc.span);
  if (!cp || cp->rows.empty()) {
    return {};
  }
  std::string links;
  for (const auto &v : cp->rows) {
    links += fmt::format("{}<a href=\"#capture-{}\">#{} ({})</a>", links.empty() ? "" : ", ",
                         text_of(v[0]), text_of(v[0]), xml_text(text_of(v[1])));
  }
  return "<p>Flight recorder captures of this window: " + links + ".</p>\n";
}

// Spikes in the window (of every spike, not only the report's worst 12: an incident's own may
// be milder than another's), worst first, with their causes; each cut at the window's edges
// (one that began with the recording, or runs on past the incident). Marks the report's spikes
// it lists as `covered`.
std::string window_spikes_html(const incident &inc, const spike_list &spikes,
                               std::vector<bool> &covered, const timefmt::zone &zone) {
  table_rows srows;
  for (std::size_t i = 0; i < spikes.all.size() && srows.size() < 6; ++i) {
    const auto &sp = spikes.all[i];
    const std::int64_t cut_a = std::max(int_of(sp[0]).value_or(0), inc.from);
    const std::int64_t cut_b = std::min(int_of(sp[1]).value_or(0), inc.to);
    if (cut_a < cut_b) {
      if (i < covered.size()) {
        covered[i] = true;
      }
      srows.push_back({{i < shown_spikes ? fmt::format("#{}", i + 1) : std::string(), false},
                       {timefmt::format_time(cut_a, zone), false},
                       {text::format_duration_ns(static_cast<double>(cut_b - cut_a)), true},
                       {victim_text(sp), false},
                       {peak_of(sp[3]), true},
                       {text_of(sp[5]), false}});
    }
  }
  if (srows.empty()) {
    return "<p class=\"note\">No spike in this window.</p>\n";
  }
  return table_html({"", "from", "for", "victim", "peak p99", "likely cause"}, srows);
}

// Priority inversions in the window, with their times.
std::string inversions_html(query::reader &db, const report_window &w, const incident &inc) {
  const timefmt::zone &zone = db.zone();
  auto inv =
      query(db,
            "SELECT ts, end_ts, comm, tid, by_comm, by_pid, wait_ns FROM "
            "inversions(?1, ?2, '10ms')" +
                (w.where.empty() ? std::string() : " WHERE (tid, comm) IN (" + w.threads + ")") +
                " ORDER BY wait_ns DESC LIMIT 6",
            inc.span);
  if (!inv || inv->rows.empty()) {
    return {};
  }
  table_rows rows;
  for (const auto &v : inv->rows) {
    rows.push_back({{timefmt::format_time(int_of(v[0]).value_or(0), zone), false},
                    {timefmt::format_time(int_of(v[1]).value_or(0), zone), false},
                    {fmt::format("{} (tid {})", text_of(v[2]), text_of(v[3])), false},
                    {fmt::format("{}[{}]", text_of(v[4]), text_of(v[5])), false},
                    {dur_of(v[6]), true}});
  }
  return table_html({"inversion from", "until", "waiting thread", "behind", "wait"}, rows);
}

// The cgroups throttled in the window, with their times.
std::string window_throttling_html(query::reader &db, const incident &inc) {
  const timefmt::zone &zone = db.zone();
  auto t = query(db,
                 "SELECT cgroup, min(ts), max(ts + dur), sum(throttled), "
                 "sum(throttled_ns) FROM cpu_throttling WHERE ts >= ?1 AND ts < ?2 AND "
                 "throttled > 0 GROUP BY cgroup ORDER BY 5 DESC LIMIT 6",
                 inc.span);
  if (!t || t->rows.empty()) {
    return {};
  }
  table_rows rows;
  for (const auto &v : t->rows) {
    rows.push_back({{text_of(v[0]), false},
                    {timefmt::format_time(int_of(v[1]).value_or(0), zone), false},
                    {timefmt::format_time(int_of(v[2]).value_or(0), zone), false},
                    {text_of(v[3]), true},
                    {dur_of(v[4]), true}});
  }
  return table_html({"throttled cgroup", "first", "last until", "periods", "time"}, rows);
}

// The system's CPU pressure at its peak in the window, and when.
std::string window_pressure_html(query::reader &db, const incident &inc) {
  auto pr = query(db,
                  "SELECT ts, some_pct FROM cpu_pressure WHERE ts >= ?1 AND ts < ?2 AND "
                  "cgroup = '/' ORDER BY some_pct DESC, ts LIMIT 1",
                  inc.span);
  if (!pr || pr->rows.empty()) {
    return {};
  }
  const auto *pct = std::get_if<double>(&pr->rows[0][1]);
  if (pct == nullptr) {
    return {};
  }
  return fmt::format("<p>CPU pressure (PSI some, the system) peaked at {:.1f} % at "
                     "{}.</p>\n",
                     *pct,
                     xml_text(timefmt::format_time(int_of(pr->rows[0][0]).value_or(0), db.zone())));
}

// One incident's section: what happened in its window.
std::string incident_section(query::reader &db, const report_window &w, const incident &inc,
                             const recorded_tables &has, const spike_list &spikes,
                             std::vector<bool> &covered) {
  std::string html = section_head(inc, db.zone());
  html += explain_html(db, w, inc, has.wakeups);
  if (has.captures) {
    html += capture_links_html(db, inc);
  }
  html += window_spikes_html(inc, spikes, covered, db.zone());
  // Priority inversions, throttling and pressure in the window, with their times.
  html += inversions_html(db, w, inc);
  if (has.throttling) {
    html += window_throttling_html(db, inc);
  }
  if (has.pressure) {
    html += window_pressure_html(db, inc);
  }
  html += "</section>\n";
  return html;
}

// The incident sections, and which of the report's spikes they list.
struct incident_sections {
  std::string html;
  std::vector<bool> covered; // per spikes.shown: listed in a section (not in the spikes table)
};

// One section per annotation (the first 12 by start): what happened in its window. Spikes
// that overlap one are listed there, the rest below.
incident_sections sections_html(query::reader &db, const report_window &w, const spike_list &spikes,
                                bool captures) {
  incident_sections out;
  out.covered.assign(spikes.shown.size(), false);
  auto an = query(db,
                  "SELECT id, start_ns, end_ns, substr(text, 1, ?3) FROM annotations WHERE "
                  "start_ns < ?2 AND coalesce(end_ns, start_ns) >= ?1 ORDER BY start_ns, id "
                  "LIMIT 12",
                  {w.from, w.to, static_cast<std::int64_t>(shown_chars + 1)});
  if (!an || an->rows.empty()) {
    return out;
  }
  recorded_tables has;
  has.captures = captures;
  has.throttling = has_object(db, "cpu_throttling"); // once, not per annotation
  has.pressure = has_object(db, "cpu_pressure");
  has.wakeups = has_object(db, "wakeups");
  for (const auto &r : an->rows) {
    out.html += incident_section(db, w, incident_of(r), has, spikes, out.covered);
  }
  return out;
}

// ---- after the sections --------------------------------------------------------------------

// The flight recorder's captures in the window (rschedd --flight-recorder): Perfetto traces
// of the seconds before each trigger, linked where they are (docs/SQL.md, "captures").
std::string captures_html(query::reader &db, const report_window &w) {
  const timefmt::zone &zone = db.zone();
  auto cp = query(db,
                  "SELECT id, start_ns, end_ns, trigger, reason, file, bytes, events FROM "
                  "captures WHERE start_ns < ?2 AND end_ns >= ?1 ORDER BY start_ns, id "
                  "LIMIT 200",
                  {w.from, w.to});
  if (!cp || cp->rows.empty()) {
    return {};
  }
  std::string html = "<h2 id=\"captures\">Flight recorder captures</h2>\n<p class=\"note\">"
                     "Perfetto traces of the seconds before each trigger (open them in "
                     "ui.perfetto.dev); the files are beside the database, as protected as it."
                     "</p>\n<table><tr><th>#</th><th>from</th><th>until</th><th>trigger</th>"
                     "<th>why</th><th>file</th><th>bytes</th><th>events</th></tr>\n";
  for (const auto &v : cp->rows) {
    const std::string file = text_of(v[5]);
    html += fmt::format(
        "<tr id=\"capture-{}\"><td>#{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>"
        "<a href=\"{}\">{}</a></td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        text_of(v[0]), text_of(v[0]),
        xml_text(timefmt::format_time(int_of(v[1]).value_or(0), zone)),
        xml_text(timefmt::format_time(int_of(v[2]).value_or(0), zone)), xml_text(text_of(v[3])),
        xml_text(text_of(v[4])), xml_text(file_url(file)), xml_text(file), text_of(v[6]),
        text_of(v[7]));
  }
  html += "</table>\n";
  return html;
}

// Who caused the worst three spikes (blame()), or that blame was not recorded.
std::string blame_html(query::reader &db, const spike_list &spikes) {
  if (!has_object(db, "thread_blame")) {
    return "<p class=\"note\">No blame recorded (rschedd -g blame).</p>\n";
  }
  std::string html;
  for (std::size_t i = 0; i < spikes.shown.size() && i < 3; ++i) {
    const auto &s = spikes.shown[i];
    auto b = query(db,
                   "SELECT by_pid, by_comm, by_cgroup, wait_ns, share_pct, preempts FROM "
                   "blame(?1, ?2, ?3) LIMIT 6",
                   {victim_arg(s), int_of(s[0]).value_or(0), int_of(s[1]).value_or(0)});
    if (!b || b->rows.empty()) {
      continue;
    }
    html +=
        fmt::format("<h3>#{}: who ran while {} waited ({})</h3>\n", i + 1, xml_text(victim_text(s)),
                    xml_text(timefmt::format_time(int_of(s[0]).value_or(0), db.zone())));
    table_rows rows;
    for (const auto &r : b->rows) {
      const auto *share = std::get_if<double>(&r[4]);
      rows.push_back({{text_of(r[0]), true},
                      {text_of(r[1]), false},
                      {text_of(r[2]), false},
                      {dur_of(r[3]), true},
                      {share != nullptr ? fmt::format("{:.1f} %", *share) : "", true},
                      {text_of(r[5]), true}});
    }
    html += table_html({"pid", "culprit", "cgroup", "ran while it waited", "share", "preemptions"},
                       rows);
  }
  return html;
}

// The report's spikes not listed in a section, and who caused the worst three.
std::string spikes_html(query::reader &db, const spike_list &spikes,
                        const std::vector<bool> &covered) {
  std::string html = "<h2>Spikes</h2>\n";
  if (spikes.shown.empty()) {
    return html + "<p class=\"note\">No comm's p99 went above 3 × its baseline in the "
                  "window.</p>\n";
  }
  html += "<p class=\"note\">Incidents where a thread's or a comm's p99 went above 3 × its "
          "baseline (spikes('sched_delay', '3x'), docs/SQL.md), the worst 12 by peak; numbered "
          "as on the timeline. Those inside an annotation's window are listed in its section "
          "above.</p>\n";
  table_rows rows;
  for (std::size_t i = 0; i < spikes.shown.size(); ++i) {
    const auto &s = spikes.shown[i];
    if (covered[i]) {
      continue; // listed in its annotation's section
    }
    rows.push_back({{fmt::format("#{}", i + 1), false},
                    {timefmt::format_time(int_of(s[0]).value_or(0), db.zone()), false},
                    {dur_of(s[2]), true},
                    {victim_text(s), false},
                    {peak_of(s[3]), true},
                    {text_of(s[5]), false}});
  }
  if (rows.empty()) {
    html += "<p class=\"note\">All of them are inside annotations' windows.</p>\n";
  } else {
    html += table_html({"", "from", "for", "victim", "peak p99", "likely cause"}, rows);
  }
  html += blame_html(db, spikes);
  return html;
}

// The worst comms and cgroups, and every CPU.
result<std::string> heatmaps_html(query::reader &db, const report_window &w, const report_maps &m) {
  const timefmt::zone &zone = db.zone();
  std::string html = "<h2>Worst comms</h2>\n";
  if (m.any_worst) {
    html += "<figure>" + heatmap_svg(m.maps[1], m.worst, zone) +
            "<figcaption>The comms with the highest p99 (at least 20 samples).</figcaption>"
            "</figure>\n";
  } else {
    html += "<p class=\"note\">No comm has 20 samples in the window.</p>\n";
  }
  if (m.maps.back().front().total() > 0) {
    html += "<h2>Busiest cgroups</h2>\n<figure>" + heatmap_svg(m.maps.back(), m.cgroups, zone) +
            "<figcaption>The cgroups with the most samples.</figcaption></figure>\n";
  }
  heatmap_args cpu;
  cpu.marks = w.marks;
  cpu.view = "cpu_sched_delay";
  cpu.from_ns = w.from;
  cpu.to_ns = w.to;
  cpu.step_ns = w.step;
  cpu.by = "cpu";
  cpu.top = 16;
  auto c = load_heatmap(db, cpu, svg_columns);
  if (!c) {
    return c.err();
  }
  html += "<h2>Per CPU</h2>\n<figure>" + heatmap_svg(*c, cpu, zone) +
          "<figcaption>Scheduling delay of the threads switched in on each CPU (every thread, "
          "whatever the report's condition).</figcaption></figure>\n";
  return html;
}

// Pressure and throttling.
std::string pressure_html(query::reader &db, const report_window &w) {
  if (!has_object(db, "cpu_pressure")) {
    return {};
  }
  std::string html = "<h2>CPU pressure and throttling</h2>\n";
  auto p = query(db,
                 "SELECT cgroup, avg(some_pct), max(some_pct) FROM cpu_pressure WHERE ts >= ?1 "
                 "AND ts < ?2 GROUP BY cgroup ORDER BY 3 DESC LIMIT 8",
                 w.span);
  if (p && !p->rows.empty()) {
    table_rows rows;
    for (const auto &r : p->rows) {
      const auto *avg = std::get_if<double>(&r[1]);
      const auto *mx = std::get_if<double>(&r[2]);
      rows.push_back({{text_of(r[0]), false},
                      {avg != nullptr ? fmt::format("{:.1f} %", *avg) : "", true},
                      {mx != nullptr ? fmt::format("{:.1f} %", *mx) : "", true}});
    }
    html += table_html({"cgroup (/ = the system)", "PSI some, mean", "max interval"}, rows);
  }
  auto t = query(db,
                 "SELECT cgroup, sum(throttled), sum(throttled_ns) FROM cpu_throttling WHERE "
                 "ts >= ?1 AND ts < ?2 AND throttled > 0 GROUP BY cgroup ORDER BY 3 DESC LIMIT 8",
                 w.span);
  if (t && !t->rows.empty()) {
    table_rows rows;
    for (const auto &r : t->rows) {
      rows.push_back({{text_of(r[0]), false}, {text_of(r[1]), true}, {dur_of(r[2]), true}});
    }
    html += table_html({"throttled cgroup", "periods", "time"}, rows);
  } else {
    html += "<p class=\"note\">No CFS throttling in the window.</p>\n";
  }
  return html;
}

// The page's foot: the zone of its times, and the document's end.
std::string page_foot(const report_window &w, const timefmt::zone &zone) {
  const std::string first = timefmt::format_time(w.from, zone);
  const auto sign = first.find_last_of("+-");
  return fmt::format("<p class=\"note\">rsched-sql report; times in {} (UTC{}).</p>\n",
                     xml_text(zone.label()),
                     xml_text(sign != std::string::npos && sign > 11 ? first.substr(sign) : "")) +
         "</body></html>\n";
}

} // namespace

// The heatmaps (one read of the window's histograms, the longest part) on a second connection
// while this one reads every part that does not draw them; then the page in its order.
result<std::string> build_report(query::reader &db, const report_args &a) {
  auto w = read_window(db, a);
  if (!w) {
    return w.err();
  }
  std::future<result<report_maps>> reading = read_heatmaps_aside(db, *w);
  std::string head = page_head(db, *w);
  head += coverage_html(db, *w);
  head += percentiles_html(db, *w);
  const spike_list spikes = read_spikes(db, *w);
  std::string middle = annotations_html(*w, db.zone());
  const bool captures = has_object(db, "captures");
  const incident_sections sections = sections_html(db, *w, spikes, captures);
  middle += sections.html;
  if (captures) {
    middle += captures_html(db, *w);
  }
  middle += spikes_html(db, spikes, sections.covered);
  const std::string pressure = pressure_html(db, *w);
  auto maps = reading.valid() ? reading.get() : read_heatmaps(db, *w);
  if (!maps) {
    return maps.err();
  }
  auto pictures = pictures_html(db, *w, *maps, spikes);
  if (!pictures) {
    return pictures.err();
  }
  auto maps_html = heatmaps_html(db, *w, *maps);
  if (!maps_html) {
    return maps_html.err();
  }
  return head + *pictures + middle + *maps_html + pressure + page_foot(*w, db.zone());
}

} // namespace rsched::sql_shell
