// Strict command-line durations and sizes (units.hpp).
#include "rsched/base/units.hpp"

#include "rsched/base/text.hpp"
#include "rsched/base/timefmt.hpp"

#include <array>
#include <cctype>
#include <string>
#include <utility>

namespace rsched::units {

bool clean(std::string_view v) {
  if (v.empty() || v.front() == ' ' || v.back() == ' ') {
    return false;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const auto c = static_cast<unsigned char>(v[i]);
    if (c == ' ' && v[i + 1] != ' ') { // never the last byte (checked above)
      continue;
    }
    if (c == 0xC2 && i + 1 < v.size() && static_cast<unsigned char>(v[i + 1]) == 0xB5) {
      ++i; // µ
      continue;
    }
    if (c <= 0x20 || c >= 0x7F) {
      return false;
    }
  }
  return true;
}

bool bare_number(std::string_view v) {
  bool digit = false;
  int dots = 0;
  for (char c : v) {
    if (c == '.') {
      ++dots;
    } else if (std::isdigit(static_cast<unsigned char>(c)) != 0) {
      digit = true;
    } else {
      return false;
    }
  }
  return digit && dots <= 1;
}

namespace {

const char *const unclean =
    "a space, tab, newline or control character around or in it (write just the value)";

} // namespace

result<std::int64_t> parse_duration(std::string_view v) {
  if (v.empty()) {
    return make_error("empty (a duration such as 2d, 12h or 50ms)");
  }
  if (!clean(v)) {
    return make_error(unclean);
  }
  if (bare_number(v)) {
    const std::string n(v);
    return make_error("a duration needs a unit (" + n + "s? " + n + "m? " + n +
                      "h?): ns, us, ms, s, m, h, d or w");
  }
  auto d = timefmt::parse_duration(v);
  if (!d) {
    return d.err();
  }
  return *d;
}

result<std::uint64_t> parse_size(std::string_view v) {
  if (v.empty()) {
    return make_error("empty (a size such as 8G, 500M or 0)");
  }
  if (!clean(v)) {
    return make_error(unclean);
  }
  std::size_t digits = 0;
  while (digits < v.size() && std::isdigit(static_cast<unsigned char>(v[digits])) != 0) {
    ++digits;
  }
  const std::string_view number = v.substr(0, digits);
  std::string unit(v.substr(digits));
  for (auto &c : unit) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (number.empty()) {
    return make_error("expected a whole number and a unit such as 8G, 500M or 64K");
  }
  if (unit.empty()) {
    if (number.find_first_not_of('0') == std::string_view::npos) {
      return std::uint64_t{0};
    }
    const std::string n(number);
    return make_error("a size needs a unit (" + n + "G? " + n +
                      "M?): B, K, M, G or T (1K = 1024 bytes)");
  }
  static constexpr std::array<std::pair<char, unsigned>, 5> shifts = {
      {{'b', 0}, {'k', 10}, {'m', 20}, {'g', 30}, {'t', 40}}};
  unsigned shift = 0;
  bool known = false;
  for (const auto &[letter, s] : shifts) {
    if (unit[0] == letter &&
        (unit.size() == 1 || (s != 0 && (unit.substr(1) == "b" || unit.substr(1) == "ib")))) {
      shift = s;
      known = true;
    }
  }
  if (!known) {
    return make_error("unknown unit '" + text::escape_for_terminal(unit) +
                      "' (B, K, M, G or T; 1K = 1024 bytes)");
  }
  // 2^60 bytes at most: 19 digits could overflow before the check.
  if (number.size() > 19) {
    return make_error("too large (at most 1048576T)");
  }
  const std::uint64_t n = std::stoull(std::string(number));
  if (n > (std::uint64_t{1} << (60 - shift))) {
    return make_error("too large (at most 1048576T)");
  }
  return n << shift;
}

} // namespace rsched::units
