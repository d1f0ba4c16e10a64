// Text renderings of charts.hpp for a terminal: heatmaps and time series.
#include "rsched/base/text.hpp"
#include "rsched/charts/charts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace rsched::charts {

namespace {

// 256-colour heat ramp (xterm palette): pale yellow to deep red.
constexpr std::array<int, 10> ramp = {230, 229, 228, 221, 214, 208, 202, 196, 160, 124};
constexpr std::string_view density = " .:-=+*#%@";
constexpr const char *block = "\u2588";
constexpr const char *shade = "\u2591";

std::string clock_of(std::int64_t ns, const timefmt::zone &z, bool seconds) {
  const std::string s = timefmt::format_time(ns, z);
  return s.size() >= 19 ? s.substr(11, seconds ? 8 : 5) : s;
}

std::string offset_of(std::int64_t ns, const timefmt::zone &z) {
  const std::string s = timefmt::format_time(ns, z);
  const auto sign = s.find_last_of("+-");
  return sign != std::string::npos && sign > 11 ? s.substr(sign) : std::string();
}

// Pads (or cuts) an escaped label to `w` columns, right-aligned.
std::string rpad(const std::string &raw, std::size_t w) {
  std::string s = text::escape_for_terminal(raw);
  const std::size_t dw = text::display_width(s);
  if (dw >= w) {
    return s.substr(0, w); // labels here are ASCII and units; cut at a byte is fine for them
  }
  return std::string(w - dw, ' ') + s;
}

bool in_gap(const std::vector<span> &gaps, std::int64_t a, std::int64_t b) {
  for (const auto &g : gaps) {
    if (g.start <= a && g.end >= b) {
      return true;
    }
  }
  return false;
}

} // namespace

std::string to_terminal(const heatmap &h, int rows, int cols, bool color,
                        const timefmt::zone &zone) {
  constexpr std::size_t label_w = 10;
  const auto avail_rows = static_cast<std::size_t>(std::max(rows - 5, 4));
  const auto avail_cols =
      static_cast<std::size_t>(std::max(cols - static_cast<int>(label_w) - 2, 10));
  // Rows merged pairwise (from the bottom) until they fit; columns merged k at a time.
  std::size_t rmerge = 1;
  while ((h.bins.size() + rmerge - 1) / rmerge > avail_rows) {
    rmerge *= 2;
  }
  const std::size_t nrows = (h.bins.size() + rmerge - 1) / rmerge;
  const std::size_t cmerge = std::max<std::size_t>(1, (h.columns() + avail_cols - 1) / avail_cols);
  const std::size_t ncols = (h.columns() + cmerge - 1) / cmerge;
  std::vector<std::vector<std::uint64_t>> grid(ncols, std::vector<std::uint64_t>(nrows, 0));
  std::uint64_t max = 0;
  for (std::size_t c = 0; c < h.columns(); ++c) {
    for (std::size_t r = 0; r < h.bins.size(); ++r) {
      auto &cell = grid[c / cmerge][r / rmerge];
      cell += h.counts[c][r];
    }
  }
  for (const auto &col : grid) {
    for (const auto n : col) {
      max = std::max(max, n);
    }
  }
  std::string out = text::escape_for_terminal(h.title) + fmt::format(" · {} samples\n", h.total());
  for (std::size_t rr = nrows; rr-- > 0;) {
    const auto &b = h.bins[rr * rmerge];
    const std::string label =
        b.open && rr > 0 ? "\u2265" + value_label(h.layout, b.lo) : value_label(h.layout, b.lo);
    out += rpad(label, label_w) + " \u2502";
    // A colour is set when it changes (not per cell) and reset at the end of the line: a
    // screenful stays a few KiB for slow terminals.
    int current = -1;
    const auto set_colour = [&](int c) {
      if (c != current) {
        out += fmt::format("\x1b[38;5;{}m", c);
        current = c;
      }
    };
    for (std::size_t c = 0; c < ncols; ++c) {
      const std::int64_t a = h.col0 + static_cast<std::int64_t>(c * cmerge) * h.step;
      const std::int64_t e = a + static_cast<std::int64_t>(cmerge) * h.step;
      const std::uint64_t n = grid[c][rr];
      if (n == 0) {
        if (in_gap(h.gaps, a, e)) {
          if (color) {
            set_colour(250);
            out += shade;
          } else {
            out += '/';
          }
        } else {
          out += ' ';
        }
        continue;
      }
      const double f = std::log1p(static_cast<double>(n)) / std::log1p(static_cast<double>(max));
      if (color) {
        const auto i = std::min<std::size_t>(
            ramp.size() - 1, static_cast<std::size_t>(f * static_cast<double>(ramp.size())));
        set_colour(ramp[i]);
        out += block;
      } else {
        const auto i = std::min<std::size_t>(
            density.size() - 1,
            1 + static_cast<std::size_t>(f * static_cast<double>(density.size() - 1)));
        out += density[i];
      }
    }
    if (current != -1) {
      out += "\x1b[0m";
    }
    out += '\n';
  }
  // time axis: the first, middle and last column starts
  out += std::string(label_w, ' ') + " \u2514";
  for (std::size_t c = 0; c < ncols; ++c) {
    out += "\u2500";
  }
  out += '\n';
  const std::int64_t span_ns = static_cast<std::int64_t>(h.columns()) * h.step;
  const bool seconds = span_ns < 600'000'000'000;
  const std::string first = clock_of(h.col0, zone, seconds);
  const std::string last = clock_of(h.col0 + span_ns, zone, seconds);
  std::string axis(label_w + 2, ' ');
  axis += first;
  const std::size_t room =
      ncols > first.size() + last.size() ? ncols - first.size() - last.size() : 1;
  axis += std::string(room, ' ') + last;
  out += axis + fmt::format("   (local, UTC{})\n", offset_of(h.col0, zone));
  // Annotations: '^' under their columns, their texts after.
  std::string marks_line(ncols, ' ');
  std::string texts;
  for (const auto &m : h.marks) {
    if (m.end < h.col0 || m.start >= h.col0 + span_ns) {
      continue;
    }
    const auto c0 = static_cast<std::size_t>(std::max<std::int64_t>(m.start - h.col0, 0) /
                                             (h.step * static_cast<std::int64_t>(cmerge)));
    const auto c1 =
        static_cast<std::size_t>(std::clamp<std::int64_t>(m.end - h.col0, 0, span_ns - 1) /
                                 (h.step * static_cast<std::int64_t>(cmerge)));
    for (std::size_t c = std::min(c0, ncols - 1); c <= std::min(c1, ncols - 1); ++c) {
      marks_line[c] = '^';
    }
    if (texts.size() < 200) {
      texts += (texts.empty() ? "" : "; ") + clock_of(m.start, zone, seconds) + " " +
               text::escape_for_terminal(m.text);
    }
  }
  if (!texts.empty()) {
    out += std::string(label_w + 2, ' ') + marks_line + "\n" + std::string(label_w + 2, ' ') +
           "^ " + texts + "\n";
  }
  out += std::string(label_w + 2, ' ');
  if (color) {
    out += "1 ";
    for (const int c : ramp) {
      out += fmt::format("\x1b[38;5;{}m{}\x1b[0m", c, block);
    }
    out += fmt::format(" {} samples (log)   \x1b[38;5;250m{}\x1b[0m no recording", max, shade);
  } else {
    out += fmt::format("1 {} {} samples (log)   / no recording", density.substr(1), max);
  }
  out += fmt::format("   {} per column\n", text::format_duration_ns(static_cast<double>(h.step) *
                                                                    static_cast<double>(cmerge)));
  return out;
}

std::string to_terminal(const series_chart &c, int rows, int cols, bool color,
                        const timefmt::zone &zone) {
  constexpr std::size_t label_w = 10;
  const auto h = static_cast<std::size_t>(std::max(rows - 5, 4));
  const auto w = static_cast<std::size_t>(std::max(cols - static_cast<int>(label_w) - 2, 10));
  const auto range = y_range(c);
  double lo = range ? range->first : std::numeric_limits<double>::infinity();
  double hi = range ? range->second : -std::numeric_limits<double>::infinity();
  std::string out = text::escape_for_terminal(c.title) + "\n";
  if (!std::isfinite(lo) || c.x.empty()) {
    return out + "(no data)\n";
  }
  if (!c.log) {
    lo = std::min(lo, 0.0);
  }
  if (hi <= lo) {
    hi = lo + (c.log ? lo * 9 : 1);
  }
  const auto frac = [&](double v) {
    return c.log ? (std::log10(v) - std::log10(lo)) / (std::log10(hi) - std::log10(lo))
                 : (v - lo) / (hi - lo);
  };
  const std::int64_t from = c.x.front();
  const std::int64_t to = std::max(c.x.back(), from + 1);
  std::vector<std::string> grid(h * w, " ");
  static constexpr std::array<const char *, 6> marks = {"*", "+", "o", "x", "#", "@"};
  static constexpr std::array<int, 6> colours = {33, 196, 34, 208, 129, 94};
  for (std::size_t s = 0; s < c.y.size(); ++s) {
    for (std::size_t i = 0; i < c.x.size() && i < c.y[s].size(); ++i) {
      const auto &v = c.y[s][i];
      if (!v || !std::isfinite(*v) || (c.log && *v <= 0)) {
        continue;
      }
      const auto x = static_cast<std::size_t>(
          std::llround(static_cast<double>(c.x[i] - from) / static_cast<double>(to - from) *
                       static_cast<double>(w - 1)));
      const auto y = static_cast<std::size_t>(
          std::llround(std::clamp(frac(*v), 0.0, 1.0) * static_cast<double>(h - 1)));
      const std::string m = marks[s % marks.size()];
      grid[(h - 1 - y) * w + std::min(x, w - 1)] =
          color ? fmt::format("\x1b[38;5;{}m{}\x1b[0m", colours[s % colours.size()], m) : m;
    }
  }
  const auto label = [&](double v) {
    return c.durations ? text::format_duration_ns(v) : fmt::format("{:.4g}", v);
  };
  for (std::size_t r = 0; r < h; ++r) {
    const double v =
        c.log ? std::pow(10.0, std::log10(lo) + (std::log10(hi) - std::log10(lo)) *
                                                    static_cast<double>(h - 1 - r) /
                                                    static_cast<double>(h - 1))
              : lo + (hi - lo) * static_cast<double>(h - 1 - r) / static_cast<double>(h - 1);
    out += (r % 4 == 0 || r + 1 == h ? rpad(label(v), label_w) : std::string(label_w, ' ')) +
           " \u2502";
    for (std::size_t x = 0; x < w; ++x) {
      out += grid[r * w + x];
    }
    out += '\n';
  }
  out += std::string(label_w, ' ') + " \u2514";
  for (std::size_t x = 0; x < w; ++x) {
    out += "\u2500";
  }
  out += '\n';
  const bool seconds = to - from < 600'000'000'000;
  const std::string first = clock_of(from, zone, seconds);
  const std::string last = clock_of(to, zone, seconds);
  out += std::string(label_w + 2, ' ') + first +
         std::string(w > first.size() + last.size() ? w - first.size() - last.size() : 1, ' ') +
         last + fmt::format("   (local, UTC{})\n", offset_of(from, zone));
  out += std::string(label_w + 2, ' ');
  for (std::size_t s = 0; s < c.y.size(); ++s) {
    const std::string m = marks[s % marks.size()];
    out += (color ? fmt::format("\x1b[38;5;{}m{}\x1b[0m", colours[s % colours.size()], m) : m) +
           " " + text::escape_for_terminal(s < c.names.size() ? c.names[s] : std::string()) + "  ";
  }
  out += '\n';
  return out;
}

} // namespace rsched::charts
