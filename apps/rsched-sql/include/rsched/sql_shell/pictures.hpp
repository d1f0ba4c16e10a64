#pragma once
// rsched-sql's pictures: `heatmap`, `plot` and `report` (subcommands, and .heatmap / .plot in the
// shell). The history is read through query::reader (SQL and rsched's functions) into
// rsched::charts data, which draws it (SVG, HTML, or text for a terminal).
#include "rsched/base/result.hpp"
#include "rsched/charts/charts.hpp"
#include "rsched/query/reader.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace rsched::sql_shell {

// The annotations a picture draws and the report lists, bounded whatever the database holds
// (one 20 MB text, a million imported rows): at most max_marks of those that overlap the window
// (start before its end, end or instant at or after its start), chosen in this order: those
// not imported first (source not 'import:...': marks written by hand, rschedd's own), then the
// longest, then the earliest; each text read with SQL's substr(), at most mark_text_chars
// characters, a longer one cut there and ending in mark_cut_note. Sorted by start time.
inline constexpr std::size_t max_marks = 200;
inline constexpr std::size_t mark_text_chars = 4096;
inline constexpr const char *mark_cut_note = "... [cut: the first 4096 characters]";
struct mark_list {
  std::vector<charts::span> marks;
  std::int64_t total = 0;        // how many annotations overlap the window in all
  std::vector<std::int64_t> ids; // marks[i]'s annotation id (0 over several hosts)
};
result<mark_list> load_marks(query::reader &db, std::int64_t from, std::int64_t to);

// heatmap [--view VIEW] [--where SQL] [--from T] [--to T] [--step DUR] [--by cpu|comm|cgroup]
//         [--top N] [--max DUR] [--column COL] [-o FILE.svg]
struct heatmap_args {
  std::string view = "sched_delay";
  std::string where;                 // an SQL condition on the view's columns (SQL by design:
                                     // spliced as written; no parameters in it)
  std::vector<std::string> comms;    // when not empty: only these comms' rows (the report's
                                     // worst comms), bound as values; titles show them as
                                     // "comm IN ('a', 'b')" after `where`
  std::optional<std::string> from;   // time words (t()); default: an hour before `to`, or
                                     // the start of the recording if that is later
  std::optional<std::string> to;     // default: the end of the newest recorded interval
  std::optional<std::string> step;   // a duration; default: a nice width for the window
  std::optional<std::string> by;     // small multiples per cpu, comm or cgroup
  std::size_t top = 6;               // panels with --by (the keys with the most samples)
  std::optional<std::string> max;    // clip: buckets from this value up are one top row
  std::optional<std::string> column; // the histogram column (default: hist, else *_hist merged)
  std::optional<std::string> output; // -o FILE: SVG there
  // Already resolved (the report passes its window on): used instead of from/to/step.
  std::optional<std::int64_t> from_ns;
  std::optional<std::int64_t> to_ns;
  std::optional<std::int64_t> step_ns;
  std::optional<mark_list> marks; // the window's annotations, read once by the report
};

// plot -c SQL [--log] [--title TEXT] [-o FILE.svg]: the first column a time (UTC ns), the others
// numbers, one series each.
struct plot_args {
  std::string sql;
  std::vector<query::value> params; // bound to ?1, ?2, ... of sql (the report's own plots)
  bool log = false;
  std::optional<std::string> title;
  std::optional<std::string> output;
  std::optional<mark_list> marks; // the annotations to draw, read once by the report
};

// report [--from T] [--to T] [--where SQL] [-o FILE.html]
struct report_args {
  std::optional<std::string> from; // default: an hour before `to` (or the recording's start)
  std::optional<std::string> to;   // default: the end of the newest recorded interval
  std::string where;               // a condition on sched_delay's columns (comm = 'web', ...)
  std::optional<std::string> output;
};

// Parsers of the words after the subcommand (or the dot command). Errors are one line.
result<heatmap_args> parse_heatmap_args(const std::vector<std::string> &args);
result<plot_args> parse_plot_args(const std::vector<std::string> &args);
result<report_args> parse_report_args(const std::vector<std::string> &args);

// How many columns a picture gets by default: for an SVG, and for a terminal of `cols`.
inline constexpr std::size_t svg_columns = 180;

// The heatmap panels of `a` (one, or the --by panels), with at most `max_columns` columns
// when --step is not given. The window: [from, to) of interval start times, as
// `ts >= t(from) AND ts < t(to)` in SQL, so that its cells add up to
// `SELECT sum(hist_count(hist)) FROM <view> WHERE <that> AND (<where>)`. Long windows read whole
// minutes (hours) from the 1-minute (1-hour) tier where it is built and kept, exactly, unless
// the condition names a per-thread column (tid, pid).
result<std::vector<charts::heatmap>> load_heatmap(query::reader &db, const heatmap_args &a,
                                                  std::size_t max_columns);
// A heatmap's arguments checked and its window, column width and clip resolved, before any
// histogram is read.
struct heatmap_plan {
  heatmap_args args;
  std::vector<std::string> hist_cols; // the histogram columns read (merged)
  std::string key;                    // --by's column, "" for one panel
  std::int64_t from = 0, to = 0, step = 1;
  std::optional<std::uint64_t> clip;
};
result<heatmap_plan> plan_heatmap(query::reader &db, const heatmap_args &a,
                                  std::size_t max_columns);
// The panels of several plans (load_heatmap's each), from one read of the rows when they are
// of one view, histogram columns, window, column width and tiers (the report's heatmaps of all
// threads, the worst comms and the busiest cgroups): each histogram decoded once, each plan's
// condition a column of the statement. `merged`, if given, gets the first plan's histograms
// merged per column (column i: [col0 + i * step, + step)), nullopt where it has no rows; it
// needs the plans read together (an error otherwise).
result<std::vector<std::vector<charts::heatmap>>>
load_heatmaps(query::reader &db, const std::vector<heatmap_plan> &plans,
              std::vector<std::optional<stats::histogram>> *merged = nullptr);
// The chart of a plot's query, with the annotations and gaps of its time range.
result<charts::series_chart> load_plot(query::reader &db, const plot_args &a);
// The same chart of rows already read (columns and rows as the query would give them).
result<charts::series_chart> plot_of_rows(query::reader &db, const plot_args &a,
                                          const std::vector<std::string> &columns,
                                          const std::vector<std::vector<query::value>> &rows);
// The incident report: one self-contained HTML page.
result<std::string> build_report(query::reader &db, const report_args &a);

// Where a picture without -o goes: a terminal (text, sized to it, in colour) or a stream that
// is not one (an SVG or HTML document).
struct picture_target {
  std::ostream *out = nullptr;
  bool terminal = false; // draw text for a terminal instead of a document
  bool color = false;    // 256 colours (a real terminal); else escape-free text
  int rows = 40;
  int cols = 120;
};

// Runs `kind` ("heatmap", "plot" or "report") with its arguments: with -o FILE the document is
// written there (and `note` says so), else to the target. Bad arguments are errors with errnum
// EINVAL (exit 2); the rest errnum 0.
result<void> run_picture(query::reader &db, const std::string &kind,
                         const std::vector<std::string> &args, const picture_target &target,
                         std::string &note);

// The SVG of heatmap panels (one, or small multiples).
std::string heatmap_svg(const std::vector<charts::heatmap> &panels, const heatmap_args &a,
                        const timefmt::zone &zone);

} // namespace rsched::sql_shell
