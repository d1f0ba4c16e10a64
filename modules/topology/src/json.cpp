#include "rsched/topology/json.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

namespace rsched::topology {

std::string to_json(const topology &t) {
  std::vector<std::pair<std::string, const cpu_info *>> entries;
  for (const auto &c : t.cpus) {
    if (c.cpu < max_cpus && (c.die >= 0 || c.numa >= 0)) {
      entries.emplace_back(std::to_string(c.cpu), &c);
    }
  }
  if (entries.empty()) {
    return "{\n  \"cpus\": {}\n}"; // serde_json's pretty printer writes an empty map as {}
  }
  // Upstream's keys are Strings in a BTreeMap: string order, not numeric order.
  std::sort(entries.begin(), entries.end(),
            [](const auto &a, const auto &b) { return a.first < b.first; });
  std::string out = "{\n  \"cpus\": {\n";
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto &[key, c] = entries[i];
    out += "    \"" + key + "\": {\n";
    out += "      \"die\": " + std::to_string(c->die) + ",\n";
    out += "      \"numa\": " + std::to_string(c->numa) + "\n";
    out += i + 1 < entries.size() ? "    },\n" : "    }\n";
  }
  out += "  }\n}";
  return out;
}

namespace {

// serde_json's default recursion limit; deeper input is an error, not a stack overflow.
constexpr int max_depth = 128;

// A recursive-descent parser for exactly the topology file, with a generic skipper for members
// it does not know. Methods return false after recording the first error.
class parser {
public:
  explicit parser(std::string_view in) : in_(in) {}

  result<topology> run() {
    std::map<unsigned, cpu_info> cpus;
    bool have_cpus = false;
    skip_ws();
    if (!at('{')) {
      return fail_result("expected a JSON object");
    }
    const std::size_t open = pos_;
    const bool ok = parse_object(1, [&](const std::string &key, std::size_t key_pos) {
      if (key != "cpus") {
        return skip_value(2);
      }
      if (have_cpus) {
        return fail_at(key_pos, "duplicate field `cpus`");
      }
      have_cpus = true;
      return parse_cpus(cpus);
    });
    if (!ok) {
      return fail_result();
    }
    if (!have_cpus) {
      return fail_result_at(open, "missing field `cpus`");
    }
    skip_ws();
    if (pos_ != in_.size()) {
      return fail_result("trailing characters");
    }
    topology t;
    for (const auto &[cpu, info] : cpus) {
      t.cpus.push_back(info);
    }
    return t;
  }

private:
  bool at(char c) const { return pos_ < in_.size() && in_[pos_] == c; }

  void skip_ws() {
    while (pos_ < in_.size() &&
           (in_[pos_] == ' ' || in_[pos_] == '\t' || in_[pos_] == '\n' || in_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool fail_at(std::size_t pos, std::string what) {
    if (!err_) {
      std::size_t line = 1;
      std::size_t col = 1;
      for (std::size_t i = 0; i < pos && i < in_.size(); ++i) {
        if (in_[i] == '\n') {
          ++line;
          col = 1;
        } else {
          ++col;
        }
      }
      err_ = make_error("topology JSON: " + what + " at line " + std::to_string(line) + " column " +
                        std::to_string(col));
    }
    return false;
  }
  bool fail(std::string what) { return fail_at(pos_, std::move(what)); }
  error fail_result(std::string what) {
    fail(std::move(what));
    return *err_;
  }
  error fail_result_at(std::size_t pos, std::string what) {
    fail_at(pos, std::move(what));
    return *err_;
  }
  error fail_result() const { return *err_; }

  // '{' (members separated by ',') '}'; calls on_member(key, key_pos) with pos_ on the value.
  template <typename F> bool parse_object(int depth, F &&on_member) {
    if (depth > max_depth) {
      return fail("nesting deeper than " + std::to_string(max_depth));
    }
    ++pos_; // '{'
    skip_ws();
    if (at('}')) {
      ++pos_;
      return true;
    }
    while (true) {
      skip_ws();
      const std::size_t key_pos = pos_;
      std::string key;
      if (!at('"')) {
        return fail("expected a string key");
      }
      if (!parse_string(key)) {
        return false;
      }
      skip_ws();
      if (!at(':')) {
        return fail("expected ':'");
      }
      ++pos_;
      skip_ws();
      if (!on_member(key, key_pos)) {
        return false;
      }
      skip_ws();
      if (at(',')) {
        ++pos_;
        continue;
      }
      if (at('}')) {
        ++pos_;
        return true;
      }
      return fail("expected ',' or '}'");
    }
  }

  bool parse_cpus(std::map<unsigned, cpu_info> &cpus) {
    if (!at('{')) {
      return fail("`cpus` must be an object");
    }
    return parse_object(2, [&](const std::string &key, std::size_t key_pos) {
      if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos) {
        return fail_at(key_pos, "CPU key is not a number");
      }
      // Digits that overflow are far above max_cpus: ignored like any other large key.
      unsigned long long n = 0;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), n);
      const bool in_range = ec == std::errc{} && end == key.data() + key.size() && n < max_cpus;
      cpu_info c;
      if (!parse_cpu(c)) {
        return false;
      }
      if (!in_range) {
        return true;
      }
      c.cpu = static_cast<unsigned>(n);
      if (!cpus.emplace(c.cpu, c).second) {
        return fail_at(key_pos, "CPU " + std::to_string(c.cpu) + " appears twice");
      }
      return true;
    });
  }

  bool parse_cpu(cpu_info &c) {
    if (!at('{')) {
      return fail("a CPU entry must be an object");
    }
    const std::size_t open = pos_;
    std::optional<std::int32_t> die;
    std::optional<std::int32_t> numa;
    const bool ok = parse_object(3, [&](const std::string &key, std::size_t key_pos) {
      if (key != "die" && key != "numa") {
        return skip_value(4);
      }
      auto &slot = key == "die" ? die : numa;
      if (slot) {
        return fail_at(key_pos, "duplicate field `" + key + "`");
      }
      std::int32_t v = 0;
      if (!parse_i32(v, key)) {
        return false;
      }
      slot = v;
      return true;
    });
    if (!ok) {
      return false;
    }
    if (!die) {
      return fail_at(open, "missing field `die`");
    }
    if (!numa) {
      return fail_at(open, "missing field `numa`");
    }
    c.die = *die;
    c.numa = *numa;
    return true;
  }

  // A JSON number token; sets `integer` when it has neither fraction nor exponent.
  bool scan_number(std::string_view &token, bool &integer) {
    const std::size_t start = pos_;
    auto digit = [&] { return pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9'; };
    auto digits = [&] {
      if (!digit()) {
        return false;
      }
      while (digit()) {
        ++pos_;
      }
      return true;
    };
    integer = true;
    if (at('-')) {
      ++pos_;
    }
    if (at('0')) {
      ++pos_;
    } else if (!digits()) {
      return fail("invalid number");
    }
    if (at('.')) {
      ++pos_;
      integer = false;
      if (!digits()) {
        return fail("invalid number");
      }
    }
    if (at('e') || at('E')) {
      ++pos_;
      integer = false;
      if (at('+') || at('-')) {
        ++pos_;
      }
      if (!digits()) {
        return fail("invalid number");
      }
    }
    token = in_.substr(start, pos_ - start);
    return true;
  }

  bool parse_i32(std::int32_t &out, const std::string &field) {
    const std::size_t start = pos_;
    if (!(at('-') || (pos_ < in_.size() && in_[pos_] >= '0' && in_[pos_] <= '9'))) {
      return fail("`" + field + "` must be an integer");
    }
    std::string_view token;
    bool integer = false;
    if (!scan_number(token, integer)) {
      return false;
    }
    if (!integer) {
      return fail_at(start, "`" + field + "` must be an integer");
    }
    const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
    if (ec != std::errc{} || end != token.data() + token.size()) {
      return fail_at(start, "`" + field + "` does not fit a 32-bit integer");
    }
    return true;
  }

  static bool hex4(std::string_view s, std::uint32_t &out) {
    out = 0;
    for (char ch : s) {
      out <<= 4;
      if (ch >= '0' && ch <= '9') {
        out |= static_cast<std::uint32_t>(ch - '0');
      } else if (ch >= 'a' && ch <= 'f') {
        out |= static_cast<std::uint32_t>(ch - 'a' + 10);
      } else if (ch >= 'A' && ch <= 'F') {
        out |= static_cast<std::uint32_t>(ch - 'A' + 10);
      } else {
        return false;
      }
    }
    return true;
  }

  // \uXXXX at pos_ (after the backslash and 'u' were consumed by the caller: pos_ on the digits).
  bool read_hex4(std::uint32_t &out) {
    if (in_.size() - pos_ < 4 || !hex4(in_.substr(pos_, 4), out)) {
      return fail("invalid \\u escape");
    }
    pos_ += 4;
    return true;
  }

  static void append_utf8(std::string &out, std::uint32_t cp) {
    auto byte = [&](std::uint32_t b) { out += static_cast<char>(static_cast<unsigned char>(b)); };
    if (cp < 0x80) {
      byte(cp);
    } else if (cp < 0x800) {
      byte(0xC0 | (cp >> 6));
      byte(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      byte(0xE0 | (cp >> 12));
      byte(0x80 | ((cp >> 6) & 0x3F));
      byte(0x80 | (cp & 0x3F));
    } else {
      byte(0xF0 | (cp >> 18));
      byte(0x80 | ((cp >> 12) & 0x3F));
      byte(0x80 | ((cp >> 6) & 0x3F));
      byte(0x80 | (cp & 0x3F));
    }
  }

  // A string at pos_ ('"'), escapes decoded, so that "\u0031" is the key "1" as for serde.
  bool parse_string(std::string &out) {
    ++pos_; // '"'
    while (pos_ < in_.size()) {
      const char c = in_[pos_];
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        return fail("control character in string");
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (++pos_ >= in_.size()) {
        break;
      }
      const char e = in_[pos_++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        std::uint32_t cp = 0;
        if (!read_hex4(cp)) {
          return false;
        }
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
          return fail("lone trailing surrogate in \\u escape");
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          std::uint32_t lo = 0;
          if (in_.substr(pos_, 2) != "\\u") {
            return fail("lone leading surrogate in \\u escape");
          }
          pos_ += 2;
          if (!read_hex4(lo)) {
            return false;
          }
          if (lo < 0xDC00 || lo > 0xDFFF) {
            return fail("invalid surrogate pair in \\u escape");
          }
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        append_utf8(out, cp);
        break;
      }
      default:
        return fail("invalid escape");
      }
    }
    return fail("unterminated string");
  }

  bool literal(std::string_view word) {
    if (in_.substr(pos_, word.size()) != word) {
      return fail("expected a JSON value");
    }
    pos_ += word.size();
    return true;
  }

  // Any JSON value at pos_, validated and discarded (members we do not know).
  bool skip_value(int depth) {
    if (depth > max_depth) {
      return fail("nesting deeper than " + std::to_string(max_depth));
    }
    if (pos_ >= in_.size()) {
      return fail("unexpected end of input");
    }
    switch (in_[pos_]) {
    case '{':
      return parse_object(depth,
                          [&](const std::string &, std::size_t) { return skip_value(depth + 1); });
    case '[': {
      ++pos_;
      skip_ws();
      if (at(']')) {
        ++pos_;
        return true;
      }
      while (true) {
        skip_ws();
        if (!skip_value(depth + 1)) {
          return false;
        }
        skip_ws();
        if (at(',')) {
          ++pos_;
          continue;
        }
        if (at(']')) {
          ++pos_;
          return true;
        }
        return fail("expected ',' or ']'");
      }
    }
    case '"': {
      std::string ignored;
      return parse_string(ignored);
    }
    case 't':
      return literal("true");
    case 'f':
      return literal("false");
    case 'n':
      return literal("null");
    default: {
      std::string_view token;
      bool integer = false;
      if (!(at('-') || (in_[pos_] >= '0' && in_[pos_] <= '9'))) {
        return fail("expected a JSON value");
      }
      return scan_number(token, integer);
    }
    }
  }

  std::string_view in_;
  std::size_t pos_ = 0;
  std::optional<error> err_;
};

} // namespace

result<topology> from_json(std::string_view text) {
  return parser(text).run();
}

} // namespace rsched::topology
