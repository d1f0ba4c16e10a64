#include "rsched/sql_shell/output.hpp"

#include "rsched/base/text.hpp"
#include "rsched/stats/histogram.hpp"
#include "rsched/store/hist_functions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <type_traits>
#include <utility>

namespace rsched::sql_shell {

std::string format_real(double d) {
  if (std::isinf(d)) {
    return d > 0 ? "Inf" : "-Inf";
  }
  if (std::isnan(d)) {
    return "NaN"; // SQLite turns NaN into NULL; kept for completeness
  }
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, d); // shortest round-trip form
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) {
    s += ".0";
  }
  return s;
}

std::string blob_literal(const std::vector<std::uint8_t> &b) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2 + 3);
  s += "x'";
  for (const std::uint8_t c : b) {
    s += hex[c >> 4];
    s += hex[c & 0xF];
  }
  s += '\'';
  return s;
}

void append_csv_text(std::string &out, std::string_view s) {
  const bool quote = s.empty() || s.find_first_of(",\"\r\n") != std::string_view::npos;
  if (!quote) {
    out += s;
    return;
  }
  out += '"';
  for (const char c : s) {
    if (c == '"') {
      out += '"';
    }
    out += c;
  }
  out += '"';
}

void append_csv_field(std::string &out, const query::value &v, bool escape_text) {
  std::visit(
      [&](const auto &x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          // NULL: empty field
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out += fmt::format("{}", x);
        } else if constexpr (std::is_same_v<T, double>) {
          out += format_real(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_csv_text(out, escape_text ? text::escape_for_terminal(x) : x);
        } else {
          out += blob_literal(x);
        }
      },
      v);
}

std::string csv_record(const std::vector<query::value> &row, bool escape_text) {
  std::string out;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (i != 0) {
      out += ',';
    }
    append_csv_field(out, row[i], escape_text);
  }
  out += "\r\n";
  return out;
}

std::string csv_header(const std::vector<std::string> &columns, bool escape_text) {
  std::string out;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i != 0) {
      out += ',';
    }
    append_csv_text(out, escape_text ? text::escape_for_terminal(columns[i]) : columns[i]);
  }
  out += "\r\n";
  return out;
}

void append_json_value(std::string &out, const query::value &v) {
  std::visit(
      [&](const auto &x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          out += "null";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out += fmt::format("{}", x);
        } else if constexpr (std::is_same_v<T, double>) {
          out += std::isfinite(x) ? format_real(x) : std::string("null");
        } else if constexpr (std::is_same_v<T, std::string>) {
          text::append_json_string(out, x);
        } else {
          out += '"';
          out += text::to_hex(std::string_view(reinterpret_cast<const char *>(x.data()), x.size()));
          out += '"';
        }
      },
      v);
}

std::string json_object(const std::vector<std::string> &columns,
                        const std::vector<query::value> &row) {
  std::string out = "{";
  std::vector<std::string> hex_keys; // the "_hex" members of this row so far
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (i != 0) {
      out += ',';
    }
    const std::string_view key = i < columns.size() ? std::string_view(columns[i]) : "";
    text::append_json_string(out, key);
    out += ':';
    const auto *s = std::get_if<std::string>(&row[i]);
    if (s == nullptr || text::append_json_string(out, *s)) {
      if (s == nullptr) {
        append_json_value(out, row[i]);
      }
      continue;
    }
    // Not valid UTF-8: the exact bytes in "<column>_hex", "_hex" added again while the name is
    // a column of the result or another such member (keys stay unique).
    std::string hex_key = std::string(key) + "_hex";
    while (std::find(columns.begin(), columns.end(), hex_key) != columns.end() ||
           std::find(hex_keys.begin(), hex_keys.end(), hex_key) != hex_keys.end()) {
      hex_key += "_hex";
    }
    out += ',';
    text::append_json_string(out, hex_key);
    out += ":\"";
    out += text::to_hex(*s);
    out += '"';
    hex_keys.push_back(std::move(hex_key));
  }
  out += '}';
  return out;
}

namespace {

// p<digits>[_<digits>]_ns, optionally a_ or b_ before it (compare()'s two windows), or peak_ns
// (spikes()); lower case.
bool is_percentile_name(std::string_view l) {
  if (l == "peak_ns") {
    return true;
  }
  if (l.size() > 2 && (l[0] == 'a' || l[0] == 'b') && l[1] == '_') {
    l.remove_prefix(2);
  }
  if (l.size() < 5 || l[0] != 'p' || l.substr(l.size() - 3) != "_ns") {
    return false;
  }
  l = l.substr(1, l.size() - 4);
  bool digit_before = false;
  for (const char c : l) {
    if (c >= '0' && c <= '9') {
      digit_before = true;
    } else if (c == '_' && digit_before) {
      digit_before = false;
    } else {
      return false;
    }
  }
  return digit_before;
}

// x with three significant digits and no unit ("8.19", "16.4", "120", "0").
std::string three_digits(double x) {
  if (x == std::floor(x) && x < 1e15) {
    return fmt::format("{}", static_cast<long long>(x));
  }
  const int decimals = x < 9.995 ? 2 : x < 99.95 ? 1 : 0;
  return fmt::format("{:.{}f}", x, decimals);
}

} // namespace

column_kind classify_column(std::string_view name) {
  std::string l(name);
  for (auto &c : l) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  // Instants (UTC ns): every column of the schema and the table functions that holds one. The
  // other *_ns columns are durations.
  static constexpr std::string_view instants[] = {"ts",      "peak_ts",    "start_ns",
                                                  "end_ns",  "built_ns",   "cutoff_ns",
                                                  "last_ns", "created_ns", "first_ns"};
  if (std::find(std::begin(instants), std::end(instants), l) != std::end(instants) ||
      (l.size() > 3 && l.compare(l.size() - 3, 3, "_ts") == 0)) {
    return column_kind::time;
  }
  if (is_percentile_name(l)) {
    return column_kind::percentile;
  }
  if (l == "dur" || (l.size() > 3 && l.compare(l.size() - 3, 3, "_ns") == 0)) {
    return column_kind::duration;
  }
  if (l.size() > 4 && l.compare(l.size() - 4, 4, "_pct") == 0) {
    return column_kind::percent;
  }
  return column_kind::plain;
}

std::string format_duration_ns(double ns) {
  if (!std::isfinite(ns)) {
    return format_real(ns);
  }
  return text::format_duration_ns(ns);
}

std::string format_percentile_ns(double ns, bool fine) {
  constexpr double top = 18'000'000'000'000'000'000.0; // below 2^64
  if (!std::isfinite(ns) || ns < 0 || ns >= top) {
    return format_duration_ns(ns);
  }
  const auto lat = fine ? stats::layout::latency_fine : stats::layout::latency;
  const stats::bucket b =
      stats::bucket_bounds(lat, stats::slot_of(lat, static_cast<std::uint64_t>(ns)));
  if (b.open_ended()) {
    return "\xe2\x89\xa5 " + format_duration_ns(static_cast<double>(b.lo)); // ≥
  }
  // Both ends in the unit of the upper one; the bucket is [lo, hi + 1).
  static constexpr const char *units[] = {"ns", "\xc2\xb5s", "ms", "s"};
  double lo = static_cast<double>(b.lo);
  double hi = static_cast<double>(b.hi) + 1.0;
  std::size_t u = 0;
  while (u < 3 && hi >= 999.5) {
    lo /= 1000.0;
    hi /= 1000.0;
    ++u;
  }
  return fmt::format("{}\xe2\x80\x93{} {}", three_digits(lo), three_digits(hi), units[u]); // –
}

cell table_cell(const query::value &v) {
  return std::visit(
      [](const auto &x) -> cell {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return {"NULL", false};
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return {fmt::format("{}", x), true};
        } else if constexpr (std::is_same_v<T, double>) {
          return {format_real(x), true};
        } else if constexpr (std::is_same_v<T, std::string>) {
          return {text::escape_for_terminal(x), false};
        } else {
          return {fmt::format("<blob {} bytes>", x.size()), false};
        }
      },
      v);
}

cell human_cell(const query::value &v, column_kind kind, const timefmt::zone &z) {
  if (kind == column_kind::time) {
    if (const auto *i = std::get_if<std::int64_t>(&v);
        i != nullptr && *i > 100'000'000'000'000'000) {
      return {text::escape_for_terminal(timefmt::format_time(*i, z)), false};
    }
  } else if (kind == column_kind::duration || kind == column_kind::percentile) {
    const auto show = [kind](double ns) {
      return kind == column_kind::duration ? format_duration_ns(ns) : format_percentile_ns(ns);
    };
    if (const auto *i = std::get_if<std::int64_t>(&v)) {
      return {show(static_cast<double>(*i)), true};
    }
    if (const auto *d = std::get_if<double>(&v)) {
      return {show(*d), true};
    }
  } else if (kind == column_kind::percent) {
    // A share computed in double (97.58212931224679): one decimal is what a person reads.
    if (const auto *d = std::get_if<double>(&v); d != nullptr && std::isfinite(*d)) {
      return {fmt::format("{:.1f}", *d), true};
    }
  }
  return table_cell(v);
}

namespace {

void append_padded(std::string &line, std::string_view s, std::size_t width, bool right) {
  const std::size_t w = text::display_width(s);
  const std::size_t pad = width > w ? width - w : 0;
  if (right) {
    line.append(pad, ' ');
  }
  line += s;
  if (!right) {
    line.append(pad, ' ');
  }
}

void append_repeat(std::string &out, std::string_view piece, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    out += piece;
  }
}

std::vector<std::string> escaped_names(const std::vector<std::string> &header) {
  std::vector<std::string> names;
  names.reserve(header.size());
  for (const auto &h : header) {
    names.push_back(text::escape_for_terminal(h));
  }
  return names;
}

// Flushes `buf` to `out` once it grows past 64 KiB (keeps memory flat on big results).
void maybe_flush(std::ostream &out, std::string &buf) {
  if (buf.size() > (std::size_t{1} << 16)) {
    out << buf;
    buf.clear();
  }
}

} // namespace

void render_table(std::ostream &out, const std::vector<std::string> &header,
                  const std::vector<std::vector<cell>> &rows, bool show_header, table_style style) {
  if (!show_header && rows.empty()) {
    return;
  }
  const bool box = style == table_style::box;
  const std::string_view h = box ? "\xe2\x94\x80" : "-"; // ─
  const std::string_view v = box ? "\xe2\x94\x82" : "|"; // │
  struct corners {
    std::string_view left, mid, right;
  };
  const corners top = box ? corners{"\xe2\x94\x8c", "\xe2\x94\xac", "\xe2\x94\x90"} // ┌ ┬ ┐
                          : corners{"+", "+", "+"};
  const corners sep = box ? corners{"\xe2\x94\x9c", "\xe2\x94\xbc", "\xe2\x94\xa4"} // ├ ┼ ┤
                          : corners{"+", "+", "+"};
  const corners bottom = box ? corners{"\xe2\x94\x94", "\xe2\x94\xb4", "\xe2\x94\x98"} // └ ┴ ┘
                             : corners{"+", "+", "+"};
  const std::size_t ncol = header.size();
  const std::vector<std::string> names = escaped_names(header);
  std::vector<std::size_t> width(ncol, 0);
  for (std::size_t c = 0; c < ncol; ++c) {
    if (show_header) {
      width[c] = text::display_width(names[c]);
    }
  }
  for (const auto &r : rows) {
    for (std::size_t c = 0; c < ncol && c < r.size(); ++c) {
      width[c] = std::max(width[c], text::display_width(r[c].text));
    }
  }
  auto rule = [&](const corners &k) {
    std::string s(k.left);
    for (std::size_t c = 0; c < ncol; ++c) {
      append_repeat(s, h, width[c] + 2);
      s += c + 1 < ncol ? k.mid : k.right;
    }
    s += '\n';
    return s;
  };

  std::string buf = rule(top);
  if (show_header) {
    buf += v;
    for (std::size_t c = 0; c < ncol; ++c) {
      buf += ' ';
      append_padded(buf, names[c], width[c], false);
      buf += ' ';
      buf += v;
    }
    buf += '\n';
    if (!rows.empty() || !box) {
      buf += rows.empty() ? rule(bottom) : rule(sep);
    }
  }
  for (const auto &r : rows) {
    buf += v;
    for (std::size_t c = 0; c < ncol; ++c) {
      buf += ' ';
      if (c < r.size()) {
        append_padded(buf, r[c].text, width[c], r[c].right);
      } else {
        buf.append(width[c], ' ');
      }
      buf += ' ';
      buf += v;
    }
    buf += '\n';
    maybe_flush(out, buf);
  }
  // With a header and no rows, the rule under the header closes the table (but a box needs its
  // bottom edge).
  if (!rows.empty() || (show_header && box)) {
    buf += rule(bottom);
  }
  out << buf;
}

namespace {

std::string markdown_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    if (c == '|') {
      out += '\\';
    }
    out += c;
  }
  return out;
}

} // namespace

void render_markdown(std::ostream &out, const std::vector<std::string> &header,
                     const std::vector<std::vector<cell>> &rows, bool show_header) {
  const std::size_t ncol = header.size();
  const std::vector<std::string> names = escaped_names(header);
  std::string buf = "|";
  for (std::size_t c = 0; c < ncol; ++c) {
    buf += ' ';
    buf += show_header ? markdown_escape(names[c]) : std::string();
    buf += " |";
  }
  buf += "\n|";
  for (std::size_t c = 0; c < ncol; ++c) {
    const bool right = !rows.empty() && c < rows.front().size() && rows.front()[c].right;
    buf += right ? "---:|" : "---|";
  }
  buf += '\n';
  for (const auto &r : rows) {
    buf += '|';
    for (std::size_t c = 0; c < ncol; ++c) {
      buf += ' ';
      if (c < r.size()) {
        buf += markdown_escape(r[c].text);
      }
      buf += " |";
    }
    buf += '\n';
    maybe_flush(out, buf);
  }
  out << buf;
}

void render_line(std::ostream &out, const std::vector<std::string> &header,
                 const std::vector<std::vector<cell>> &rows) {
  const std::vector<std::string> names = escaped_names(header);
  std::size_t w = 0;
  for (const auto &n : names) {
    w = std::max(w, text::display_width(n));
  }
  std::string buf;
  bool first = true;
  for (const auto &r : rows) {
    if (!first) {
      buf += '\n';
    }
    first = false;
    for (std::size_t c = 0; c < names.size(); ++c) {
      append_padded(buf, names[c], w, true);
      buf += " = ";
      if (c < r.size()) {
        buf += r[c].text;
      }
      buf += '\n';
    }
    maybe_flush(out, buf);
  }
  out << buf;
}

void printer::begin(const std::vector<std::string> &columns) {
  finish();
  pending_ = true;
  row_count_ = 0;
  columns_ = columns;
  rows_.clear();
  percentiles_.clear();
  kinds_.clear();
  store::answered_precision() = {};
  for (const auto &c : columns) {
    kinds_.push_back(cfg_.units ? classify_column(c) : column_kind::plain);
  }
  csv_header_due_ = cfg_.mode == output_mode::csv && cfg_.headers;
}

void printer::row(const std::vector<query::value> &values) {
  ++row_count_;
  switch (cfg_.mode) {
  case output_mode::csv:
    if (csv_header_due_) {
      csv_header_due_ = false;
      *out_ << csv_header(columns_, cfg_.escape_csv_text);
    }
    *out_ << csv_record(values, cfg_.escape_csv_text);
    return;
  case output_mode::jsonl:
    *out_ << json_object(columns_, values) << '\n';
    return;
  case output_mode::json:
    *out_ << (row_count_ == 1 ? "[" : ",\n") << json_object(columns_, values);
    return;
  default:
    break;
  }
  if (cfg_.max_rows != 0 && rows_.size() >= cfg_.max_rows) {
    return; // counted, not shown
  }
  std::vector<cell> cells;
  cells.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const column_kind kind = i < kinds_.size() ? kinds_[i] : column_kind::plain;
    cells.push_back(human_cell(values[i], kind, cfg_.zone));
    if (kind == column_kind::percentile) {
      if (const auto *n = std::get_if<std::int64_t>(&values[i])) {
        percentiles_.push_back({rows_.size(), i, static_cast<double>(*n)});
      } else if (const auto *d = std::get_if<double>(&values[i])) {
        percentiles_.push_back({rows_.size(), i, *d});
      }
    }
  }
  rows_.push_back(std::move(cells));
}

void printer::finish(bool ok) {
  if (pending_ && !ok && row_count_ == 0) {
    pending_ = false; // failed before its first row: the error says it all
    csv_header_due_ = false;
    columns_.clear();
    kinds_.clear();
  }
  if (pending_) {
    pending_ = false;
    if (row_count_ == 0) {
      ++empty_results_;
    }
    // Layout 5's buckets only when the statement answered every percentile at their precision;
    // a window across the upgrade, a layout 1 metric or a table function keeps layout 1's.
    if (store::answered_precision().all_fine()) {
      for (const auto &p : percentiles_) {
        rows_[p.row][p.col].text = format_percentile_ns(p.ns, true);
      }
    }
    switch (cfg_.mode) {
    case output_mode::csv:
      if (csv_header_due_) { // an empty result still has its header
        *out_ << csv_header(columns_, cfg_.escape_csv_text);
      }
      csv_header_due_ = false;
      break;
    case output_mode::jsonl:
      break;
    case output_mode::json:
      *out_ << (row_count_ == 0 ? "[]\n" : "]\n");
      break;
    case output_mode::table:
    case output_mode::box:
      render_table(*out_, columns_, rows_, cfg_.headers,
                   cfg_.mode == output_mode::box ? table_style::box : table_style::ascii);
      break;
    case output_mode::markdown:
      render_markdown(*out_, columns_, rows_, cfg_.headers);
      break;
    case output_mode::line:
      render_line(*out_, columns_, rows_);
      break;
    }
    if (is_human(cfg_.mode) && row_count_ > rows_.size()) {
      *out_ << fmt::format("... {} more rows (use .output FILE or --csv for all)\n",
                           row_count_ - rows_.size());
    }
    columns_.clear();
    kinds_.clear();
    rows_.clear();
    percentiles_.clear();
    row_count_ = 0;
  }
  out_->flush();
}

query::result_sink printer::sink() {
  query::result_sink s;
  s.on_columns = [this](const std::vector<std::string> &columns) { begin(columns); };
  s.on_row = [this](const std::vector<query::value> &values) { row(values); };
  return s;
}

} // namespace rsched::sql_shell
