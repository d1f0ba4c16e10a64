#pragma once
// Text helpers for untrusted strings (comm and cgroup names are chosen by whoever runs a
// process: they may hold escape sequences, quotes, commas or bytes that are not UTF-8).
#include <cstdint>
#include <string>
#include <string_view>

namespace rsched::text {

// Kernel comm bytes (up to 16, NUL-padded) to a string: stops at the first NUL, keeps every other
// byte as is. The stored value is the kernel's exact bytes; escaping happens only on display.
inline std::string from_comm(const char *comm, std::size_t cap) {
  std::size_t n = 0;
  while (n < cap && comm[n] != '\0') {
    ++n;
  }
  return std::string(comm, n);
}

struct utf8_char {
  std::size_t len = 0; // bytes of the sequence at the position; 0 = not valid UTF-8 there
  std::uint32_t cp = 0;
};

// Decodes the multi-byte UTF-8 sequence starting at s[i] (a lead byte >= 0x80): validates the
// length, continuation bytes, overlong forms, surrogates and the Unicode range.
inline utf8_char decode_utf8(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t len = 0;
  std::uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
    cp = c & 0x1Fu;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
    cp = c & 0x0Fu;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
    cp = c & 0x07u;
  }
  bool valid = len != 0 && i + len <= s.size();
  for (std::size_t k = 1; valid && k < len; ++k) {
    const auto cc = static_cast<unsigned char>(s[i + k]);
    valid = (cc & 0xC0) == 0x80;
    cp = (cp << 6) | (cc & 0x3Fu);
  }
  if (valid) {
    static constexpr std::uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    valid = cp >= min_cp[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
  }
  return valid ? utf8_char{len, cp} : utf8_char{};
}

// Makes a string safe to print on a terminal: control bytes (C0, DEL, C1 as raw bytes), backslash
// and bytes that do not form valid UTF-8 are written as \xNN (backslash as \\); valid printable
// UTF-8 passes through. The result can never move the cursor, change colours or set a title.
inline std::string escape_for_terminal(std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size());
  auto emit_hex = [&](unsigned char c) {
    out += "\\x";
    out += hex[c >> 4];
    out += hex[c & 0xF];
  };
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (c < 0x20 || c == 0x7F) {
      emit_hex(c);
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Multi-byte UTF-8: valid sequences pass, except C1 controls (they steer terminals too).
    const utf8_char u = decode_utf8(s, i);
    const bool valid = u.len != 0 && !(u.cp >= 0x80 && u.cp <= 0x9F);
    const std::size_t len = u.len;
    if (!valid) {
      emit_hex(c);
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

// Display width of a string already passed through escape_for_terminal: one column per code
// point (good enough for aligning tables; wide CJK glyphs are rare in comm names).
inline std::size_t display_width(std::string_view s) {
  std::size_t w = 0;
  for (char ch : s) {
    if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) {
      ++w;
    }
  }
  return w;
}

// ---- JSON ----------------------------------------------------------------------------------
// Every JSON rsched writes (rsched-sql --json/--jsonl, export perfetto) is valid UTF-8 that strict
// parsers accept (jq; Python's json.loads of the bytes decoded as strict UTF-8): no raw control
// byte, no lone surrogate escape. Text that is not valid UTF-8 (a comm or cgroup name is any bytes)
// is written lossy and exact side by side:
//   comm = "a\xff\xfeb"   ->   "comm":"a<U+FFFD><U+FFFD>b","comm_hex":"61fffe62"
// the string has U+FFFD for each byte that is not part of valid UTF-8, and, only then, a sibling
// member named with "_hex" added holds the exact bytes in lowercase hex
// (bytes.fromhex(obj["comm_hex"]) gives them back). Without a "_hex" member the string is exact.

// Appends `s` as a JSON string literal with its quotes. '"' and '\' are escaped, \b \f \n \r
// \t as such, the other C0 controls, DEL and the C1 controls (U+0080..U+009F) as \u00XX (so the
// output is safe on a terminal); other valid UTF-8 passes through; each byte that is not part of
// valid UTF-8 (a stray continuation byte, a truncated sequence, an overlong form, an encoded
// surrogate, above U+10FFFF: decode_utf8's rules) becomes U+FFFD, written as its UTF-8 bytes.
// Returns true when `s` was valid UTF-8 (the literal is exact), false when a byte was replaced.
bool append_json_string(std::string &out, std::string_view s);

// Lowercase hex of bytes: "61fffe62".
std::string to_hex(std::string_view bytes);

// Appends the member "key":"value" and, when `value` is not valid UTF-8, the member
// "<key>_hex":"<to_hex(value)>" after it (with a comma).
void append_json_text_member(std::string &out, std::string_view key, std::string_view value);

// A duration in ns with a unit and three significant digits: "950 ns", "1.50 µs", "45.7 ms",
// "12.3 s", "250 s"; whole ns below 1 µs print without decimals. `ns` must be finite.
std::string format_duration_ns(double ns);

// A byte count with a binary unit and three significant digits: "512 B", "1.50 KiB",
// "45.7 MiB", "1.20 GiB", "3.00 TiB"; whole bytes below 1 KiB print without decimals.
std::string format_bytes(std::int64_t bytes);

} // namespace rsched::text
