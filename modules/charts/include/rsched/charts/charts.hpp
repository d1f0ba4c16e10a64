#pragma once
// rsched::charts: pictures of the history from plain data, with no SQL and no BPF: latency
// heatmaps (time across, histogram buckets up a log axis, colour for how many samples) and
// time-series line charts, as self-contained SVG (no scripts, no fonts or anything from the
// network) or as text for a terminal (Unicode blocks in 256 colours, or plain characters).
//
// Heatmap cells are whole histogram buckets: a display row merges buckets of the stored layout
// (roughly log2), never splits one, so the cells of a heatmap add up exactly to the samples of
// the rows that went into it.
#include "rsched/base/timefmt.hpp"
#include "rsched/stats/histogram.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rsched::charts {

// One display row of a heatmap: the layout's slots [first, last], values [lo, hi] (hi inclusive;
// open: no upper bound).
struct bin {
  std::size_t first = 0;
  std::size_t last = 0;
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  bool open = false;
};

// The display rows of a layout, bottom to top. Latency (ns): [0, 10 µs), [10, 20 µs), 20, 40,
// 80, 160, 320 µs, then every log2 bucket from 512 µs; depth and count: 0, 1, 2-3, 4-7, ...;
// log2: every bucket. With `clip` (a value of the layout), the rows from the first one whose
// lower bound is >= clip are one open top row.
std::vector<bin> log_bins(stats::layout l, std::optional<std::uint64_t> clip = std::nullopt);

// A value of the layout for people: "10 µs", "1.02 ms" for latency, "12" for the others.
std::string value_label(stats::layout l, std::uint64_t v);

// A recording gap or an annotation: [start, end) UTC ns (end == start: a point in time).
// An annotation's text is drawn at most mark_label_chars characters long above its band and
// mark_title_chars in its tooltip (cut with "..."), in the first panel of small multiples only.
inline constexpr std::size_t mark_label_chars = 40;
inline constexpr std::size_t mark_title_chars = 200;
struct span {
  std::int64_t start = 0;
  std::int64_t end = 0;
  std::string text;   // an annotation's text or a gap's reason (raw bytes: escaped when drawn)
  bool spike = false; // a detected spike, not an annotation: drawn dashed, in orange
  // Drawn as "#N " before the label (the report: the annotation's id, as its section and table
  // name it, so a label cut short or left out still says which); 0: none.
  std::int64_t number = 0;
};

struct heatmap {
  std::string title; // what it shows (raw bytes)
  stats::layout layout = stats::layout::latency;
  std::int64_t from = 0; // the window [from, to), UTC ns
  std::int64_t to = 0;
  std::int64_t step = 1; // column width, ns
  std::int64_t col0 = 0; // start of column 0: `from` rounded down to a multiple of `step`
  std::vector<bin> bins; // rows, bottom to top
  std::vector<std::vector<std::uint64_t>> counts; // [column][row]
  std::vector<span> gaps;                         // times nothing was recorded
  std::vector<span> marks;                        // annotations
  std::int64_t marks_not_drawn =
      0;              // annotations of the window left out of `marks` (said top right)
  std::string source; // where the rows came from ("sched_delay_1m + sched_delay"), "" unknown
  [[nodiscard]] std::size_t columns() const { return counts.size(); }
  [[nodiscard]] std::uint64_t total() const;
  [[nodiscard]] std::uint64_t column_total(std::size_t c) const;
};

// An empty heatmap of the window, columns of `step` aligned to multiples of it (UTC).
heatmap make_heatmap(stats::layout l, std::int64_t from, std::int64_t to, std::int64_t step,
                     std::optional<std::uint64_t> clip = std::nullopt);

// Adds a histogram row that starts at `ts` (in [from, to)) to its column. Fails on a layout
// other than the heatmap's; a row outside the window adds nothing.
result<void> add(heatmap &h, std::int64_t ts, const stats::histogram &row);

// The column of `h` that holds `ts`; nullopt outside the window.
std::optional<std::size_t> column_of(const heatmap &h, std::int64_t ts);

// Each slot's display row in `bins` (rows of consecutive slots from slot 0, as log_bins makes
// them): the row counts of a sparse histogram are col[rows[slot]] += count.
std::vector<std::uint16_t> rows_of_slots(const std::vector<bin> &bins);

// A column width for a window: the smallest of 1, 2, 5, 10, 15, 30 s, 1, 2, 5, 10, 15, 30 min,
// 1, 2, 3, 6, 12 h, 1 d that gives at most `max_columns` columns, and not below `min_step`.
std::int64_t nice_step(std::int64_t window_ns, std::size_t max_columns,
                       std::int64_t min_step = 1'000'000'000);

struct svg_options {
  timefmt::zone zone = timefmt::zone::local(); // axis labels and tooltips
  int max_width = 1100;                        // px, the whole picture
  int row_height = 12;                         // px per display row
};

// One heatmap as a standalone SVG document. Each cell is a <rect class="cell"> with data-t0
// (column start, ns), data-lo and data-hi (the row's bounds; data-hi empty for the open row),
// data-count and a <title> tooltip (time, range, count, % of its column, cumulative %). Gaps are
// hatched bands (class "gap"), annotations translucent bands with their text (class "mark";
// overlapping fills merged into one).
// Each panel is a <g class="heatmap"> with data-source (heatmap::source) and data-step (ns); the
// column width and the source are also printed top right.
std::string to_svg(const heatmap &h, const svg_options &o = {});

// Small multiples: one heatmap per panel (same window and rows), stacked, each with its title.
// The annotations are outlined, labelled and given a tooltip in the first panel; the others
// show their translucent fill only (a text is in the picture once, whatever the panels).
std::string to_svg(const std::vector<heatmap> &panels, const std::string &title,
                   const svg_options &o = {});

// A heatmap as text for a terminal of `rows` x `cols` characters: rows merged pairwise when the
// layout has more than fit, columns merged when the window has more. `color`: 256-colour blocks;
// else characters by density (" .:-=+*#%@"), escape-free.
std::string to_terminal(const heatmap &h, int rows, int cols, bool color,
                        const timefmt::zone &zone);

// Time series: x in UTC ns, one or more named y series (NULL: no point).
struct series_chart {
  std::string title;
  std::vector<std::string> names;                    // one per series (raw bytes)
  std::vector<std::int64_t> x;                       // ascending
  std::vector<std::vector<std::optional<double>>> y; // [series][point]
  bool durations = false;                            // y values are ns: axis and labels with units
  bool log = false;                                  // log y axis (values <= 0 are left out)
  std::vector<span> gaps;
  std::vector<span> marks;
  std::int64_t marks_not_drawn = 0; // annotations left out of `marks` (said top right)
};

// The smallest and largest finite y values drawn (only > 0 on a log axis); none when there is
// no such value.
std::optional<std::pair<double, double>> y_range(const series_chart &c);

// The chart as a standalone SVG document: one polyline per series (class "series", data-name),
// a point per value with a <title> tooltip, axes with units, a legend.
std::string to_svg(const series_chart &c, const svg_options &o = {});

// The chart as text: one character cell per (column, row), series drawn with their first letter
// (or the braille-free '*', '+', 'o', 'x' with `color` false) over a labelled y axis.
std::string to_terminal(const series_chart &c, int rows, int cols, bool color,
                        const timefmt::zone &zone);

// Text for SVG/HTML: hostile bytes escaped (text::escape_for_terminal), then XML's five.
std::string xml_text(std::string_view s);

} // namespace rsched::charts
