// Formatting of text.hpp that is not inline.
#include "rsched/base/text.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace rsched::text {

std::string format_bytes(std::int64_t bytes) {
  const char *sign = bytes < 0 ? "-" : "";
  auto a = std::fabs(static_cast<double>(bytes));
  static constexpr const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t u = 0;
  while (u < 6 && a >= 1023.5) { // 1023.5 B rounds to 1.00 KiB, not 1024 B
    a /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%s%.0f B", sign, a);
    return buf;
  }
  const int decimals = a < 9.995 ? 2 : a < 99.95 ? 1 : 0;
  std::snprintf(buf, sizeof(buf), "%s%.*f %s", sign, decimals, a, units[u]);
  return buf;
}

std::string format_duration_ns(double ns) {
  const char *sign = ns < 0 ? "-" : "";
  double a = std::fabs(ns);
  static constexpr const char *units[] = {"ns", "\xc2\xb5s", "ms", "s"};
  std::size_t u = 0;
  while (u < 3 && a >= 999.5) { // 999.5 ns rounds to 1.00 µs, not 1000 ns
    a /= 1000.0;
    ++u;
  }
  char buf[64];
  if (u == 0 && a == std::floor(a)) {
    std::snprintf(buf, sizeof(buf), "%s%lld ns", sign, static_cast<long long>(a));
    return buf;
  }
  int decimals = 0;
  if (a < 9.995) {
    decimals = 2;
  } else if (a < 99.95) {
    decimals = 1;
  }
  std::snprintf(buf, sizeof(buf), "%s%.*f %s", sign, decimals, a, units[u]);
  return buf;
}

bool append_json_string(std::string &out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  auto u_escape = [&](unsigned char c) {
    out += "\\u00";
    out += hex[c >> 4];
    out += hex[c & 0xF];
  };
  bool exact = true;
  out += '"';
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          u_escape(c);
        } else {
          out += static_cast<char>(c);
        }
      }
      ++i;
      continue;
    }
    const utf8_char u = decode_utf8(s, i);
    if (u.len == 0) {
      out += "\xef\xbf\xbd"; // U+FFFD for this byte; the caller adds the exact bytes as hex
      exact = false;
      ++i;
      continue;
    }
    if (u.cp <= 0x9F) {
      u_escape(static_cast<unsigned char>(u.cp)); // C1 control
    } else {
      out.append(s.substr(i, u.len));
    }
    i += u.len;
  }
  out += '"';
  return exact;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char ch : bytes) {
    const auto c = static_cast<unsigned char>(ch);
    out += hex[c >> 4];
    out += hex[c & 0xF];
  }
  return out;
}

void append_json_text_member(std::string &out, std::string_view key, std::string_view value) {
  append_json_string(out, key);
  out += ':';
  if (!append_json_string(out, value)) {
    out += ',';
    std::string hex_key(key);
    hex_key += "_hex";
    append_json_string(out, hex_key);
    out += ":\"";
    out += to_hex(value);
    out += '"';
  }
}

} // namespace rsched::text
