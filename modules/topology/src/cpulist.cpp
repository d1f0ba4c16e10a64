#include "rsched/topology/cpulist.hpp"

#include "rsched/base/text.hpp"

#include <charconv>
#include <optional>
#include <string>

namespace rsched::topology {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) {
    s.remove_prefix(1);
  }
  while (!s.empty() && is_space(s.back())) {
    s.remove_suffix(1);
  }
  return s;
}

// A decimal CPU number below max_cpulist_cpu: digits only (from_chars alone would not reject
// "+1" in every mode, and the kernel never prints signs), whitespace around it allowed.
std::optional<unsigned> parse_cpu_number(std::string_view s) {
  s = trim(s);
  if (s.empty()) {
    return std::nullopt;
  }
  for (char c : s) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
  }
  unsigned v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size() || v >= max_cpulist_cpu) {
    return std::nullopt;
  }
  return v;
}

error malformed(std::string_view item, std::string_view why) {
  // The text comes from files anyone could have faked: keep the message one short line.
  constexpr std::size_t max_shown = 40;
  std::string shown = text::escape_for_terminal(item.substr(0, max_shown));
  if (item.size() > max_shown) {
    shown += "...";
  }
  return make_error("malformed cpulist item \"" + shown + "\": " + std::string(why));
}

} // namespace

result<std::vector<unsigned>> parse_cpulist(std::string_view text) {
  const std::string_view body = trim(text);
  std::vector<unsigned> cpus;
  if (body.empty()) {
    return cpus;
  }
  // A bitmap rather than appending each range: overlapping ranges repeated many times would
  // otherwise grow the vector far beyond max_cpulist_cpu entries.
  std::vector<bool> seen(max_cpulist_cpu, false);
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = body.find(',', start);
    const std::string_view item = body.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (trim(item).empty()) {
      return malformed(item, "empty item");
    }
    const std::size_t dash = item.find('-');
    const auto lo = parse_cpu_number(item.substr(0, dash));
    if (!lo) {
      return malformed(item, "expected a CPU number below " + std::to_string(max_cpulist_cpu));
    }
    unsigned hi = *lo;
    if (dash != std::string_view::npos) {
      const auto h = parse_cpu_number(item.substr(dash + 1));
      if (!h) {
        return malformed(item, "expected a CPU number below " + std::to_string(max_cpulist_cpu) +
                                   " after '-'");
      }
      if (*h < *lo) {
        return malformed(item, "range ends before it starts");
      }
      hi = *h;
    }
    for (unsigned c = *lo; c <= hi; ++c) {
      seen[c] = true;
    }
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  for (unsigned c = 0; c < max_cpulist_cpu; ++c) {
    if (seen[c]) {
      cpus.push_back(c);
    }
  }
  return cpus;
}

} // namespace rsched::topology
