#pragma once
// Names and strings as SQL text: whatever they hold (quotes, NUL-free bytes that are not UTF-8),
// they stay data. Used wherever rsched builds SQL from names it did not choose (hosts, views,
// columns of a file, comms, cgroups).
#include <string>
#include <string_view>

namespace rsched::sqlite {

// `s` as an SQL identifier: in double quotes, '"' doubled.
inline std::string sql_ident(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    out += c;
    if (c == '"') {
      out += '"';
    }
  }
  return out + "\"";
}

// `s` as an SQL string literal: in single quotes, '\'' doubled.
inline std::string sql_literal(std::string_view s) {
  std::string out = "'";
  for (const char c : s) {
    out += c;
    if (c == '\'') {
      out += '\'';
    }
  }
  return out + "'";
}

} // namespace rsched::sqlite
