// Chart data: display rows of a layout, columns of a window, accumulation; the y range of a
// series chart (charts.hpp).
#include "rsched/base/text.hpp"
#include "rsched/charts/charts.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

namespace rsched::charts {

namespace {

constexpr std::uint64_t us = 1000;

// The lower bounds where display rows start, in the layout's unit.
std::vector<std::uint64_t> row_starts(stats::layout l) {
  std::vector<std::uint64_t> s;
  switch (l) {
  case stats::layout::latency:
  case stats::layout::latency_fine: // the same rows: every latency edge is a fine edge
    for (std::uint64_t v : {0U, 10U, 20U, 40U, 80U, 160U, 320U}) {
      s.push_back(v * us);
    }
    for (std::uint64_t v = 512; v <= (std::uint64_t{1} << 32); v *= 2) {
      s.push_back(v * us);
    }
    break;
  case stats::layout::depth:
  case stats::layout::count:
    s.push_back(0);
    for (std::uint64_t v = 1; v != 0 && v <= (std::uint64_t{1} << 62); v *= 2) {
      s.push_back(v);
    }
    break;
  case stats::layout::log2:
    for (std::size_t slot = 0; slot < stats::slot_count(l); ++slot) {
      s.push_back(stats::bucket_bounds(l, slot).lo);
    }
    break;
  }
  return s;
}

} // namespace

std::vector<bin> log_bins(stats::layout l, std::optional<std::uint64_t> clip) {
  const auto starts = row_starts(l);
  std::vector<bin> out;
  std::size_t row = 0; // index into starts of the current row
  for (std::size_t slot = 0; slot < stats::slot_count(l); ++slot) {
    const auto b = stats::bucket_bounds(l, slot);
    std::size_t r = row;
    while (r + 1 < starts.size() && b.lo >= starts[r + 1]) {
      ++r;
    }
    if (out.empty() || r != row) {
      out.push_back({slot, slot, b.lo, b.hi, b.open_ended()});
      row = r;
    } else {
      out.back().last = slot;
      out.back().hi = b.hi;
      out.back().open = b.open_ended();
    }
  }
  if (clip) {
    // Rows from the first one at or above the clip value are one open top row (at least one
    // row stays below it).
    std::size_t k = 1;
    while (k < out.size() && out[k].lo < *clip) {
      ++k;
    }
    if (k < out.size()) {
      out[k].last = out.back().last;
      out[k].hi = out.back().hi;
      out[k].open = true;
      out.resize(k + 1);
    }
  }
  return out;
}

std::string value_label(stats::layout l, std::uint64_t v) {
  if (l == stats::layout::latency) {
    return text::format_duration_ns(static_cast<double>(v));
  }
  return std::to_string(v);
}

std::uint64_t heatmap::column_total(std::size_t c) const {
  return std::accumulate(counts[c].begin(), counts[c].end(), std::uint64_t{0});
}

std::uint64_t heatmap::total() const {
  std::uint64_t n = 0;
  for (std::size_t c = 0; c < counts.size(); ++c) {
    n += column_total(c);
  }
  return n;
}

heatmap make_heatmap(stats::layout l, std::int64_t from, std::int64_t to, std::int64_t step,
                     std::optional<std::uint64_t> clip) {
  heatmap h;
  h.layout = l;
  h.from = from;
  h.to = std::max(to, from);
  h.step = std::max<std::int64_t>(step, 1);
  std::int64_t q = from / h.step;
  if (from % h.step != 0 && from < 0) {
    --q;
  }
  h.col0 = q * h.step;
  h.bins = log_bins(l, clip);
  const std::int64_t span = h.to - h.col0;
  const auto ncols = static_cast<std::size_t>(span / h.step + (span % h.step != 0 ? 1 : 0));
  h.counts.assign(std::max<std::size_t>(ncols, 1), std::vector<std::uint64_t>(h.bins.size(), 0));
  return h;
}

std::optional<std::size_t> column_of(const heatmap &h, std::int64_t ts) {
  if (ts < h.from || ts >= h.to) {
    return std::nullopt;
  }
  const auto c = static_cast<std::size_t>((ts - h.col0) / h.step);
  if (c >= h.counts.size()) {
    return std::nullopt;
  }
  return c;
}

std::vector<std::uint16_t> rows_of_slots(const std::vector<bin> &bins) {
  std::vector<std::uint16_t> rows;
  for (std::size_t r = 0; r < bins.size(); ++r) {
    rows.resize(bins[r].last + 1, static_cast<std::uint16_t>(r));
  }
  return rows;
}

result<void> add(heatmap &h, std::int64_t ts, const stats::histogram &row) {
  if (row.kind != h.layout) {
    return make_error("a histogram of another layout than the heatmap's");
  }
  const auto c = column_of(h, ts);
  if (!c) {
    return {};
  }
  auto &col = h.counts[*c];
  for (std::size_t r = 0; r < h.bins.size(); ++r) {
    for (std::size_t s = h.bins[r].first; s <= h.bins[r].last; ++s) {
      col[r] += row.slots[s];
    }
  }
  return {};
}

std::int64_t nice_step(std::int64_t window_ns, std::size_t max_columns, std::int64_t min_step) {
  constexpr std::int64_t s = 1'000'000'000;
  static constexpr std::array<std::int64_t, 18> steps = {
      s,        2 * s,        5 * s,        10 * s,       15 * s,        30 * s,
      60 * s,   120 * s,      300 * s,      600 * s,      900 * s,       1800 * s,
      3600 * s, 2 * 3600 * s, 3 * 3600 * s, 6 * 3600 * s, 12 * 3600 * s, 24 * 3600 * s};
  const auto cols = std::max<std::size_t>(max_columns, 1);
  for (const auto st : steps) {
    if (st >= min_step && window_ns / st < static_cast<std::int64_t>(cols)) {
      return st;
    }
  }
  // Past a day a column: whole days.
  const std::int64_t days = window_ns / (24 * 3600 * s) / static_cast<std::int64_t>(cols) + 1;
  return std::max(days * 24 * 3600 * s, min_step);
}

std::string xml_text(std::string_view in) {
  const std::string s = text::escape_for_terminal(in);
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&apos;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

std::optional<std::pair<double, double>> y_range(const series_chart &c) {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  for (const auto &s : c.y) {
    for (const auto &v : s) {
      if (v && std::isfinite(*v) && (!c.log || *v > 0)) {
        lo = std::min(lo, *v);
        hi = std::max(hi, *v);
      }
    }
  }
  if (lo > hi) {
    return std::nullopt;
  }
  return std::pair{lo, hi};
}

} // namespace rsched::charts
