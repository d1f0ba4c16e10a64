// SVG renderings of charts.hpp: heatmaps, small multiples and time series. Standalone documents:
// no scripts, no external fonts or images; text escaped.
#include "rsched/base/text.hpp"
#include "rsched/charts/charts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace rsched::charts {

namespace {

// "2026-11-20 14:03:05.123+01:00" -> its parts.
struct time_parts {
  std::string date;   // 2026-11-20
  std::string clock;  // 14:03:05 (milliseconds dropped)
  std::string offset; // +01:00
};

time_parts parts_of(std::int64_t ns, const timefmt::zone &z) {
  const std::string s = timefmt::format_time(ns, z);
  time_parts p;
  p.date = s.substr(0, std::min<std::size_t>(10, s.size()));
  if (s.size() >= 19) {
    p.clock = s.substr(11, 8);
  }
  const auto sign = s.find_last_of("+-");
  if (sign != std::string::npos && sign > 11) {
    p.offset = s.substr(sign);
  }
  return p;
}

// Tick labels: HH:MM (HH:MM:SS under a minute's spacing), with the date on ticks where it
// changes (and the first).
std::string tick_label(std::int64_t ns, std::int64_t spacing, const timefmt::zone &z,
                       std::string &last_date) {
  const auto p = parts_of(ns, z);
  std::string label = spacing < 60'000'000'000 ? p.clock : p.clock.substr(0, 5);
  if (p.date != last_date) {
    last_date = p.date;
    label = p.date + " " + label;
  }
  return label;
}

std::int64_t tick_spacing(std::int64_t window, double width_px) {
  constexpr std::int64_t s = 1'000'000'000;
  static constexpr std::array<std::int64_t, 22> steps = {s,
                                                         2 * s,
                                                         5 * s,
                                                         10 * s,
                                                         15 * s,
                                                         30 * s,
                                                         60 * s,
                                                         2 * 60 * s,
                                                         5 * 60 * s,
                                                         10 * 60 * s,
                                                         15 * 60 * s,
                                                         30 * 60 * s,
                                                         3600 * s,
                                                         2 * 3600 * s,
                                                         3 * 3600 * s,
                                                         6 * 3600 * s,
                                                         12 * 3600 * s,
                                                         24 * 3600 * s,
                                                         2 * 86400 * s,
                                                         7 * 86400 * s,
                                                         14 * 86400 * s,
                                                         28 * 86400 * s};
  const double max_ticks = std::max(2.0, width_px / 120.0);
  for (const auto st : steps) {
    if (static_cast<double>(window) / static_cast<double>(st) <= max_ticks) {
      return st;
    }
  }
  return steps.back();
}

std::int64_t floor_to(std::int64_t t, std::int64_t w) {
  std::int64_t q = t / w;
  if (t % w != 0 && t < 0) {
    --q;
  }
  return q * w;
}

// Heat colour of a share f in (0, 1]: pale yellow to deep red.
std::string heat(double f) {
  f = std::clamp(f, 0.0, 1.0);
  const double hue = 55.0 - 55.0 * f;
  const double light = 90.0 - 58.0 * f;
  return fmt::format("hsl({:.0f},100%,{:.0f}%)", hue, light);
}

double share(std::uint64_t n, std::uint64_t max) {
  if (n == 0 || max == 0) {
    return 0.0;
  }
  return std::log1p(static_cast<double>(n)) / std::log1p(static_cast<double>(max));
}

std::string range_label(stats::layout l, const bin &b) {
  if (b.open) {
    return "\u2265 " + value_label(l, b.lo);
  }
  return value_label(l, b.lo) + "\u2013" + value_label(l, b.hi + 1);
}

constexpr const char *svg_head =
    R"~(<svg xmlns="http://www.w3.org/2000/svg" width="{0}" height="{1}" viewBox="0 0 {0} {1}" )~"
    R"~(font-family="DejaVu Sans, Liberation Sans, Arial, sans-serif" font-size="11">)~"
    "\n<defs><pattern id=\"hatch\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\">"
    "<rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/><path d=\"M0,6 L6,0\" stroke=\"#b0b0b0\" "
    "stroke-width=\"1\"/></pattern>"
    "<linearGradient id=\"heat\">{2}</linearGradient></defs>\n"
    "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n";

std::string heat_stops() {
  std::string s;
  for (int i = 0; i <= 10; ++i) {
    s += fmt::format("<stop offset=\"{}%\" stop-color=\"{}\"/>", i * 10, heat(i / 10.0 + 1e-9));
  }
  return s;
}

// `s` cut to at most `n` characters (a valid UTF-8 sequence or a single other byte each) with
// "..." appended when cut: never in the middle of a sequence.
std::string truncate_chars(std::string_view s, std::size_t n) {
  std::size_t i = 0;
  std::size_t chars = 0;
  while (i < s.size() && chars < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : std::max<std::size_t>(text::decode_utf8(s, i).len, 1);
    i += len;
    ++chars;
  }
  return i < s.size() ? std::string(s.substr(0, i)) + "..." : std::string(s);
}

// "999800 more annotations not drawn" when some were left out.
std::string not_drawn(std::int64_t left_out) {
  return fmt::format("{} more annotation{} not drawn", left_out, left_out == 1 ? "" : "s");
}

// The width of a label of font-size 10 (XML-escaped text): about 6 px a character, an entity
// one character.
double label_width(std::string_view xml) {
  std::size_t chars = 0;
  bool entity = false;
  for (const char ch : xml) {
    if (entity) {
      entity = ch != ';';
      continue;
    }
    entity = ch == '&';
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) {
      ++chars;
    }
  }
  return 6.0 * static_cast<double>(chars);
}

struct frame {
  double left = 78;
  double top = 0;
  double width = 0;  // plot area
  double height = 0; // plot area
};

// The time axis under a plot area: ticks, labels, caption with the zone.
void time_axis(std::string &out, const frame &f, std::int64_t from, std::int64_t to,
               const timefmt::zone &z, bool labels) {
  const double y = f.top + f.height;
  out += fmt::format(R"~(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#444"/>)~",
                     f.left, y, f.left + f.width, y);
  out += "\n";
  const std::int64_t window = std::max<std::int64_t>(to - from, 1);
  const std::int64_t sp = tick_spacing(window, f.width);
  std::string last_date;
  for (std::int64_t t = floor_to(from, sp); t <= to; t += sp) {
    if (t < from) {
      continue;
    }
    const double x = f.left + f.width * static_cast<double>(t - from) / static_cast<double>(window);
    out += fmt::format(
        R"~(<line x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#444"/>)~", x, y,
        y + 4);
    if (labels) {
      out +=
          fmt::format(R"~(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" fill="#222">{}</text>)~",
                      x, y + 16, xml_text(tick_label(t, sp, z, last_date)));
    }
    out += "\n";
  }
  if (labels) {
    out += fmt::format(R"~(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" fill="#555">time )~"
                       R"~((local, UTC{})</text>)~",
                       f.left + f.width / 2, y + 32, xml_text(parts_of(from, z).offset));
    out += "\n";
  }
}

// The translucent fill of annotation bands, drawn under the data (spans() draws their outline
// and text over it).
void mark_fills(std::string &out, const frame &f, std::int64_t from, std::int64_t to,
                const std::vector<span> &marks) {
  const double window = static_cast<double>(std::max<std::int64_t>(to - from, 1));
  const auto x_of = [&](std::int64_t t) {
    return f.left + f.width * static_cast<double>(std::clamp(t, from, to) - from) / window;
  };
  // Bands that overlap on screen are one fill: at most one rect per couple of pixels, however
  // many annotations the window holds.
  std::vector<std::pair<double, double>> xs;
  for (const auto &m : marks) {
    if (m.end < from || m.start >= to) {
      continue;
    }
    const double x0 = x_of(m.start);
    xs.emplace_back(x0, x0 + std::max(2.0, x_of(m.end) - x0));
  }
  std::sort(xs.begin(), xs.end());
  for (std::size_t i = 0; i < xs.size();) {
    double x1 = xs[i].second;
    std::size_t j = i + 1;
    while (j < xs.size() && xs[j].first <= x1) {
      x1 = std::max(x1, xs[j].second);
      ++j;
    }
    out += fmt::format(R"~(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" )~"
                       R"~(fill="rgba(40,110,200,0.13)"/>)~",
                       xs[i].first, f.top, x1 - xs[i].first, f.height);
    out += "\n";
    i = j;
  }
}

// Gaps (hatched) and annotations (outlined bands with their text above) over a plot area.
void spans(std::string &out, const frame &f, std::int64_t from, std::int64_t to,
           const std::vector<span> &gaps, const std::vector<span> &marks, const timefmt::zone &z) {
  const double window = static_cast<double>(std::max<std::int64_t>(to - from, 1));
  const auto x_of = [&](std::int64_t t) {
    return f.left + f.width * static_cast<double>(std::clamp(t, from, to) - from) / window;
  };
  for (const auto &g : gaps) {
    if (g.end <= from || g.start >= to) {
      continue;
    }
    const double x0 = x_of(g.start);
    const double w = std::max(1.0, x_of(g.end) - x0);
    out +=
        fmt::format(R"~(<rect class="gap" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" )~"
                    R"~(fill="url(#hatch)" data-start="{}" data-end="{}"><title>no recording: )~"
                    R"~({} ({}, {}))</title></rect>)~",
                    x0, f.top, w, f.height, g.start, g.end, xml_text(g.text),
                    xml_text(timefmt::format_time(g.start, z)),
                    xml_text(text::format_duration_ns(static_cast<double>(g.end - g.start))));
    out += "\n";
  }
  // Labels along the top, left to right, in rows: above the plot, then inside its top edge;
  // a label goes to the first row where it runs into nothing; one that would run past the right
  // edge ends there. Where every row is taken (marks crowded closer than their labels are long)
  // the label is left out and counted in a note (its band keeps its tooltip).
  constexpr std::size_t label_rows = 4;
  std::array<double, label_rows> label_end{};
  label_end.fill(-1e9);
  std::size_t unlabelled = 0;
  const double right = f.left + f.width + 18; // the SVGs leave 20 px right of the plot
  for (const auto &m : marks) {
    if (m.end < from || m.start >= to) {
      continue;
    }
    const double x0 = x_of(m.start);
    const double w = std::max(2.0, x_of(m.end) - x0);
    // Annotations: solid blue outlines; spikes: dashed orange, so the two never read alike.
    out += fmt::format(R"~(<rect class="{}" x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" )~"
                       R"~(fill="none" stroke="{}" {})~"
                       R"~(stroke-width="1" data-start="{}" data-end="{}"><title>{} ({})</title>)~"
                       "</rect>",
                       m.spike ? "mark spike" : "mark", x0, f.top, w, f.height,
                       m.spike ? "rgba(214,110,20,0.9)" : "rgba(40,110,200,0.8)",
                       m.spike ? R"~(stroke-dasharray="4 2" )~" : "", m.start, m.end,
                       xml_text(truncate_chars(m.text, mark_title_chars)),
                       xml_text(timefmt::format_time(m.start, z)));
    const std::string label = (m.number != 0 ? fmt::format("#{} ", m.number) : std::string()) +
                              xml_text(truncate_chars(m.text, mark_label_chars));
    const double lw = label_width(label);
    double lx = x0 + 2;
    if (lx + lw > right) {
      lx = std::max(f.left, right - lw);
    }
    std::size_t row = 0;
    while (row < label_rows && lx < label_end[row] + 6) {
      ++row;
    }
    if (row == label_rows) {
      ++unlabelled;
    } else {
      const double ly = row == 0 ? f.top - 3 : f.top + 11 * static_cast<double>(row);
      out += fmt::format(
          R"~(<text class="mark-label" x="{:.1f}" y="{:.1f}" fill="{}" font-size="10">{}</text>)~",
          lx, ly, m.spike ? "#a04c00" : "#1a4f99", label);
      label_end[row] = lx + lw;
    }
    out += "\n";
  }
  if (unlabelled > 0) {
    out += fmt::format(R"~(<text class="mark-note" x="{:.1f}" y="{:.1f}" text-anchor="end" )~"
                       R"~(fill="#555" font-size="10">{} more labels too crowded to draw: )~"
                       R"~(hover their bands</text>)~",
                       f.left + f.width - 4, f.top + f.height - 6, unlabelled);
    out += "\n";
  }
}

// One heatmap panel into `out` at `f` (plot area), colours scaled to `max_cell`.
// `mark_text`: the annotations outlined with their labels and tooltips (the first panel); else
// only their fill.
void heatmap_panel(std::string &out, const heatmap &h, const frame &f, std::uint64_t max_cell,
                   const svg_options &o, bool x_labels, bool mark_text) {
  const double rh = static_cast<double>(o.row_height);
  const double cw = f.width / static_cast<double>(h.columns());
  out +=
      fmt::format(R"~(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#fbfbfb" )~"
                  R"~(stroke="#ddd"/>)~",
                  f.left, f.top, f.width, f.height);
  out += "\n";
  mark_fills(out, f, h.col0, h.col0 + static_cast<std::int64_t>(h.columns()) * h.step, h.marks);
  for (std::size_t c = 0; c < h.columns(); ++c) {
    const std::uint64_t col_total = h.column_total(c);
    if (col_total == 0) {
      continue;
    }
    const std::int64_t t0 = h.col0 + static_cast<std::int64_t>(c) * h.step;
    const std::string when = timefmt::format_time(t0, o.zone);
    const std::string until = parts_of(t0 + h.step, o.zone).clock;
    std::uint64_t below = 0;
    for (std::size_t r = 0; r < h.bins.size(); ++r) {
      const std::uint64_t n = h.counts[c][r];
      below += n;
      if (n == 0) {
        continue;
      }
      const auto &b = h.bins[r];
      const double x = f.left + static_cast<double>(c) * cw;
      const double y = f.top + static_cast<double>(h.bins.size() - 1 - r) * rh;
      const double pct = 100.0 * static_cast<double>(n) / static_cast<double>(col_total);
      const double cum = 100.0 * static_cast<double>(below) / static_cast<double>(col_total);
      out += fmt::format(
          R"~(<rect class="cell" x="{:.2f}" y="{:.1f}" width="{:.2f}" height="{:.1f}" fill="{}" )~"
          R"~(data-t0="{}" data-lo="{}" data-hi="{}" data-count="{}"><title>{}{}{} · {} · {} )~"
          R"~(samples · {:.1f}% of the column · cumulative {:.1f}%</title></rect>)~",
          x, y, std::max(cw, 0.6), rh, heat(share(n, max_cell)), t0, b.lo,
          b.open ? std::string() : std::to_string(b.hi), n, xml_text(when), "\u2013",
          xml_text(until), xml_text(range_label(h.layout, b)), n, pct, cum);
      out += "\n";
    }
  }
  // y axis: each row's lower bound at its bottom edge (every other row when they are tight).
  const std::size_t every = rh >= 11 ? 1 : 2;
  for (std::size_t r = 0; r < h.bins.size(); r += every) {
    const double y = f.top + static_cast<double>(h.bins.size() - r) * rh;
    const auto &b = h.bins[r];
    const std::string label =
        b.open && r > 0 ? "\u2265 " + value_label(h.layout, b.lo) : value_label(h.layout, b.lo);
    out += fmt::format(R"~(<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="#333" )~"
                       R"~(font-size="10">{}</text>)~",
                       f.left - 4, y, xml_text(label));
    out += "\n";
  }
  spans(out, f, h.col0, h.col0 + static_cast<std::int64_t>(h.columns()) * h.step, h.gaps,
        mark_text ? h.marks : std::vector<span>{}, o.zone);
  time_axis(out, f, h.col0, h.col0 + static_cast<std::int64_t>(h.columns()) * h.step, o.zone,
            x_labels);
}

std::uint64_t max_cell_of(const heatmap &h) {
  std::uint64_t m = 0;
  for (const auto &col : h.counts) {
    for (const auto n : col) {
      m = std::max(m, n);
    }
  }
  return m;
}

void legend(std::string &out, double x, double y, std::uint64_t max_cell) {
  out += fmt::format(R"~(<g class="legend"><rect x="{:.1f}" y="{:.1f}" width="160" height="10" )~"
                     R"~(fill="url(#heat)" stroke="#999"/>)~",
                     x, y);
  out += fmt::format(R"~(<text x="{:.1f}" y="{:.1f}" fill="#333" font-size="10">1</text>)~", x,
                     y + 22);
  out += fmt::format(R"~(<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="#333" )~"
                     R"~(font-size="10">{} samples (log scale)</text>)~",
                     x + 160, y + 22, max_cell);
  out += fmt::format(R"~(<rect x="{:.1f}" y="{:.1f}" width="14" height="10" fill="url(#hatch)" )~"
                     R"~(stroke="#999"/><text x="{:.1f}" y="{:.1f}" fill="#333" )~"
                     R"~(font-size="10">no recording</text>)~",
                     x + 190, y, x + 208, y + 9);
  out += fmt::format(R"~(<rect x="{:.1f}" y="{:.1f}" width="14" height="10" )~"
                     R"~(fill="rgba(40,110,200,0.16)" stroke="rgba(40,110,200,0.7)"/>)~"
                     R"~(<text x="{:.1f}" y="{:.1f}" fill="#333" font-size="10">annotation</text>)~"
                     "</g>\n",
                     x + 290, y, x + 308, y + 9);
}

double plot_width(std::size_t columns, const svg_options &o, double left) {
  const double avail = std::max(200.0, static_cast<double>(o.max_width) - left - 20);
  return std::min(avail, std::max(200.0, static_cast<double>(columns) * 14.0));
}

} // namespace

std::string to_svg(const heatmap &h, const svg_options &o) {
  return to_svg(std::vector<heatmap>{h}, h.title, o);
}

std::string to_svg(const std::vector<heatmap> &panels, const std::string &title,
                   const svg_options &o) {
  frame f;
  const std::size_t columns = panels.empty() ? 1 : panels.front().columns();
  f.width = plot_width(columns, o, f.left);
  std::uint64_t max_cell = 0;
  std::uint64_t total = 0;
  for (const auto &p : panels) {
    max_cell = std::max(max_cell, max_cell_of(p));
    total += p.total();
  }
  const bool many = panels.size() > 1;
  std::string body;
  double y = 28;
  for (std::size_t i = 0; i < panels.size(); ++i) {
    const auto &p = panels[i];
    if (many) {
      y += 16;
      body += fmt::format(R"~(<text class="panel" x="{:.1f}" y="{:.1f}" font-weight="bold" )~"
                          R"~(fill="#222">{} · {} samples</text>)~",
                          f.left, y - 2, xml_text(p.title), p.total());
      body += "\n";
    }
    y += 14; // room for annotation labels
    f.top = y;
    f.height = static_cast<double>(p.bins.size() * static_cast<std::size_t>(o.row_height));
    body += fmt::format("<g class=\"heatmap\" data-panel=\"{}\" data-step=\"{}\" "
                        "data-source=\"{}\">\n",
                        i, p.step, xml_text(p.source));
    heatmap_panel(body, p, f, max_cell, o, !many || i + 1 == panels.size(), i == 0);
    body += "</g>\n";
    y = f.top + f.height + (!many || i + 1 == panels.size() ? 40 : 8);
  }
  legend(body, f.left, y + 6, max_cell);
  const double height = y + 40;
  const double width = f.left + f.width + 20;
  std::string out = fmt::format(fmt::runtime(svg_head), static_cast<int>(width),
                                static_cast<int>(height), heat_stops());
  out += fmt::format(R"~(<text x="10" y="18" font-size="13" font-weight="bold" fill="#111">{} · )~"
                     R"~({} samples</text>)~",
                     xml_text(title), total);
  if (!panels.empty()) {
    const auto &p = panels.front();
    out +=
        fmt::format(R"~(<text x="{:.1f}" y="18" text-anchor="end" fill="#777" )~"
                    R"~(font-size="10">{} columns{}{}</text>)~",
                    f.left + f.width, text::format_duration_ns(static_cast<double>(p.step)),
                    p.source.empty() ? std::string() : " · from " + xml_text(p.source),
                    p.marks_not_drawn > 0 ? " · " + not_drawn(p.marks_not_drawn) : std::string());
  }
  out += "\n" + body + "</svg>\n";
  return out;
}

// ---- time series ----------------------------------------------------------------------------

namespace {

constexpr std::array<const char *, 8> palette = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                                 "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string y_label(double v, bool durations) {
  if (durations) {
    return text::format_duration_ns(v);
  }
  if (std::fabs(v) >= 1e6 || (std::fabs(v) < 1e-2 && v != 0)) {
    return fmt::format("{:.3g}", v);
  }
  return fmt::format("{:.6g}", v);
}

// More ticks than an axis could show: a bound on the loops that make them.
constexpr std::size_t max_ticks = 64;

// Nice linear ticks covering [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, int want) {
  const double span = std::max(hi - lo, 1e-12);
  const double raw = span / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (raw <= m * mag) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> t;
  // At most a few dozen: a step below the values' precision (values of 1e18 a few apart) would
  // not move v at all.
  for (double v = std::floor(lo / step) * step; v <= hi + step * 1e-9 && t.size() < max_ticks;
       v += step) {
    if (!t.empty() && !(v > t.back())) {
      break;
    }
    t.push_back(v);
  }
  return t;
}

// A series chart's plot area and the scales that place its points in it.
struct series_frame {
  frame f;
  std::int64_t from = 0; // the time range across
  std::int64_t to = 1;
  double lo = 0; // the value range up
  double hi = 1;
  bool log = false; // a log y axis
  bool any = false; // some value is drawn (else the plot says "no data")

  [[nodiscard]] double x_of(std::int64_t t) const {
    return f.left + f.width * static_cast<double>(t - from) /
                        static_cast<double>(std::max<std::int64_t>(to - from, 1));
  }
  [[nodiscard]] double y_of(double v) const {
    const double frac = log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                            : (v - lo) / (hi - lo);
    return f.top + f.height * (1.0 - frac);
  }
};

// The plot area of `c` and its ranges: values from 0 on a linear axis, whole powers of ten on
// a log one; a second of time when there are not two points.
series_frame series_frame_of(const series_chart &c, const svg_options &o) {
  series_frame p;
  p.f.top = 34;
  p.f.width = std::max(300.0, static_cast<double>(o.max_width) - p.f.left - 20);
  p.f.height = 300;
  p.log = c.log;
  const auto range = y_range(c);
  double lo = range ? range->first : std::numeric_limits<double>::infinity();
  double hi = range ? range->second : -std::numeric_limits<double>::infinity();
  p.any = std::isfinite(lo);
  if (!p.any) {
    lo = 0;
    hi = 1;
  }
  if (!c.log) {
    lo = std::min(lo, 0.0);
    if (hi <= lo) {
      hi = lo + 1;
    }
  } else if (!p.any || !(lo > 0) || !std::isfinite(hi)) {
    // Nothing to draw on a log axis (no value, or none above 0: a condition that matched no
    // rows): one decade. Taken as it was, log10(0) made the first tick 0, and the ticks, each
    // ten times the last, never reached the top.
    lo = 1;
    hi = 10;
  } else {
    lo = std::pow(10.0, std::floor(std::log10(lo)));
    hi = std::pow(10.0, std::ceil(std::log10(hi)));
    if (!(hi > lo) || !std::isfinite(hi)) {
      hi = lo * 10;
    }
  }
  p.lo = lo;
  p.hi = hi;
  p.from = c.x.empty() ? 0 : c.x.front();
  p.to = c.x.empty() ? 1 : c.x.back();
  if (p.to <= p.from) {
    p.to = p.from + 1'000'000'000;
  }
  return p;
}

// The y axis: a gridline and a label per power of ten (log) or per nice linear tick.
void y_axis(std::string &body, const series_frame &p, const series_chart &c) {
  const frame &f = p.f;
  std::vector<double> ticks;
  if (c.log) {
    for (double v = p.lo; v > 0 && v <= p.hi * 1.0001 && ticks.size() < max_ticks; v *= 10) {
      ticks.push_back(v);
    }
  } else {
    ticks = linear_ticks(p.lo, p.hi, 5);
  }
  for (const double v : ticks) {
    if (v < p.lo - 1e-9 || v > p.hi + std::fabs(p.hi) * 1e-4 + 1e-9) {
      continue;
    }
    const double y = p.y_of(v);
    body += fmt::format(
        R"~(<line x1="{:.1f}" y1="{:.1f}" x2="{:.1f}" y2="{:.1f}" stroke="#e6e6e6"/>)~"
        R"~(<text x="{:.1f}" y="{:.1f}" text-anchor="end" fill="#333" )~"
        R"~(font-size="10">{}</text>)~",
        f.left, y, f.left + f.width, y, f.left - 4, y + 3, xml_text(y_label(v, c.durations)));
    body += "\n";
  }
}

// The points gathered so far as one polyline, and none gathered.
void flush_polyline(std::string &body, const char *colour, std::string &pts) {
  if (!pts.empty()) {
    body += fmt::format(R"~(<polyline fill="none" stroke="{}" stroke-width="1.6" points="{}"/>)~",
                        colour, pts);
    pts.clear();
  }
}

// Series `s`: a polyline per run of points without a hole, and (when there are few points) a
// dot per point with its time, name and value as a tooltip.
void series_line(std::string &body, const series_frame &p, const series_chart &c, std::size_t s,
                 const timefmt::zone &z) {
  const bool dots = c.x.size() <= 600;
  const char *colour = palette[s % palette.size()];
  const std::string name = s < c.names.size() ? c.names[s] : std::string();
  body += fmt::format("<g class=\"series\" data-name=\"{}\">", xml_text(name));
  std::string pts;
  for (std::size_t i = 0; i < c.x.size() && i < c.y[s].size(); ++i) {
    const auto &v = c.y[s][i];
    if (!v || !std::isfinite(*v) || (c.log && *v <= 0)) {
      flush_polyline(body, colour, pts);
      continue;
    }
    const double x = p.x_of(c.x[i]);
    const double y = p.y_of(*v);
    pts += fmt::format("{}{:.1f},{:.1f}", pts.empty() ? "" : " ", x, y);
    if (dots) {
      body += fmt::format(R"~(<circle cx="{:.1f}" cy="{:.1f}" r="2" fill="{}"><title>{} · {}: )~"
                          R"~({}</title></circle>)~",
                          x, y, colour, xml_text(timefmt::format_time(c.x[i], z)), xml_text(name),
                          xml_text(y_label(*v, c.durations)));
    }
  }
  flush_polyline(body, colour, pts);
  body += "</g>\n";
}

// The legend under the time axis, a colour and a name per series, in a row; returns its y.
double series_legend(std::string &body, const frame &f, const series_chart &c) {
  double lx = f.left;
  const double ly = f.top + f.height + 48;
  for (std::size_t s = 0; s < c.y.size(); ++s) {
    const std::string name = s < c.names.size() ? c.names[s] : std::string();
    body += fmt::format(R"~(<rect x="{:.1f}" y="{:.1f}" width="14" height="3" fill="{}"/>)~"
                        R"~(<text x="{:.1f}" y="{:.1f}" fill="#333" font-size="11">{}</text>)~",
                        lx, ly, palette[s % palette.size()], lx + 18, ly + 4, xml_text(name));
    body += "\n";
    lx += 30 + 7.0 * static_cast<double>(std::min<std::size_t>(name.size(), 30));
  }
  return ly;
}

// The document around the drawing: its size, the title, the annotations left out, and "no
// data" over a plot without a value.
std::string series_document(const std::string &body, const series_frame &p, const series_chart &c,
                            double height) {
  const frame &f = p.f;
  const double width = f.left + f.width + 20;
  std::string out = fmt::format(fmt::runtime(svg_head), static_cast<int>(width),
                                static_cast<int>(height), heat_stops());
  out += fmt::format(R"~(<text x="10" y="18" font-size="13" font-weight="bold" fill="#111">{})~"
                     R"~(</text>)~",
                     xml_text(c.title));
  if (c.marks_not_drawn > 0) {
    out += fmt::format(R"~(<text x="{:.1f}" y="18" text-anchor="end" fill="#777" )~"
                       R"~(font-size="10">{}</text>)~",
                       f.left + f.width, not_drawn(c.marks_not_drawn));
  }
  out += "\n" + body;
  if (!p.any) {
    out += fmt::format(R"~(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" fill="#888">no )~"
                       R"~(data</text>)~",
                       f.left + f.width / 2, f.top + f.height / 2);
  }
  out += "</svg>\n";
  return out;
}

} // namespace

std::string to_svg(const series_chart &c, const svg_options &o) {
  const series_frame p = series_frame_of(c, o);
  const frame &f = p.f;
  std::string body;
  body +=
      fmt::format(R"~(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="#fbfbfb" )~"
                  R"~(stroke="#ddd"/>)~",
                  f.left, f.top, f.width, f.height);
  body += "\n";
  y_axis(body, p, c);
  mark_fills(body, f, p.from, p.to, c.marks);
  spans(body, f, p.from, p.to, c.gaps, c.marks, o.zone);
  for (std::size_t s = 0; s < c.y.size(); ++s) {
    series_line(body, p, c, s, o.zone);
  }
  time_axis(body, f, p.from, p.to, o.zone, true);
  const double legend_y = series_legend(body, f, c);
  return series_document(body, p, c, legend_y + 20);
}

} // namespace rsched::charts
