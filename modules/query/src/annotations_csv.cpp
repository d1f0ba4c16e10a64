// CSV incident timelines (RFC 4180) as records.
#include "annotations_records.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cstddef>
#include <utility>

namespace rsched::query::detail {

namespace {

result<std::vector<std::vector<std::string>>> parse_csv(std::string_view s) {
  std::vector<std::vector<std::string>> out;
  std::vector<std::string> rec;
  std::string field;
  std::size_t i = 0;
  std::size_t line = 1;
  bool any = false; // the current record has content
  if (s.size() >= 3 && s.substr(0, 3) == "\xEF\xBB\xBF") {
    i = 3; // UTF-8 byte order mark
  }
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"' && field.empty()) {
      const std::size_t start_line = line;
      ++i;
      bool closed = false;
      while (i < s.size()) {
        if (s[i] == '"') {
          if (i + 1 < s.size() && s[i + 1] == '"') {
            field += '"';
            i += 2;
            continue;
          }
          ++i;
          closed = true;
          break;
        }
        if (s[i] == '\n') {
          ++line;
        }
        field += s[i++];
      }
      if (!closed) {
        return make_error(fmt::format("line {}: unterminated quoted field", start_line));
      }
      if (i < s.size() && s[i] != ',' && s[i] != '\n' && s[i] != '\r') {
        return make_error(fmt::format("line {}: text after a closing quote", line));
      }
      any = true;
      continue;
    }
    if (c == ',') {
      rec.push_back(std::move(field));
      field.clear();
      any = true;
      ++i;
      continue;
    }
    if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < s.size() && s[i + 1] == '\n') {
        ++i;
      }
      ++i;
      ++line;
      if (any || !field.empty()) {
        rec.push_back(std::move(field));
        out.push_back(std::move(rec));
      }
      rec.clear();
      field.clear();
      any = false;
      continue;
    }
    field += c;
    any = true;
    ++i;
  }
  if (any || !field.empty()) {
    rec.push_back(std::move(field));
    out.push_back(std::move(rec));
  }
  return out;
}

} // namespace

result<std::vector<incident_record>> csv_records(std::string_view content) {
  std::vector<incident_record> out;
  auto rows = parse_csv(content);
  if (!rows) {
    return rows.err();
  }
  if (rows->empty()) {
    return make_error("CSV has no header row");
  }
  std::vector<std::string> header;
  header.reserve((*rows)[0].size());
  for (const auto &field : (*rows)[0]) {
    // Trimmed of spaces in one pass (erasing one leading space at a time was quadratic).
    const auto first = field.find_first_not_of(' ');
    std::string h = first == std::string::npos
                        ? std::string()
                        : field.substr(first, field.find_last_not_of(' ') - first + 1);
    for (auto &c : h) {
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    header.push_back(std::move(h));
  }
  for (std::size_t r = 1; r < rows->size(); ++r) {
    const auto &fields = (*rows)[r];
    if (fields.size() != header.size()) {
      return make_error(
          fmt::format("row {}: {} fields, the header has {}", r, fields.size(), header.size()));
    }
    incident_record rec;
    for (std::size_t c = 0; c < header.size(); ++c) {
      rec[header[c]] = fields[c];
    }
    out.push_back(std::move(rec));
  }
  return out;
}

} // namespace rsched::query::detail
