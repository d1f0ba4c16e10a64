#include "rsched/sql_shell/output.hpp"

#include "rsched/base/text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <type_traits>

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

void append_csv_field(std::string &out, const store::value &v, bool escape_text) {
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

std::string csv_record(const std::vector<store::value> &row, bool escape_text) {
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

cell table_cell(const store::value &v) {
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

} // namespace

void render_table(std::ostream &out, const std::vector<std::string> &header,
                  const std::vector<std::vector<cell>> &rows, bool show_header) {
  if (!show_header && rows.empty()) {
    return;
  }
  const std::size_t ncol = header.size();
  std::vector<std::string> names;
  names.reserve(ncol);
  std::vector<std::size_t> width(ncol, 0);
  for (std::size_t c = 0; c < ncol; ++c) {
    names.push_back(text::escape_for_terminal(header[c]));
    if (show_header) {
      width[c] = text::display_width(names[c]);
    }
  }
  for (const auto &r : rows) {
    for (std::size_t c = 0; c < ncol && c < r.size(); ++c) {
      width[c] = std::max(width[c], text::display_width(r[c].text));
    }
  }
  std::string rule = "+";
  for (const std::size_t w : width) {
    rule.append(w + 2, '-');
    rule += '+';
  }
  rule += '\n';

  std::string buf = rule;
  if (show_header) {
    buf += '|';
    for (std::size_t c = 0; c < ncol; ++c) {
      buf += ' ';
      append_padded(buf, names[c], width[c], false);
      buf += " |";
    }
    buf += '\n';
    buf += rule;
  }
  for (const auto &r : rows) {
    buf += '|';
    for (std::size_t c = 0; c < ncol; ++c) {
      buf += ' ';
      if (c < r.size()) {
        append_padded(buf, r[c].text, width[c], r[c].right);
      } else {
        buf.append(width[c], ' ');
      }
      buf += " |";
    }
    buf += '\n';
    if (buf.size() > (std::size_t{1} << 16)) { // keep memory flat on big results
      out << buf;
      buf.clear();
    }
  }
  if (!rows.empty() || !show_header) {
    buf += rule; // with a header and no rows, the rule under the header closes the table
  }
  out << buf;
}

void printer::begin(const std::vector<std::string> &columns) {
  finish();
  if (cfg_.mode == output_mode::csv) {
    if (cfg_.headers) {
      out_ << csv_header(columns, cfg_.escape_csv_text);
    }
    return;
  }
  pending_ = true;
  columns_ = columns;
  rows_.clear();
}

void printer::row(const std::vector<store::value> &values) {
  if (cfg_.mode == output_mode::csv) {
    out_ << csv_record(values, cfg_.escape_csv_text);
    return;
  }
  std::vector<cell> cells;
  cells.reserve(values.size());
  for (const auto &v : values) {
    cells.push_back(table_cell(v));
  }
  rows_.push_back(std::move(cells));
}

void printer::finish() {
  if (pending_) {
    render_table(out_, columns_, rows_, cfg_.headers);
    pending_ = false;
    columns_.clear();
    rows_.clear();
  }
  out_.flush();
}

store::result_sink printer::sink() {
  store::result_sink s;
  s.on_columns = [this](const std::vector<std::string> &columns) { begin(columns); };
  s.on_row = [this](const std::vector<store::value> &values) { row(values); };
  return s;
}

} // namespace rsched::sql_shell
